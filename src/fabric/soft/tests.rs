//! Focused tests of the soft provider's internals over loopback. Every wait has a timeout.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::time::{Duration, Instant};

use crate::fabric::*;

const T: Duration = Duration::from_secs(5);

fn fabric() -> Fabric {
    open(&FabricConfig::new(FabricKind::Soft)).unwrap()
}

fn loopback() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 0))
}

fn event(ch: &EventChannel) -> CmEvent {
    ch.get_event(T).unwrap().expect("a CM event within the timeout")
}

fn completion(cq: &CompletionQueue) -> WorkCompletion {
    let mut wc = [WorkCompletion::default(); 1];
    let n = cq.poll_wait(&mut wc, Duration::from_micros(50), T).unwrap();
    assert_eq!(n, 1, "a completion within the timeout");
    wc[0]
}

fn no_completion(cq: &CompletionQueue) {
    let mut wc = [WorkCompletion::default(); 1];
    assert_eq!(cq.poll(&mut wc).unwrap(), 0, "unexpected completion {:?}", wc[0]);
}

/// Two connected queue pairs on one device: `a` (active) and `b` (passive).
struct Pair {
    pd: ProtectionDomain,
    cq_a: CompletionQueue,
    cq_b: CompletionQueue,
    ch_a: EventChannel,
    ch_b: EventChannel,
    a: QueuePair,
    b: QueuePair,
    _listener: Listener,
}

fn pair_with(fab: &Fabric, rnr_retry: u8, caps: QpCaps) -> Pair {
    let pd = fab.alloc_pd().unwrap();
    let cq_a = fab.create_cq(64).unwrap();
    let cq_b = fab.create_cq(64).unwrap();
    let ch_a = fab.create_event_channel().unwrap();
    let ch_b = fab.create_event_channel().unwrap();
    let listener = ch_b.listen(loopback(), 16).unwrap();
    let mut init_a = QpInit::new(&pd, &cq_a);
    init_a.rnr_retry = rnr_retry;
    init_a.caps = caps;
    init_a.min_rnr_timer = Duration::from_millis(1);
    let a = ch_a.connect(listener.local_addr(), &init_a, b"hello", T).unwrap();
    let CmEvent::ConnectRequest(req) = event(&ch_b) else { panic!("expected a connect request") };
    assert_eq!(req.private_data(), b"hello");
    let mut init_b = QpInit::new(&pd, &cq_b);
    init_b.min_rnr_timer = Duration::from_millis(1);
    init_b.caps = caps;
    let b = req.accept(&init_b, b"welcome").unwrap();
    match event(&ch_a) {
        CmEvent::Established { conn, private_data } => {
            assert_eq!(conn, a.conn_id());
            assert_eq!(private_data, b"welcome");
        }
        other => panic!("expected Established, got {other:?}"),
    }
    assert!(matches!(event(&ch_b), CmEvent::Established { conn, .. } if conn == b.conn_id()));
    Pair { pd, cq_a, cq_b, ch_a, ch_b, a, b, _listener: listener }
}

fn pair(fab: &Fabric) -> Pair {
    pair_with(fab, 6, QpCaps::default())
}

fn read(qp: &QueuePair, wr_id: u64, dst: &MemoryRegion, off: usize, len: usize, remote: RemoteAddr) {
    let sge = [dst.sge(off, len)];
    qp.post_send(&SendRequest::new(wr_id, SendOp::RdmaRead(remote), &sge)).unwrap();
}

#[test]
fn read_write_and_send_move_the_bytes() {
    let fab = fabric();
    let p = pair(&fab);
    let rw = Access::LOCAL_WRITE | Access::REMOTE_READ | Access::REMOTE_WRITE;
    let remote = p.pd.register(1 << 20, rw).unwrap();
    let local = p.pd.register(1 << 20, Access::LOCAL_WRITE).unwrap();
    let pattern: Vec<u8> = (0..1 << 20).map(|i: u32| (i * 7 + 3) as u8).collect();
    remote.buffer().write(0, &pattern).unwrap();

    read(&p.a, 1, &local, 0, 1 << 20, remote.remote());
    let wc = completion(&p.cq_a);
    assert_eq!((wc.wr_id, wc.status, wc.opcode, wc.byte_len), (1, WcStatus::Success, WcOpcode::RdmaRead, 1 << 20));
    assert_eq!(wc.qp_num, p.a.qp_num());
    let mut got = vec![0u8; 1 << 20];
    local.buffer().read(0, &mut got).unwrap();
    assert_eq!(got, pattern);

    local.buffer().write(100, b"written").unwrap();
    let sge = [local.sge(100, 7)];
    let at = RemoteAddr { addr: remote.addr() + 5000, rkey: remote.rkey() };
    p.a.post_send(&SendRequest::new(2, SendOp::RdmaWrite(at), &sge)).unwrap();
    assert_eq!(completion(&p.cq_a).status, WcStatus::Success);
    let mut w = [0u8; 7];
    remote.buffer().read(5000, &mut w).unwrap();
    assert_eq!(&w, b"written");

    let rbuf = p.pd.register(64, Access::LOCAL_WRITE).unwrap();
    p.b.post_recv(77, &[rbuf.sge(0, 64)]).unwrap();
    p.a.post_send(&SendRequest::new(3, SendOp::SendWithImm(0xfeed), &sge)).unwrap();
    let wc = completion(&p.cq_b);
    assert_eq!(
        (wc.wr_id, wc.status, wc.opcode, wc.byte_len, wc.imm),
        (77, WcStatus::Success, WcOpcode::Recv, 7, Some(0xfeed))
    );
    assert_eq!(wc.qp_num, p.b.qp_num());
    assert_eq!(completion(&p.cq_a).wr_id, 3);
    let mut r = [0u8; 7];
    rbuf.buffer().read(0, &mut r).unwrap();
    assert_eq!(&r, b"written");
}

/// Where a bad READ aims, given the region it abuses.
type Target = fn(&MemoryRegion) -> RemoteAddr;

#[test]
fn remote_access_is_checked_against_rkey_bounds_and_rights() {
    let fab = fabric();
    let pd_other = fab.alloc_pd().unwrap();
    // Each case breaks the requester QP, so each gets its own pair.
    let cases: Vec<(&str, Target)> = vec![
        ("forged rkey", |mr| RemoteAddr { addr: mr.addr(), rkey: mr.rkey() ^ 0x5a5a_5a5a }),
        ("past the end", |mr| RemoteAddr { addr: mr.addr() + 4096 - 8, rkey: mr.rkey() }),
        ("below the start", |mr| RemoteAddr { addr: mr.addr().wrapping_sub(1), rkey: mr.rkey() }),
    ];
    for (what, target) in cases {
        let p = pair(&fab);
        let mr = p.pd.register(4096, Access::LOCAL_WRITE | Access::REMOTE_READ).unwrap();
        mr.buffer().fill(0, 4096, 0xAB).unwrap();
        let dst = p.pd.register(4096, Access::LOCAL_WRITE).unwrap();
        read(&p.a, 1, &dst, 0, 16, target(&mr));
        read(&p.a, 2, &dst, 16, 16, mr.remote());
        let wc = completion(&p.cq_a);
        assert_eq!((wc.wr_id, wc.status), (1, WcStatus::RemoteAccessError), "{what}");
        let wc = completion(&p.cq_a);
        assert_eq!((wc.wr_id, wc.status), (2, WcStatus::WorkRequestFlushed), "{what}: later requests flush");
        let mut got = [0u8; 32];
        dst.buffer().read(0, &mut got).unwrap();
        assert_eq!(got, [0u8; 32], "{what}: no byte may arrive");
    }
    // Missing REMOTE_READ / REMOTE_WRITE, another protection domain, and a deregistered key.
    let p = pair(&fab);
    let dst = p.pd.register(64, Access::LOCAL_WRITE).unwrap();
    let no_read = p.pd.register(64, Access::LOCAL_WRITE | Access::REMOTE_WRITE).unwrap();
    read(&p.a, 1, &dst, 0, 8, no_read.remote());
    assert_eq!(completion(&p.cq_a).status, WcStatus::RemoteAccessError);
    let p = pair(&fab);
    let dst = p.pd.register(64, Access::LOCAL_WRITE).unwrap();
    let read_only = p.pd.register(64, Access::REMOTE_READ).unwrap();
    let sge = [dst.sge(0, 8)];
    p.a.post_send(&SendRequest::new(1, SendOp::RdmaWrite(read_only.remote()), &sge)).unwrap();
    assert_eq!(completion(&p.cq_a).status, WcStatus::RemoteAccessError);
    let p = pair(&fab);
    let dst = p.pd.register(64, Access::LOCAL_WRITE).unwrap();
    let foreign = pd_other.register(64, Access::REMOTE_READ).unwrap();
    read(&p.a, 1, &dst, 0, 8, foreign.remote());
    assert_eq!(completion(&p.cq_a).status, WcStatus::RemoteAccessError);
    let p = pair(&fab);
    let dst = p.pd.register(64, Access::LOCAL_WRITE).unwrap();
    let gone = p.pd.register(64, Access::REMOTE_READ).unwrap();
    let stale = gone.remote();
    drop(gone);
    read(&p.a, 1, &dst, 0, 8, stale);
    assert_eq!(completion(&p.cq_a).status, WcStatus::RemoteAccessError);
}

#[test]
fn rkeys_are_random_and_unique() {
    let fab = fabric();
    let pd = fab.alloc_pd().unwrap();
    let mrs: Vec<_> = (0..64).map(|_| pd.register(8, Access::REMOTE_READ).unwrap()).collect();
    let mut keys: Vec<u32> = mrs.iter().map(|m| m.rkey()).collect();
    let sequential = keys.windows(2).filter(|w| w[1] == w[0].wrapping_add(1)).count();
    assert!(sequential < 4, "rkeys look sequential: {keys:?}");
    keys.sort_unstable();
    keys.dedup();
    assert_eq!(keys.len(), 64);
}

#[test]
fn send_without_receive_waits_then_fails_with_rnr_retry_exceeded() {
    let fab = fabric();
    let p = pair_with(&fab, 2, QpCaps::default());
    let src = p.pd.register(64, Access::LOCAL_WRITE).unwrap();
    let sge = [src.sge(0, 8)];
    p.a.post_send(&SendRequest::new(9, SendOp::Send, &sge)).unwrap();
    let wc = completion(&p.cq_a);
    assert_eq!((wc.wr_id, wc.status), (9, WcStatus::RnrRetryExceeded));
    // The queue pair is now in error: later work requests flush.
    p.a.post_send(&SendRequest::new(10, SendOp::Send, &sge).unsignaled()).unwrap();
    assert_eq!(completion(&p.cq_a).status, WcStatus::WorkRequestFlushed);

    // With infinite retries the SEND lands once a receive is posted, and a later SEND waits
    // behind it (RC order).
    let p = pair_with(&fab, RNR_RETRY_INFINITE, QpCaps::default());
    let src = p.pd.register(64, Access::LOCAL_WRITE).unwrap();
    src.buffer().write(0, b"first!!!second!!").unwrap();
    p.a.post_send(&SendRequest::new(1, SendOp::Send, &[src.sge(0, 8)])).unwrap();
    p.a.post_send(&SendRequest::new(2, SendOp::Send, &[src.sge(8, 8)])).unwrap();
    let dst = p.pd.register(64, Access::LOCAL_WRITE).unwrap();
    let deadline = Instant::now() + Duration::from_millis(20);
    let mut wc = [WorkCompletion::default(); 1];
    while Instant::now() < deadline {
        assert_eq!(p.cq_a.poll(&mut wc).unwrap(), 0, "no completion before a receive exists: {:?}", wc[0]);
    }
    p.b.post_recv(100, &[dst.sge(0, 8)]).unwrap();
    p.b.post_recv(101, &[dst.sge(8, 8)]).unwrap();
    assert_eq!(completion(&p.cq_b).wr_id, 100);
    assert_eq!(completion(&p.cq_b).wr_id, 101);
    let mut got = [0u8; 16];
    dst.buffer().read(0, &mut got).unwrap();
    assert_eq!(&got, b"first!!!second!!");
    assert_eq!(completion(&p.cq_a).status, WcStatus::Success);
    assert_eq!(completion(&p.cq_a).status, WcStatus::Success);
}

#[test]
fn send_longer_than_the_receive_is_a_length_error_on_both_sides() {
    let fab = fabric();
    let p = pair(&fab);
    let buf = p.pd.register(64, Access::LOCAL_WRITE).unwrap();
    p.b.post_recv(5, &[buf.sge(0, 4)]).unwrap();
    p.a.post_send(&SendRequest::new(6, SendOp::Send, &[buf.sge(0, 32)])).unwrap();
    let wc = completion(&p.cq_b);
    assert_eq!((wc.wr_id, wc.status), (5, WcStatus::LocalLengthError));
    let wc = completion(&p.cq_a);
    assert_eq!((wc.wr_id, wc.status), (6, WcStatus::RemoteInvalidRequest));
}

#[test]
fn disconnect_flushes_outstanding_requests_and_both_sides_get_disconnected() {
    let fab = fabric();
    let p = pair_with(&fab, RNR_RETRY_INFINITE, QpCaps::default());
    let buf = p.pd.register(64, Access::LOCAL_WRITE).unwrap();
    p.a.post_recv(1, &[buf.sge(0, 8)]).unwrap();
    p.a.post_recv(2, &[buf.sge(8, 8)]).unwrap();
    // A SEND that cannot complete: b has no receive and retries forever.
    p.a.post_send(&SendRequest::new(3, SendOp::Send, &[buf.sge(0, 8)])).unwrap();
    p.a.disconnect().unwrap();
    let mut seen: Vec<(u64, WcStatus)> = (0..3).map(|_| completion(&p.cq_a)).map(|w| (w.wr_id, w.status)).collect();
    seen.sort_by_key(|s| s.0);
    assert_eq!(
        seen,
        vec![(1, WcStatus::WorkRequestFlushed), (2, WcStatus::WorkRequestFlushed), (3, WcStatus::WorkRequestFlushed)]
    );
    assert!(matches!(event(&p.ch_a), CmEvent::Disconnected { conn } if conn == p.a.conn_id()));
    assert!(matches!(event(&p.ch_b), CmEvent::Disconnected { conn } if conn == p.b.conn_id()));
    p.a.disconnect().unwrap();
    let err = p.a.post_send(&SendRequest::new(4, SendOp::Send, &[buf.sge(0, 8)]));
    assert!(matches!(err, Err(Error::NotConnected { .. })), "{err:?}");
    no_completion(&p.cq_a);
}

#[test]
fn a_cut_connection_fails_outstanding_sends_with_transport_retry_exceeded() {
    let fab = fabric();
    let p = pair_with(&fab, RNR_RETRY_INFINITE, QpCaps::default());
    let buf = p.pd.register(64, Access::LOCAL_WRITE).unwrap();
    p.a.post_recv(1, &[buf.sge(0, 8)]).unwrap();
    p.a.post_send(&SendRequest::new(2, SendOp::Send, &[buf.sge(0, 8)])).unwrap();
    fab.faults().unwrap().cut(p.a.conn_id()).unwrap();
    let mut seen: Vec<(u64, WcStatus)> = (0..2).map(|_| completion(&p.cq_a)).map(|w| (w.wr_id, w.status)).collect();
    seen.sort_by_key(|s| s.0);
    assert_eq!(seen, vec![(1, WcStatus::WorkRequestFlushed), (2, WcStatus::TransportRetryExceeded)]);
    assert!(matches!(event(&p.ch_a), CmEvent::Disconnected { .. }));
    assert!(matches!(event(&p.ch_b), CmEvent::Disconnected { .. }));
    assert!(fab.faults().unwrap().cut(p.a.conn_id()).is_err(), "the connection is gone");
}

#[test]
fn unsignaled_sends_hold_their_slots_until_a_signaled_one_completes() {
    let fab = fabric();
    let caps = QpCaps { max_send_wr: 4, ..QpCaps::default() };
    let p = pair_with(&fab, 6, caps);
    let mr = p.pd.register(64, Access::LOCAL_WRITE | Access::REMOTE_WRITE).unwrap();
    let sge = [mr.sge(0, 8)];
    let write =
        |wr_id, signaled| SendRequest { signaled, ..SendRequest::new(wr_id, SendOp::RdmaWrite(mr.remote()), &sge) };
    for i in 0..4 {
        p.a.post_send(&write(i, false)).unwrap();
    }
    // Even once they are acknowledged, the four unsignaled WRITEs occupy the queue.
    std::thread::sleep(Duration::from_millis(20));
    assert!(matches!(p.a.post_send(&write(9, true)), Err(Error::QueueFull { depth: 4, .. })));
    no_completion(&p.cq_a);

    let p = pair_with(&fab, 6, caps);
    let mr2 = p.pd.register(64, Access::LOCAL_WRITE | Access::REMOTE_WRITE).unwrap();
    let sge = [mr2.sge(0, 8)];
    let write =
        |wr_id, signaled| SendRequest { signaled, ..SendRequest::new(wr_id, SendOp::RdmaWrite(mr2.remote()), &sge) };
    for i in 0..3 {
        p.a.post_send(&write(i, false)).unwrap();
    }
    p.a.post_send(&write(3, true)).unwrap();
    assert_eq!(completion(&p.cq_a).wr_id, 3);
    for i in 4..8 {
        p.a.post_send(&write(i, i == 7)).unwrap();
    }
    assert_eq!(completion(&p.cq_a).wr_id, 7);
}

#[test]
fn completion_queue_overrun_is_reported_by_poll() {
    let fab = fabric();
    let p = pair(&fab);
    let small = fab.create_cq(2).unwrap();
    let buf = p.pd.register(64, Access::LOCAL_WRITE).unwrap();
    let mut init = QpInit::new(&p.pd, &small);
    init.caps.max_recv_wr = 8;
    let listener = p.ch_b.listen(loopback(), 4).unwrap();
    let a = p.ch_a.connect(listener.local_addr(), &init, &[], T).unwrap();
    let CmEvent::ConnectRequest(req) = event(&p.ch_b) else { panic!("expected a request") };
    let b = req.accept(&QpInit::new(&p.pd, &p.cq_b), &[]).unwrap();
    assert!(matches!(event(&p.ch_a), CmEvent::Established { .. }));
    for i in 0..3 {
        a.post_recv(i, &[buf.sge(0, 8)]).unwrap();
    }
    a.disconnect().unwrap(); // three flush completions into a CQ of two
    let mut wc = [WorkCompletion::default(); 4];
    assert!(matches!(small.poll(&mut wc), Err(Error::CqOverrun { depth: 2 })));
    drop(b);
}

#[test]
fn reject_and_no_listener_reach_the_requester() {
    let fab = fabric();
    let pd = fab.alloc_pd().unwrap();
    let cq = fab.create_cq(8).unwrap();
    let ch = fab.create_event_channel().unwrap();
    let server = fab.create_event_channel().unwrap();
    let listener = server.listen(loopback(), 4).unwrap();
    let addr = listener.local_addr();
    assert!(matches!(server.listen(addr, 4), Err(Error::AddrInUse { .. })));
    let qp = ch.connect(addr, &QpInit::new(&pd, &cq), b"please", T).unwrap();
    let CmEvent::ConnectRequest(req) = event(&server) else { panic!("expected a request") };
    req.reject(b"no thanks").unwrap();
    match event(&ch) {
        CmEvent::Rejected { conn, reason, private_data } => {
            assert_eq!(conn, qp.conn_id());
            assert_eq!(reason, RejectReason::Consumer);
            assert_eq!(private_data, b"no thanks");
        }
        other => panic!("expected Rejected, got {other:?}"),
    }
    drop(listener);
    let qp = ch.connect(addr, &QpInit::new(&pd, &cq), &[], T).unwrap();
    assert!(
        matches!(event(&ch), CmEvent::Rejected { reason: RejectReason::NoListener, conn, .. } if conn == qp.conn_id())
    );
}

fn fd_count() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

fn thread_count() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status.lines().find_map(|l| l.strip_prefix("Threads:")).unwrap().trim().parse().unwrap()
}

/// Waits (bounded) until `f` is at most `limit`.
fn settles(what: &str, limit: usize, f: fn() -> usize) {
    let deadline = Instant::now() + T;
    while f() > limit {
        assert!(Instant::now() < deadline, "{what} stayed at {} (limit {limit})", f());
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn connect_disconnect_cycles_leak_no_fds_or_threads() {
    // Other tests run concurrently in this process, so compare against a baseline with slack
    // far below what 200 leaked cycles would leave behind (400 fds).
    let fab = fabric();
    let pd = fab.alloc_pd().unwrap();
    let cq = fab.create_cq(1024).unwrap();
    let ch_a = fab.create_event_channel().unwrap();
    let ch_b = fab.create_event_channel().unwrap();
    let listener = ch_b.listen(loopback(), 16).unwrap();
    let cycle = || {
        let a = ch_a.connect(listener.local_addr(), &QpInit::new(&pd, &cq), &[], T).unwrap();
        let CmEvent::ConnectRequest(req) = event(&ch_b) else { panic!("expected a request") };
        let b = req.accept(&QpInit::new(&pd, &cq), &[]).unwrap();
        assert!(matches!(event(&ch_a), CmEvent::Established { .. }));
        assert!(matches!(event(&ch_b), CmEvent::Established { .. }));
        a.disconnect().unwrap();
        assert!(matches!(event(&ch_a), CmEvent::Disconnected { .. }));
        assert!(matches!(event(&ch_b), CmEvent::Disconnected { .. }));
        drop((a, b));
    };
    for _ in 0..10 {
        cycle();
    }
    let fds = fd_count();
    let threads = thread_count();
    for _ in 0..200 {
        cycle();
    }
    settles("fd count", fds + 40, fd_count);
    settles("thread count", threads + 8, thread_count);

    // Opening and dropping devices joins their NIC threads.
    let before = thread_count();
    for _ in 0..20 {
        let f = fabric();
        let _ch = f.create_event_channel().unwrap();
    }
    settles("thread count after closing devices", before + 8, thread_count);
}

#[test]
fn ud_delivers_datagrams_and_applies_seeded_faults() {
    let fab = fabric();
    let pd = fab.alloc_pd().unwrap();
    let init = UdInit { interface: Ipv4Addr::LOCALHOST, port: 0, unicast_port: 0, recv_depth: 64 };
    let rx = fab.create_ud(&pd, &init).unwrap();
    let tx = fab.create_ud(&pd, &init).unwrap();
    let to = SocketAddrV4::new(Ipv4Addr::LOCALHOST, rx.local_addr().port());
    assert!(matches!(tx.send_unicast(to, &vec![0u8; 1025]), Err(Error::PayloadTooLarge { mtu: 1024, .. })));
    tx.send_unicast(to, b"ping").unwrap();
    let d = rx.recv(T).unwrap().expect("a datagram");
    assert_eq!(d.data, b"ping");
    assert_eq!(d.from.port(), tx.local_addr().port());
    assert!(rx.recv(Duration::ZERO).unwrap().is_none());

    // Every datagram duplicated, deterministically.
    fab.faults().unwrap().set_ud_faults(UdFaults { duplicate: 1.0, seed: 7, ..Default::default() });
    tx.send_unicast(to, b"twice").unwrap();
    assert_eq!(rx.recv(T).unwrap().unwrap().data, b"twice");
    assert_eq!(rx.recv(T).unwrap().unwrap().data, b"twice");
    // Every datagram dropped.
    fab.faults().unwrap().set_ud_faults(UdFaults { drop: 1.0, seed: 7, ..Default::default() });
    tx.send_unicast(to, b"lost").unwrap();
    assert!(rx.recv(Duration::from_millis(50)).unwrap().is_none());
    fab.faults().unwrap().set_ud_faults(UdFaults::default());

    // Multicast over loopback, where the host allows it.
    let group = Ipv4Addr::new(239, 255, 77, 1);
    let port = free_udp_port();
    let rx = fab.create_ud(&pd, &UdInit { port, ..init.clone() }).unwrap();
    match rx.join(group) {
        Ok(()) => {
            let m = fab.create_ud(&pd, &UdInit { port, ..init.clone() }).unwrap();
            m.send_to(group, b"to all").unwrap();
            assert_eq!(rx.recv(T).unwrap().expect("multicast datagram").data, b"to all");
        }
        Err(Error::MulticastUnavailable { interface, .. }) => assert_eq!(interface, "127.0.0.1"),
        Err(e) => panic!("unexpected join error {e}"),
    }
}

/// A UDP port that was free a moment ago (group sockets share ports anyway).
fn free_udp_port() -> u16 {
    std::net::UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Receives until `marker` arrives and returns the payloads seen before it.
fn until_marker(ep: &UdEndpoint, marker: &[u8]) -> Vec<Vec<u8>> {
    let mut seen = Vec::new();
    loop {
        let d = ep.recv(T).unwrap().expect("a datagram within the timeout");
        if d.data == marker {
            return seen;
        }
        seen.push(d.data);
    }
}

#[test]
fn ud_endpoints_sharing_a_port_hear_exactly_their_groups() {
    let fab = fabric();
    let pd = fab.alloc_pd().unwrap();
    let init = UdInit { interface: Ipv4Addr::LOCALHOST, port: free_udp_port(), unicast_port: 0, recv_depth: 64 };
    let (g1, g2) = (Ipv4Addr::new(239, 255, 77, 2), Ipv4Addr::new(239, 255, 77, 3));
    let a = fab.create_ud(&pd, &init).unwrap();
    let b = fab.create_ud(&pd, &init).unwrap();
    let c = fab.create_ud(&pd, &init).unwrap();
    let tx = fab.create_ud(&pd, &init).unwrap();
    match a.join(g1) {
        Ok(()) => {}
        Err(Error::MulticastUnavailable { .. }) => return,
        Err(e) => panic!("unexpected join error {e}"),
    }
    b.join(g1).unwrap();
    b.join(g2).unwrap();
    c.join(g2).unwrap();
    // Every member of a group gets each datagram once; non-members get none of it.
    tx.send_to(g1, b"one").unwrap();
    tx.send_to(g2, b"two").unwrap();
    for ep in [&a, &b, &c] {
        ep.join(Ipv4Addr::new(239, 255, 77, 4)).unwrap();
    }
    tx.send_to(Ipv4Addr::new(239, 255, 77, 4), b"end").unwrap();
    assert_eq!(until_marker(&a, b"end"), vec![b"one".to_vec()]);
    let mut at_b = until_marker(&b, b"end");
    at_b.sort();
    assert_eq!(at_b, vec![b"one".to_vec(), b"two".to_vec()]);
    assert_eq!(until_marker(&c, b"end"), vec![b"two".to_vec()]);
    // Unicast reaches exactly the addressed endpoint, and replies reach the sender.
    let addr = |ep: &UdEndpoint| match ep.local_addr() {
        SocketAddr::V4(v4) => v4,
        other => panic!("IPv6 address {other}"),
    };
    tx.send_unicast(addr(&b), b"for b").unwrap();
    for ep in [&a, &b, &c] {
        ep.send_unicast(addr(&tx), b"end").unwrap();
    }
    for ep in [&a, &c] {
        tx.send_unicast(addr(ep), b"end").unwrap();
    }
    tx.send_unicast(addr(&b), b"end").unwrap();
    assert_eq!(until_marker(&a, b"end"), Vec::<Vec<u8>>::new());
    assert_eq!(until_marker(&b, b"end"), vec![b"for b".to_vec()]);
    assert_eq!(until_marker(&c, b"end"), Vec::<Vec<u8>>::new());
    for _ in 0..3 {
        let d = tx.recv(T).unwrap().expect("a reply");
        assert_eq!(d.data, b"end");
        assert!([addr(&a), addr(&b), addr(&c)].contains(&match d.from {
            SocketAddr::V4(v4) => v4,
            other => panic!("IPv6 sender {other}"),
        }));
    }
}

#[test]
fn malformed_frames_from_the_network_close_the_connection_without_an_event() {
    use super::wire::{FrameType, Header};
    use std::io::{Read, Write};
    let fab = fabric();
    let ch = fab.create_event_channel().unwrap();
    let listener = ch.listen(loopback(), 4).unwrap();
    let mut too_long = Header::new(FrameType::ConnectReq);
    too_long.len = 57;
    let mut frames = vec![too_long.encode().to_vec(), vec![0xff; 64]];
    let mut early_read = Header::new(FrameType::ReadReq);
    early_read.aux = 8;
    frames.push(early_read.encode().to_vec());
    let mut bytes = too_long.encode().to_vec();
    bytes.extend_from_slice(&[1u8; 57]);
    frames.push(bytes);
    for frame in frames {
        let mut s = std::net::TcpStream::connect(listener.local_addr()).unwrap();
        s.set_read_timeout(Some(T)).unwrap();
        s.write_all(&frame).unwrap();
        let mut buf = [0u8; 16];
        // The NIC closes the stream: end of file (or a reset), never an answer.
        match s.read(&mut buf) {
            Ok(n) => assert_eq!(n, 0, "the NIC answered a malformed frame"),
            Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::ConnectionReset, "{e}"),
        }
    }
    assert!(ch.get_event(Duration::from_millis(20)).unwrap().is_none(), "no request may be delivered");
}

#[test]
fn a_shared_receive_queue_serves_several_queue_pairs() {
    let fab = fabric();
    let pd = fab.alloc_pd().unwrap();
    let cq = fab.create_cq(64).unwrap();
    let srq = pd.create_srq(8, 1).unwrap();
    let ch_a = fab.create_event_channel().unwrap();
    let ch_b = fab.create_event_channel().unwrap();
    let listener = ch_b.listen(loopback(), 4).unwrap();
    let buf = pd.register(64, Access::LOCAL_WRITE).unwrap();
    srq.post_recv(1, &[buf.sge(0, 16)]).unwrap();
    srq.post_recv(2, &[buf.sge(16, 16)]).unwrap();
    let mut senders = Vec::new();
    let mut receivers = Vec::new();
    for _ in 0..2 {
        let a = ch_a.connect(listener.local_addr(), &QpInit::new(&pd, &cq), &[], T).unwrap();
        let CmEvent::ConnectRequest(req) = event(&ch_b) else { panic!("expected a request") };
        let mut init = QpInit::new(&pd, &cq);
        init.srq = Some(&srq);
        let b = req.accept(&init, &[]).unwrap();
        assert!(matches!(b.post_recv(9, &[buf.sge(0, 8)]), Err(Error::InvalidArgument { .. })));
        assert!(matches!(event(&ch_a), CmEvent::Established { .. }));
        assert!(matches!(event(&ch_b), CmEvent::Established { .. }));
        senders.push(a);
        receivers.push(b);
    }
    for (i, a) in senders.iter().enumerate() {
        a.post_send(&SendRequest::new(10 + i as u64, SendOp::Send, &[buf.sge(32, 4)]).unsignaled()).unwrap();
    }
    let mut recvs: Vec<(u64, u32)> = Vec::new();
    while recvs.len() < 2 {
        let wc = completion(&cq);
        assert_eq!((wc.status, wc.opcode), (WcStatus::Success, WcOpcode::Recv));
        recvs.push((wc.wr_id, wc.qp_num));
    }
    recvs.sort_unstable();
    assert_eq!(recvs.iter().map(|r| r.0).collect::<Vec<_>>(), vec![1, 2]);
    let mut qpns: Vec<u32> = recvs.iter().map(|r| r.1).collect();
    qpns.sort_unstable();
    let mut expected: Vec<u32> = receivers.iter().map(|q| q.qp_num()).collect();
    expected.sort_unstable();
    assert_eq!(qpns, expected, "each queue pair consumed one shared receive");
}

#[test]
fn an_incoming_connection_without_connect_request_is_closed_after_the_handshake_timeout() {
    use std::io::Read;
    let timeout = Duration::from_millis(100);
    let fab = super::device::open_with(&FabricConfig::new(FabricKind::Soft), timeout).unwrap();
    let ch = fab.create_event_channel().unwrap();
    let listener = ch.listen(loopback(), 4).unwrap();
    let mut silent = std::net::TcpStream::connect(listener.local_addr()).unwrap();
    silent.set_read_timeout(Some(T)).unwrap();
    let start = Instant::now();
    let mut buf = [0u8; 64];
    match silent.read(&mut buf) {
        Ok(0) => {}
        Ok(n) => panic!("{n} unexpected bytes from the listener"),
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
        Err(e) => panic!("the silent connection was not closed within {T:?}: {e}"),
    }
    assert!(start.elapsed() >= timeout - Duration::from_millis(5), "closed before the timeout");
    assert!(ch.get_event(Duration::ZERO).unwrap().is_none(), "a silent connection produced an event");
    // A connection that did send its request is unaffected: READs keep completing on it
    // until well past the handshake timeout.
    let p = pair(&fab);
    let established = Instant::now();
    let remote = p.pd.register(64, Access::REMOTE_READ).unwrap();
    let local = p.pd.register(64, Access::LOCAL_WRITE).unwrap();
    let mut n = 0;
    while established.elapsed() < 3 * timeout {
        read(&p.a, n, &local, 0, 64, remote.remote());
        let wc = completion(&p.cq_a);
        assert_eq!((wc.wr_id, wc.status), (n, WcStatus::Success));
        n += 1;
    }
    assert!(p.ch_a.get_event(Duration::ZERO).unwrap().is_none(), "an event on the established connection");
    assert!(p.ch_b.get_event(Duration::ZERO).unwrap().is_none(), "an event on the established connection");
}

#[test]
fn connections_made_and_closed_leave_no_timer_behind() {
    // Connect timeout (5 s), handshake timeout (30 s here) and close linger (2 s) are cancelled
    // once they no longer matter, so the NIC holds nothing for connections that are gone:
    // memory does not grow with the connection rate.
    let config = FabricConfig::new(FabricKind::Soft);
    let (fab, shared) = super::device::open_inspected(&config, Duration::from_secs(30)).unwrap();
    for i in 0..20 {
        let p = pair(&fab);
        let (closing, other, other_ch) = if i % 2 == 0 { (&p.a, &p.b, &p.ch_b) } else { (&p.b, &p.a, &p.ch_a) };
        closing.disconnect().unwrap();
        assert!(matches!(event(other_ch), CmEvent::Disconnected { conn } if conn == other.conn_id()));
    }
    // Well within the close linger, and far within the timeouts.
    let deadline = Instant::now() + Duration::from_millis(1500);
    let pending = || shared.timers_pending.load(std::sync::atomic::Ordering::Relaxed);
    while (pending() > 0 || !shared.conns.lock().is_empty()) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(shared.conns.lock().len(), 0, "connections left");
    assert_eq!(pending(), 0, "timers left for connections that are gone");
}

#[test]
fn the_soft_device_says_its_copies_run_on_this_hosts_cpus() {
    // Producers of bulk data leave the soft NIC thread a turn on their CPU (the publisher
    // yields after large commits) only where the device says so.
    assert!(fabric().attributes().copies_on_host_cpus);
}

#[test]
fn a_device_name_other_than_soft0_is_refused() {
    let named = |name: &str| FabricConfig { device: Some(name.into()), ..FabricConfig::new(FabricKind::Soft) };
    match open(&named("mlx5_0")) {
        Err(Error::NoDevice { provider: "soft", detail }) => assert!(detail.contains("mlx5_0"), "{detail}"),
        Err(e) => panic!("expected NoDevice naming mlx5_0, got {e}"),
        Ok(_) => panic!("a soft fabric opened as mlx5_0"),
    }
    assert_eq!(open(&named("soft0")).expect("soft0 is the soft device").device_name(), "soft0");
}

#[test]
fn a_bind_error_names_the_local_address_not_a_peer() {
    // 192.0.2.1 (TEST-NET-1) is no address of this host: binding fails, nothing is sent.
    let addr = SocketAddr::from(([192, 0, 2, 1], 0));
    let err = match fabric().create_event_channel().unwrap().listen(addr, 4) {
        Err(e) => e,
        Ok(_) => panic!("listening on an address of no interface succeeded"),
    };
    assert!(matches!(err, Error::Os { peer: None, local: Some(a), .. } if a == addr), "{err:?}");
    let text = err.to_string();
    assert!(text.contains("local address 192.0.2.1:0") && !text.contains("peer"), "{text}");
}

#[test]
fn a_unicast_port_in_use_is_addr_in_use_naming_the_local_address() {
    let fab = fabric();
    let pd = fab.alloc_pd().unwrap();
    let init = UdInit { interface: Ipv4Addr::LOCALHOST, port: 0, unicast_port: 0, recv_depth: 16 };
    let first = fab.create_ud(&pd, &init).unwrap();
    let taken = first.local_addr();
    let err = match fab.create_ud(&pd, &UdInit { unicast_port: taken.port(), ..init }) {
        Err(e) => e,
        Ok(_) => panic!("a second endpoint bound {taken}"),
    };
    assert!(matches!(err, Error::AddrInUse { addr, .. } if addr == taken), "{err:?}");
    let text = err.to_string();
    assert!(text.contains(&taken.to_string()) && !text.contains("peer"), "{text}");
}
