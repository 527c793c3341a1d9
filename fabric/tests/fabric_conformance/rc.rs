//! Reliable-connected data path: SEND/RECV (with immediate, gathered), RDMA READ and WRITE,
//! signaled and unsignaled requests, many outstanding READs, a large READ.

use rdma_fabric::*;

use crate::common::fabric::*;
use crate::common::provider::ProviderSpec;

/// A SEND lands in the posted receive at its offset, nothing beyond; the receive completion
/// reports wr_id, Recv, the byte count, no immediate and the receiving queue pair.
pub fn rc_send_recv(spec: &ProviderSpec) {
    let p = Pair::connect(spec);
    let rbuf = p.server.register(256, Access::LOCAL_WRITE);
    rbuf.buffer().fill(0, 256, 0xEE).expect("fill");
    let sbuf = p.client.register(256, Access::NONE);
    let msg = pattern(100, 0x41);
    sbuf.buffer().write(8, &msg).expect("write");

    p.server_qp.post_recv(7, &[rbuf.sge(64, 128)]).expect("post_recv");
    p.client_qp.post_send(&wr(70, SendOp::Send, &[sbuf.sge(8, 100)])).expect("post SEND");

    let wc = poll_one(&p.server.cq);
    assert_success(&wc, 7, WcOpcode::Recv, p.server_qp.qp_num());
    assert_eq!((wc.byte_len, wc.imm), (100, None));
    assert_success(&poll_one(&p.client.cq), 70, WcOpcode::Send, p.client_qp.qp_num());
    assert_eq!(read_mr(&rbuf, 64, 100), msg);
    assert!(read_mr(&rbuf, 0, 64).iter().chain(&read_mr(&rbuf, 164, 92)).all(|&b| b == 0xEE), "bytes outside changed");

    // And the other way round, on the same connection.
    let back = pattern(33, 0x42);
    let rbuf2 = p.client.register(64, Access::LOCAL_WRITE);
    let sbuf2 = p.server.register(64, Access::NONE);
    sbuf2.buffer().write(0, &back).expect("write");
    p.client_qp.post_recv(8, &[rbuf2.sge(0, 64)]).expect("post_recv");
    p.server_qp.post_send(&wr(80, SendOp::Send, &[sbuf2.sge(0, 33)])).expect("post SEND");
    let wc = poll_one(&p.client.cq);
    assert_success(&wc, 8, WcOpcode::Recv, p.client_qp.qp_num());
    assert_eq!(wc.byte_len, 33);
    assert_eq!(read_mr(&rbuf2, 0, 33), back);
    assert_success(&poll_one(&p.server.cq), 80, WcOpcode::Send, p.server_qp.qp_num());
    assert_cq_empty(&p.client.cq, "client");
    assert_cq_empty(&p.server.cq, "server");
}

/// A SEND with immediate delivers the immediate in the receive completion; a plain SEND after
/// it carries none; a zero-length SEND with immediate works too.
pub fn rc_send_with_immediate(spec: &ProviderSpec) {
    let p = Pair::connect(spec);
    let rbuf = p.server.register(128, Access::LOCAL_WRITE);
    let sbuf = p.client.register(64, Access::NONE);
    sbuf.buffer().write(0, &pattern(40, 0x43)).expect("write");
    for i in 0..3 {
        p.server_qp.post_recv(i, &[rbuf.sge(0, 128)]).expect("post_recv");
    }
    p.client_qp.post_send(&wr(10, SendOp::SendWithImm(0xDEAD_BEEF), &[sbuf.sge(0, 40)])).expect("SEND imm");
    p.client_qp.post_send(&wr(11, SendOp::Send, &[sbuf.sge(0, 40)])).expect("SEND");
    p.client_qp.post_send(&wr(12, SendOp::SendWithImm(7), &[])).expect("SEND imm without data");

    let wcs = poll_n(&p.server.cq, 3);
    let expect = [(0, 40, Some(0xDEAD_BEEF)), (1, 40, None), (2, 0, Some(7))];
    for (wc, (wr_id, len, imm)) in wcs.iter().zip(expect) {
        assert_success(wc, wr_id, WcOpcode::Recv, p.server_qp.qp_num());
        assert_eq!((wc.byte_len, wc.imm), (len, imm), "{wc:?}");
    }
    assert_eq!(read_mr(&rbuf, 0, 40), pattern(40, 0x43));
    let sends = poll_n(&p.client.cq, 3);
    for (wc, wr_id) in sends.iter().zip(10..) {
        assert_success(wc, wr_id, WcOpcode::Send, p.client_qp.qp_num());
    }
}

/// A SEND gathers its SGEs in order; a receive scatters into its SGE.
pub fn rc_send_gathers_two_sges(spec: &ProviderSpec) {
    let p = Pair::connect(spec);
    let rbuf = p.server.register(4096, Access::LOCAL_WRITE);
    let a = p.client.register(100, Access::NONE);
    let b = p.client.register(300, Access::LOCAL_WRITE);
    a.buffer().write(0, &pattern(100, 1)).expect("write");
    b.buffer().write(0, &pattern(300, 2)).expect("write");
    p.server_qp.post_recv(1, &[rbuf.sge(1000, 3000)]).expect("post_recv");
    let sges = [a.sge(10, 90), b.sge(50, 250)];
    p.client_qp.post_send(&wr(2, SendOp::Send, &sges)).expect("post SEND");
    let wc = poll_one(&p.server.cq);
    assert_success(&wc, 1, WcOpcode::Recv, p.server_qp.qp_num());
    assert_eq!(wc.byte_len, 340);
    let mut expect = pattern(100, 1)[10..].to_vec();
    expect.extend_from_slice(&pattern(300, 2)[50..]);
    assert_eq!(read_mr(&rbuf, 1000, 340), expect);
    assert_success(&poll_one(&p.client.cq), 2, WcOpcode::Send, p.client_qp.qp_num());
}

/// An RDMA READ copies the remote range into the local SGE; the completion reports the length.
pub fn rc_rdma_read(spec: &ProviderSpec) {
    let p = Pair::connect(spec);
    let remote = p.server.register(8192, Access::REMOTE_READ);
    remote.buffer().write(0, &pattern(8192, 0x51)).expect("write");
    let local = p.client.register(4096, Access::LOCAL_WRITE);
    local.buffer().fill(0, 4096, 0xEE).expect("fill");
    let sge = [local.sge(100, 3000)];
    p.client_qp.post_send(&wr(5, SendOp::RdmaRead(at(remote.remote(), 5000)), &sge)).expect("post READ");
    let wc = poll_one(&p.client.cq);
    assert_success(&wc, 5, WcOpcode::RdmaRead, p.client_qp.qp_num());
    assert_eq!(wc.byte_len, 3000);
    assert_eq!(read_mr(&local, 100, 3000), pattern(8192, 0x51)[5000..8000]);
    assert!(read_mr(&local, 0, 100).iter().chain(&read_mr(&local, 3100, 996)).all(|&b| b == 0xEE));
    assert_cq_empty(&p.server.cq, "a READ completes only at the requester");
}

/// An RDMA WRITE lands in the peer's region at the given address once it completed.
pub fn rc_rdma_write(spec: &ProviderSpec) {
    let p = Pair::connect(spec);
    let remote = p.server.register(4096, Access::LOCAL_WRITE | Access::REMOTE_WRITE);
    remote.buffer().fill(0, 4096, 0xEE).expect("fill");
    let local = p.client.register(2048, Access::NONE);
    local.buffer().write(0, &pattern(2048, 0x61)).expect("write");
    let sge = [local.sge(48, 1500)];
    p.client_qp.post_send(&wr(6, SendOp::RdmaWrite(at(remote.remote(), 1024)), &sge)).expect("post WRITE");
    assert_success(&poll_one(&p.client.cq), 6, WcOpcode::RdmaWrite, p.client_qp.qp_num());
    assert_eq!(read_mr(&remote, 1024, 1500), pattern(2048, 0x61)[48..1548]);
    assert!(read_mr(&remote, 0, 1024).iter().chain(&read_mr(&remote, 2524, 1572)).all(|&b| b == 0xEE));
    assert_cq_empty(&p.server.cq, "a WRITE completes only at the requester");
}

/// Unsignaled requests that succeed produce no completion, yet execute; a later signaled one
/// completes (and, the send queue being ordered, proves the earlier ones done).
pub fn rc_unsignaled_success_has_no_completion(spec: &ProviderSpec) {
    let p = Pair::connect(spec);
    let remote = p.server.register(4096, Access::LOCAL_WRITE | Access::REMOTE_WRITE);
    let rbuf = p.server.register(64, Access::LOCAL_WRITE);
    let local = p.client.register(4096, Access::NONE);
    local.buffer().write(0, &pattern(4096, 0x71)).expect("write");
    p.server_qp.post_recv(1, &[rbuf.sge(0, 64)]).expect("post_recv");

    let first = [local.sge(0, 1000)];
    let send = [local.sge(0, 10)];
    let last = [local.sge(1000, 1000)];
    let unsignaled = |wr_id, op, sges| wr(wr_id, op, sges).unsignaled();
    p.client_qp.post_send(&unsignaled(1, SendOp::RdmaWrite(remote.remote()), &first)).expect("WRITE");
    p.client_qp.post_send(&unsignaled(2, SendOp::Send, &send)).expect("SEND");
    p.client_qp.post_send(&wr(3, SendOp::RdmaWrite(at(remote.remote(), 1000)), &last)).expect("WRITE");

    assert_success(&poll_one(&p.client.cq), 3, WcOpcode::RdmaWrite, p.client_qp.qp_num());
    assert_cq_empty(&p.client.cq, "unsignaled successes");
    assert_eq!(read_mr(&remote, 0, 2000), pattern(4096, 0x71)[..2000]);
    let wc = poll_one(&p.server.cq);
    assert_success(&wc, 1, WcOpcode::Recv, p.server_qp.qp_num());
    assert_eq!(wc.byte_len, 10);
}

/// Many READs outstanding at once all complete, in order, each with its own data.
pub fn rc_batched_reads(spec: &ProviderSpec) {
    const N: usize = 64;
    const LEN: usize = 1024;
    let p = Pair::connect(spec);
    let remote = p.server.register(N * LEN, Access::REMOTE_READ);
    let data = pattern(N * LEN, 0x81);
    remote.buffer().write(0, &data).expect("write");
    let local = p.client.register(N * LEN, Access::LOCAL_WRITE);
    for i in 0..N {
        // Read block i into slot N-1-i, so that a mixed-up request shows.
        let sge = [local.sge((N - 1 - i) * LEN, LEN)];
        let op = SendOp::RdmaRead(at(remote.remote(), (i * LEN) as u64));
        p.client_qp.post_send(&wr(i as u64, op, &sge)).expect("post READ");
    }
    let wcs = poll_n(&p.client.cq, N);
    for (i, wc) in wcs.iter().enumerate() {
        assert_success(wc, i as u64, WcOpcode::RdmaRead, p.client_qp.qp_num());
        assert_eq!(wc.byte_len, LEN as u32);
    }
    for i in 0..N {
        assert_eq!(read_mr(&local, (N - 1 - i) * LEN, LEN), data[i * LEN..(i + 1) * LEN], "block {i}");
    }
}

/// READs beyond the initiator depth wait in the send queue, and the WRITEs posted after them
/// wait too: each end grants 2 READs at once (its responder resources, below the peer's
/// initiator depth), each posts many more back to back, and every request completes, in post
/// order, with the right bytes. (A requester that sent them all at once would break the
/// responder's limit: the soft responder then cuts the connection.)
pub fn rc_reads_beyond_the_initiator_depth_wait_and_complete_in_order(spec: &ProviderSpec) {
    let client = Node::open(spec);
    let server = Node::open(spec);
    let listener = server.events.listen(spec.listen_addr(), 16).expect("listen");
    let init = |node| QpInit { responder_resources: 2, ..Node::qp_init(node) };
    assert!(client.qp_init().initiator_depth > 2, "each end asks for more than the other grants");
    let client_qp = client.events.connect(listener.local_addr(), &init(&client), &[], WAIT).expect("connect");
    let req = expect_connect_request(&server.events);
    let server_qp = req.accept(&init(&server), &[]).expect("accept");
    expect_established(&client.events, client_qp.conn_id());
    expect_established(&server.events, server_qp.conn_id());
    reads_and_writes_complete_in_order(&client_qp, &client, &server);
    reads_and_writes_complete_in_order(&server_qp, &server, &client);
}

/// Posts many READs (with a WRITE every fourth request) of `to`'s memory on `qp` of `from`, back
/// to back, and checks that they complete in post order with the right bytes.
pub(crate) fn reads_and_writes_complete_in_order(qp: &QueuePair, from: &Node, to: &Node) {
    const N: usize = 24;
    const LEN: usize = 256 << 10;
    const WRITE_LEN: usize = 64;
    let remote = to.register(N * LEN + N * WRITE_LEN, Access::LOCAL_WRITE | Access::REMOTE_READ | Access::REMOTE_WRITE);
    let data = pattern(N * LEN, 0x5d);
    remote.buffer().write(0, &data).expect("write");
    let local = from.register(N * LEN + WRITE_LEN, Access::LOCAL_WRITE);
    let written = pattern(WRITE_LEN, 0x17);
    local.buffer().write(N * LEN, &written).expect("write");
    let is_write = |i: usize| i % 4 == 3;
    for i in 0..N {
        let request = if is_write(i) {
            let dst = at(remote.remote(), (N * LEN + i * WRITE_LEN) as u64);
            qp.post_send(&wr(i as u64, SendOp::RdmaWrite(dst), &[local.sge(N * LEN, WRITE_LEN)]))
        } else {
            // Block i into slot N-1-i, so that a mixed-up request shows.
            let src = at(remote.remote(), (i * LEN) as u64);
            qp.post_send(&wr(i as u64, SendOp::RdmaRead(src), &[local.sge((N - 1 - i) * LEN, LEN)]))
        };
        request.unwrap_or_else(|e| panic!("post request {i}: {e}"));
    }
    for (i, wc) in poll_n(&from.cq, N).iter().enumerate() {
        let opcode = if is_write(i) { WcOpcode::RdmaWrite } else { WcOpcode::RdmaRead };
        assert_success(wc, i as u64, opcode, qp.qp_num());
    }
    for i in (0..N).filter(|&i| !is_write(i)) {
        assert!(read_mr(&local, (N - 1 - i) * LEN, LEN) == data[i * LEN..(i + 1) * LEN], "block {i}");
    }
    for i in (0..N).filter(|&i| is_write(i)) {
        assert_eq!(read_mr(&remote, N * LEN + i * WRITE_LEN, WRITE_LEN), written, "WRITE {i}");
    }
}

/// One READ of 1 MiB (many MTUs) arrives whole.
pub fn rc_read_one_mib(spec: &ProviderSpec) {
    const LEN: usize = 1 << 20;
    let p = Pair::connect(spec);
    let remote = p.server.register(LEN, Access::REMOTE_READ);
    let data = pattern(LEN, 0x91);
    remote.buffer().write(0, &data).expect("write");
    let local = p.client.register(LEN, Access::LOCAL_WRITE);
    p.client_qp.post_send(&wr(1, SendOp::RdmaRead(remote.remote()), &[local.sge(0, LEN)])).expect("post READ");
    let wc = poll_one(&p.client.cq);
    assert_success(&wc, 1, WcOpcode::RdmaRead, p.client_qp.qp_num());
    assert_eq!(wc.byte_len, LEN as u32);
    assert!(read_mr(&local, 0, LEN) == data, "1 MiB READ content differs");
}

/// Both ends of a connection report the data path the provider promises: shared memory for the
/// soft provider with its same-host path on (both ends are in this process), else the network.
pub fn rc_data_path_is_the_providers(spec: &ProviderSpec) {
    let p = Pair::connect(spec);
    assert_eq!(p.client_qp.data_path(), spec.data_path, "active side");
    assert_eq!(p.server_qp.data_path(), spec.data_path, "passive side");
}

/// Requests execute and complete in order whatever path they take: a READ posted behind a SEND
/// that waits for a receive (RNR, retried forever) executes only once that SEND is placed (it
/// reads what the responder wrote before posting the receive) and completes after it.
pub fn rc_read_behind_a_waiting_send_completes_after_it(spec: &ProviderSpec) {
    let cfg = PairConfig {
        // Both: librdmacm applies a side's value to the peer's SENDs, soft to its own.
        client_rnr_retry: RNR_RETRY_INFINITE,
        server_rnr_retry: RNR_RETRY_INFINITE,
        server_min_rnr_timer: std::time::Duration::from_millis(1),
        ..PairConfig::default()
    };
    let p = Pair::connect_with(spec, cfg);
    let remote = p.server.register(4096, Access::REMOTE_READ);
    remote.buffer().write(0, &pattern(64, 0x21)).expect("write");
    let sbuf = p.client.register(64, Access::NONE);
    let local = p.client.register(64, Access::LOCAL_WRITE);
    let rbuf = p.server.register(64, Access::LOCAL_WRITE);
    p.client_qp.post_send(&wr(1, SendOp::Send, &[sbuf.sge(0, 16)])).expect("post SEND");
    p.client_qp.post_send(&wr(2, SendOp::RdmaRead(remote.remote()), &[local.sge(0, 64)])).expect("post READ");
    let early = poll_up_to(&p.client.cq, 2, QUIET);
    assert!(early.is_empty(), "nothing completes while the SEND before the READ waits for a receive: {early:?}");
    remote.buffer().write(0, &pattern(64, 0x22)).expect("write");
    p.server_qp.post_recv(9, &[rbuf.sge(0, 64)]).expect("post_recv");
    let wcs = poll_n(&p.client.cq, 2);
    assert_success(&wcs[0], 1, WcOpcode::Send, p.client_qp.qp_num());
    assert_success(&wcs[1], 2, WcOpcode::RdmaRead, p.client_qp.qp_num());
    assert_eq!(read_mr(&local, 0, 64), pattern(64, 0x22), "the READ ran before the SEND ahead of it was placed");
}

/// SENDs of every size arrive in post order, whatever way each takes to the peer (a provider
/// may carry small and large SENDs differently): small, large, small, large, small.
pub fn rc_sends_of_every_size_arrive_in_post_order(spec: &ProviderSpec) {
    const SIZES: [usize; 5] = [8, 64 * 1024, 1, 20 * 1024, 0];
    let p = Pair::connect(spec);
    let slot = 64 * 1024;
    let rbuf = p.server.register(SIZES.len() * slot, Access::LOCAL_WRITE);
    for i in 0..SIZES.len() {
        p.server_qp.post_recv(i as u64, &[rbuf.sge(i * slot, slot)]).expect("post_recv");
    }
    let sbuf = p.client.register(SIZES.len() * slot, Access::NONE);
    for (i, &len) in SIZES.iter().enumerate() {
        sbuf.buffer().write(i * slot, &pattern(len, i as u8)).expect("write");
        let imm = SendOp::SendWithImm(100 + i as u32);
        p.client_qp.post_send(&wr(i as u64, imm, &[sbuf.sge(i * slot, len)])).expect("post SEND");
    }
    let wcs = poll_n(&p.server.cq, SIZES.len());
    for (i, (wc, &len)) in wcs.iter().zip(&SIZES).enumerate() {
        assert_success(wc, i as u64, WcOpcode::Recv, p.server_qp.qp_num());
        assert_eq!((wc.imm, wc.byte_len), (Some(100 + i as u32), len as u32), "receive {i}");
        assert_eq!(read_mr(&rbuf, i * slot, len), pattern(len, i as u8), "receive {i}");
    }
    let sent = poll_n(&p.client.cq, SIZES.len());
    let ids: Vec<u64> = sent.iter().map(|wc| wc.wr_id).collect();
    assert_eq!(ids, (0..SIZES.len() as u64).collect::<Vec<_>>(), "SENDs complete in post order");
}
