//! Error paths of the reliable-connected data path: remote access errors, RNR, full queues,
//! local bounds, oversized SENDs, posting outside a connection, flush on disconnect.

use std::collections::BTreeSet;
use std::time::Duration;

use rdma_fabric::*;

use crate::common::child::{self, ChildProcess};
use crate::common::fabric::*;
use crate::common::provider::ProviderSpec;

/// Takes one completion and asserts it is `wr_id` failed with `status` on queue pair `qp_num`
/// (the opcode of an error completion is undefined in verbs, so it is not checked).
fn expect_failed(cq: &CompletionQueue, wr_id: u64, status: WcStatus, qp_num: u32) {
    let wc = poll_one(cq);
    assert_eq!((wc.wr_id, wc.status, wc.qp_num), (wr_id, status, qp_num), "completion {wc:?}");
}

/// Posts a READ of `len` bytes from `from` into `local[0..len]` and expects RemoteAccessError,
/// with the destination untouched.
fn read_expecting_access_error(p: &Pair, from: RemoteAddr, len: usize) {
    read_expecting_access_error_at_requester(p, from, len);
    assert_cq_empty(&p.server.cq, "the responder (no receive posted) reports nothing");
}

/// The requester's side of [`read_expecting_access_error`].
fn read_expecting_access_error_at_requester(p: &Pair, from: RemoteAddr, len: usize) {
    let local = p.client.register(len.max(64), Access::LOCAL_WRITE);
    local.buffer().fill(0, local.len(), 0xAB).expect("fill");
    p.client_qp.post_send(&wr(1, SendOp::RdmaRead(from), &[local.sge(0, len)])).expect("post READ");
    expect_failed(&p.client.cq, 1, WcStatus::RemoteAccessError, p.client_qp.qp_num());
    assert!(read_mr(&local, 0, local.len()).iter().all(|&b| b == 0xAB), "a refused READ changed the destination");
    assert_cq_empty(&p.client.cq, "after the error completion");
}

/// A READ with a forged rkey fails with RemoteAccessError and writes nothing.
pub fn read_with_forged_rkey(spec: &ProviderSpec) {
    let p = Pair::connect(spec);
    let remote = p.server.register(4096, Access::REMOTE_READ);
    remote.buffer().fill(0, 4096, 0x5C).expect("fill");
    let forged = RemoteAddr { addr: remote.addr(), rkey: remote.rkey() ^ 0x00A5_5A00 };
    assert_ne!(forged.rkey, remote.rkey());
    read_expecting_access_error(&p, forged, 256);
}

/// A remote access error moves the responder's queue pair to the error state, as a hardware
/// responder's: the receive it had posted is flushed, and so is a SEND it posts afterwards (or
/// the post is refused); the requester's queue pair is in error too, so a valid READ is flushed.
pub fn remote_access_error_fails_the_responders_queue_pair(spec: &ProviderSpec) {
    let p = Pair::connect(spec);
    let rbuf = p.server.register(64, Access::LOCAL_WRITE);
    p.server_qp.post_recv(7, &[rbuf.sge(0, 64)]).expect("post_recv");
    let remote = p.server.register(4096, Access::REMOTE_READ);
    let forged = RemoteAddr { addr: remote.addr(), rkey: remote.rkey() ^ 0x0050_0500 };
    read_expecting_access_error_at_requester(&p, forged, 64);
    expect_failed(&p.server.cq, 7, WcStatus::WorkRequestFlushed, p.server_qp.qp_num());

    let sbuf = p.server.register(8, Access::NONE);
    if p.server_qp.post_send(&wr(8, SendOp::Send, &[sbuf.sge(0, 8)])).is_ok() {
        expect_failed(&p.server.cq, 8, WcStatus::WorkRequestFlushed, p.server_qp.qp_num());
    }
    let local = p.client.register(64, Access::LOCAL_WRITE);
    if p.client_qp.post_send(&wr(2, SendOp::RdmaRead(remote.remote()), &[local.sge(0, 64)])).is_ok() {
        expect_failed(&p.client.cq, 2, WcStatus::WorkRequestFlushed, p.client_qp.qp_num());
    }
    assert!(read_mr(&local, 0, 64).iter().all(|&b| b == 0), "a flushed READ brought bytes");
}

/// A READ not inside the remote region fails with RemoteAccessError, to the byte: straddling
/// its end, entirely past it, starting before it. The region's length (1000) is not a page
/// multiple, so the check is the registered length, not the allocation.
pub fn read_out_of_bounds(spec: &ProviderSpec) {
    const LEN: u64 = 1000;
    for (what, offset, len) in
        [("straddling the end", LEN - 8, 16), ("past the end", LEN, 8), ("before the start", 0, 8)]
    {
        let p = Pair::connect(spec);
        let remote = p.server.register(LEN as usize, Access::REMOTE_READ);
        let from = if what == "before the start" {
            RemoteAddr { addr: remote.addr() - 8, rkey: remote.rkey() }
        } else {
            at(remote.remote(), offset)
        };
        eprintln!("READ {what}: [{:#x}, +{len}) of region {:?}", from.addr, remote);
        read_expecting_access_error(&p, from, len);
    }
}

/// A READ of a region registered without REMOTE_READ fails with RemoteAccessError.
pub fn read_without_remote_read(spec: &ProviderSpec) {
    let p = Pair::connect(spec);
    let remote = p.server.register(4096, Access::LOCAL_WRITE | Access::REMOTE_WRITE);
    read_expecting_access_error(&p, remote.remote(), 64);
}

/// A WRITE into a region registered without REMOTE_WRITE fails with RemoteAccessError and
/// changes nothing there.
pub fn write_without_remote_write(spec: &ProviderSpec) {
    let p = Pair::connect(spec);
    let remote = p.server.register(4096, Access::LOCAL_WRITE | Access::REMOTE_READ);
    let local = p.client.register(64, Access::NONE);
    local.buffer().fill(0, 64, 0x77).expect("fill");
    p.client_qp.post_send(&wr(2, SendOp::RdmaWrite(remote.remote()), &[local.sge(0, 64)])).expect("post WRITE");
    expect_failed(&p.client.cq, 2, WcStatus::RemoteAccessError, p.client_qp.qp_num());
    assert!(read_mr(&remote, 0, 4096).iter().all(|&b| b == 0), "a refused WRITE changed the region");
}

/// A READ of a region of another protection domain than the responder's queue pair fails.
pub fn read_of_region_in_another_pd(spec: &ProviderSpec) {
    let p = Pair::connect(spec);
    let other_pd = p.server.fabric.alloc_pd().expect("alloc_pd");
    let remote = other_pd.register(4096, Access::REMOTE_READ).expect("register");
    read_expecting_access_error(&p, remote.remote(), 64);
}

/// Isolation by protection domain, as on hardware: a queue pair of one protection domain
/// reaches no region of another domain of the same device, even with that region's real rkey.
/// A READ and a WRITE (each on a fresh connection) fail with a remote access error at the
/// requester, the responder's queue pair goes to the error state (its posted receive is
/// flushed), and no byte moves either way.
pub fn pd_isolation_fails_the_responders_queue_pair_and_moves_nothing(spec: &ProviderSpec) {
    for write in [false, true] {
        let p = Pair::connect(spec);
        let rbuf = p.server.register(64, Access::LOCAL_WRITE);
        p.server_qp.post_recv(7, &[rbuf.sge(0, 64)]).expect("post_recv");
        let other_pd = p.server.fabric.alloc_pd().expect("alloc_pd");
        let secret = other_pd
            .register(4096, Access::LOCAL_WRITE | Access::REMOTE_READ | Access::REMOTE_WRITE)
            .expect("register");
        secret.buffer().fill(0, 4096, 0x5E).expect("fill");
        let local = p.client.register(64, Access::LOCAL_WRITE);
        local.buffer().fill(0, 64, 0xAB).expect("fill");
        let op = if write { SendOp::RdmaWrite(secret.remote()) } else { SendOp::RdmaRead(secret.remote()) };
        p.client_qp.post_send(&wr(1, op, &[local.sge(0, 64)])).expect("post");
        expect_failed(&p.client.cq, 1, WcStatus::RemoteAccessError, p.client_qp.qp_num());
        expect_failed(&p.server.cq, 7, WcStatus::WorkRequestFlushed, p.server_qp.qp_num());
        assert!(read_mr(&local, 0, 64).iter().all(|&b| b == 0xAB), "write {write}: bytes reached the requester");
        assert!(
            read_mr(&secret, 0, 4096).iter().all(|&b| b == 0x5E),
            "write {write}: the other domain's region changed"
        );
        // The requester's queue pair is in error too: a valid READ of its own domain is flushed.
        let own = p.server.register(64, Access::REMOTE_READ);
        if p.client_qp.post_send(&wr(2, SendOp::RdmaRead(own.remote()), &[local.sge(0, 64)])).is_ok() {
            expect_failed(&p.client.cq, 2, WcStatus::WorkRequestFlushed, p.client_qp.qp_num());
        }
        assert!(read_mr(&local, 0, 64).iter().all(|&b| b == 0xAB), "a flushed READ brought bytes");
    }
}

/// Once the owner drops (deregisters) a region, READs with its old rkey fail.
pub fn read_after_remote_deregistered(spec: &ProviderSpec) {
    let p = Pair::connect(spec);
    let remote = p.server.register(4096, Access::REMOTE_READ);
    remote.buffer().fill(0, 4096, 0x3C).expect("fill");
    let addr = remote.remote();
    let local = p.client.register(64, Access::LOCAL_WRITE);
    p.client_qp.post_send(&wr(0, SendOp::RdmaRead(addr), &[local.sge(0, 64)])).expect("post READ");
    assert_success(&poll_one(&p.client.cq), 0, WcOpcode::RdmaRead, p.client_qp.qp_num());
    assert_eq!(read_mr(&local, 0, 64), [0x3C; 64]);
    drop(remote);
    read_expecting_access_error(&p, addr, 64);
}

/// A READ into a local region without LOCAL_WRITE is refused: at post time, or with a
/// LocalProtectionError completion; the region is not written either way.
pub fn read_into_region_without_local_write(spec: &ProviderSpec) {
    let p = Pair::connect(spec);
    let remote = p.server.register(4096, Access::REMOTE_READ);
    remote.buffer().fill(0, 4096, 0x99).expect("fill");
    let local = p.client.register(64, Access::NONE);
    match p.client_qp.post_send(&wr(3, SendOp::RdmaRead(remote.remote()), &[local.sge(0, 64)])) {
        Err(_) => assert_cq_empty(&p.client.cq, "a refused post"),
        Ok(()) => expect_failed(&p.client.cq, 3, WcStatus::LocalProtectionError, p.client_qp.qp_num()),
    }
    assert!(read_mr(&local, 0, 64).iter().all(|&b| b == 0), "the NIC wrote a region without LOCAL_WRITE");
}

/// A SEND to a peer that never posts a receive fails with RnrRetryExceeded after `rnr_retry`.
pub fn send_rnr_retry_exceeded(spec: &ProviderSpec) {
    let cfg =
        PairConfig { client_rnr_retry: 1, server_min_rnr_timer: Duration::from_millis(1), ..PairConfig::default() };
    let p = Pair::connect_with(spec, cfg);
    let sbuf = p.client.register(64, Access::NONE);
    p.client_qp.post_send(&wr(4, SendOp::Send, &[sbuf.sge(0, 32)])).expect("post SEND");
    expect_failed(&p.client.cq, 4, WcStatus::RnrRetryExceeded, p.client_qp.qp_num());
    assert_cq_empty(&p.server.cq, "no receive was posted");
}

/// With the first SEND stuck in RNR retries (infinite), the send queue fills: the request past
/// its depth is refused with `QueueFull`; disconnecting flushes every posted request.
pub fn send_queue_full_then_flushed(spec: &ProviderSpec) {
    const DEPTH: u32 = 8;
    let caps = QpCaps { max_send_wr: DEPTH, ..QpCaps::default() };
    let cfg = PairConfig { client_caps: caps, client_rnr_retry: RNR_RETRY_INFINITE, ..PairConfig::default() };
    let p = Pair::connect_with(spec, cfg);
    let sbuf = p.client.register(64, Access::NONE);
    let limit = 4 * DEPTH as u64 + 64;
    let mut posted = 0u64;
    let refusal = loop {
        assert!(posted < limit, "{posted} SENDs posted on a send queue of depth {DEPTH}, none refused");
        match p.client_qp.post_send(&wr(posted, SendOp::Send, &[sbuf.sge(0, 16)])) {
            Ok(()) => posted += 1,
            Err(e) => break e,
        }
    };
    match refusal {
        Error::QueueFull { queue, depth } => {
            assert_eq!(queue, "send queue");
            assert_eq!(u64::from(depth), posted, "the refusal reports the depth that was reached");
        }
        other => panic!("post past the send queue depth: expected QueueFull, got {other}"),
    }
    assert!(posted >= u64::from(DEPTH), "only {posted} of {DEPTH} fit");
    if spec.exact_queue_depth {
        assert_eq!(posted, u64::from(DEPTH));
    }
    assert_cq_empty(&p.client.cq, "SENDs stuck in RNR retries");

    p.client_qp.disconnect().expect("disconnect");
    let wcs = poll_n(&p.client.cq, posted as usize);
    let ids: BTreeSet<u64> = wcs.iter().map(|wc| wc.wr_id).collect();
    assert_eq!(ids, (0..posted).collect(), "every posted SEND completes once");
    for wc in &wcs {
        assert_eq!((wc.status, wc.qp_num), (WcStatus::WorkRequestFlushed, p.client_qp.qp_num()), "{wc:?}");
    }
    expect_disconnected_each(&[(&p.client.events, p.client_qp.conn_id()), (&p.server.events, p.server_qp.conn_id())]);
    assert_cq_empty(&p.server.cq, "no receive was posted");
}

/// The receive past the receive queue's depth is refused with `QueueFull`; once a receive
/// completes its slot can be posted again.
pub fn recv_queue_full(spec: &ProviderSpec) {
    const DEPTH: u32 = 8;
    let caps = QpCaps { max_recv_wr: DEPTH, ..QpCaps::default() };
    let p = Pair::connect_with(spec, PairConfig { server_caps: caps, ..PairConfig::default() });
    let rbuf = p.server.register(64, Access::LOCAL_WRITE);
    let limit = 4 * DEPTH as u64 + 64;
    let mut posted = 0u64;
    let refusal = loop {
        assert!(posted < limit, "{posted} receives posted on a receive queue of depth {DEPTH}, none refused");
        match p.server_qp.post_recv(posted, &[rbuf.sge(0, 64)]) {
            Ok(()) => posted += 1,
            Err(e) => break e,
        }
    };
    match refusal {
        Error::QueueFull { queue, depth } => {
            assert_eq!(queue, "receive queue");
            assert_eq!(u64::from(depth), posted);
        }
        other => panic!("post past the receive queue depth: expected QueueFull, got {other}"),
    }
    assert!(posted >= u64::from(DEPTH));
    if spec.exact_queue_depth {
        assert_eq!(posted, u64::from(DEPTH));
    }
    let sbuf = p.client.register(64, Access::NONE);
    p.client_qp.post_send(&wr(100, SendOp::Send, &[sbuf.sge(0, 8)])).expect("post SEND");
    assert_success(&poll_one(&p.server.cq), 0, WcOpcode::Recv, p.server_qp.qp_num());
    assert_success(&poll_one(&p.client.cq), 100, WcOpcode::Send, p.client_qp.qp_num());
    p.server_qp.post_recv(posted, &[rbuf.sge(0, 64)]).expect("a completed receive frees its slot");
}

/// An SGE outside its region is refused with `LocalBounds` (exact offset, length, region
/// length) on every verb, nothing is posted, and the queue pair keeps working.
pub fn local_sge_out_of_bounds(spec: &ProviderSpec) {
    let p = Pair::connect(spec);
    let remote = p.server.register(4096, Access::REMOTE_READ | Access::LOCAL_WRITE | Access::REMOTE_WRITE);
    let mr = p.client.register(64, Access::LOCAL_WRITE);
    let bounds = |r: Result<()>, offset: usize, len: usize, what: &str| match r {
        Err(Error::LocalBounds { offset: o, len: l, region_len }) => assert_eq!((o, l, region_len), (offset, len, 64)),
        other => panic!("{what} with an SGE [{offset}, +{len}) of a 64-byte region: {other:?}"),
    };
    bounds(p.client_qp.post_send(&wr(1, SendOp::Send, &[mr.sge(60, 8)])), 60, 8, "SEND");
    bounds(p.client_qp.post_send(&wr(2, SendOp::RdmaRead(remote.remote()), &[mr.sge(0, 65)])), 0, 65, "READ");
    bounds(p.client_qp.post_send(&wr(3, SendOp::RdmaWrite(remote.remote()), &[mr.sge(65, 0)])), 65, 0, "WRITE");
    bounds(
        p.client_qp.post_send(&wr(4, SendOp::Send, &[mr.sge(0, 8), mr.sge(usize::MAX, 2)])),
        usize::MAX,
        2,
        "SEND (second SGE overflowing)",
    );
    bounds(p.client_qp.post_recv(5, &[mr.sge(32, 33)]), 32, 33, "RECV");
    assert_cq_empty(&p.client.cq, "refused posts");

    p.client_qp.post_send(&wr(6, SendOp::RdmaWrite(remote.remote()), &[mr.sge(0, 64)])).expect("valid WRITE");
    assert_success(&poll_one(&p.client.cq), 6, WcOpcode::RdmaWrite, p.client_qp.qp_num());
}

/// A SEND larger than the posted receive fails: the sender gets a non-success completion; the
/// receive, if it completes, does not succeed (LocalLengthError in verbs).
pub fn send_larger_than_recv(spec: &ProviderSpec) {
    let p = Pair::connect(spec);
    let rbuf = p.server.register(64, Access::LOCAL_WRITE);
    rbuf.buffer().fill(0, 64, 0xEE).expect("fill");
    let sbuf = p.client.register(64, Access::NONE);
    p.server_qp.post_recv(1, &[rbuf.sge(0, 16)]).expect("post_recv");
    p.client_qp.post_send(&wr(2, SendOp::Send, &[sbuf.sge(0, 64)])).expect("post SEND");
    let wc = poll_one(&p.client.cq);
    assert_eq!((wc.wr_id, wc.qp_num), (2, p.client_qp.qp_num()));
    assert!(!wc.status.is_success(), "an oversized SEND succeeded: {wc:?}");
    let mut out = [WorkCompletion::default(); 4];
    let n = p.server.cq.poll_wait(&mut out, SPIN, QUIET).expect("poll_wait");
    for wc in &out[..n] {
        assert_eq!(wc.wr_id, 1);
        assert!(!wc.status.is_success(), "the too-small receive succeeded: {wc:?}");
    }
    assert!(read_mr(&rbuf, 16, 48).iter().all(|&b| b == 0xEE), "bytes past the receive were written");
}

/// A SEND posted before the connection is established is refused, or completes with an error
/// once the connection attempt fails (here: it is rejected).
pub fn post_before_established(spec: &ProviderSpec) {
    let client = Node::open(spec);
    let server = Node::open(spec);
    let listener = server.events.listen(spec.listen_addr(), 4).expect("listen");
    let qp = client.events.connect(listener.local_addr(), &client.qp_init(), &[], WAIT).expect("connect");
    let sbuf = client.register(64, Access::NONE);
    let posted = qp.post_send(&wr(1, SendOp::Send, &[sbuf.sge(0, 8)]));
    expect_connect_request(&server.events).reject(&[]).expect("reject");
    match next_event(&client.events, "Rejected") {
        CmEvent::Rejected { conn, .. } => assert_eq!(conn, qp.conn_id()),
        other => panic!("expected Rejected, got {other:?}"),
    }
    match posted {
        Err(_) => assert_cq_empty(&client.cq, "a refused post"),
        Ok(()) => {
            let wc = poll_one(&client.cq);
            assert_eq!(wc.wr_id, 1);
            assert!(!wc.status.is_success(), "a SEND on a never-established connection succeeded: {wc:?}");
        }
    }
}

/// After a disconnect, posting is refused or completes flushed.
pub fn post_after_disconnect(spec: &ProviderSpec) {
    let p = Pair::connect(spec);
    let buf = p.client.register(64, Access::LOCAL_WRITE);
    p.client_qp.disconnect().expect("disconnect");
    expect_disconnected_each(&[(&p.client.events, p.client_qp.conn_id()), (&p.server.events, p.server_qp.conn_id())]);
    let send = p.client_qp.post_send(&wr(1, SendOp::Send, &[buf.sge(0, 8)]));
    let recv = p.client_qp.post_recv(2, &[buf.sge(0, 64)]);
    let accepted: Vec<u64> = [(1, send.is_ok()), (2, recv.is_ok())].into_iter().filter(|x| x.1).map(|x| x.0).collect();
    let wcs = poll_n(&p.client.cq, accepted.len());
    for (wc, wr_id) in wcs.iter().zip(&accepted) {
        assert_eq!((wc.wr_id, wc.status), (*wr_id, WcStatus::WorkRequestFlushed), "{wc:?}");
    }
    assert_cq_empty(&p.client.cq, "after the flushed posts");
}

/// Disconnecting flushes every outstanding receive (WorkRequestFlushed, with the queue pair
/// number) and both sides get Disconnected; disconnect is idempotent; the passive side, after
/// its Disconnected event, disconnects too and its receives flush.
pub fn disconnect_flushes_and_notifies(spec: &ProviderSpec) {
    const N: u64 = 4;
    let p = Pair::connect(spec);
    let cbuf = p.client.register(4096, Access::LOCAL_WRITE);
    let sbuf = p.server.register(4096, Access::LOCAL_WRITE);
    for i in 0..N {
        p.client_qp.post_recv(i, &[cbuf.sge(64 * i as usize, 64)]).expect("post_recv");
        p.server_qp.post_recv(100 + i, &[sbuf.sge(64 * i as usize, 64)]).expect("post_recv");
    }
    assert_cq_empty(&p.client.cq, "receives wait");

    p.client_qp.disconnect().expect("disconnect");
    p.client_qp.disconnect().expect("a second disconnect");
    let flushed = |cq: &CompletionQueue, first: u64, qp_num: u32| {
        let wcs = poll_n(cq, N as usize);
        let ids: BTreeSet<u64> = wcs.iter().map(|wc| wc.wr_id).collect();
        assert_eq!(ids, (first..first + N).collect());
        for wc in &wcs {
            assert_eq!((wc.status, wc.qp_num), (WcStatus::WorkRequestFlushed, qp_num), "{wc:?}");
        }
    };
    flushed(&p.client.cq, 0, p.client_qp.qp_num());
    expect_disconnected_each(&[(&p.client.events, p.client_qp.conn_id()), (&p.server.events, p.server_qp.conn_id())]);
    p.server_qp.disconnect().expect("disconnect on the passive side");
    flushed(&p.server.cq, 100, p.server_qp.qp_num());
    assert_no_event(&p.client.events, "after Disconnected");
    assert_no_event(&p.server.events, "after Disconnected");
    assert_cq_empty(&p.client.cq, "after the flush");
    assert_cq_empty(&p.server.cq, "after the flush");
}

/// SENDs that completed at the sender before it disconnects were received: the receiver
/// finds their receives completed with their bytes, in order, and only its other receives
/// flushed (a completed SEND was acknowledged, so it was placed).
pub fn sends_completed_before_a_disconnect_are_received(spec: &ProviderSpec) {
    const SENT: u64 = 3;
    const POSTED: u64 = 5;
    let p = Pair::connect(spec);
    let rbuf = p.server.register(4096, Access::LOCAL_WRITE);
    for i in 0..POSTED {
        p.server_qp.post_recv(i, &[rbuf.sge(64 * i as usize, 64)]).expect("post_recv");
    }
    let sbuf = p.client.register(64, Access::NONE);
    for i in 0..SENT {
        sbuf.buffer().write(0, &pattern(16, i as u8)).expect("write");
        p.client_qp.post_send(&wr(10 + i, SendOp::Send, &[sbuf.sge(0, 16)])).expect("post SEND");
        assert_success(&poll_one(&p.client.cq), 10 + i, WcOpcode::Send, p.client_qp.qp_num());
    }
    p.client_qp.disconnect().expect("disconnect");
    expect_disconnected_each(&[(&p.client.events, p.client_qp.conn_id()), (&p.server.events, p.server_qp.conn_id())]);
    p.server_qp.disconnect().expect("disconnect on the passive side");
    let wcs = poll_n(&p.server.cq, POSTED as usize);
    for (i, wc) in wcs.iter().enumerate() {
        if (i as u64) < SENT {
            assert_success(wc, i as u64, WcOpcode::Recv, p.server_qp.qp_num());
            assert_eq!(read_mr(&rbuf, 64 * i, 16), pattern(16, i as u8), "receive {i}");
        } else {
            assert_eq!((wc.wr_id, wc.status), (i as u64, WcStatus::WorkRequestFlushed), "{wc:?}");
        }
    }
    assert_cq_empty(&p.server.cq, "after the flush");
}

/// Bytes of the region the killed responder exposes, and of each READ of it.
const KILLED_REGION: usize = 1 << 20;
const KILLED_READ: usize = 64 * 1024;
/// The byte the killed responder's region holds.
const KILLED_FILL: u8 = 0x77;

/// A responder process killed (SIGKILL) while the requester READs its region back to back:
/// the requester never faults (on the same-host path its mapping stays backed), every READ
/// completes with the region's bytes or fails, and the connection ends within a bound: a failed
/// completion, a refused post, or a `Disconnected` event (an RDMA device may keep retrying a
/// READ for a long time; the peer's CM tells of its end first).
pub fn read_from_a_peer_process_killed_mid_read(spec: &ProviderSpec) {
    if child::role().as_deref() == Some("responder") {
        return killed_responder(spec);
    }
    let path = format!("{}::read_from_a_peer_process_killed_mid_read", spec.name);
    let mut responder = ChildProcess::spawn(&path, "responder", &[]);
    let addr: std::net::SocketAddr = responder.expect("addr", WAIT).parse().expect("an address");
    let rkey: u32 = responder.expect("rkey", WAIT).parse().expect("an rkey");
    let base: u64 = responder.expect("base", WAIT).parse().expect("an address");
    let client = Node::open(spec);
    let qp = client.events.connect(addr, &client.qp_init(), &[], WAIT).expect("connect");
    expect_established(&client.events, qp.conn_id());
    assert_eq!(qp.data_path(), spec.data_path);
    let landing = client.register(KILLED_READ, Access::LOCAL_WRITE);
    let mut deadline = std::time::Instant::now() + WAIT;
    let mut reads = 0u64;
    loop {
        assert!(std::time::Instant::now() < deadline, "READs kept succeeding after the kill");
        let offset = (reads as usize * 4096) % (KILLED_REGION - KILLED_READ);
        let from = RemoteAddr { addr: base + offset as u64, rkey };
        if qp.post_send(&wr(reads, SendOp::RdmaRead(from), &[landing.sge(0, KILLED_READ)])).is_err() {
            break;
        }
        // The READ completes, or fails, or (an RDMA device that has not given up retrying
        // yet) the peer's end is reported as a disconnect.
        let wc = loop {
            if let Some(wc) = poll_up_to(&client.cq, 1, Duration::from_millis(50)).pop() {
                break Some(wc);
            }
            if let Ok(Some(CmEvent::Disconnected { .. })) = client.events.get_event(Duration::ZERO) {
                break None;
            }
            assert!(std::time::Instant::now() < deadline, "READ {reads}: no completion and no disconnect");
        };
        match wc {
            Some(wc) if wc.status == WcStatus::Success => {}
            _ => break,
        }
        assert!(
            read_mr(&landing, 0, KILLED_READ).iter().all(|&b| b == KILLED_FILL),
            "READ {reads} brought other bytes"
        );
        reads += 1;
        if reads == 50 {
            responder.kill();
            deadline = std::time::Instant::now() + spec.dead_peer_timeout + WAIT;
        }
    }
    assert!(reads >= 50, "the connection failed after {reads} READs, before the responder was killed");
}

/// Child role: a responder with a filled region, serving READs until it is killed.
fn killed_responder(spec: &ProviderSpec) {
    let server = Node::open(spec);
    let listener = server.events.listen(spec.listen_addr(), 4).expect("listen");
    let region = server.register(KILLED_REGION, Access::REMOTE_READ);
    region.buffer().fill(0, KILLED_REGION, KILLED_FILL).expect("fill");
    child::report("addr", listener.local_addr());
    child::report("rkey", region.remote().rkey);
    child::report("base", region.remote().addr);
    let req = expect_connect_request(&server.events);
    let _qp = req.accept(&server.qp_init(), &[]).expect("accept");
    // Alive until killed (bounded: the parent kills it after 50 READs).
    let deadline = std::time::Instant::now() + spec.child_timeout;
    while std::time::Instant::now() < deadline {
        let _ = server.events.get_event(WAIT);
    }
}
