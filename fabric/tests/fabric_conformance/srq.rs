//! Shared receive queues.

use std::collections::BTreeMap;

use rdma_fabric::*;

use crate::common::fabric::*;
use crate::common::provider::ProviderSpec;

/// Two queue pairs sharing one SRQ both receive from it, each completion naming its queue pair;
/// `post_recv` on a queue pair with an SRQ is refused. Devices without SRQ refuse `create_srq`.
pub fn srq_shared_by_two_queue_pairs(spec: &ProviderSpec) {
    let server = Node::open(spec);
    if server.fabric.attributes().max_srq_wr == 0 {
        assert!(matches!(server.pd.create_srq(4, 1), Err(Error::InvalidArgument { .. })));
        return;
    }
    let attrs = server.fabric.attributes().clone();
    for (wr, sge) in [(0, 1), (attrs.max_srq_wr + 1, 1), (4, 0), (4, attrs.max_sge + 1)] {
        assert!(
            matches!(server.pd.create_srq(wr, sge), Err(Error::InvalidArgument { .. })),
            "create_srq({wr}, {sge}) on {attrs:?}"
        );
    }
    let srq = server.pd.create_srq(16, 1).expect("create_srq");
    let listener = server.events.listen(spec.listen_addr(), 8).expect("listen");
    let clients = [Node::open(spec), Node::open(spec)];
    let mut pairs = Vec::new();
    for client in &clients {
        let client_qp = client.events.connect(listener.local_addr(), &client.qp_init(), &[], WAIT).expect("connect");
        let req = expect_connect_request(&server.events);
        let conn = req.conn_id();
        let init = QpInit { srq: Some(&srq), ..server.qp_init() };
        let server_qp = req.accept(&init, &[]).expect("accept with SRQ");
        expect_established(&client.events, client_qp.conn_id());
        expect_established(&server.events, conn);
        pairs.push((client_qp, server_qp));
    }
    let rbuf = server.register(4 * 128, Access::LOCAL_WRITE);
    assert!(pairs[0].1.post_recv(99, &[rbuf.sge(0, 128)]).is_err(), "post_recv on a queue pair with an SRQ");
    for i in 0..4u64 {
        srq.post_recv(i, &[rbuf.sge(128 * i as usize, 128)]).expect("srq post_recv");
    }
    let msgs = [pattern(50, 0xA1), pattern(70, 0xA2)];
    let sbufs: Vec<MemoryRegion> = clients.iter().map(|c| c.register(128, Access::NONE)).collect();
    for (k, ((client_qp, _), sbuf)) in pairs.iter().zip(&sbufs).enumerate() {
        sbuf.buffer().write(0, &msgs[k]).expect("write");
        client_qp.post_send(&wr(10 + k as u64, SendOp::Send, &[sbuf.sge(0, msgs[k].len())])).expect("post SEND");
    }
    let wcs = poll_n(&server.cq, 2);
    let by_qp: BTreeMap<u32, WorkCompletion> = wcs.iter().map(|wc| (wc.qp_num, *wc)).collect();
    for (k, (_, server_qp)) in pairs.iter().enumerate() {
        let wc = by_qp.get(&server_qp.qp_num()).unwrap_or_else(|| panic!("no receive on queue pair {k}: {wcs:?}"));
        assert_eq!((wc.status, wc.opcode, wc.byte_len), (WcStatus::Success, WcOpcode::Recv, msgs[k].len() as u32));
        assert!(wc.wr_id < 4, "{wc:?}");
        assert_eq!(read_mr(&rbuf, 128 * wc.wr_id as usize, msgs[k].len()), msgs[k], "queue pair {k}");
    }
    assert_ne!(wcs[0].wr_id, wcs[1].wr_id, "two receives consumed");
    for ((client_qp, _), (k, client)) in pairs.iter().zip(clients.iter().enumerate()) {
        assert_success(&poll_one(&client.cq), 10 + k as u64, WcOpcode::Send, client_qp.qp_num());
    }
}
