//! Tests of what only the soft provider promises, over loopback: its choices where the contract
//! allows several outcomes, the wire and its framing, the NIC's timers and limits, UD port
//! sharing, its device and its errors. The contract itself is the conformance suite's
//! (`tests/fabric_conformance/`, run on soft with and without the same-host path). Every wait
//! has a timeout.

use std::net::{Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use super::handshakes::{HANDSHAKE_TIMEOUT, MAX_PENDING_HANDSHAKES, MAX_PENDING_HANDSHAKES_PER_SOURCE};
use super::shm::tests::{network_only_fabric, Ends};
use crate::*;

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
fn after_rnr_retry_exceeded_later_requests_flush() {
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
fn posting_after_a_disconnect_is_refused_with_not_connected() {
    // The subscription relies on the refusal (not a flushed completion) to tell a closed feed.
    let fab = fabric();
    let p = pair(&fab);
    let buf = p.pd.register(64, Access::LOCAL_WRITE).unwrap();
    p.a.disconnect().unwrap();
    assert!(matches!(event(&p.ch_a), CmEvent::Disconnected { conn } if conn == p.a.conn_id()));
    assert!(matches!(event(&p.ch_b), CmEvent::Disconnected { conn } if conn == p.b.conn_id()));
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
fn a_refused_tcp_connect_is_rejected_with_no_listener() {
    // Soft knows nobody listens (the TCP connect is refused), and says so: the subscription
    // treats `NoListener` apart from an unreachable peer.
    let fab = fabric();
    let pd = fab.alloc_pd().unwrap();
    let cq = fab.create_cq(8).unwrap();
    let ch = fab.create_event_channel().unwrap();
    let server = fab.create_event_channel().unwrap();
    let addr = server.listen(loopback(), 4).unwrap().local_addr();
    let qp = ch.connect(addr, &QpInit::new(&pd, &cq), &[], T).unwrap();
    assert!(
        matches!(event(&ch), CmEvent::Rejected { reason: RejectReason::NoListener, conn, .. } if conn == qp.conn_id())
    );
}

#[test]
fn a_request_to_a_listener_whose_channel_was_dropped_is_rejected() {
    // The listener outlives its channel: the request it brings in has nobody to answer it, and
    // is rejected (no private data) rather than left waiting.
    let fab = fabric();
    let pd = fab.alloc_pd().unwrap();
    let cq = fab.create_cq(8).unwrap();
    let ch = fab.create_event_channel().unwrap();
    let server = fab.create_event_channel().unwrap();
    let listener = server.listen(loopback(), 4).unwrap();
    drop(server);
    let qp = ch.connect(listener.local_addr(), &QpInit::new(&pd, &cq), b"anyone?", T).unwrap();
    match event(&ch) {
        CmEvent::Rejected { conn, reason: RejectReason::Consumer, private_data } => {
            assert_eq!(conn, qp.conn_id());
            assert!(private_data.is_empty(), "{private_data:?}");
        }
        other => panic!("expected Rejected by the consumer, got {other:?}"),
    }
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
fn closing_devices_joins_their_nic_threads() {
    // Other tests run concurrently in this process, so compare against a baseline with slack
    // far below what 20 NIC threads left behind would add.
    let before = thread_count();
    for _ in 0..20 {
        let f = fabric();
        let _ch = f.create_event_channel().unwrap();
    }
    settles("thread count after closing devices", before + 8, thread_count);
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
fn an_incoming_connection_without_connect_request_is_closed_after_the_handshake_timeout() {
    use std::io::Read;
    let timeout = Duration::from_millis(100);
    let fab = super::open::for_tests::open_with(&FabricConfig::new(FabricKind::Soft), timeout).unwrap();
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
    let (fab, device, conns) = super::open::for_tests::open_inspected(&config, Duration::from_secs(30)).unwrap();
    for i in 0..20 {
        let p = pair(&fab);
        let (closing, other, other_ch) = if i % 2 == 0 { (&p.a, &p.b, &p.ch_b) } else { (&p.b, &p.a, &p.ch_a) };
        closing.disconnect().unwrap();
        assert!(matches!(event(other_ch), CmEvent::Disconnected { conn } if conn == other.conn_id()));
    }
    // Well within the close linger, and far within the timeouts.
    let deadline = Instant::now() + Duration::from_millis(1500);
    let pending = || device.timers_pending.load(std::sync::atomic::Ordering::Relaxed);
    while (pending() > 0 || !conns.open.lock().is_empty()) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(conns.open.lock().len(), 0, "connections left");
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

/// Half-open connects that hold the handshake table, each reopened as soon as it is closed:
/// 16 sources with 64 each, first all in one /24 (the legitimate client's own), then in 16
/// different /24s (1,024: the whole table). A legitimate client connecting through the
/// contract meanwhile gets through every time, within a bound: the oldest silent handshake
/// gives way to it, and its own handshake, which speaks at once, never does.
#[test]
fn a_flood_of_half_open_connects_from_16_sources_does_not_shut_out_a_legitimate_client() {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::Arc;
    const BOUND: Duration = Duration::from_secs(3);
    let config = FabricConfig::new(FabricKind::Soft);
    let (fab, device, _) = super::open::for_tests::open_inspected(&config, HANDSHAKE_TIMEOUT).unwrap();
    let ch = fab.create_event_channel().unwrap();
    let listener = ch.listen(loopback(), 4096).unwrap();
    let addr = listener.local_addr();
    let stop = Arc::new(AtomicBool::new(false));
    // The application accepts every request.
    let acceptor = {
        let (fab, stop) = (fab.clone(), stop.clone());
        std::thread::spawn(move || {
            let pd = fab.alloc_pd().unwrap();
            let cq = fab.create_cq(16).unwrap();
            let mut accepted = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                if let Some(CmEvent::ConnectRequest(req)) = ch.get_event(Duration::from_millis(50)).unwrap() {
                    accepted.push(req.accept(&QpInit::new(&pd, &cq), &[]).unwrap());
                }
            }
            drop(listener);
        })
    };
    for (phase, sources) in [
        ("one /24", (2..18u8).map(|i| Ipv4Addr::new(127, 0, 0, i)).collect::<Vec<_>>()),
        ("16 /24s", (1..17u8).map(|i| Ipv4Addr::new(127, 0, i, 2)).collect()),
    ] {
        let flooding = Arc::new(AtomicBool::new(true));
        let opened = Arc::new(AtomicUsize::new(0));
        let all = sources.len() * MAX_PENDING_HANDSHAKES_PER_SOURCE;
        let flooder = {
            let (flooding, opened) = (flooding.clone(), opened.clone());
            std::thread::spawn(move || flood(addr, &sources, MAX_PENDING_HANDSHAKES_PER_SOURCE, &flooding, &opened))
        };
        // Let the NIC take in the whole flood first: every connect holds a slot, or gave way
        // to a later one, or was refused.
        assert_eq!(MAX_PENDING_HANDSHAKES, all, "16 sources of 64 fill the table");
        let turned_away = || {
            let c = fab.counters();
            (c.evicted_handshakes + c.refused_handshakes) as usize
        };
        let before = turned_away();
        let deadline = Instant::now() + T;
        while device.handshakes.lock().len() + turned_away() - before < all {
            assert!(Instant::now() < deadline, "{phase}: the NIC did not take the flood in in time");
            std::thread::sleep(Duration::from_millis(10));
        }
        let pd = fab.alloc_pd().unwrap();
        let cq = fab.create_cq(16).unwrap();
        let client = fab.create_event_channel().unwrap();
        for trial in 0..2 {
            let start = Instant::now();
            let qp = client.connect(addr, &QpInit::new(&pd, &cq), &[], BOUND).unwrap();
            let ev = loop {
                let left = BOUND.saturating_sub(start.elapsed());
                match client.get_event(left).unwrap() {
                    Some(CmEvent::Disconnected { .. }) => continue,
                    other => break other,
                }
            };
            assert!(
                matches!(&ev, Some(CmEvent::Established { conn, .. }) if *conn == qp.conn_id()),
                "{phase}, trial {trial}: {ev:?} after {:?}; {} handshakes held; {:?}",
                start.elapsed(),
                device.handshakes.lock().len(),
                fab.counters()
            );
        }
        flooding.store(false, Ordering::Relaxed);
        flooder.join().unwrap();
        let c = fab.counters();
        let opened = opened.load(Ordering::Relaxed);
        assert!(c.evicted_handshakes > 0, "{phase}: the flood ({opened} connects) was evicting: {c:?}");
        eprintln!("{phase}: {opened} half-open connects; {c:?}");
    }
    stop.store(true, Ordering::Relaxed);
    acceptor.join().unwrap();
}

/// Keeps `per_source` silent TCP connections to `addr` open from each of `sources`, opening a
/// new one as soon as one is closed, until `flooding` turns false; counts them in `opened`.
fn flood(
    addr: SocketAddr,
    sources: &[Ipv4Addr],
    per_source: usize,
    flooding: &std::sync::atomic::AtomicBool,
    opened: &std::sync::atomic::AtomicUsize,
) {
    use socket2::{Domain, Socket, Type};
    let mut held: Vec<Vec<Socket>> = sources.iter().map(|_| Vec::new()).collect();
    while flooding.load(std::sync::atomic::Ordering::Relaxed) {
        for (source, socks) in sources.iter().zip(&mut held) {
            socks.retain(|s| {
                let mut b = [std::mem::MaybeUninit::<u8>::uninit(); 1];
                match s.peek(&mut b) {
                    Err(e) => matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::NotConnected),
                    Ok(_) => false,
                }
            });
            while socks.len() < per_source {
                let s = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
                s.bind(&SocketAddr::from((*source, 0)).into()).unwrap();
                s.set_nonblocking(true).unwrap();
                let _ = s.connect(&addr.into());
                socks.push(s);
                opened.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Two soft devices with the same-host path off (so every frame goes through the NIC threads),
/// the first with its connection table, and what connects queue pairs between them.
struct NetworkEnds {
    ends: Ends,
    conns_a: std::sync::Arc<super::connections::Connections>,
    _fabrics: (Fabric, Fabric),
}

impl NetworkEnds {
    fn new() -> NetworkEnds {
        let off = FabricConfig {
            soft: SoftOptions::default().same_host(SameHost::Off),
            ..FabricConfig::new(FabricKind::Soft)
        };
        let (a, _, conns_a) = super::open::for_tests::open_inspected(&off, HANDSHAKE_TIMEOUT).unwrap();
        let b = network_only_fabric();
        NetworkEnds { ends: Ends::new(&a, &b), conns_a, _fabrics: (a, b) }
    }

    /// A connected pair of queue pairs: (on the first device, on the second).
    fn connect(&self) -> (QueuePair, QueuePair) {
        self.ends.connect(|init| init, |init| init)
    }

    /// The first device's connection of `qp`.
    fn conn_a(&self, qp: &QueuePair) -> std::sync::Arc<super::conn::Conn> {
        self.conns_a.open.lock().get(&qp.conn_id()).expect("the connection").clone()
    }
}

/// A thread that polls its CQ for a READ over the network takes the response from the socket
/// itself (`conn/responses.rs`): the READs complete, with their bytes and in post order, while
/// the requester's NIC thread cannot read the connection at all (the test holds the table it
/// finds connections in). Without it no completion arrives until the NIC thread reads again.
#[test]
fn a_poller_takes_its_read_responses_itself_while_the_nic_thread_is_held() {
    let ends = NetworkEnds::new();
    let (a, _b) = ends.connect();
    let (Ends { pd_a, pd_b, cq_a, .. }, conns) = (&ends.ends, &ends.conns_a);
    let remote = pd_b.register(4096, Access::REMOTE_READ).unwrap();
    let pattern: Vec<u8> = (0..4096u32).map(|i| (i * 7 % 251) as u8).collect();
    remote.buffer().write(0, &pattern).unwrap();
    let local = pd_a.register(8192, Access::LOCAL_WRITE).unwrap();

    // From here the requester's NIC thread, woken by the responses, waits for this lock.
    let held = conns.open.lock();
    let sizes = [64usize, 1000, 2048, 8];
    for (i, &len) in sizes.iter().enumerate() {
        let at = RemoteAddr { addr: remote.remote().addr + 8 * i as u64, rkey: remote.rkey() };
        read(&a, i as u64, &local, 2048 * i, len, at);
    }
    let mut got = Vec::new();
    let deadline = Instant::now() + T;
    while got.len() < sizes.len() && Instant::now() < deadline {
        let mut wc = [WorkCompletion::default(); 4];
        let n = cq_a.poll(&mut wc).unwrap();
        got.extend(wc[..n].iter().map(|w| (w.wr_id, w.status, w.byte_len)));
    }
    drop(held);
    let expected: Vec<_> =
        sizes.iter().enumerate().map(|(i, &len)| (i as u64, WcStatus::Success, len as u32)).collect();
    assert_eq!(got, expected, "every READ completed, in post order, without the NIC thread");
    for (i, &len) in sizes.iter().enumerate() {
        let mut bytes = vec![0u8; len];
        local.buffer().read(2048 * i, &mut bytes).unwrap();
        assert_eq!(bytes, pattern[8 * i..8 * i + len], "the bytes of READ {i}");
    }
    // The connection goes on as before once the NIC thread reads it again.
    read(&a, 99, &local, 0, 16, remote.remote());
    assert_eq!(completion(cq_a).wr_id, 99);

    // A READ larger than a poller takes is the NIC thread's: held, it does not complete.
    let len = super::conn::POLLED_READ_MAX as usize * 2;
    let (big_remote, big_local) =
        (pd_b.register(len, Access::REMOTE_READ).unwrap(), pd_a.register(len, Access::LOCAL_WRITE).unwrap());
    let held = conns.open.lock();
    read(&a, 100, &big_local, 0, len, big_remote.remote());
    let mut wc = [WorkCompletion::default(); 1];
    assert_eq!(cq_a.poll_wait(&mut wc, Duration::from_millis(20), Duration::from_millis(20)).unwrap(), 0);
    drop(held);
    assert_eq!(completion(cq_a).wr_id, 100);
}

/// A poller woken on its CQ's bell places a small SEND waiting in the socket of a connection
/// whose receives complete there itself (`conn/responses.rs`): the receive completes with its
/// bytes, and the sender gets its acknowledgement, while the receiver's NIC thread cannot read
/// the connection at all (the test holds the table it finds connections in). Without it the
/// parked poller sleeps until the NIC thread reads again. A SEND that finds no posted receive
/// (RNR) and one larger than a poller places stay the NIC thread's: held, they do not
/// complete; freed, it places them, in order.
#[test]
fn a_woken_poller_places_a_small_send_itself_while_the_nic_thread_is_held() {
    let ends = NetworkEnds::new();
    let (a, b) = ends.connect();
    let (Ends { pd_a, pd_b, cq_a, cq_b, .. }, conns) = (&ends.ends, &ends.conns_a);
    // A READ over the network has the receive CQ's bell watch the connection's socket.
    let remote = pd_b.register(64, Access::REMOTE_READ).unwrap();
    let big = super::conn::POLLED_SEND_MAX as usize * 2;
    let rbuf = pd_a.register(big, Access::LOCAL_WRITE).unwrap();
    read(&a, 1, &rbuf, 0, 16, remote.remote());
    assert_eq!(completion(cq_a).wr_id, 1);
    let sbuf = pd_b.register(big, Access::NONE).unwrap();
    let pattern: Vec<u8> = (0..100u32).map(|i| (i * 13 % 251) as u8).collect();
    sbuf.buffer().write(0, &pattern).unwrap();
    let send =
        |wr_id: u64, len: usize| b.post_send(&SendRequest::new(wr_id, SendOp::Send, &[sbuf.sge(0, len)])).unwrap();
    // Parked from the start (no spin): only a wake-up brings the completion.
    let parked = |timeout: Duration| {
        let mut wc = [WorkCompletion::default(); 1];
        let n = cq_a.poll_wait(&mut wc, Duration::ZERO, timeout).unwrap();
        (n == 1).then_some((wc[0].wr_id, wc[0].status, wc[0].byte_len))
    };

    let held = conns.open.lock();
    a.post_recv(10, &[rbuf.sge(0, 4096)]).unwrap();
    send(20, pattern.len());
    assert_eq!(parked(T), Some((10, WcStatus::Success, 100)), "placed by the woken poller");
    let mut bytes = vec![0u8; pattern.len()];
    rbuf.buffer().read(0, &mut bytes).unwrap();
    assert_eq!(bytes, pattern);
    let acked = completion(cq_b);
    assert_eq!((acked.wr_id, acked.status), (20, WcStatus::Success), "the acknowledgement went out");

    // No receive posted: the SEND waits for the NIC thread (RNR), which places it once freed.
    send(21, 8);
    assert_eq!(parked(Duration::from_millis(30)), None);
    a.post_recv(11, &[rbuf.sge(0, 4096)]).unwrap();
    drop(held);
    assert_eq!(parked(T), Some((11, WcStatus::Success, 8)));
    assert_eq!(completion(cq_b).wr_id, 21);

    // A SEND larger than a poller places is the NIC thread's too.
    let held = conns.open.lock();
    a.post_recv(12, &[rbuf.sge(0, big)]).unwrap();
    send(22, big);
    assert_eq!(parked(Duration::from_millis(30)), None);
    drop(held);
    assert_eq!(parked(T), Some((12, WcStatus::Success, big as u32)));
    assert_eq!(completion(cq_b).wr_id, 22);
}

/// A NIC thread that finds a connection's receive state held by a polling thread reads it
/// again only after a pause and a yield of its CPU (`NextPoll::AfterPause`), turn after turn:
/// on a shared CPU the holder may be the thread it preempted. Here the test holds the receive
/// state while a SEND waits on the connection, sees the NIC thread yield for it again and
/// again, and the SEND is placed once the state is free.
#[test]
fn a_nic_thread_yields_its_cpu_before_it_reads_again_a_connection_a_poller_holds() {
    use std::sync::atomic::Ordering;
    let ends = NetworkEnds::new();
    let (a, b) = ends.connect();
    let rbuf = ends.ends.pd_a.register(64, Access::LOCAL_WRITE).unwrap();
    a.post_recv(1, &[rbuf.sge(0, 64)]).unwrap();
    let sbuf = ends.ends.pd_b.register(64, Access::NONE).unwrap();
    let conn = ends.conn_a(&a);
    let yields = || conn.device.yields_for_held.load(Ordering::Relaxed);

    let held = conn.rx.lock();
    b.post_send(&SendRequest::new(11, SendOp::Send, &[sbuf.sge(0, 16)])).unwrap();
    let until = std::time::Instant::now() + T;
    while yields() < 10 {
        assert!(std::time::Instant::now() < until, "the NIC thread yielded {} times for the held connection", yields());
        std::thread::yield_now();
    }
    drop(held);
    let placed = completion(&ends.ends.cq_a);
    assert_eq!((placed.wr_id, placed.status, placed.byte_len), (1, WcStatus::Success, 16));
    assert_eq!(completion(&ends.ends.cq_b).wr_id, 11);
}

/// The NIC thread does not wait for a thread that holds a connection's receive state (a poller
/// taking its READ responses, `conn/responses.rs`): it reads that connection again later and
/// serves the device's other connections meanwhile. Here the test holds the receive state of one
/// connection while a SEND arrives on it, and a SEND on a second connection is still placed.
#[test]
fn the_nic_thread_serves_other_connections_while_a_poller_holds_one() {
    let ends = NetworkEnds::new();
    let (a1, b1) = ends.connect();
    let (a2, b2) = ends.connect();
    let rbuf = ends.ends.pd_a.register(128, Access::LOCAL_WRITE).unwrap();
    a1.post_recv(1, &[rbuf.sge(0, 64)]).unwrap();
    a2.post_recv(2, &[rbuf.sge(64, 64)]).unwrap();
    let sbuf = ends.ends.pd_b.register(64, Access::NONE).unwrap();
    let sge = [sbuf.sge(0, 16)];

    let conn1 = ends.conn_a(&a1);
    let held = conn1.rx.lock();
    b1.post_send(&SendRequest::new(11, SendOp::Send, &sge)).unwrap();
    // Not acknowledged while its connection's receive state is held (and meanwhile the NIC
    // thread has had its event).
    let mut wc = [WorkCompletion::default(); 1];
    assert_eq!(ends.ends.cq_b.poll_wait(&mut wc, Duration::ZERO, Duration::from_millis(20)).unwrap(), 0);
    b2.post_send(&SendRequest::new(12, SendOp::Send, &sge)).unwrap();
    let placed = completion(&ends.ends.cq_a);
    drop(held);
    assert_eq!((placed.wr_id, placed.status), (2, WcStatus::Success), "the second connection's SEND, placed meanwhile");
    // The held connection is read once it is free.
    assert_eq!(completion(&ends.ends.cq_a).wr_id, 1);
    let mut acked: Vec<u64> = (0..2).map(|_| completion(&ends.ends.cq_b).wr_id).collect();
    acked.sort_unstable();
    assert_eq!(acked, [11, 12]);
}
