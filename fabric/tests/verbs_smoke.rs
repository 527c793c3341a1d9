//! End-to-end tests of the verbs provider on a real device (Soft-RoCE in the rxe VM):
//! `scripts/verbs-vm-tests.sh` runs them inside the guest with `--ignored`.
#![cfg(feature = "verbs")]

use std::net::{IpAddr, Ipv4Addr, SocketAddr, SocketAddrV4};
use std::time::{Duration, Instant};

use rdma_fabric::*;

const WAIT: Duration = Duration::from_secs(20);

fn bind_ip() -> IpAddr {
    std::env::var("RXE_IP").ok().and_then(|s| s.parse().ok()).expect("RXE_IP names the address of the RDMA netdev")
}

fn fabric() -> Fabric {
    let cfg = FabricConfig { bind: bind_ip(), ..FabricConfig::new(FabricKind::Verbs) };
    open(&cfg).expect("open the verbs device behind RXE_IP")
}

fn next_event(ch: &EventChannel) -> CmEvent {
    let deadline = Instant::now() + WAIT;
    while Instant::now() < deadline {
        if let Some(ev) = ch.get_event(deadline - Instant::now()).expect("get_event") {
            return ev;
        }
    }
    panic!("no CM event within {WAIT:?}");
}

fn one_completion(cq: &CompletionQueue) -> WorkCompletion {
    let mut wc = [WorkCompletion::default()];
    let n = cq.poll_wait(&mut wc, Duration::from_micros(50), WAIT).expect("poll");
    assert_eq!(n, 1, "no completion within {WAIT:?}");
    wc[0]
}

/// Both ends of one connection, with a CQ and a 4 KiB region each.
struct Pair {
    _fabric: Fabric,
    srq: Option<SharedReceiveQueue>,
    server_ch: EventChannel,
    client_ch: EventChannel,
    _listener: Listener,
    server: QueuePair,
    client: QueuePair,
    server_cq: CompletionQueue,
    client_cq: CompletionQueue,
    server_mr: MemoryRegion,
    client_mr: MemoryRegion,
    req_data: Vec<u8>,
    accept_data: Vec<u8>,
}

fn connect_pair(connect_data: &[u8], accept_data: &[u8]) -> Pair {
    connect_pair_with(connect_data, accept_data, &|_| {}, &|_| {}, false)
}

type Tweak<'a> = &'a dyn Fn(&mut QpInit<'_>);

fn connect_pair_with(
    connect_data: &[u8],
    accept_data: &[u8],
    client_tweak: Tweak,
    server_tweak: Tweak,
    srq: bool,
) -> Pair {
    let fabric = fabric();
    let pd = fabric.alloc_pd().unwrap();
    let server_cq = fabric.create_cq(64).unwrap();
    let client_cq = fabric.create_cq(64).unwrap();
    let rw = Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ;
    let server_mr = pd.register(4096, rw).unwrap();
    let client_mr = pd.register(4096, rw).unwrap();
    let server_ch = fabric.create_event_channel().unwrap();
    let client_ch = fabric.create_event_channel().unwrap();
    let listener = server_ch.listen(SocketAddr::new(bind_ip(), 0), 8).unwrap();
    assert_ne!(listener.local_addr().port(), 0);

    let srq = srq.then(|| pd.create_srq(16, 1).unwrap());
    let mut client_init = QpInit::new(&pd, &client_cq);
    client_tweak(&mut client_init);
    let mut server_init = QpInit::new(&pd, &server_cq);
    server_init.srq = srq.as_ref();
    server_tweak(&mut server_init);
    let client = client_ch.connect(listener.local_addr(), &client_init, connect_data, WAIT).unwrap();
    let req = match next_event(&server_ch) {
        CmEvent::ConnectRequest(req) => req,
        other => panic!("expected a connect request, got {other:?}"),
    };
    let req_data = req.private_data().to_vec();
    assert_eq!(req.peer_addr().ip(), bind_ip());
    let server = req.accept(&server_init, accept_data).unwrap();
    let got_accept = match next_event(&client_ch) {
        CmEvent::Established { conn, private_data } => {
            assert_eq!(conn, client.conn_id());
            private_data
        }
        other => panic!("expected established on the client, got {other:?}"),
    };
    match next_event(&server_ch) {
        CmEvent::Established { conn, .. } => assert_eq!(conn, server.conn_id()),
        other => panic!("expected established on the server, got {other:?}"),
    }
    Pair {
        _fabric: fabric,
        srq,
        server_ch,
        client_ch,
        _listener: listener,
        server,
        client,
        server_cq,
        client_cq,
        server_mr,
        client_mr,
        req_data,
        accept_data: got_accept,
    }
}

#[test]
#[ignore = "needs an RDMA device: run in the rxe VM by scripts/verbs-vm-tests.sh"]
fn connect_carries_private_data_both_ways_then_send_recv() {
    let p = connect_pair(b"hello from the client", b"welcome from the server");
    // The CM pads private data: the sender's bytes come first.
    assert!(p.req_data.starts_with(b"hello from the client"), "{:?}", p.req_data);
    assert!(p.accept_data.starts_with(b"welcome from the server"), "{:?}", p.accept_data);

    p.server.post_recv(7, &[p.server_mr.sge(0, 256)]).unwrap();
    p.client_mr.buffer().write(0, b"ping over rxe").unwrap();
    let send_sges = [p.client_mr.sge(0, 13)];
    let send = SendRequest::new(1, SendOp::SendWithImm(0xabcd), &send_sges);
    p.client.post_send(&send).unwrap();
    let wc = one_completion(&p.client_cq);
    assert_eq!((wc.wr_id, wc.status, wc.opcode), (1, WcStatus::Success, WcOpcode::Send));
    let wc = one_completion(&p.server_cq);
    assert_eq!(
        (wc.wr_id, wc.status, wc.opcode, wc.byte_len, wc.imm),
        (7, WcStatus::Success, WcOpcode::Recv, 13, Some(0xabcd))
    );
    assert_eq!(wc.qp_num, p.server.qp_num());
    let mut got = [0u8; 13];
    p.server_mr.buffer().read(0, &mut got).unwrap();
    assert_eq!(&got, b"ping over rxe");
}

#[test]
#[ignore = "needs an RDMA device: run in the rxe VM by scripts/verbs-vm-tests.sh"]
fn rdma_read_and_write() {
    let p = connect_pair(b"rw", b"");
    p.server_mr.buffer().write(100, b"published bytes").unwrap();
    let remote = p.server_mr.remote();
    let read_sges = [p.client_mr.sge(0, 15)];
    let read =
        SendRequest::new(2, SendOp::RdmaRead(RemoteAddr { addr: remote.addr + 100, rkey: remote.rkey }), &read_sges);
    p.client.post_send(&read).unwrap();
    let wc = one_completion(&p.client_cq);
    assert_eq!((wc.wr_id, wc.status, wc.opcode, wc.byte_len), (2, WcStatus::Success, WcOpcode::RdmaRead, 15));
    let mut got = [0u8; 15];
    p.client_mr.buffer().read(0, &mut got).unwrap();
    assert_eq!(&got, b"published bytes");

    p.client_mr.buffer().write(512, b"written remotely").unwrap();
    let write_sges = [p.client_mr.sge(512, 16)];
    let write =
        SendRequest::new(3, SendOp::RdmaWrite(RemoteAddr { addr: remote.addr + 2000, rkey: remote.rkey }), &write_sges);
    p.client.post_send(&write).unwrap();
    let wc = one_completion(&p.client_cq);
    assert_eq!((wc.wr_id, wc.status, wc.opcode), (3, WcStatus::Success, WcOpcode::RdmaWrite));
    let mut got = [0u8; 16];
    p.server_mr.buffer().read(2000, &mut got).unwrap();
    assert_eq!(&got, b"written remotely");
}

#[test]
#[ignore = "needs an RDMA device: run in the rxe VM by scripts/verbs-vm-tests.sh"]
fn read_with_a_wrong_rkey_is_a_remote_access_error() {
    let p = connect_pair(b"bad rkey", b"");
    let remote = p.server_mr.remote();
    let read_sges = [p.client_mr.sge(0, 64)];
    let read = SendRequest::new(
        4,
        SendOp::RdmaRead(RemoteAddr { addr: remote.addr, rkey: remote.rkey ^ 0x5a5a_0000 }),
        &read_sges,
    );
    p.client.post_send(&read).unwrap();
    let wc = one_completion(&p.client_cq);
    assert_eq!((wc.wr_id, wc.status), (4, WcStatus::RemoteAccessError));
    // The requester's QP is in error now: the peer sees the connection go.
    drop(p.client);
    match next_event(&p.server_ch) {
        CmEvent::Disconnected { conn } => assert_eq!(conn, p.server.conn_id()),
        other => panic!("expected disconnected, got {other:?}"),
    }
}

#[test]
#[ignore = "needs an RDMA device: run in the rxe VM by scripts/verbs-vm-tests.sh"]
fn disconnect_flushes_receives_and_both_sides_see_it() {
    let p = connect_pair(b"bye", b"");
    p.server.post_recv(10, &[p.server_mr.sge(0, 64)]).unwrap();
    p.server.post_recv(11, &[p.server_mr.sge(64, 64)]).unwrap();
    p.client.disconnect().unwrap();
    p.client.disconnect().unwrap();
    // The peer's channel delivers its Disconnected first: that answers the disconnect
    // request, which then completes on the initiating side.
    match next_event(&p.server_ch) {
        CmEvent::Disconnected { conn } => assert_eq!(conn, p.server.conn_id()),
        other => panic!("expected disconnected on the server, got {other:?}"),
    }
    match next_event(&p.client_ch) {
        CmEvent::Disconnected { conn } => assert_eq!(conn, p.client.conn_id()),
        other => panic!("expected disconnected on the client, got {other:?}"),
    }
    let a = one_completion(&p.server_cq);
    let b = one_completion(&p.server_cq);
    assert_eq!((a.wr_id, a.status), (10, WcStatus::WorkRequestFlushed));
    assert_eq!((b.wr_id, b.status), (11, WcStatus::WorkRequestFlushed));
}

#[test]
#[ignore = "needs an RDMA device: run in the rxe VM by scripts/verbs-vm-tests.sh"]
fn reject_carries_private_data_and_no_listener_is_reported() {
    let fabric = fabric();
    let pd = fabric.alloc_pd().unwrap();
    let cq = fabric.create_cq(16).unwrap();
    let server_ch = fabric.create_event_channel().unwrap();
    let client_ch = fabric.create_event_channel().unwrap();
    let listener = server_ch.listen(SocketAddr::new(bind_ip(), 0), 8).unwrap();
    let client = client_ch.connect(listener.local_addr(), &QpInit::new(&pd, &cq), b"let me in", WAIT).unwrap();
    match next_event(&server_ch) {
        CmEvent::ConnectRequest(req) => req.reject(b"go away").unwrap(),
        other => panic!("expected a connect request, got {other:?}"),
    }
    match next_event(&client_ch) {
        CmEvent::Rejected { conn, reason, private_data } => {
            assert_eq!(conn, client.conn_id());
            assert_eq!(reason, RejectReason::Consumer);
            assert!(private_data.starts_with(b"go away"), "{private_data:?}");
        }
        other => panic!("expected rejected, got {other:?}"),
    }

    let port = listener.local_addr().port();
    drop(listener);
    let client = client_ch.connect(SocketAddr::new(bind_ip(), port), &QpInit::new(&pd, &cq), b"anyone?", WAIT).unwrap();
    match next_event(&client_ch) {
        CmEvent::Rejected { conn, reason, .. } => {
            assert_eq!(conn, client.conn_id());
            assert_eq!(reason, RejectReason::NoListener);
        }
        other => panic!("expected rejected (no listener), got {other:?}"),
    }
}

#[test]
#[ignore = "needs an RDMA device: run in the rxe VM by scripts/verbs-vm-tests.sh"]
fn ud_multicast_join_send_recv() {
    let IpAddr::V4(ip) = bind_ip() else { panic!("RXE_IP must be IPv4") };
    let group = Ipv4Addr::new(239, 1, 1, 1);
    let fabric = fabric();
    let pd = fabric.alloc_pd().unwrap();
    let init = UdInit { interface: ip, port: 5000, unicast_port: 0, recv_depth: 16 };
    let rx = fabric.create_ud(&pd, &init).unwrap();
    let tx = fabric.create_ud(&pd, &init).unwrap();
    assert_eq!(rx.mtu(), fabric.attributes().ud_mtu);
    rx.join(group).unwrap();
    tx.join(group).unwrap();
    // Unicast resolves the address through SIDR: a port nobody listens on is unreachable.
    let nobody = SocketAddrV4::new(ip, 1);
    let r = tx.send_unicast(nobody, b"x");
    assert!(matches!(r, Err(Error::Os { .. })), "unicast to {nobody}: {r:?}");
    let big = vec![7u8; tx.mtu() + 1];
    assert!(matches!(tx.send_to(group, &big), Err(Error::PayloadTooLarge { .. })));
    let full = vec![0x5au8; tx.mtu()];
    tx.send_to(group, b"announcement").unwrap();
    tx.send_to(group, &full).unwrap();
    let d = rx.recv(WAIT).unwrap().expect("a datagram");
    assert_eq!(d.data, b"announcement");
    assert_eq!(d.from.ip(), IpAddr::V4(ip));
    let d = rx.recv(WAIT).unwrap().expect("the MTU-sized datagram");
    assert_eq!(d.data, full);

    // Another port is another Q_Key: its datagrams do not reach this endpoint.
    let other = fabric.create_ud(&pd, &UdInit { port: 5001, ..init.clone() }).unwrap();
    other.join(group).unwrap();
    other.send_to(group, b"other port").unwrap();
    tx.send_to(group, b"same port").unwrap();
    let d = rx.recv(WAIT).unwrap().expect("a datagram");
    assert_eq!(d.data, b"same port");

    rx.leave(group).unwrap();
    tx.send_to(group, b"after leave").unwrap();
    assert_eq!(rx.recv(Duration::from_millis(300)).unwrap(), None);
}

/// Posts a SEND to a peer without a posted receive, posts the receive a little later, and
/// returns how long the send still took after that: about one RNR timer period of the
/// responder (655 ms with the CM's default, microseconds when `min_rnr_timer` applied).
fn rnr_delay(
    from: &QueuePair,
    cq: &CompletionQueue,
    mr: &MemoryRegion,
    to: &QueuePair,
    to_mr: &MemoryRegion,
) -> Duration {
    let send_sges = [mr.sge(0, 8)];
    let send = SendRequest::new(99, SendOp::Send, &send_sges);
    from.post_send(&send).unwrap();
    // Not a synchronisation: the delay lets the first attempt meet an empty receive queue.
    std::thread::sleep(Duration::from_millis(50));
    let posted = Instant::now();
    to.post_recv(98, &[to_mr.sge(0, 64)]).unwrap();
    loop {
        // The CQ also holds the receive completion of the other direction (wr_id 98).
        let wc = one_completion(cq);
        if wc.wr_id == 99 {
            assert_eq!(wc.status, WcStatus::Success);
            return posted.elapsed();
        }
        assert_eq!((wc.wr_id, wc.status), (98, WcStatus::Success));
    }
}

#[test]
#[ignore = "needs an RDMA device: run in the rxe VM by scripts/verbs-vm-tests.sh"]
fn min_rnr_timer_is_applied_on_both_sides() {
    let fast = &|init: &mut QpInit<'_>| {
        init.rnr_retry = RNR_RETRY_INFINITE;
        init.min_rnr_timer = Duration::from_micros(40);
    };
    let p = connect_pair_with(b"rnr", b"", fast, fast, false);
    let passive_responder = rnr_delay(&p.client, &p.client_cq, &p.client_mr, &p.server, &p.server_mr);
    let active_responder = rnr_delay(&p.server, &p.server_cq, &p.server_mr, &p.client, &p.client_mr);
    eprintln!("RNR delays: passive responder {passive_responder:?}, active responder {active_responder:?}");
    assert!(passive_responder < Duration::from_millis(300), "passive side: {passive_responder:?}");
    assert!(active_responder < Duration::from_millis(300), "active side: {active_responder:?}");
}

#[test]
#[ignore = "needs an RDMA device: run in the rxe VM by scripts/verbs-vm-tests.sh"]
fn shared_receive_queue_takes_sends() {
    let p = connect_pair_with(b"srq", b"", &|_| {}, &|_| {}, true);
    let srq = p.srq.as_ref().unwrap();
    assert!(matches!(p.server.post_recv(1, &[p.server_mr.sge(0, 64)]), Err(Error::InvalidArgument { .. })));
    srq.post_recv(21, &[p.server_mr.sge(0, 64)]).unwrap();
    p.client_mr.buffer().write(0, b"via srq").unwrap();
    let send_sges = [p.client_mr.sge(0, 7)];
    let send = SendRequest::new(5, SendOp::Send, &send_sges).unsignaled();
    p.client.post_send(&send).unwrap();
    let wc = one_completion(&p.server_cq);
    assert_eq!((wc.wr_id, wc.status, wc.byte_len, wc.qp_num), (21, WcStatus::Success, 7, p.server.qp_num()));
    let mut got = [0u8; 7];
    p.server_mr.buffer().read(0, &mut got).unwrap();
    assert_eq!(&got, b"via srq");
}

#[test]
#[ignore = "needs an RDMA device: run in the rxe VM by scripts/verbs-vm-tests.sh"]
fn a_full_receive_queue_is_queue_full() {
    let small = &|init: &mut QpInit<'_>| init.caps.max_recv_wr = 4;
    let p = connect_pair_with(b"full", b"", &|_| {}, small, false);
    let mut posted = 0;
    let err = loop {
        match p.server.post_recv(posted, &[p.server_mr.sge(0, 16)]) {
            Ok(()) => posted += 1,
            Err(e) => break e,
        }
        assert!(posted < 1024, "the receive queue never filled");
    };
    assert!(posted >= 4, "only {posted} receives fitted");
    assert!(matches!(err, Error::QueueFull { queue: "receive queue", .. }), "{err:?}");
}

/// Retransmission settings of queue pairs connected by hand: about 67 ms, 7 times.
const PATIENT: RtsAttr = RtsAttr { timeout: 14, retry_count: 7, rnr_retry: RNR_RETRY_INFINITE, max_rd_atomic: 4 };
/// Retransmission settings that give up quickly: about 4 ms, once.
const HASTY: RtsAttr = RtsAttr { timeout: 10, retry_count: 1, rnr_retry: RNR_RETRY_INFINITE, max_rd_atomic: 4 };

/// Moves `qp` (whose endpoint is `local`) to RTS towards `remote`, as the seed programs'
/// `modify_qp_to_init`, `modify_qp_to_rtr` and `modify_qp_to_rts` do; `in_init` runs in INIT
/// (where receives may be posted first).
fn connect_by_hand(qp: &QueuePair, local: QpEndpoint, remote: QpEndpoint, rts: RtsAttr, in_init: impl FnOnce()) {
    qp.modify_to_init(InitAttr { port: local.port, access: Access::REMOTE_READ | Access::REMOTE_WRITE }).unwrap();
    assert_eq!(qp.state(), QpState::Init);
    in_init();
    let rtr = RtrAttr {
        remote,
        path_mtu: local.mtu.min(remote.mtu),
        max_dest_rd_atomic: 4,
        min_rnr_timer: Duration::from_micros(640),
    };
    qp.modify_to_rtr(rtr).unwrap();
    assert_eq!(qp.state(), QpState::ReadyToReceive);
    qp.modify_to_rts(rts).unwrap();
    assert_eq!(qp.state(), QpState::ReadyToSend);
}

/// Two queue pairs of one device created by hand (in RESET), with a CQ and a 4 KiB region each.
struct HandPair {
    fabric: Fabric,
    a: QueuePair,
    b: QueuePair,
    a_cq: CompletionQueue,
    b_cq: CompletionQueue,
    a_mr: MemoryRegion,
    b_mr: MemoryRegion,
}

fn hand_pair() -> HandPair {
    let fabric = fabric();
    let pd = fabric.alloc_pd().unwrap();
    let (a_cq, b_cq) = (fabric.create_cq(16).unwrap(), fabric.create_cq(16).unwrap());
    let rw = Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ;
    let (a_mr, b_mr) = (pd.register(4096, rw).unwrap(), pd.register(4096, rw).unwrap());
    let a = fabric.create_qp(QpInit::new(&pd, &a_cq)).unwrap();
    let b = fabric.create_qp(QpInit::new(&pd, &b_cq)).unwrap();
    HandPair { fabric, a, b, a_cq, b_cq, a_mr, b_mr }
}

#[test]
#[ignore = "needs an RDMA device: run in the rxe VM by scripts/verbs-vm-tests.sh"]
fn bootstrap_connects_two_queue_pairs_by_hand_then_send_read_write() {
    let HandPair { fabric, a, b, a_cq, b_cq, a_mr, b_mr } = hand_pair();
    assert_eq!((a.state(), b.state()), (QpState::Reset, QpState::Reset));

    // The endpoints as the side channel would carry them: the RoCE v2 GID of the device's
    // address, the port's active MTU, 24-bit PSNs.
    let (ea, eb) = (a.local_endpoint().unwrap(), b.local_endpoint().unwrap());
    let IpAddr::V4(ip) = bind_ip() else { panic!("RXE_IP must be IPv4") };
    for (qp, ep) in [(&a, ea), (&b, eb)] {
        assert_eq!(ep.qp_num, qp.qp_num());
        assert_eq!(ep.gid, ip.to_ipv6_mapped().octets(), "{ep:?}");
        assert_eq!(ep.mtu.bytes(), fabric.attributes().ud_mtu, "{ep:?}");
        assert!(ep.psn <= 0xff_ffff && ep.port >= 1, "{ep:?}");
    }
    // RTR before INIT is refused before the device sees it.
    let early = RtrAttr { remote: eb, path_mtu: ea.mtu, max_dest_rd_atomic: 4, min_rnr_timer: Duration::ZERO };
    assert!(matches!(a.modify_to_rtr(early), Err(Error::InvalidTransition { .. })));

    // A queue pair in RESET takes no receive (the device refuses it).
    assert!(b.post_recv(1, &[b_mr.sge(0, 64)]).is_err());
    connect_by_hand(&a, ea, eb, PATIENT, || {});
    // Until b is in RTS it sends nothing.
    assert!(matches!(b.post_send(&SendRequest::new(9, SendOp::Send, &[])), Err(Error::NotConnected { .. })));
    connect_by_hand(&b, eb, ea, PATIENT, || b.post_recv(1, &[b_mr.sge(0, 64)]).unwrap());
    assert_eq!(b.peer_addr().ip(), IpAddr::V4(ip));
    // SEND with immediate data.
    a_mr.buffer().write(0, b"by hand").unwrap();
    let send_sges = [a_mr.sge(0, 7)];
    a.post_send(&SendRequest::new(2, SendOp::SendWithImm(0x5eed), &send_sges)).unwrap();
    let wc = one_completion(&a_cq);
    assert_eq!((wc.wr_id, wc.status, wc.opcode), (2, WcStatus::Success, WcOpcode::Send));
    let wc = one_completion(&b_cq);
    assert_eq!(
        (wc.wr_id, wc.status, wc.opcode, wc.byte_len, wc.imm, wc.qp_num),
        (1, WcStatus::Success, WcOpcode::Recv, 7, Some(0x5eed), b.qp_num())
    );
    let mut got = [0u8; 7];
    b_mr.buffer().read(0, &mut got).unwrap();
    assert_eq!(&got, b"by hand");

    // RDMA READ of b's region.
    b_mr.buffer().write(1000, b"read by hand").unwrap();
    let remote = b_mr.remote();
    let read_sges = [a_mr.sge(100, 12)];
    let read =
        SendRequest::new(3, SendOp::RdmaRead(RemoteAddr { addr: remote.addr + 1000, rkey: remote.rkey }), &read_sges);
    a.post_send(&read).unwrap();
    let wc = one_completion(&a_cq);
    assert_eq!((wc.wr_id, wc.status, wc.opcode, wc.byte_len), (3, WcStatus::Success, WcOpcode::RdmaRead, 12));
    let mut got = [0u8; 12];
    a_mr.buffer().read(100, &mut got).unwrap();
    assert_eq!(&got, b"read by hand");

    // RDMA WRITE the other way: b writes into a's region.
    b_mr.buffer().write(2000, b"written by hand").unwrap();
    let a_remote = a_mr.remote();
    let write_sges = [b_mr.sge(2000, 15)];
    let write = SendRequest::new(
        4,
        SendOp::RdmaWrite(RemoteAddr { addr: a_remote.addr + 3000, rkey: a_remote.rkey }),
        &write_sges,
    );
    b.post_send(&write).unwrap();
    let wc = one_completion(&b_cq);
    assert_eq!((wc.wr_id, wc.status, wc.opcode), (4, WcStatus::Success, WcOpcode::RdmaWrite));
    let mut got = [0u8; 15];
    a_mr.buffer().read(3000, &mut got).unwrap();
    assert_eq!(&got, b"written by hand");

    // Moving to ERROR flushes what is posted; the queue pair then refuses more.
    a.post_recv(5, &[a_mr.sge(0, 64)]).unwrap();
    a.modify(&QpTransition::Error).unwrap();
    let wc = one_completion(&a_cq);
    assert_eq!((wc.wr_id, wc.status), (5, WcStatus::WorkRequestFlushed));
    assert_eq!(a.state(), QpState::Error);
    assert!(matches!(a.post_send(&SendRequest::new(6, SendOp::Send, &[])), Err(Error::NotConnected { .. })));
}

#[test]
#[ignore = "needs an RDMA device: run in the rxe VM by scripts/verbs-vm-tests.sh"]
fn bootstrap_to_a_wrong_qp_number_fails_with_retry_exceeded() {
    let p = hand_pair();
    let (ea, eb) = (p.a.local_endpoint().unwrap(), p.b.local_endpoint().unwrap());
    // b's number plus one: no queue pair of this device answers to it.
    let wrong = QpEndpoint { qp_num: (eb.qp_num + 1) & 0xff_ffff, ..eb };
    connect_by_hand(&p.a, ea, wrong, HASTY, || {});
    let send_sges = [p.a_mr.sge(0, 8)];
    p.a.post_send(&SendRequest::new(1, SendOp::Send, &send_sges)).unwrap();
    let wc = one_completion(&p.a_cq);
    assert_eq!((wc.wr_id, wc.status), (1, WcStatus::TransportRetryExceeded));
    assert_eq!(p.a.state(), QpState::Error);
}

#[test]
#[ignore = "needs an RDMA device: run in the rxe VM by scripts/verbs-vm-tests.sh"]
fn bootstrap_a_destroyed_peer_fails_the_next_send_and_flushes_the_rest() {
    let HandPair { a, b, a_cq, a_mr, .. } = hand_pair();
    let (ea, eb) = (a.local_endpoint().unwrap(), b.local_endpoint().unwrap());
    connect_by_hand(&a, ea, eb, HASTY, || a.post_recv(7, &[a_mr.sge(0, 64)]).unwrap());
    connect_by_hand(&b, eb, ea, HASTY, || {});
    drop(b);
    // Nothing tells a: its next send finds no peer, fails, and the queue pair flushes the rest.
    let send_sges = [a_mr.sge(64, 8)];
    a.post_send(&SendRequest::new(8, SendOp::Send, &send_sges)).unwrap();
    let mut seen = [one_completion(&a_cq), one_completion(&a_cq)].map(|wc| (wc.wr_id, wc.status));
    seen.sort_by_key(|&(wr_id, _)| wr_id);
    assert_eq!(seen, [(7, WcStatus::WorkRequestFlushed), (8, WcStatus::TransportRetryExceeded)]);
}

/// Objects of the two providers are not mixed: a queue pair of verbs with a soft PD or CQ, a
/// verbs channel's connect with soft objects, a UD endpoint with a soft PD, and an SGE naming a
/// region of the other provider, on either provider's queue pair, are refused with
/// `ProviderMismatch` naming the verb and the object.
#[test]
#[ignore = "needs an RDMA device: run in the rxe VM by scripts/verbs-vm-tests.sh"]
fn objects_of_the_other_provider_are_refused_with_provider_mismatch() {
    let verbs = fabric();
    let soft = open(&FabricConfig::new(FabricKind::Soft)).expect("open soft");
    let (verbs_pd, verbs_cq) = (verbs.alloc_pd().expect("alloc_pd"), verbs.create_cq(16).expect("create_cq"));
    let (soft_pd, soft_cq) = (soft.alloc_pd().expect("alloc_pd"), soft.create_cq(16).expect("create_cq"));
    let mismatch = |result: Result<()>, verb: &str, object: &str| match result {
        Err(Error::ProviderMismatch { verb: v, object: o }) => assert_eq!((v, o), (verb, object)),
        other => panic!("{verb} with the {object} of the other provider gave {other:?}"),
    };
    let created = |result: Result<QueuePair>| result.map(drop);
    mismatch(created(verbs.create_qp(QpInit::new(&soft_pd, &soft_cq))), "create_qp", "protection domain");
    mismatch(created(verbs.create_qp(QpInit::new(&verbs_pd, &soft_cq))), "create_qp", "send completion queue");
    let soft_recv_cq = QpInit { recv_cq: &soft_cq, ..QpInit::new(&verbs_pd, &verbs_cq) };
    mismatch(created(verbs.create_qp(soft_recv_cq)), "create_qp", "receive completion queue");
    mismatch(created(soft.create_qp(QpInit::new(&verbs_pd, &verbs_cq))), "create_qp", "protection domain");
    let channel = verbs.create_event_channel().expect("create_event_channel");
    let to = SocketAddr::new(bind_ip(), 9);
    mismatch(created(channel.connect(to, &QpInit::new(&soft_pd, &soft_cq), b"", WAIT)), "connect", "protection domain");
    let init = UdInit { interface: Ipv4Addr::LOCALHOST, port: 9, unicast_port: 0, recv_depth: 4 };
    mismatch(verbs.create_ud(&soft_pd, &init).map(drop), "create_ud", "protection domain");

    let verbs_mr = verbs_pd.register(64, Access::LOCAL_WRITE).expect("register");
    let soft_mr = soft_pd.register(64, Access::LOCAL_WRITE).expect("register");
    let verbs_qp = verbs.create_qp(QpInit::new(&verbs_pd, &verbs_cq)).expect("create_qp");
    let soft_qp = soft.create_qp(QpInit::new(&soft_pd, &soft_cq)).expect("create_qp");
    mismatch(verbs_qp.post_recv(1, &[soft_mr.sge(0, 64)]), "post_recv", "memory region");
    mismatch(soft_qp.post_recv(1, &[verbs_mr.sge(0, 64)]), "post_recv", "memory region");
    let send =
        SendRequest { wr_id: 2, op: SendOp::Send, sges: &[soft_mr.sge(0, 64)], signaled: true, solicited: false };
    mismatch(verbs_qp.post_send(&send), "post_send", "memory region");
}
