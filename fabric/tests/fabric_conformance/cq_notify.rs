//! The completion channel as a descriptor (`CompletionQueue::notify_fd`): readable once an
//! armed CQ's notification arrives, whoever queued the completion (a peer in another process
//! too), cleared by `take_notification`, and armed again by the next `arm`.

use std::os::fd::{AsRawFd, BorrowedFd};
use std::time::{Duration, Instant};

use rdma_fabric::*;

use crate::common::child::{self, ChildProcess};
use crate::common::fabric::*;
use crate::common::provider::ProviderSpec;

/// Whether `fd` polls readable within `timeout` (0: right now).
fn readable(fd: BorrowedFd<'_>, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        let mut pfd = libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        let left = deadline.saturating_duration_since(Instant::now());
        let ms = left.as_millis().min(i32::MAX as u128) as i32;
        // SAFETY: one valid pollfd for the duration of the call.
        let rc = unsafe { libc::poll(&mut pfd, 1, ms) };
        if rc > 0 {
            return pfd.revents & libc::POLLIN != 0;
        }
        let interrupted = rc < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted;
        if !interrupted || left.is_zero() {
            assert!(rc >= 0, "poll: {}", std::io::Error::last_os_error());
            return false;
        }
    }
}

/// Takes one completion from `cq` by polling alone (no `poll_wait`: it would arm the CQ), within
/// [`WAIT`]: after a notification the entry may trail it by a hair on some devices.
fn poll_unarmed(cq: &CompletionQueue) -> WorkCompletion {
    let deadline = Instant::now() + WAIT;
    let mut out = [WorkCompletion::default(); 1];
    loop {
        if cq.poll(&mut out).expect("poll") == 1 {
            return out[0];
        }
        assert!(Instant::now() < deadline, "no completion within {WAIT:?}");
        std::thread::yield_now();
    }
}

/// Sends one SEND of 8 bytes from `client` and checks its completion on `send_cq`.
fn send_one(qp: &QueuePair, send_cq: &CompletionQueue, buf: &MemoryRegion, wr_id: u64, solicited: bool) {
    let sge = [buf.sge(0, 8)];
    let request = if solicited { wr(wr_id, SendOp::Send, &sge).solicited() } else { wr(wr_id, SendOp::Send, &sge) };
    qp.post_send(&request).expect("post SEND");
    assert_success(&poll_one(send_cq), wr_id, WcOpcode::Send, qp.qp_num());
}

/// An armed, empty CQ's descriptor is not readable; a SEND's receive makes it readable;
/// `take_notification` takes it (true) and clears it; a completion while not armed leaves it
/// clear; after a new `arm` the next completion makes it readable again.
pub fn cq_notify_fd_readable_after_an_armed_completion_until_taken(spec: &ProviderSpec) {
    let p = Pair::connect(spec);
    let cq = &p.server.cq;
    let rbuf = p.server.register(256, Access::LOCAL_WRITE);
    let sbuf = p.client.register(64, Access::NONE);
    for i in 0..3u64 {
        p.server_qp.post_recv(10 + i, &[rbuf.sge(i as usize * 64, 64)]).expect("post_recv");
    }
    let fd = cq.notify_fd().expect("notify_fd");
    cq.arm().expect("arm");
    assert_cq_empty(cq, "before any SEND");
    assert!(!readable(fd, Duration::ZERO), "readable while armed and empty");
    assert!(!cq.take_notification().expect("take_notification"), "a notification with no completion");

    send_one(&p.client_qp, &p.client.cq, &sbuf, 1, false);
    assert!(readable(fd, WAIT), "not readable within {WAIT:?} after a receive completed");
    assert!(cq.take_notification().expect("take_notification"), "readable, yet no notification to take");
    assert!(!readable(fd, Duration::ZERO), "still readable after take_notification");
    assert_success(&poll_unarmed(cq), 10, WcOpcode::Recv, p.server_qp.qp_num());

    // Not armed: the completion is queued and raises nothing.
    send_one(&p.client_qp, &p.client.cq, &sbuf, 2, false);
    assert_success(&poll_unarmed(cq), 11, WcOpcode::Recv, p.server_qp.qp_num());
    assert!(!readable(fd, Duration::ZERO), "readable for a completion that came while not armed");

    cq.arm().expect("arm again");
    assert!(!readable(fd, Duration::ZERO), "readable after re-arming with nothing new");
    send_one(&p.client_qp, &p.client.cq, &sbuf, 3, false);
    assert!(readable(fd, WAIT), "not readable within {WAIT:?} after re-arming");
    assert!(cq.take_notification().expect("take_notification"));
    assert_success(&poll_unarmed(cq), 12, WcOpcode::Recv, p.server_qp.qp_num());
    assert!(!readable(fd, Duration::ZERO), "still readable after the second take");
}

/// Armed for solicited completions, the descriptor stays clear for an unsolicited SEND's
/// receive (queued all the same) and turns readable for a solicited one's.
pub fn cq_notify_fd_follows_solicited_arming(spec: &ProviderSpec) {
    let p = Pair::connect(spec);
    let cq = &p.server.cq;
    let rbuf = p.server.register(128, Access::LOCAL_WRITE);
    let sbuf = p.client.register(64, Access::NONE);
    for i in 0..2u64 {
        p.server_qp.post_recv(20 + i, &[rbuf.sge(i as usize * 64, 64)]).expect("post_recv");
    }
    let fd = cq.notify_fd().expect("notify_fd");
    cq.arm_solicited().expect("arm for solicited completions");
    send_one(&p.client_qp, &p.client.cq, &sbuf, 1, false);
    assert_success(&poll_unarmed(cq), 20, WcOpcode::Recv, p.server_qp.qp_num());
    assert!(!readable(fd, Duration::ZERO), "readable for an unsolicited SEND");
    send_one(&p.client_qp, &p.client.cq, &sbuf, 2, true);
    assert!(readable(fd, WAIT), "not readable within {WAIT:?} for a solicited SEND");
    assert!(cq.take_notification().expect("take_notification"));
    assert_success(&poll_unarmed(cq), 21, WcOpcode::Recv, p.server_qp.qp_num());
}

/// The bytes the peer process answers with.
const REPLY: &[u8; 8] = b"peer-rep";

/// A peer in another process (on soft with the same-host path: a SEND it writes into this
/// process's inbox, with no NIC thread in between) makes the armed CQ's descriptor readable.
/// The SEND that asks it to answer completes on a CQ of its own, so only the peer's SEND can
/// raise the notification.
pub fn cq_notify_fd_wakes_for_a_peer_process(spec: &ProviderSpec) {
    if child::role().as_deref() == Some("replier") {
        return peer_replier(spec);
    }
    let path = format!("{}::cq_notify_fd_wakes_for_a_peer_process", spec.name);
    let mut peer = ChildProcess::spawn(&path, "replier", &[]);
    let addr: std::net::SocketAddr = peer.expect("addr", WAIT).parse().expect("an address");
    let client = Node::open(spec);
    let send_cq = client.fabric.create_cq(16).expect("create_cq");
    let init = QpInit { send_cq: &send_cq, ..client.qp_init() };
    let qp = client.events.connect(addr, &init, &[], WAIT).expect("connect");
    expect_established(&client.events, qp.conn_id());
    peer.expect("ready", WAIT);

    let rbuf = client.register(64, Access::LOCAL_WRITE);
    let sbuf = client.register(64, Access::NONE);
    qp.post_recv(7, &[rbuf.sge(0, 64)]).expect("post_recv");
    let fd = client.cq.notify_fd().expect("notify_fd");
    client.cq.arm().expect("arm");
    assert_cq_empty(&client.cq, "before asking the peer");
    assert!(!readable(fd, Duration::ZERO), "readable before the peer sent anything");
    send_one(&qp, &send_cq, &sbuf, 1, false);
    assert!(readable(fd, WAIT), "not readable within {WAIT:?} after the peer process's SEND");
    assert!(client.cq.take_notification().expect("take_notification"));
    assert!(!readable(fd, Duration::ZERO), "still readable after take_notification");
    let wc = poll_unarmed(&client.cq);
    assert_success(&wc, 7, WcOpcode::Recv, qp.qp_num());
    assert_eq!(read_mr(&rbuf, 0, REPLY.len()), REPLY, "the peer's answer");
}

/// Child role: accepts one connection, reports `ready` once it can receive, answers the first
/// SEND with [`REPLY`], then stays until the parent disconnects (or kills it).
fn peer_replier(spec: &ProviderSpec) {
    let server = Node::open(spec);
    let listener = server.events.listen(spec.listen_addr(), 4).expect("listen");
    child::report("addr", listener.local_addr());
    let req = expect_connect_request(&server.events);
    let conn = req.conn_id();
    let qp = req.accept(&server.qp_init(), &[]).expect("accept");
    let rbuf = server.register(64, Access::LOCAL_WRITE);
    qp.post_recv(1, &[rbuf.sge(0, 64)]).expect("post_recv");
    expect_established(&server.events, conn);
    child::report("ready", 1);
    assert_success(&poll_one(&server.cq), 1, WcOpcode::Recv, qp.qp_num());
    let sbuf = server.register(64, Access::NONE);
    sbuf.buffer().write(0, REPLY).expect("write");
    qp.post_send(&wr(2, SendOp::Send, &[sbuf.sge(0, REPLY.len())])).expect("post SEND");
    assert_success(&poll_one(&server.cq), 2, WcOpcode::Send, qp.qp_num());
    let deadline = Instant::now() + spec.child_timeout;
    while Instant::now() < deadline {
        if let Ok(Some(CmEvent::Disconnected { .. })) = server.events.get_event(WAIT) {
            return;
        }
    }
}
