//! Queue pairs connected by hand, without the connection manager, as the seed programs do:
//! each side creates its queue pair (RESET), the two exchange their endpoints over a side
//! channel (here: in memory, through serde as a socket would carry them), and each moves its
//! own through INIT, RTR and RTS. Then the data path over them, RNR, the state machine's
//! refusals, a peer that never answers, a destroyed peer, and the access INIT grants.
//!
//! Provider-neutral: nothing assumes soft's endpoints (RoCE has LID 0 and real GIDs); where
//! providers legitimately differ (a destroyed peer: soft disconnects the other end at once, an
//! RDMA device lets its next request time out), the common part is asserted.

use std::collections::BTreeSet;
use std::time::Duration;

use rdma_fabric::*;

use super::rc::reads_and_writes_complete_in_order;
use crate::common::fabric::*;
use crate::common::provider::ProviderSpec;

/// A queue pair number no device of the suite hands out: near the top of the 24 bits, where
/// neither Soft-RoCE's numbers (below 2^17) nor soft's (from below 2^16, one per queue pair)
/// reach.
const WRONG_QPN: u32 = 0xFF_FFF0;

/// How each end is moved: the access INIT grants, and RTS's and RTR's retry settings.
#[derive(Debug, Clone, Copy)]
struct Settings {
    access: Access,
    /// RTS: 4.096 µs × 2^timeout per try.
    timeout: u8,
    retry_count: u8,
    rnr_retry: u8,
    /// RTR: how long the peer waits before it retries a SEND this end had no receive for.
    min_rnr_timer: Duration,
    /// RTR's `max_dest_rd_atomic` and RTS's `max_rd_atomic` (`None`: as many as the default
    /// queue-pair settings and the device allow).
    rd_atomic: Option<u8>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            access: Access::REMOTE_READ | Access::REMOTE_WRITE,
            timeout: 14,
            retry_count: 7,
            rnr_retry: RNR_RETRY_INFINITE,
            min_rnr_timer: Duration::from_micros(640),
            rd_atomic: None,
        }
    }
}

impl Settings {
    /// Few, short retries: a request nobody answers fails within tens of milliseconds.
    fn quick() -> Self {
        Settings { timeout: 12, retry_count: 1, ..Settings::default() }
    }
}

/// A queue pair created unconnected on `node`, in RESET.
fn hand_qp(node: &Node) -> QueuePair {
    let qp = node.fabric.create_qp(node.qp_init()).expect("create_qp");
    assert_eq!(qp.state(), QpState::Reset, "a queue pair is created in RESET");
    qp
}

/// `qp`'s endpoint as its peer receives it: serialized and back, as over the side channel.
fn endpoint(qp: &QueuePair) -> QpEndpoint {
    let ep = qp.local_endpoint().expect("local_endpoint");
    let config = bincode::config::standard();
    let bytes = bincode::serde::encode_to_vec(ep, config).expect("encode the endpoint");
    let (sent, _): (QpEndpoint, usize) =
        bincode::serde::decode_from_slice(&bytes, config).expect("decode the endpoint");
    sent
}

/// RTR towards `remote`: the path MTU both ports take, the READs this end serves.
fn rtr(node: &Node, local: &QpEndpoint, remote: QpEndpoint, s: Settings) -> RtrAttr {
    RtrAttr {
        remote,
        path_mtu: local.mtu.min(remote.mtu),
        max_dest_rd_atomic: s.rd_atomic.unwrap_or(DEFAULT_RD_ATOMIC.min(node.fabric.attributes().max_qp_rd_atom)),
        min_rnr_timer: s.min_rnr_timer,
    }
}

/// RTS with `s`'s retries and the READs this end may have outstanding.
fn rts(node: &Node, s: Settings) -> RtsAttr {
    RtsAttr {
        timeout: s.timeout,
        retry_count: s.retry_count,
        rnr_retry: s.rnr_retry,
        max_rd_atomic: s.rd_atomic.unwrap_or(DEFAULT_RD_ATOMIC.min(node.fabric.attributes().max_qp_init_rd_atom)),
    }
}

/// Moves `qp` through INIT, RTR (towards `remote`) and RTS, as `modify_qp_to_init`, `_rtr`
/// and `_rts` of the seed programs, checking the state after each move.
fn bring_up(node: &Node, qp: &QueuePair, remote: QpEndpoint, s: Settings) {
    let local = qp.local_endpoint().expect("local_endpoint");
    qp.modify_to_init(InitAttr { port: local.port, access: s.access }).expect("RESET → INIT");
    assert_eq!(qp.state(), QpState::Init);
    qp.modify_to_rtr(rtr(node, &local, remote, s)).expect("INIT → RTR");
    assert_eq!(qp.state(), QpState::ReadyToReceive);
    qp.modify_to_rts(rts(node, s)).expect("RTR → RTS");
    assert_eq!(qp.state(), QpState::ReadyToSend);
}

/// Two nodes with a queue pair each, connected by hand (the queue pairs drop first).
struct HandPair {
    qa: QueuePair,
    qb: QueuePair,
    a: Node,
    b: Node,
}

impl HandPair {
    /// The seed flow: create both, exchange endpoints, then `a` moves all the way to RTS
    /// before `b` leaves RESET (the peer of a queue pair in RTR need not be ready yet).
    fn connect(spec: &ProviderSpec, s: Settings) -> HandPair {
        let (a, b) = (Node::open(spec), Node::open(spec));
        let (qa, qb) = (hand_qp(&a), hand_qp(&b));
        let (to_b, to_a) = (endpoint(&qa), endpoint(&qb));
        bring_up(&a, &qa, to_a, s);
        bring_up(&b, &qb, to_b, s);
        HandPair { qa, qb, a, b }
    }
}

/// Posts a SEND of `msg` from `from` into a receive `to` posted, and checks both completions
/// and the bytes.
fn send_and_check(from: (&Node, &QueuePair), to: (&Node, &QueuePair), msg: &[u8], imm: Option<u32>) {
    let ((sender, sqp), (receiver, rqp)) = (from, to);
    let rbuf = receiver.register(4096, Access::LOCAL_WRITE);
    let sbuf = sender.register(4096, Access::NONE);
    sbuf.buffer().write(0, msg).expect("write");
    rqp.post_recv(5, &[rbuf.sge(64, 1024)]).expect("post_recv");
    let op = imm.map_or(SendOp::Send, SendOp::SendWithImm);
    sqp.post_send(&wr(50, op, &[sbuf.sge(0, msg.len())])).expect("post SEND");
    let wc = poll_one(&receiver.cq);
    assert_success(&wc, 5, WcOpcode::Recv, rqp.qp_num());
    assert_eq!((wc.byte_len as usize, wc.imm), (msg.len(), imm), "{wc:?}");
    assert_eq!(read_mr(&rbuf, 64, msg.len()), msg);
    assert_success(&poll_one(&sender.cq), 50, WcOpcode::Send, sqp.qp_num());
}

/// Connected by hand, the queue pairs carry SENDs both ways (with and without immediate), and
/// RDMA READs and WRITEs of the peer's memory, with their completions and bytes, as queue pairs
/// the connection manager connected.
pub fn bootstrap_connect_by_hand_then_send_read_write_and_send_with_immediate(spec: &ProviderSpec) {
    let p = HandPair::connect(spec, Settings::default());
    let (a, b) = ((&p.a, &p.qa), (&p.b, &p.qb));
    send_and_check(a, b, &pattern(100, 1), None);
    assert_eq!((p.qa.data_path(), p.qb.data_path()), (spec.data_path, spec.data_path));
    send_and_check(a, b, &pattern(40, 2), Some(0xC0FF_EE00));
    send_and_check(b, a, &pattern(333, 3), None);
    send_and_check(b, a, &[], Some(7));

    let remote = p.b.register(8192, Access::REMOTE_READ | Access::REMOTE_WRITE | Access::LOCAL_WRITE);
    remote.buffer().write(0, &pattern(8192, 4)).expect("write");
    let local = p.a.register(8192, Access::LOCAL_WRITE);
    p.qa.post_send(&wr(60, SendOp::RdmaRead(at(remote.remote(), 16)), &[local.sge(32, 5000)])).expect("post READ");
    assert_success(&poll_one(&p.a.cq), 60, WcOpcode::RdmaRead, p.qa.qp_num());
    assert_eq!(read_mr(&local, 32, 5000), read_mr(&remote, 16, 5000));

    local.buffer().write(0, &pattern(777, 5)).expect("write");
    p.qa.post_send(&wr(61, SendOp::RdmaWrite(at(remote.remote(), 8)), &[local.sge(0, 777)])).expect("post WRITE");
    assert_success(&poll_one(&p.a.cq), 61, WcOpcode::RdmaWrite, p.qa.qp_num());
    assert_eq!(read_mr(&remote, 8, 777), pattern(777, 5));
    assert_eq!(read_mr(&remote, 0, 8), pattern(8192, 4)[..8], "bytes before the WRITE changed");
    assert_cq_empty(&p.a.cq, "a");
    assert_cq_empty(&p.b.cq, "b");
}

/// READs take the depths RTR and RTS set, not the queue pair's creation settings: with two
/// each way (of the default sixteen), many READs (and WRITEs among them) posted back to back
/// wait in the send queue and complete in order, each way.
pub fn bootstrap_reads_beyond_max_rd_atomic_wait_and_complete_in_order(spec: &ProviderSpec) {
    let p = HandPair::connect(spec, Settings { rd_atomic: Some(2), ..Settings::default() });
    assert!(p.a.qp_init().initiator_depth > 2, "the creation settings allow more than RTS does");
    reads_and_writes_complete_in_order(&p.qa, &p.a, &p.b);
    reads_and_writes_complete_in_order(&p.qb, &p.b, &p.a);
}

/// A SEND that finds no receive is retried as RTS (the sender's `rnr_retry`) and RTR (the
/// receiver's `min_rnr_timer`) say: forever until a receive comes with 7, failed with RNR
/// retry exceeded after one retry with 1.
pub fn bootstrap_rnr_retries_follow_rts_and_rtr(spec: &ProviderSpec) {
    let p = HandPair::connect(spec, Settings::default());
    let sbuf = p.a.register(64, Access::NONE);
    p.qa.post_send(&wr(1, SendOp::Send, &[sbuf.sge(0, 16)])).expect("post SEND");
    assert!(poll_up_to(&p.a.cq, 1, QUIET).is_empty(), "a SEND waiting for a receive completed");
    let rbuf = p.b.register(64, Access::LOCAL_WRITE);
    p.qb.post_recv(2, &[rbuf.sge(0, 64)]).expect("post_recv");
    assert_success(&poll_one(&p.b.cq), 2, WcOpcode::Recv, p.qb.qp_num());
    assert_success(&poll_one(&p.a.cq), 1, WcOpcode::Send, p.qa.qp_num());

    let s = Settings { rnr_retry: 1, min_rnr_timer: Duration::from_millis(1), ..Settings::default() };
    let p = HandPair::connect(spec, s);
    let sbuf = p.a.register(64, Access::NONE);
    p.qa.post_send(&wr(3, SendOp::Send, &[sbuf.sge(0, 16)])).expect("post SEND");
    let wc = poll_one(&p.a.cq);
    assert_eq!((wc.wr_id, wc.status, wc.qp_num), (3, WcStatus::RnrRetryExceeded, p.qa.qp_num()), "{wc:?}");
    assert_cq_empty(&p.b.cq, "no receive was posted");
}

/// A queue pair given a wrong remote queue pair number reaches nobody: its SEND completes
/// with retry exceeded once RTS's timeout and retry count have run out, and the queue pair is
/// in ERROR; the peer it meant to reach is untouched.
pub fn bootstrap_wrong_remote_qpn_fails_the_send_with_retry_exceeded(spec: &ProviderSpec) {
    let (a, b) = (Node::open(spec), Node::open(spec));
    let (qa, qb) = (hand_qp(&a), hand_qp(&b));
    let (to_b, to_a) = (endpoint(&qa), endpoint(&qb));
    let wrong = QpEndpoint { qp_num: WRONG_QPN, ..to_a };
    assert_ne!(wrong.qp_num, qb.qp_num());
    bring_up(&a, &qa, wrong, Settings::quick());
    bring_up(&b, &qb, to_b, Settings::quick());
    let sbuf = a.register(64, Access::NONE);
    qa.post_send(&wr(9, SendOp::Send, &[sbuf.sge(0, 32)])).expect("post SEND");
    let wc = poll_one(&a.cq);
    assert_eq!((wc.wr_id, wc.status, wc.qp_num), (9, WcStatus::TransportRetryExceeded, qa.qp_num()), "{wc:?}");
    assert_eq!(qa.state(), QpState::Error);
    assert_eq!(qb.state(), QpState::ReadyToSend, "the peer it meant to reach is untouched");
    assert_cq_empty(&b.cq, "the peer");
}

/// Moves out of order are refused with `InvalidTransition` (as `ibv_modify_qp`'s EINVAL) and
/// leave the queue pair where it was: RESET → RTS, INIT → INIT, INIT → RTS. Nothing can be
/// sent before RTS.
pub fn bootstrap_transition_out_of_order_is_invalid(spec: &ProviderSpec) {
    let node = Node::open(spec);
    let qp = hand_qp(&node);
    let s = Settings::default();
    let refused = |r: Result<()>, from: QpState, to: QpState| match r {
        Err(Error::InvalidTransition { from: f, to: t }) => assert_eq!((f, t), (from, to)),
        other => panic!("{from} → {to}: expected InvalidTransition, got {other:?}"),
    };
    refused(qp.modify_to_rts(rts(&node, s)), QpState::Reset, QpState::ReadyToSend);
    assert_eq!(qp.state(), QpState::Reset);
    let init = InitAttr { port: endpoint(&qp).port, access: s.access };
    qp.modify_to_init(init).expect("RESET → INIT");
    refused(qp.modify_to_init(init), QpState::Init, QpState::Init);
    refused(qp.modify_to_rts(rts(&node, s)), QpState::Init, QpState::ReadyToSend);
    assert_eq!(qp.state(), QpState::Init);
    let sbuf = node.register(64, Access::NONE);
    assert!(qp.post_send(&wr(1, SendOp::Send, &[sbuf.sge(0, 8)])).is_err(), "a SEND posted in INIT");
    assert_cq_empty(&node.cq, "nothing was posted");
}

/// RTR before INIT is refused with `InvalidTransition` and leaves the queue pair in RESET;
/// in order, the same move succeeds.
pub fn bootstrap_rtr_before_init_is_invalid(spec: &ProviderSpec) {
    let (node, peer) = (Node::open(spec), Node::open(spec));
    let (qp, other) = (hand_qp(&node), hand_qp(&peer));
    let (local, remote) = (endpoint(&qp), endpoint(&other));
    let s = Settings::default();
    match qp.modify_to_rtr(rtr(&node, &local, remote, s)) {
        Err(Error::InvalidTransition { from: QpState::Reset, to: QpState::ReadyToReceive }) => {}
        other => panic!("RESET → RTR: expected InvalidTransition, got {other:?}"),
    }
    assert_eq!(qp.state(), QpState::Reset);
    qp.modify_to_init(InitAttr { port: local.port, access: s.access }).expect("RESET → INIT");
    qp.modify_to_rtr(rtr(&node, &local, remote, s)).expect("INIT → RTR");
    assert_eq!(qp.state(), QpState::ReadyToReceive);
}

/// Destroying one end flushes the other: its outstanding receives complete flushed and it ends
/// in ERROR. Where the destroy disconnects (soft, as a connection-manager peer sees) that
/// happens at once and a SEND posted afterwards is flushed or refused; where nothing tells the
/// peer (an RDMA device), that SEND fails with retry exceeded, which fails the queue pair.
pub fn bootstrap_destroying_one_side_flushes_the_other(spec: &ProviderSpec) {
    const N: u64 = 3;
    let HandPair { qa, qb, a, b } = HandPair::connect(spec, Settings::quick());
    // One SEND each way first: both ends are connected.
    send_and_check((&a, &qa), (&b, &qb), &pattern(10, 1), None);
    send_and_check((&b, &qb), (&a, &qa), &pattern(10, 2), None);
    let rbuf = b.register(4096, Access::LOCAL_WRITE);
    for i in 0..N {
        qb.post_recv(100 + i, &[rbuf.sge(64 * i as usize, 64)]).expect("post_recv");
    }
    drop(qa);
    let sbuf = b.register(64, Access::NONE);
    let sent = match qb.post_send(&wr(7, SendOp::Send, &[sbuf.sge(0, 8)])) {
        Ok(()) => 1,
        Err(Error::NotConnected { .. }) => 0,
        Err(e) => panic!("a SEND to a destroyed peer: {e}"),
    };
    let wcs = poll_n(&b.cq, (N + sent) as usize);
    let receives: BTreeSet<u64> = wcs.iter().filter(|wc| wc.wr_id != 7).map(|wc| wc.wr_id).collect();
    assert_eq!(receives, (100..100 + N).collect());
    for wc in &wcs {
        let failed = [WcStatus::WorkRequestFlushed, WcStatus::TransportRetryExceeded];
        let expected: &[WcStatus] = if wc.wr_id == 7 { &failed } else { &failed[..1] };
        assert!(expected.contains(&wc.status) && wc.qp_num == qb.qp_num(), "{wc:?}");
    }
    assert_eq!(qb.state(), QpState::Error);
    assert_cq_empty(&b.cq, "after the flush");
}

/// The access INIT grants bounds what the peer may do, whatever its regions grant: with
/// REMOTE_READ only, the peer's READ succeeds and its WRITE fails (a remote access error, or
/// Soft-RoCE's invalid request) without changing a byte; with REMOTE_WRITE only, the other way
/// round.
pub fn bootstrap_init_access_limits_what_the_peer_may_do(spec: &ProviderSpec) {
    let refused = [WcStatus::RemoteAccessError, WcStatus::RemoteInvalidRequest];
    for (granted, allowed, denied) in [
        (
            Access::REMOTE_READ,
            SendOp::RdmaRead as fn(RemoteAddr) -> SendOp,
            SendOp::RdmaWrite as fn(RemoteAddr) -> SendOp,
        ),
        (Access::REMOTE_WRITE, SendOp::RdmaWrite, SendOp::RdmaRead),
    ] {
        let p = HandPair::connect(spec, Settings { access: granted, ..Settings::default() });
        let remote = p.a.register(4096, Access::REMOTE_READ | Access::REMOTE_WRITE | Access::LOCAL_WRITE);
        remote.buffer().fill(0, 4096, 0x3C).expect("fill");
        let local = p.b.register(4096, Access::LOCAL_WRITE);
        local.buffer().fill(0, 4096, 0x3C).expect("fill");
        p.qb.post_send(&wr(1, allowed(remote.remote()), &[local.sge(0, 256)])).expect("post the allowed request");
        let wc = poll_one(&p.b.cq);
        assert_eq!((wc.wr_id, wc.status), (1, WcStatus::Success), "INIT granted {granted:?}: {wc:?}");

        local.buffer().fill(0, 4096, 0xA5).expect("fill");
        p.qb.post_send(&wr(2, denied(remote.remote()), &[local.sge(0, 256)])).expect("post the denied request");
        let wc = poll_one(&p.b.cq);
        assert!(wc.wr_id == 2 && refused.contains(&wc.status), "INIT granted {granted:?} only: {wc:?}");
        assert_eq!(read_mr(&remote, 0, 4096), vec![0x3C; 4096], "a refused request changed the peer's memory");
        assert_eq!(read_mr(&local, 0, 4096), vec![0xA5; 4096], "a refused READ changed the destination");
    }
}

/// An endpoint names its queue pair and a 24-bit first PSN, and comes back from the side
/// channel's encoding (serde, here bincode) exactly as it went; every queue pair has its own.
pub fn bootstrap_endpoint_round_trips_through_serde(spec: &ProviderSpec) {
    let node = Node::open(spec);
    let (qp, other) = (hand_qp(&node), hand_qp(&node));
    let ep = qp.local_endpoint().expect("local_endpoint");
    assert_eq!(ep.qp_num, qp.qp_num());
    assert!(ep.psn <= 0xFF_FFFF && ep.port >= 1, "{ep:?}");
    let config = bincode::config::standard();
    let bytes = bincode::serde::encode_to_vec(ep, config).expect("encode");
    let (back, read): (QpEndpoint, usize) = bincode::serde::decode_from_slice(&bytes, config).expect("decode");
    assert_eq!((back, read), (ep, bytes.len()));
    assert_ne!(endpoint(&other).qp_num, ep.qp_num, "two queue pairs, one number");
}
