//! Attacks on the soft NIC: READ floods, rkey guessing, handshake floods, answers left unread.
//! The attacker speaks the soft wire protocol straight to a TCP socket (it is not bound by the
//! limits the soft requester keeps); the victim is a bare soft fabric responder that accepts
//! every connection, and a well-behaved peer uses the fabric API beside the attacker.

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, TcpStream};
use std::sync::atomic::AtomicBool;
use std::sync::Mutex;
use std::thread::JoinHandle;

use rdma_pubsub::fabric::soft::wire::{CmParams, FrameType, Header, Status, HEADER_LEN};
use rdma_pubsub::fabric::soft::{MAX_PENDING_HANDSHAKES_PER_SOURCE, OUTPUT_STALL_TIMEOUT};
use rdma_pubsub::fabric::{FabricCounters, Listener, SameHost, SoftOptions, DEFAULT_RD_ATOMIC};

use super::*;

/// Length of the responder's region (the "ring" peers READ).
const REGION_LEN: usize = 1 << 20;
/// Resident memory a flood may add to the responder's process: far less than an unbounded
/// queue of answers to the flood (hundreds of MiB), far more than the bounded one.
const FLOOD_RSS_SLACK_KIB: u64 = 48 * 1024;
/// Requests of a flood, sent in batches of [`FLOOD_BATCH`]: 32 MB on the wire, answered by an
/// unbounded queue with more than 100 MiB of frames.
const FLOOD_REQUESTS: usize = 1 << 20;
const FLOOD_BATCH: usize = 1024;

/// A soft device on loopback, through its NIC whatever the peer (no same-host path).
fn soft_fabric() -> Fabric {
    let config =
        FabricConfig { soft: SoftOptions::default().same_host(SameHost::Off), ..FabricConfig::new(FabricKind::Soft) };
    fabric::open(&config).expect("soft fabric")
}

/// A byte of the responder's region at `offset`.
fn region_byte(offset: usize) -> u8 {
    (offset as u32).wrapping_mul(2_654_435_761).rotate_right(11) as u8
}

/// A bare soft responder: accepts every connect request (and posts one receive on each queue
/// pair), keeps the queue pairs, and exposes one region to remote READ and WRITE.
struct Responder {
    fabric: Fabric,
    cq: CompletionQueue,
    region: MemoryRegion,
    addr: SocketAddr,
    accepted: Arc<Mutex<Vec<QueuePair>>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    _listener: Listener,
}

impl Responder {
    fn start() -> Responder {
        let fabric = soft_fabric();
        let pd = fabric.alloc_pd().unwrap();
        let cq = fabric.create_cq(1024).unwrap();
        let channel = fabric.create_event_channel().unwrap();
        let rw = Access::LOCAL_WRITE | Access::REMOTE_READ | Access::REMOTE_WRITE;
        let region = pd.register(REGION_LEN, rw).unwrap();
        let bytes: Vec<u8> = (0..REGION_LEN).map(region_byte).collect();
        region.buffer().write(0, &bytes).unwrap();
        let recv = pd.register(4096, Access::LOCAL_WRITE).unwrap();
        let listener = channel.listen(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)), 1024).unwrap();
        let addr = listener.local_addr();
        let accepted = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (accepted, stop, cq) = (accepted.clone(), stop.clone(), cq.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let Some(CmEvent::ConnectRequest(req)) = channel.get_event(Duration::from_millis(20)).unwrap()
                    else {
                        continue;
                    };
                    let Ok(qp) = req.accept(&QpInit::new(&pd, &cq), &[]) else { continue };
                    // A peer may be gone already (the handshake test's peers leave at once).
                    if qp.post_recv(u64::from(qp.qp_num()), &[recv.sge(0, 4096)]).is_err() {
                        continue;
                    }
                    accepted.lock().unwrap().push(qp);
                }
            })
        };
        Responder { fabric, cq, region, addr, accepted, stop, thread: Some(thread), _listener: listener }
    }

    fn counters(&self) -> FabricCounters {
        self.fabric.counters()
    }

    /// The number of the `i`th queue pair accepted (waiting for it to be accepted).
    fn qp_num(&self, i: usize) -> u32 {
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(qp) = self.accepted.lock().unwrap().get(i) {
                return qp.qp_num();
            }
            assert!(Instant::now() < deadline, "no queue pair {i} accepted");
            std::thread::yield_now();
        }
    }

    /// Waits for the receive posted on queue pair `qp_num` to be flushed: the queue pair failed
    /// (it is in the error state, or its connection was cut).
    fn expect_flushed_receive(&self, qp_num: u32) {
        let mut wc = [WorkCompletion::default(); 1];
        assert_eq!(self.cq.poll_wait(&mut wc, Duration::from_micros(50), WAIT).unwrap(), 1, "no completion");
        assert_eq!(
            (wc[0].wr_id, wc[0].status, wc[0].qp_num),
            (u64::from(qp_num), WcStatus::WorkRequestFlushed, qp_num),
            "the receive of queue pair {qp_num} is flushed"
        );
    }

    /// Waits until `done` holds for the device's counters.
    fn wait_counters(&self, what: &str, done: impl Fn(&FabricCounters) -> bool) {
        let deadline = Instant::now() + WAIT;
        while !done(&self.counters()) {
            assert!(Instant::now() < deadline, "{what}: counters {:?}", self.counters());
            std::thread::yield_now();
        }
    }
}

impl Drop for Responder {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            t.join().unwrap();
        }
    }
}

/// A peer that connects through the fabric API and READs the whole region.
struct GoodPeer {
    _fabric: Fabric,
    cq: CompletionQueue,
    qp: QueuePair,
    dst: MemoryRegion,
}

impl GoodPeer {
    fn connect(to: &Responder) -> GoodPeer {
        let fabric = soft_fabric();
        let pd = fabric.alloc_pd().unwrap();
        let cq = fabric.create_cq(64).unwrap();
        let channel = fabric.create_event_channel().unwrap();
        let dst = pd.register(REGION_LEN, Access::LOCAL_WRITE).unwrap();
        let qp = channel.connect(to.addr, &QpInit::new(&pd, &cq), &[], WAIT).unwrap();
        match channel.get_event(WAIT).unwrap() {
            Some(CmEvent::Established { conn, .. }) if conn == qp.conn_id() => {}
            other => panic!("expected Established, got {other:?}"),
        }
        GoodPeer { _fabric: fabric, cq, qp, dst }
    }

    /// READs the responder's whole region and checks every byte.
    fn read_region(&self, from: &Responder) {
        self.dst.buffer().fill(0, REGION_LEN, 0).unwrap();
        let sge = [self.dst.sge(0, REGION_LEN)];
        self.qp.post_send(&SendRequest::new(1, SendOp::RdmaRead(from.region.remote()), &sge)).unwrap();
        let mut wc = [WorkCompletion::default(); 1];
        assert_eq!(self.cq.poll_wait(&mut wc, Duration::from_micros(50), WAIT).unwrap(), 1, "READ completion");
        assert_eq!((wc[0].wr_id, wc[0].status), (1, WcStatus::Success), "the well-behaved peer is served");
        let mut got = vec![0u8; REGION_LEN];
        self.dst.buffer().read(0, &mut got).unwrap();
        assert!(got.iter().enumerate().all(|(i, &b)| b == region_byte(i)), "the READ brought the region");
    }
}

/// An attacker speaking the soft wire protocol on a raw TCP socket.
struct WirePeer {
    sock: TcpStream,
}

impl WirePeer {
    /// A TCP connection to `to` from address `from`.
    fn tcp(to: SocketAddr, from: IpAddr) -> TcpStream {
        let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        sock.bind(&SocketAddr::from((from, 0)).into()).unwrap();
        sock.connect(&to.into()).unwrap();
        let sock: TcpStream = sock.into();
        sock.set_read_timeout(Some(WAIT)).unwrap();
        sock.set_write_timeout(Some(WAIT)).unwrap();
        sock
    }

    /// Connects from `from` with a well-formed CONNECT_REQ; returns the peer once the ACCEPT
    /// arrived, `None` when the responder closed the connection instead.
    fn try_handshake(to: SocketAddr, from: IpAddr) -> Option<WirePeer> {
        let mut peer = WirePeer { sock: Self::tcp(to, from) };
        let mut req = Header::new(FrameType::ConnectReq);
        let params = CmParams { rnr_retry: 7, initiator_depth: DEFAULT_RD_ATOMIC, responder_resources: 1 };
        req.aux = params.to_aux();
        peer.sock.write_all(&req.encode()).ok()?;
        let accept = peer.try_header()?;
        assert_eq!(accept.ty, FrameType::Accept, "{accept:?}");
        let mut data = vec![0u8; accept.len as usize];
        peer.sock.read_exact(&mut data).unwrap();
        Some(peer)
    }

    /// Connects from 127.0.0.1; the responder must accept.
    fn handshake(to: SocketAddr) -> WirePeer {
        Self::try_handshake(to, Ipv4Addr::LOCALHOST.into()).expect("the responder accepts")
    }

    /// The next frame header; `None` when the connection ended.
    fn try_header(&mut self) -> Option<Header> {
        let mut b = [0u8; HEADER_LEN];
        self.sock.read_exact(&mut b).ok()?;
        Some(Header::decode(&b, 1 << 31).expect("a valid frame from the responder"))
    }

    /// The next frame header and its payload.
    fn frame(&mut self) -> (Header, Vec<u8>) {
        let h = self.try_header().expect("a frame from the responder");
        let mut payload = vec![0u8; h.len as usize];
        self.sock.read_exact(&mut payload).unwrap();
        (h, payload)
    }
}

/// A READ request frame.
fn read_req(psn: u32, remote: RemoteAddr, len: u32) -> Header {
    let mut h = Header::new(FrameType::ReadReq);
    (h.psn, h.addr, h.rkey, h.aux) = (psn, remote.addr, remote.rkey, len);
    h
}

/// Sends `FLOOD_REQUESTS` frames made by `frame(psn)` as fast as the responder takes them
/// (until a write fails or times out: the responder stopped reading or cut the connection),
/// without ever reading; returns the largest growth of resident memory over `before`, in KiB.
fn flood(peer: &WirePeer, before: resources::Usage, frame: impl Fn(u32) -> Header) -> u64 {
    peer.sock.set_write_timeout(Some(Duration::from_secs(1))).unwrap();
    let mut peak = 0;
    let mut sock = &peer.sock;
    for batch in 0..FLOOD_REQUESTS / FLOOD_BATCH {
        let bytes: Vec<u8> = (0..FLOOD_BATCH).flat_map(|i| frame((batch * FLOOD_BATCH + i) as u32).encode()).collect();
        let stopped = sock.write_all(&bytes).is_err();
        if batch % 16 == 0 || stopped {
            peak = peak.max(resources::Usage::now().rss_kib.saturating_sub(before.rss_kib));
        }
        if stopped {
            break;
        }
    }
    peak
}

/// A connected peer pipelines READ requests for the whole region without limit (the soft
/// requester would keep to its initiator depth; this one writes the frames itself) and never
/// reads its socket. The responder cuts it as soon as it has more READs outstanding than the
/// responder resources it was granted, counts it, and its memory stays bounded; a well-behaved
/// peer is served before and after. Runs alone in a child process: memory is process-wide.
#[test]
fn a_read_flood_beyond_the_responder_resources_is_cut_and_memory_stays_bounded() {
    let path = "nic::a_read_flood_beyond_the_responder_resources_is_cut_and_memory_stays_bounded";
    if !isolate::in_child_process(path, Duration::from_secs(120)) {
        return;
    }
    let responder = Responder::start();
    let good = GoodPeer::connect(&responder);
    good.read_region(&responder);
    let attacker = WirePeer::handshake(responder.addr);
    // The responder's receive is posted before the flood, so the cut has one to flush.
    let attacker_qp = responder.qp_num(1);
    let before = resources::Usage::now();
    let whole = responder.region.remote();
    let peak_kib = flood(&attacker, before, |psn| read_req(psn, whole, REGION_LEN as u32));
    assert!(peak_kib < FLOOD_RSS_SLACK_KIB, "the READ flood grew the responder by {peak_kib} KiB");
    responder.wait_counters("the flood is cut for its READ depth", |c| c.read_depth_violations == 1);
    responder.expect_flushed_receive(attacker_qp);
    let after = resources::Usage::now();
    assert!(after.rss_kib.saturating_sub(before.rss_kib) < FLOOD_RSS_SLACK_KIB, "{before:?} -> {after:?}");
    good.read_region(&responder);
    assert_eq!(responder.counters().output_stalls, 0, "cut for its READ depth, not for a stall");
}

/// A connected peer that guesses rkeys: after its first remote access error the responder's
/// queue pair is in the error state, as a hardware responder's: a READ with the valid rkey on
/// the same connection is refused, a SEND is refused, and the responder's posted receive is
/// flushed (the responder side sees the error). Each guess costs a new connection.
#[test]
fn after_a_remote_access_error_the_responder_refuses_the_connections_requests() {
    let responder = Responder::start();
    let mut attacker = WirePeer::handshake(responder.addr);
    let attacker_qp = responder.qp_num(0);
    let valid = responder.region.remote();
    let guess = RemoteAddr { rkey: valid.rkey ^ 0x0101_0101, ..valid };
    attacker.sock.write_all(&read_req(0, guess, 64).encode()).unwrap();
    let (nak, _) = attacker.frame();
    assert_eq!((nak.ty, nak.psn, nak.status, nak.len), (FrameType::ReadResp, 0, Status::RemoteAccess, 0));

    attacker.sock.write_all(&read_req(1, valid, 64).encode()).unwrap();
    let (after, data) = attacker.frame();
    assert_eq!((after.ty, after.psn, after.status), (FrameType::ReadResp, 1, Status::OperationError));
    assert!(data.is_empty(), "no byte of the region after the error");
    let mut send = Header::new(FrameType::Send);
    (send.psn, send.len) = (2, 8);
    attacker.sock.write_all(&send.encode()).unwrap();
    attacker.sock.write_all(&[0x5a; 8]).unwrap();
    let (ack, _) = attacker.frame();
    assert_eq!((ack.ty, ack.psn, ack.status), (FrameType::Ack, 2, Status::OperationError));

    // The responder's receive is flushed: its queue pair is in the error state.
    responder.expect_flushed_receive(attacker_qp);
    assert_eq!(responder.counters().remote_access_errors, 1);
}

/// A flood of TCP connections from one source that never send their connect request: at most
/// `MAX_PENDING_HANDSHAKES_PER_SOURCE` stay open (each until its handshake timeout), the rest
/// are closed at once and counted. Another source connects meanwhile (more times than the
/// limit: established connections are not counted), and the flooding source connects again
/// once it gave its pending connections up.
#[test]
fn a_handshake_flood_from_one_source_is_capped_counted_and_spares_other_sources() {
    let responder = Responder::start();
    let flooder: IpAddr = Ipv4Addr::new(127, 0, 0, 2).into();
    let extra = 16;
    let flood: Vec<TcpStream> =
        (0..MAX_PENDING_HANDSHAKES_PER_SOURCE + extra).map(|_| WirePeer::tcp(responder.addr, flooder)).collect();
    responder.wait_counters("the excess connections are refused", |c| c.refused_handshakes == extra as u64);
    // The refused ones see their connection end; the others stay open, waiting.
    for s in &flood {
        s.set_nonblocking(true).unwrap();
    }
    let closed = || flood.iter().filter(|s| !would_block(s)).count();
    let deadline = Instant::now() + WAIT;
    while closed() < extra {
        assert!(Instant::now() < deadline, "{} of {extra} refused connections closed", closed());
        std::thread::yield_now();
    }
    assert_eq!(closed(), extra, "the pending connections stay open");

    // Another source is not held up by the flood: through the fabric, and on the wire; and
    // established connections hold no handshake slot: it may have more than the limit.
    GoodPeer::connect(&responder).read_region(&responder);
    let established: Vec<WirePeer> =
        (0..=MAX_PENDING_HANDSHAKES_PER_SOURCE).map(|_| WirePeer::handshake(responder.addr)).collect();
    drop(established);
    let c = responder.counters();
    assert_eq!((c.refused_handshakes, c.handshake_timeouts), (extra as u64, 0));

    // The flooder gives its connections up: it may connect again once the responder saw them go.
    drop(flood);
    let deadline = Instant::now() + WAIT;
    let again = loop {
        if let Some(peer) = WirePeer::try_handshake(responder.addr, flooder) {
            break peer;
        }
        assert!(Instant::now() < deadline, "the flooding source never got a slot back");
    };
    drop(again);
}

/// Whether nothing can be read from `s` yet (it is open and silent).
fn would_block(s: &TcpStream) -> bool {
    matches!(s.peek(&mut [0u8; 1]), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
}

/// A zero-length WRITE at `at`: a request the responder answers (with an acknowledgement).
fn empty_write(psn: u32, at: RemoteAddr) -> Header {
    let mut h = Header::new(FrameType::Write);
    (h.psn, h.addr, h.rkey) = (psn, at.addr, at.rkey);
    h
}

/// A connected peer floods requests that are each answered (zero-length WRITEs, acknowledged
/// one by one) and never reads the answers. The responder stops reading the peer once the
/// answers queued for it pass `OUT_CAP` (its memory stays bounded), and cuts it when it has
/// written nothing for `OUTPUT_STALL_TIMEOUT`, counting it. Runs alone in a child process.
#[test]
fn a_peer_that_never_reads_its_answers_is_paused_then_cut_with_bounded_memory() {
    let path = "nic::a_peer_that_never_reads_its_answers_is_paused_then_cut_with_bounded_memory";
    if !isolate::in_child_process(path, Duration::from_secs(120)) {
        return;
    }
    let responder = Responder::start();
    let good = GoodPeer::connect(&responder);
    let attacker = WirePeer::handshake(responder.addr);
    let attacker_qp = responder.qp_num(1);
    let before = resources::Usage::now();
    let at = responder.region.remote();
    let peak_kib = flood(&attacker, before, |psn| empty_write(psn, at));
    assert!(peak_kib < FLOOD_RSS_SLACK_KIB, "unread answers grew the responder by {peak_kib} KiB");
    good.read_region(&responder);
    let deadline = Instant::now() + 2 * OUTPUT_STALL_TIMEOUT + WAIT;
    while responder.counters().output_stalls == 0 {
        assert!(Instant::now() < deadline, "the stalled peer was never cut: {:?}", responder.counters());
        std::thread::yield_now();
    }
    responder.expect_flushed_receive(attacker_qp);
    let after = resources::Usage::now();
    assert!(after.rss_kib.saturating_sub(before.rss_kib) < FLOOD_RSS_SLACK_KIB, "{before:?} -> {after:?}");
    good.read_region(&responder);
    assert_eq!(responder.counters(), FabricCounters { output_stalls: 1, ..FabricCounters::default() });
}
