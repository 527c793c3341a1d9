//! Completion queues: limits, batch polling, notification and bounded waits.

use std::sync::mpsc;
use std::time::{Duration, Instant};

use rdma_fabric::*;

use crate::common::fabric::*;
use crate::common::provider::ProviderSpec;

/// Slack allowed over a requested timeout before a wait counts as unbounded.
const TIMER_SLACK: Duration = Duration::from_secs(2);

/// Depth 0 and depths over `max_cqe` are refused; a CQ is at least as deep as asked; polling an
/// empty CQ (or into an empty slice) returns 0.
pub fn cq_depth_limits(spec: &ProviderSpec) {
    let fabric = spec.open();
    assert!(matches!(fabric.create_cq(0), Err(Error::InvalidArgument { .. })));
    let max = fabric.attributes().max_cqe;
    if let Some(over) = max.checked_add(1) {
        assert!(matches!(fabric.create_cq(over), Err(Error::InvalidArgument { .. })));
    }
    let cq = fabric.create_cq(16).expect("create_cq");
    assert!(cq.depth() >= 16, "depth {} < 16", cq.depth());
    let mut out = [WorkCompletion::default(); 4];
    assert_eq!(cq.poll(&mut out).expect("poll"), 0);
    assert_eq!(cq.poll(&mut []).expect("poll into nothing"), 0);
}

/// A poll moves at most `out.len()` completions, in order, none lost or repeated; polling into
/// an empty slice consumes nothing.
pub fn cq_poll_in_batches(spec: &ProviderSpec) {
    const N: u64 = 32;
    let p = Pair::connect(spec);
    let remote = p.server.register(64 * N as usize, Access::LOCAL_WRITE | Access::REMOTE_WRITE);
    let local = p.client.register(64, Access::NONE);
    local.buffer().write(0, &pattern(64, 1)).expect("write");
    for i in 0..N {
        let sge = [local.sge(0, 64)];
        p.client_qp.post_send(&wr(i, SendOp::RdmaWrite(at(remote.remote(), 64 * i)), &sge)).expect("post WRITE");
    }
    let deadline = Instant::now() + WAIT;
    let mut got = Vec::new();
    let mut out = [WorkCompletion::default(); 5];
    while got.len() < N as usize {
        assert!(Instant::now() < deadline, "{} of {N} completions within {WAIT:?}", got.len());
        assert_eq!(p.client.cq.poll(&mut out[..0]).expect("poll into nothing"), 0);
        let n = p.client.cq.poll(&mut out[..3]).expect("poll");
        assert!(n <= 3, "poll returned {n} into a slice of 3");
        got.extend_from_slice(&out[..n]);
        if n == 0 {
            let n = p.client.cq.poll_wait(&mut out, SPIN, deadline.saturating_duration_since(Instant::now()));
            got.extend_from_slice(&out[..n.expect("poll_wait")]);
        }
    }
    for (i, wc) in got.iter().enumerate() {
        assert_success(wc, i as u64, WcOpcode::RdmaWrite, p.client_qp.qp_num());
    }
    assert_cq_empty(&p.client.cq, "after all WRITE completions");
    for i in 0..N as usize {
        assert_eq!(read_mr(&remote, 64 * i, 64), pattern(64, 1), "WRITE {i} landed");
    }
}

/// `drain` polls until the queue is empty: within one call every batch but the last is full,
/// and over the calls every completion arrives once, in order.
pub fn cq_drain_hands_over_full_batches_then_a_short_one(spec: &ProviderSpec) {
    const N: u64 = 24;
    let p = Pair::connect(spec);
    let remote = p.server.register(64 * N as usize, Access::LOCAL_WRITE | Access::REMOTE_WRITE);
    let local = p.client.register(64, Access::NONE);
    for i in 0..N {
        let sge = [local.sge(0, 64)];
        p.client_qp.post_send(&wr(i, SendOp::RdmaWrite(at(remote.remote(), 64 * i)), &sge)).expect("post WRITE");
    }
    let deadline = Instant::now() + WAIT;
    let mut got = Vec::new();
    let mut batch = [WorkCompletion::default(); 4];
    while got.len() < N as usize {
        assert!(Instant::now() < deadline, "{} of {N} completions within {WAIT:?}", got.len());
        let mut sizes = Vec::new();
        p.client
            .cq
            .drain(&mut batch, |wcs| {
                sizes.push(wcs.len());
                got.extend_from_slice(wcs);
            })
            .expect("drain");
        let (last, full) = sizes.split_last().expect("at least one batch");
        assert!(*last < 4 && full.iter().all(|&n| n == 4), "batch sizes of one drain: {sizes:?}");
        if sizes == [0] {
            std::thread::yield_now();
        }
    }
    for (i, wc) in got.iter().enumerate() {
        assert_success(wc, i as u64, WcOpcode::RdmaWrite, p.client_qp.qp_num());
    }
    assert_cq_empty(&p.client.cq, "after draining every completion");
}

/// `poll_wait` and arm + `wait` on an empty CQ time out after the given time, not much later.
pub fn cq_poll_wait_times_out_when_empty(spec: &ProviderSpec) {
    let fabric = spec.open();
    let cq = fabric.create_cq(8).expect("create_cq");
    let mut out = [WorkCompletion::default(); 4];
    let timeout = Duration::from_millis(100);

    let start = Instant::now();
    assert_eq!(cq.poll_wait(&mut out, SPIN, timeout).expect("poll_wait"), 0);
    let elapsed = start.elapsed();
    assert!(elapsed >= timeout && elapsed < timeout + TIMER_SLACK, "poll_wait took {elapsed:?}");

    cq.arm().expect("arm");
    let start = Instant::now();
    assert!(!cq.wait(timeout).expect("wait"), "a notification without a completion");
    let elapsed = start.elapsed();
    assert!(elapsed >= timeout && elapsed < timeout + TIMER_SLACK, "wait took {elapsed:?}");
}

/// An armed CQ notifies the completion that arrives after arming; `wait` then returns true and
/// `poll` finds it; with nothing new, the next armed wait times out.
pub fn cq_arm_wait_poll(spec: &ProviderSpec) {
    let p = Pair::connect(spec);
    let rbuf = p.server.register(64, Access::LOCAL_WRITE);
    let sbuf = p.client.register(64, Access::NONE);
    p.server_qp.post_recv(9, &[rbuf.sge(0, 64)]).expect("post_recv");
    p.server.cq.arm().expect("arm");
    p.client_qp.post_send(&wr(1, SendOp::Send, &[sbuf.sge(0, 8)])).expect("post SEND");
    assert!(p.server.cq.wait(WAIT).expect("wait"), "no notification within {WAIT:?}");
    let mut out = [WorkCompletion::default(); 4];
    // The notification may precede the entry by a hair on some devices: poll with a bound.
    let n = p.server.cq.poll_wait(&mut out, SPIN, WAIT).expect("poll");
    assert_eq!(n, 1);
    assert_success(&out[0], 9, WcOpcode::Recv, p.server_qp.qp_num());
    assert_success(&poll_one(&p.client.cq), 1, WcOpcode::Send, p.client_qp.qp_num());

    p.server.cq.arm().expect("arm again");
    assert!(!p.server.cq.wait(QUIET).expect("wait"), "a notification with no new completion");
}

/// `wait` and `poll_wait` take any timeout, `Duration::MAX` included (it saturates instead of
/// overflowing the deadline): an armed wait for a completion that comes returns true.
pub fn cq_waits_accept_any_duration(spec: &ProviderSpec) {
    let p = Pair::connect(spec);
    let rbuf = p.server.register(64, Access::LOCAL_WRITE);
    let sbuf = p.client.register(64, Access::NONE);
    p.server_qp.post_recv(9, &[rbuf.sge(0, 64)]).expect("post_recv");
    p.server.cq.arm().expect("arm");
    let (tx, rx) = mpsc::channel();
    let cq = p.server.cq.clone();
    let waiter = std::thread::spawn(move || {
        let _ = tx.send(cq.wait(Duration::MAX).map_err(|e| e.to_string()));
    });
    p.client_qp.post_send(&wr(1, SendOp::Send, &[sbuf.sge(0, 8)])).expect("post SEND");
    let woke = rx.recv_timeout(WAIT).expect("wait(Duration::MAX) returned after the completion");
    assert!(woke.expect("wait"), "the armed wait was notified");
    waiter.join().expect("waiter");
    let mut out = [WorkCompletion::default(); 4];
    assert_eq!(p.server.cq.poll_wait(&mut out, SPIN, Duration::MAX).expect("poll_wait(Duration::MAX)"), 1);
    assert_success(&out[0], 9, WcOpcode::Recv, p.server_qp.qp_num());
}

/// A CQ armed for solicited completions (`ibv_req_notify_cq(cq, 1)`) stays quiet for the
/// receive of an unsolicited SEND, which is still queued, and notifies that of a solicited one.
pub fn cq_arm_solicited_notifies_only_solicited_sends(spec: &ProviderSpec) {
    let p = Pair::connect(spec);
    let rbuf = p.server.register(256, Access::LOCAL_WRITE);
    let sbuf = p.client.register(64, Access::NONE);
    for i in 0..2u64 {
        p.server_qp.post_recv(10 + i, &[rbuf.sge(i as usize * 64, 64)]).expect("post_recv");
    }
    p.server.cq.arm_solicited().expect("arm for solicited completions");
    p.client_qp.post_send(&wr(1, SendOp::Send, &[sbuf.sge(0, 8)])).expect("post SEND");
    assert_success(&poll_one(&p.client.cq), 1, WcOpcode::Send, p.client_qp.qp_num());
    assert!(!p.server.cq.wait(QUIET).expect("wait"), "an unsolicited SEND raised a notification");
    let second = [sbuf.sge(8, 8)];
    let solicited = wr(2, SendOp::Send, &second).solicited();
    p.client_qp.post_send(&solicited).expect("post solicited SEND");
    assert!(p.server.cq.wait(WAIT).expect("wait"), "no notification for a solicited SEND within {WAIT:?}");
    let mut out = [WorkCompletion::default(); 4];
    let mut got = Vec::new();
    let deadline = Instant::now() + WAIT;
    while got.len() < 2 && Instant::now() < deadline {
        let n = p.server.cq.poll_wait(&mut out, SPIN, WAIT).expect("poll");
        got.extend_from_slice(&out[..n]);
    }
    assert_eq!(got.len(), 2, "both receives completed");
    assert_success(&got[0], 10, WcOpcode::Recv, p.server_qp.qp_num());
    assert_success(&got[1], 11, WcOpcode::Recv, p.server_qp.qp_num());
    assert_success(&poll_one(&p.client.cq), 2, WcOpcode::Send, p.client_qp.qp_num());
}

/// `poll_wait` blocked on an empty CQ returns as soon as a completion arrives.
pub fn cq_poll_wait_returns_on_completion(spec: &ProviderSpec) {
    let p = Pair::connect(spec);
    let rbuf = p.server.register(64, Access::LOCAL_WRITE);
    let sbuf = p.client.register(64, Access::NONE);
    p.server_qp.post_recv(3, &[rbuf.sge(0, 64)]).expect("post_recv");
    let (ready_tx, ready_rx) = mpsc::channel();
    let cq = p.server.cq.clone();
    let waiter = std::thread::spawn(move || {
        let mut out = [WorkCompletion::default(); 4];
        ready_tx.send(()).expect("signal");
        let start = Instant::now();
        let n = cq.poll_wait(&mut out, Duration::ZERO, WAIT).expect("poll_wait");
        (n, out[0], start.elapsed())
    });
    ready_rx.recv_timeout(WAIT).expect("waiter started");
    p.client_qp.post_send(&wr(4, SendOp::Send, &[sbuf.sge(0, 16)])).expect("post SEND");
    let (n, wc, elapsed) = waiter.join().expect("waiter");
    assert_eq!(n, 1, "poll_wait returned nothing within {elapsed:?}");
    assert!(elapsed < WAIT, "poll_wait ran into its timeout");
    assert_success(&wc, 3, WcOpcode::Recv, p.server_qp.qp_num());
    assert_eq!(wc.byte_len, 16);
}

/// More completions than a CQ's depth make `poll` fail with `CqOverrun`. The receive CQ of the
/// server is the small one; the client's SENDs complete (after the receiver queued their
/// completions) on a separate large CQ, so the test knows when the overrun has happened (on a
/// device that stops acknowledging at the overflow, after [`WAIT`]).
pub fn cq_overrun(spec: &ProviderSpec) {
    let client = Node::open(spec);
    let server = Node::open(spec);
    let listener = server.events.listen(spec.listen_addr(), 8).expect("listen");
    let small = server.fabric.create_cq(4).expect("create_cq");
    let depth = small.depth();
    let n = depth as usize + 4;
    let qp = client.events.connect(listener.local_addr(), &client.qp_init(), &[], WAIT).expect("connect");
    let req = expect_connect_request(&server.events);
    let conn = req.conn_id();
    let caps = QpCaps { max_recv_wr: n as u32, ..QpCaps::default() };
    let init = QpInit { recv_cq: &small, caps, ..server.qp_init() };
    let server_qp = req.accept(&init, &[]).expect("accept");
    expect_established(&client.events, qp.conn_id());
    expect_established(&server.events, conn);

    let rbuf = server.register(64, Access::LOCAL_WRITE);
    let sbuf = client.register(64, Access::NONE);
    for i in 0..n {
        server_qp.post_recv(i as u64, &[rbuf.sge(0, 64)]).expect("post_recv");
    }
    for i in 0..n {
        qp.post_send(&wr(i as u64, SendOp::Send, &[sbuf.sge(0, 8)])).expect("post SEND");
    }
    // Soft acknowledges every SEND; Soft-RoCE stops acknowledging at the overflow. Either way the
    // first `depth` SENDs were received and completed.
    let acks = poll_up_to(&client.cq, n, WAIT);
    assert!(acks.len() >= depth as usize, "{acks:?}");
    assert!(acks.iter().take(depth as usize).all(|wc| wc.status.is_success()), "{acks:?}");
    let mut out = [WorkCompletion::default(); 64];
    match small.poll(&mut out) {
        Err(Error::CqOverrun { depth: d }) => assert_eq!(d, depth),
        other => panic!("{n} completions into a CQ of depth {depth}: poll gave {other:?}"),
    }
}
