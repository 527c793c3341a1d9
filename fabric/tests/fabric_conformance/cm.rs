//! Connection manager: listen, connect, accept and reject with private data, unreachable peers,
//! private-data limits.

use rdma_fabric::*;

use crate::common::fabric::*;
use crate::common::provider::ProviderSpec;

/// Asserts that `got` carries `sent`: exactly where the provider delivers exact lengths, else as
/// a prefix (librdmacm pads private data to the CM field size).
fn assert_private_data(spec: &ProviderSpec, got: &[u8], sent: &[u8], what: &str) {
    assert!(got.starts_with(sent), "{what} private data {got:?} does not start with {sent:?}");
    if spec.exact_private_data {
        assert_eq!(got.len(), sent.len(), "{what} private data length");
    }
}

/// Port 0 picks distinct free ports on the requested address; a port in use is refused with
/// `AddrInUse`, and is free again once its listener is dropped.
pub fn cm_listen_port_zero_and_addr_in_use(spec: &ProviderSpec) {
    let node = Node::open(spec);
    let a = node.events.listen(spec.listen_addr(), 8).expect("listen");
    let b = node.events.listen(spec.listen_addr(), 8).expect("listen");
    for l in [&a, &b] {
        assert_eq!(l.local_addr().ip(), spec.listen_addr().ip());
        assert_ne!(l.local_addr().port(), 0, "port 0 was not replaced by the picked port");
    }
    assert_ne!(a.local_addr(), b.local_addr());
    let taken = a.local_addr();
    match node.events.listen(taken, 8) {
        Err(Error::AddrInUse { addr, .. }) => assert_eq!(addr, taken),
        Err(e) => panic!("listening on {taken} in use: expected AddrInUse, got {e}"),
        Ok(l) => panic!("listening twice on {taken} succeeded ({})", l.local_addr()),
    }
    drop(a);
    let again = node.events.listen(taken, 8).expect("listen on a released port");
    assert_eq!(again.local_addr(), taken);
}

/// Connect private data arrives in the ConnectRequest, accept private data in the active side's
/// Established; the passive side gets Established too; ids and addresses match across sides.
pub fn cm_connect_accept_private_data(spec: &ProviderSpec) {
    let client = Node::open(spec);
    let server = Node::open(spec);
    let listener = server.events.listen(spec.listen_addr(), 8).expect("listen");
    let connect_data = pattern(20, 0x11);
    let accept_data = pattern(100, 0x22);

    let client_qp =
        client.events.connect(listener.local_addr(), &client.qp_init(), &connect_data, WAIT).expect("connect");
    let req = expect_connect_request(&server.events);
    assert_private_data(spec, req.private_data(), &connect_data, "connect");
    assert_eq!(req.peer_addr().ip(), spec.listen_addr().ip());
    let server_conn = req.conn_id();
    let req_peer = req.peer_addr();
    let server_qp = req.accept(&server.qp_init(), &accept_data).expect("accept");
    assert_eq!(server_qp.conn_id(), server_conn);

    let got = expect_established(&client.events, client_qp.conn_id());
    assert_private_data(spec, &got, &accept_data, "accept");
    let passive = expect_established(&server.events, server_conn);
    if spec.exact_private_data {
        assert!(passive.is_empty(), "passive Established carries {passive:?}");
    }

    assert_eq!(client_qp.peer_addr(), listener.local_addr());
    assert_eq!(server_qp.local_addr(), listener.local_addr());
    assert_eq!(server_qp.peer_addr(), client_qp.local_addr());
    assert_eq!(req_peer, client_qp.local_addr());
    assert_no_event(&client.events, "after Established");
    assert_no_event(&server.events, "after Established");
}

/// Private data of exactly the CM limits (56 connect, 196 accept, 148 reject) arrives whole.
pub fn cm_private_data_at_the_limits(spec: &ProviderSpec) {
    let client = Node::open(spec);
    let server = Node::open(spec);
    let listener = server.events.listen(spec.listen_addr(), 8).expect("listen");
    let connect_data = pattern(MAX_CONNECT_PRIVATE_DATA, 0x31);
    let accept_data = pattern(MAX_ACCEPT_PRIVATE_DATA, 0x32);
    let reject_data = pattern(MAX_REJECT_PRIVATE_DATA, 0x33);

    let qp = client.events.connect(listener.local_addr(), &client.qp_init(), &connect_data, WAIT).expect("connect");
    let req = expect_connect_request(&server.events);
    assert_eq!(req.private_data(), &connect_data[..]);
    let conn = req.conn_id();
    let _server_qp = req.accept(&server.qp_init(), &accept_data).expect("accept");
    assert_eq!(expect_established(&client.events, qp.conn_id()), accept_data);
    expect_established(&server.events, conn);

    let qp2 = client.events.connect(listener.local_addr(), &client.qp_init(), &connect_data, WAIT).expect("connect");
    expect_connect_request(&server.events).reject(&reject_data).expect("reject");
    match next_event(&client.events, "Rejected") {
        CmEvent::Rejected { conn, reason: RejectReason::Consumer, private_data } => {
            assert_eq!(conn, qp2.conn_id());
            assert_eq!(private_data, reject_data);
        }
        other => panic!("expected Rejected by the consumer, got {other:?}"),
    }
}

/// A reject reaches the active side as `Rejected { Consumer }` with the reject's private data.
pub fn cm_reject_with_private_data(spec: &ProviderSpec) {
    let client = Node::open(spec);
    let server = Node::open(spec);
    let listener = server.events.listen(spec.listen_addr(), 8).expect("listen");
    let qp = client.events.connect(listener.local_addr(), &client.qp_init(), b"let me in", WAIT).expect("connect");
    let req = expect_connect_request(&server.events);
    assert_private_data(spec, req.private_data(), b"let me in", "connect");
    req.reject(b"no room").expect("reject");
    match next_event(&client.events, "Rejected") {
        CmEvent::Rejected { conn, reason, private_data } => {
            assert_eq!(conn, qp.conn_id());
            assert_eq!(reason, RejectReason::Consumer);
            assert_private_data(spec, &private_data, b"no room", "reject");
        }
        other => panic!("expected Rejected, got {other:?}"),
    }
    assert_no_event(&server.events, "after a reject");
}

/// Connecting to a port nobody listens on ends in `Rejected { NoListener }` or `Unreachable`.
pub fn cm_no_listener(spec: &ProviderSpec) {
    let client = Node::open(spec);
    let server = Node::open(spec);
    // A port that was just free: listen on port 0, then stop listening.
    let addr = server.events.listen(spec.listen_addr(), 1).expect("listen").local_addr();
    let qp = client.events.connect(addr, &client.qp_init(), b"anyone?", WAIT).expect("connect starts");
    match next_event(&client.events, "Rejected or Unreachable") {
        CmEvent::Rejected { conn, reason: RejectReason::NoListener, .. } => assert_eq!(conn, qp.conn_id()),
        CmEvent::Unreachable { conn, .. } => assert_eq!(conn, qp.conn_id()),
        other => panic!("expected Rejected {{ NoListener }} or Unreachable, got {other:?}"),
    }
    assert_no_event(&server.events, "nobody listened");
}

/// Private data one byte over each limit is refused with `PrivateDataTooLong`; a connect request
/// whose accept or reject failed that way is rejected when dropped.
pub fn cm_private_data_too_long(spec: &ProviderSpec) {
    let client = Node::open(spec);
    let server = Node::open(spec);
    let listener = server.events.listen(spec.listen_addr(), 8).expect("listen");
    let addr = listener.local_addr();

    match client.events.connect(addr, &client.qp_init(), &[7; MAX_CONNECT_PRIVATE_DATA + 1], WAIT) {
        Err(Error::PrivateDataTooLong { what, len, max }) => {
            assert_eq!((what, len, max), ("connect", MAX_CONNECT_PRIVATE_DATA + 1, MAX_CONNECT_PRIVATE_DATA));
        }
        other => panic!("57-byte connect private data: {other:?}"),
    }
    assert_no_event(&server.events, "a refused connect sends nothing");

    for (what, len) in [("accept", MAX_ACCEPT_PRIVATE_DATA + 1), ("reject", MAX_REJECT_PRIVATE_DATA + 1)] {
        let qp = client.events.connect(addr, &client.qp_init(), b"x", WAIT).expect("connect");
        let req = expect_connect_request(&server.events);
        let data = vec![9u8; len];
        let result = if what == "accept" { req.accept(&server.qp_init(), &data).map(drop) } else { req.reject(&data) };
        match result {
            Err(Error::PrivateDataTooLong { what: w, len: l, max }) => assert_eq!((w, l, max), (what, len, len - 1)),
            other => panic!("{len}-byte {what} private data: {other:?}"),
        }
        match next_event(&client.events, "Rejected after the dropped request") {
            CmEvent::Rejected { conn, reason: RejectReason::Consumer, .. } => assert_eq!(conn, qp.conn_id()),
            other => panic!("expected Rejected {{ Consumer }}, got {other:?}"),
        }
    }
}

/// Makes a queue-pair setting invalid for a device with these attributes.
type Spoil = fn(&mut QpInit<'_>, &DeviceAttributes);

/// Queue-pair settings outside the device limits are refused with `InvalidArgument` by connect
/// (nothing is sent) and by accept (the dropped request then rejects the peer).
pub fn cm_invalid_queue_pair_settings(spec: &ProviderSpec) {
    let client = Node::open(spec);
    let server = Node::open(spec);
    let listener = server.events.listen(spec.listen_addr(), 8).expect("listen");
    let attrs = client.fabric.attributes().clone();
    let bad: [(&str, Spoil); 10] = [
        ("max_send_wr 0", |i, _| i.caps.max_send_wr = 0),
        ("max_send_wr over max_qp_wr", |i, a| i.caps.max_send_wr = a.max_qp_wr + 1),
        ("max_recv_wr over max_qp_wr", |i, a| i.caps.max_recv_wr = a.max_qp_wr + 1),
        ("max_send_sge 0", |i, _| i.caps.max_send_sge = 0),
        ("max_send_sge over max_sge", |i, a| i.caps.max_send_sge = a.max_sge + 1),
        ("rnr_retry 8", |i, _| i.rnr_retry = RNR_RETRY_INFINITE + 1),
        ("initiator_depth 0", |i, _| i.initiator_depth = 0),
        ("initiator_depth over max_qp_init_rd_atom", |i, a| i.initiator_depth = a.max_qp_init_rd_atom + 1),
        ("responder_resources 0", |i, _| i.responder_resources = 0),
        ("responder_resources over max_qp_rd_atom", |i, a| i.responder_resources = a.max_qp_rd_atom + 1),
    ];
    for (what, spoil) in &bad {
        let mut init = client.qp_init();
        spoil(&mut init, &attrs);
        match client.events.connect(listener.local_addr(), &init, &[], WAIT) {
            Err(Error::InvalidArgument { verb, .. }) => assert_eq!(verb, "connect", "{what}"),
            other => panic!("connect with {what}: {other:?}"),
        }
    }
    assert_no_event(&server.events, "refused connects send nothing");
    for (what, spoil) in &bad {
        let qp = client.events.connect(listener.local_addr(), &client.qp_init(), &[], WAIT).expect("connect");
        let req = expect_connect_request(&server.events);
        let mut init = server.qp_init();
        spoil(&mut init, &attrs);
        match req.accept(&init, &[]) {
            Err(Error::InvalidArgument { verb, .. }) => assert_eq!(verb, "accept", "{what}"),
            other => panic!("accept with {what}: {other:?}"),
        }
        match next_event(&client.events, "Rejected") {
            CmEvent::Rejected { conn, reason: RejectReason::Consumer, .. } => assert_eq!(conn, qp.conn_id()),
            other => panic!("expected Rejected after a refused accept, got {other:?}"),
        }
    }
}

/// Dropping a queue pair disconnects it: the peer gets Disconnected, and the peer's receives
/// flush once it disconnects in turn.
pub fn cm_drop_queue_pair_disconnects(spec: &ProviderSpec) {
    let p = Pair::connect(spec);
    let buf = p.server.register(64, Access::LOCAL_WRITE);
    p.server_qp.post_recv(5, &[buf.sge(0, 64)]).expect("post_recv");
    let Pair { client_qp, server_qp, client, server, listener: _listener } = p;
    drop(client_qp);
    expect_disconnected(&server.events, server_qp.conn_id());
    server_qp.disconnect().expect("disconnect after the peer left");
    let wc = poll_one(&server.cq);
    assert_eq!((wc.wr_id, wc.status, wc.qp_num), (5, WcStatus::WorkRequestFlushed, server_qp.qp_num()));
    assert_cq_empty(&client.cq, "the dropped side had no work");
}
