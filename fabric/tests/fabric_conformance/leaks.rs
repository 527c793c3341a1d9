//! Resource leaks over many connections.

use rdma_fabric::*;

use crate::common::fabric::*;
use crate::common::isolate;
use crate::common::provider::ProviderSpec;
use crate::common::resources::Usage;

/// Resident memory a run may grow by after the warm-up.
const RSS_SLACK_KIB: u64 = 8 * 1024;

/// Mappings a run may grow by after the warm-up (the allocator maps arenas of its own).
const MAPPINGS_SLACK: usize = 16;

/// `spec.leak_cycles` connect / SEND / READ / disconnect cycles (a fresh queue pair each, a
/// receive posted, one SEND, one READ of a remote region) leave no file descriptor, thread,
/// mapping (the same-host path maps the peer's region per connection) or, beyond a small bound,
/// memory behind. Runs alone in a child process, since the counters are process-wide.
pub fn leak_connect_disconnect_cycles(spec: &ProviderSpec) {
    if !isolate::in_child_process(&format!("{}::leak_connect_disconnect_cycles", spec.name), spec.child_timeout) {
        return;
    }
    let client = Node::open(spec);
    let server = Node::open(spec);
    let listener = server.events.listen(spec.listen_addr(), 16).expect("listen");
    let rbuf = server.register(64, Access::LOCAL_WRITE);
    let sbuf = client.register(64, Access::NONE);
    let remote = server.register(4096, Access::REMOTE_READ);
    remote.buffer().write(0, &pattern(64, 0x5A)).expect("write");
    let landing = client.register(64, Access::LOCAL_WRITE);
    let cfg = PairConfig::default();

    let cycle = |i: usize| {
        sbuf.buffer().write(0, &(i as u64).to_le_bytes()).expect("write");
        let (client_qp, server_qp) = connect_nodes(&client, &server, listener.local_addr(), &cfg);
        server_qp.post_recv(i as u64, &[rbuf.sge(0, 64)]).expect("post_recv");
        client_qp.post_send(&wr(i as u64, SendOp::Send, &[sbuf.sge(0, 8)])).expect("post SEND");
        let wc = poll_one(&server.cq);
        assert_success(&wc, i as u64, WcOpcode::Recv, server_qp.qp_num());
        assert_eq!(read_mr(&rbuf, 0, 8), (i as u64).to_le_bytes());
        assert_success(&poll_one(&client.cq), i as u64, WcOpcode::Send, client_qp.qp_num());
        client_qp.post_send(&wr(i as u64, SendOp::RdmaRead(remote.remote()), &[landing.sge(0, 64)])).expect("READ");
        assert_success(&poll_one(&client.cq), i as u64, WcOpcode::RdmaRead, client_qp.qp_num());
        assert_eq!(read_mr(&landing, 0, 64), pattern(64, 0x5A));
        client_qp.disconnect().expect("disconnect");
        expect_disconnected_each(&[(&client.events, client_qp.conn_id()), (&server.events, server_qp.conn_id())]);
    };

    for i in 0..spec.leak_warmup {
        cycle(i);
    }
    let before = Usage::now();
    for i in spec.leak_warmup..spec.leak_cycles {
        cycle(i);
    }
    let after = Usage::settle_to(before, WAIT);
    eprintln!("{} cycles: {before:?} -> {after:?}", spec.leak_cycles);
    assert!(after.fds <= before.fds, "file descriptors grew: {before:?} -> {after:?}");
    assert!(after.threads <= before.threads, "threads grew: {before:?} -> {after:?}");
    assert!(after.mappings <= before.mappings + MAPPINGS_SLACK, "mappings grew: {before:?} -> {after:?}");
    assert!(after.rss_kib <= before.rss_kib + RSS_SLACK_KIB, "resident memory grew: {before:?} -> {after:?}");
}
