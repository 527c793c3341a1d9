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

#[path = "common/read_pair.rs"]
mod read_pair;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use crossbeam::channel::{self, Sender};
use read_pair::{ReadPair, MAX_OUTSTANDING, WINDOW_BYTES};

const SIZES: [usize; 4] = [64, 4 << 10, 64 << 10, 1 << 20];
/// How long the requester spins on its CQ before it blocks on the completion channel
/// (`FABRIC_BENCH_SPIN_US`, default 0: with the NIC threads of both fabrics on the same two
/// CPUs, a spinning requester slows them down more than a wakeup costs).
fn spin() -> Duration {
    let us = std::env::var("FABRIC_BENCH_SPIN_US").ok().and_then(|v| v.parse().ok()).unwrap_or(0);
    Duration::from_micros(us)
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
            b.iter_custom(|iters| pair.reads(iters, size, depth, spin()))
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
    group
        .bench_function(BenchmarkId::new("soft_read", 64), |b| b.iter_custom(|iters| pair.reads(iters, 64, 1, spin())));
    group.finish();
}

criterion_group!(benches, read_goodput, read_latency);
criterion_main!(benches);
