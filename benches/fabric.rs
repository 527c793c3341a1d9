//! Fabric benchmarks on the soft provider over loopback, with plain TCP as the baseline.
//!
//! - `read_goodput/soft_read/<size>`: one process, two opened fabrics (requester and responder,
//!   one RC connection); the requester keeps up to 16 READs outstanding (as many as fit 8 MiB).
//! - `read_goodput/tcp/<size>`: the same bytes over one TCP loopback stream: a writer thread
//!   writes chunks of `size`, the measuring thread reads them.
//! - `read_latency/soft_read/64`: one READ of 64 bytes outstanding at a time.
//!
//! Run: `taskset -c 0,1 cargo bench --bench fabric`. Each point measures ~2 s.
//! `FABRIC_BENCH_SPIN_US` sets how long the requester polls before blocking (default 0).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use crossbeam::channel::{self, Sender};
use rdma_pubsub::fabric::{
    self, Access, CmEvent, CompletionQueue, EventChannel, Fabric, FabricConfig, FabricKind, MemoryRegion, QpCaps,
    QpInit, QueuePair, RemoteAddr, SendOp, SendRequest, WorkCompletion,
};

const SIZES: [usize; 4] = [64, 4 << 10, 64 << 10, 1 << 20];
const WINDOW_BYTES: usize = 8 << 20;
const MAX_OUTSTANDING: usize = 16;
const WAIT: Duration = Duration::from_secs(10);
/// How long the requester spins on its CQ before it blocks on the completion channel
/// (`FABRIC_BENCH_SPIN_US`, default 0: with the NIC threads of both fabrics on the same two
/// CPUs, a spinning requester slows them down more than a wakeup costs).
fn spin() -> Duration {
    let us = std::env::var("FABRIC_BENCH_SPIN_US").ok().and_then(|v| v.parse().ok()).unwrap_or(0);
    Duration::from_micros(us)
}

fn soft_fabric() -> Fabric {
    fabric::open(&FabricConfig::new(FabricKind::Soft)).expect("open the soft fabric")
}

fn next_event(channel: &EventChannel, what: &str) -> CmEvent {
    channel.get_event(WAIT).expect("get CM event").unwrap_or_else(|| panic!("no CM event ({what}) within {WAIT:?}"))
}

/// A requester connected to a responder that exposes `WINDOW_BYTES` for remote READ. Field
/// order is drop order: queue pairs first, then regions, then the fabrics.
struct ReadPair {
    qp: QueuePair,
    _responder_qp: QueuePair,
    cq: CompletionQueue,
    local: MemoryRegion,
    remote: RemoteAddr,
    _exposed: MemoryRegion,
    _channels: (EventChannel, EventChannel),
    _fabrics: (Fabric, Fabric),
}

impl ReadPair {
    fn new() -> Self {
        let responder = soft_fabric();
        let rpd = responder.alloc_pd().expect("responder pd");
        let rcq = responder.create_cq(64).expect("responder cq");
        let exposed = rpd.register(WINDOW_BYTES, Access::REMOTE_READ).expect("register exposed window");
        exposed.buffer().fill(0, WINDOW_BYTES, 0xa5).expect("fill");
        let rch = responder.create_event_channel().expect("responder channel");
        let listener = rch.listen(SocketAddr::from(([127, 0, 0, 1], 0)), 4).expect("listen");

        let requester = soft_fabric();
        let pd = requester.alloc_pd().expect("requester pd");
        let cq = requester.create_cq(256).expect("requester cq");
        let local = pd.register(WINDOW_BYTES, Access::LOCAL_WRITE).expect("register local window");
        let ch = requester.create_event_channel().expect("requester channel");
        let mut init = QpInit::new(&pd, &cq);
        init.caps = QpCaps { max_send_wr: 64, ..QpCaps::default() };
        let qp = ch.connect(listener.local_addr(), &init, &[], WAIT).expect("connect");

        let CmEvent::ConnectRequest(req) = next_event(&rch, "connect request") else {
            panic!("expected a connect request")
        };
        let rinit = QpInit::new(&rpd, &rcq);
        let responder_qp = req.accept(&rinit, &[]).expect("accept");
        for (channel, conn) in [(&ch, qp.conn_id()), (&rch, responder_qp.conn_id())] {
            match next_event(channel, "established") {
                CmEvent::Established { conn: c, .. } if c == conn => {}
                other => panic!("expected Established, got {other:?}"),
            }
        }
        drop(listener);
        ReadPair {
            qp,
            _responder_qp: responder_qp,
            cq,
            local,
            remote: exposed.remote(),
            _exposed: exposed,
            _channels: (ch, rch),
            _fabrics: (requester, responder),
        }
    }

    /// Issues `count` READs of `size` bytes with up to `depth` outstanding; returns the time.
    fn reads(&self, count: u64, size: usize, depth: usize) -> Duration {
        let mut wcs = [WorkCompletion::default(); 32];
        let spin = spin();
        let (mut posted, mut done) = (0u64, 0u64);
        let start = Instant::now();
        while done < count {
            while posted < count && posted - done < depth as u64 {
                let slot = (posted % depth as u64) as usize * size;
                let sges = [self.local.sge(slot, size)];
                let remote = RemoteAddr { addr: self.remote.addr + slot as u64, rkey: self.remote.rkey };
                let wr = SendRequest { wr_id: posted, op: SendOp::RdmaRead(remote), sges: &sges, signaled: true };
                self.qp.post_send(&wr).expect("post READ");
                posted += 1;
            }
            let n = self.cq.poll_wait(&mut wcs, spin, WAIT).expect("poll");
            assert!(n > 0, "no READ completion within {WAIT:?}");
            for wc in &wcs[..n] {
                assert!(wc.status.is_success(), "READ {} failed: {:?}", wc.wr_id, wc.status);
            }
            done += n as u64;
        }
        start.elapsed()
    }
}

/// A TCP loopback stream with a writer thread that writes `n` chunks of `size` on command.
struct TcpPair {
    reader: TcpStream,
    commands: Option<Sender<u64>>,
    writer: Option<JoinHandle<()>>,
    chunk: Vec<u8>,
}

impl TcpPair {
    fn new(size: usize) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let mut out = TcpStream::connect(listener.local_addr().expect("addr")).expect("connect");
        let (reader, _) = listener.accept().expect("accept");
        out.set_nodelay(true).expect("nodelay");
        reader.set_nodelay(true).expect("nodelay");
        let (tx, rx) = channel::unbounded::<u64>();
        let writer = std::thread::spawn(move || {
            let chunk = vec![0xa5u8; size];
            for n in rx {
                for _ in 0..n {
                    out.write_all(&chunk).expect("write");
                }
            }
        });
        TcpPair { reader, commands: Some(tx), writer: Some(writer), chunk: vec![0; size] }
    }

    /// Has the writer send `count` chunks and reads them; returns the time.
    fn transfer(&mut self, count: u64) -> Duration {
        let start = Instant::now();
        self.commands.as_ref().expect("writer running").send(count).expect("command");
        for _ in 0..count {
            self.reader.read_exact(&mut self.chunk).expect("read");
        }
        start.elapsed()
    }
}

impl Drop for TcpPair {
    fn drop(&mut self) {
        self.commands.take();
        if let Some(w) = self.writer.take() {
            let _ = w.join();
        }
    }
}

fn read_goodput(c: &mut Criterion) {
    let pair = ReadPair::new();
    let mut group = c.benchmark_group("read_goodput");
    group.sample_size(10).warm_up_time(Duration::from_millis(500)).measurement_time(Duration::from_secs(2));
    for size in SIZES {
        let depth = MAX_OUTSTANDING.min(WINDOW_BYTES / size);
        group.throughput(Throughput::Bytes(size as u64));
        group.bench_with_input(BenchmarkId::new("soft_read", size), &size, |b, &size| {
            b.iter_custom(|iters| pair.reads(iters, size, depth))
        });
        let mut tcp = TcpPair::new(size);
        group.bench_with_input(BenchmarkId::new("tcp", size), &size, |b, _| b.iter_custom(|iters| tcp.transfer(iters)));
    }
    group.finish();
}

fn read_latency(c: &mut Criterion) {
    let pair = ReadPair::new();
    let mut group = c.benchmark_group("read_latency");
    group.sample_size(10).warm_up_time(Duration::from_millis(500)).measurement_time(Duration::from_secs(2));
    group.throughput(Throughput::Bytes(64));
    group.bench_function(BenchmarkId::new("soft_read", 64), |b| b.iter_custom(|iters| pair.reads(iters, 64, 1)));
    group.finish();
}

criterion_group!(benches, read_goodput, read_latency);
criterion_main!(benches);
