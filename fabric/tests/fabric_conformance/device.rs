//! Device, protection domain and memory registration.

use std::collections::HashSet;

use rdma_fabric::*;

use crate::common::fabric::{next_event, read_mr, Node, WAIT};
use crate::common::provider::ProviderSpec;

/// Every access combination a region may be registered with (REMOTE_WRITE needs LOCAL_WRITE).
fn access_combinations() -> [Access; 6] {
    [
        Access::NONE,
        Access::LOCAL_WRITE,
        Access::REMOTE_READ,
        Access::LOCAL_WRITE | Access::REMOTE_READ,
        Access::LOCAL_WRITE | Access::REMOTE_WRITE,
        Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ,
    ]
}

/// The device opens as the requested provider and reports limits the rest of the suite (and
/// the middleware) relies on; on soft the limits are the configured `SoftOptions`.
pub fn device_attributes(spec: &ProviderSpec) {
    let fabric = spec.open();
    assert_eq!(fabric.kind(), spec.kind);
    assert!(!fabric.device_name().is_empty(), "device name is empty");
    let a = fabric.attributes().clone();
    let caps = QpCaps::default();
    assert!(a.max_qp_wr >= caps.max_send_wr.max(caps.max_recv_wr), "max_qp_wr {a:?}");
    assert!(a.max_sge >= caps.max_send_sge.max(caps.max_recv_sge), "max_sge {a:?}");
    assert!(a.max_cqe >= crate::common::fabric::NODE_CQ_DEPTH, "max_cqe {a:?}");
    assert!(a.max_mr_size >= 1 << 20, "max_mr_size {a:?}");
    assert!(a.max_msg_size >= 1 << 20, "max_msg_size {a:?}");
    assert!(a.max_qp_rd_atom >= 1 && a.max_qp_init_rd_atom >= 1, "READ depths {a:?}");
    assert!(a.max_qp_rd_atom < u8::MAX && a.max_qp_init_rd_atom < u8::MAX, "READ depths {a:?}");
    assert!(DEFAULT_RD_ATOMIC <= a.max_qp_rd_atom.min(a.max_qp_init_rd_atom), "default READ depths fit {a:?}");
    assert!([256, 512, 1024, 2048, 4096].contains(&a.ud_mtu), "ud_mtu {a:?}");
    let pd = fabric.alloc_pd().expect("alloc_pd");
    assert_eq!(pd.fabric().attributes(), &a);
    let _second_pd = fabric.alloc_pd().expect("a second PD");

    if spec.kind == FabricKind::Soft {
        let (ud_mtu, max_qp_wr, max_cqe, max_srq_wr, max_mr_size) = (512, 300, 5000, 0, 1 << 24);
        let options = SoftOptions::default()
            .ud_mtu(ud_mtu)
            .max_qp_wr(max_qp_wr)
            .max_cqe(max_cqe)
            .max_srq_wr(max_srq_wr)
            .max_mr_size(max_mr_size);
        let fabric = open(&FabricConfig { soft: options, ..spec.config() }).expect("open soft with options");
        let a = fabric.attributes();
        assert_eq!(
            (a.ud_mtu, a.max_qp_wr, a.max_cqe, a.max_srq_wr, a.max_mr_size),
            (ud_mtu, max_qp_wr, max_cqe, max_srq_wr, max_mr_size),
            "soft attributes follow SoftOptions"
        );
        let pd = fabric.alloc_pd().expect("alloc_pd");
        assert!(matches!(pd.create_srq(1, 1), Err(Error::InvalidArgument { .. })), "no SRQ when max_srq_wr is 0");
        assert!(matches!(pd.register((1 << 24) + 1, Access::NONE), Err(Error::InvalidArgument { .. })));
    }
}

/// A region can be registered with every access combination; each reports its address, length,
/// access and keys, starts zeroed; lkeys, and the rkeys of regions with remote access, are
/// distinct across live regions, also across protection domains.
pub fn memory_regions_of_every_access(spec: &ProviderSpec) {
    let fabric = spec.open();
    let pds = [fabric.alloc_pd().expect("alloc_pd"), fabric.alloc_pd().expect("alloc_pd")];
    let mut mrs = Vec::new();
    for pd in &pds {
        for (i, access) in access_combinations().into_iter().enumerate() {
            let len = 1000 + 4096 * i;
            let mr = pd.register(len, access).unwrap_or_else(|e| panic!("register {access:?}: {e}"));
            assert_eq!(mr.len(), len);
            assert!(!mr.is_empty());
            assert_eq!(mr.access(), access);
            assert_ne!(mr.addr(), 0);
            assert_eq!(mr.addr() % rdma_fabric::BUFFER_ALIGN as u64, 0, "regions are page-aligned");
            assert_eq!(mr.remote(), RemoteAddr { addr: mr.addr(), rkey: mr.rkey() });
            assert_eq!(mr.buffer().len(), len);
            assert!(read_mr(&mr, 0, len).iter().all(|&b| b == 0), "a new region is zeroed");
            mr.buffer().write(len - 3, &[1, 2, 3]).expect("write");
            assert_eq!(read_mr(&mr, len - 3, 3), [1, 2, 3]);
            mrs.push(mr);
        }
    }
    // Only regions a peer may access need an rkey (Soft-RoCE gives the others rkey 0).
    let remote: Vec<&MemoryRegion> = mrs
        .iter()
        .filter(|m| m.access().contains(Access::REMOTE_READ) || m.access().contains(Access::REMOTE_WRITE))
        .collect();
    let rkeys: HashSet<u32> = remote.iter().map(|m| m.rkey()).collect();
    let lkeys: HashSet<u32> = mrs.iter().map(|m| m.lkey()).collect();
    assert_eq!(rkeys.len(), remote.len(), "rkeys of remotely accessible regions are distinct: {remote:?}");
    assert_eq!(lkeys.len(), mrs.len(), "lkeys are distinct: {mrs:?}");
    let addrs: HashSet<u64> = mrs.iter().map(|m| m.addr()).collect();
    assert_eq!(addrs.len(), mrs.len(), "regions do not overlap");

    let max = fabric.attributes().max_mr_size;
    if let Some(len) = max.checked_add(1).and_then(|l| usize::try_from(l).ok()) {
        assert!(
            matches!(pds[0].register(len, Access::NONE), Err(Error::InvalidArgument { .. })),
            "a region larger than max_mr_size is refused"
        );
    }
}

/// REMOTE_WRITE without LOCAL_WRITE is refused, as in verbs.
pub fn remote_write_requires_local_write(spec: &ProviderSpec) {
    let fabric = spec.open();
    let pd = fabric.alloc_pd().expect("alloc_pd");
    for access in [Access::REMOTE_WRITE, Access::REMOTE_WRITE | Access::REMOTE_READ] {
        match pd.register(64, access) {
            Err(Error::InvalidArgument { verb, .. }) => assert_eq!(verb, "register memory"),
            other => panic!("registering with {access:?} gave {other:?}"),
        }
    }
}

/// Objects of two opened devices are not mixed, as `ibv_create_qp` refuses objects of another
/// device context: a queue pair (made by hand, by connect or by accept) with the PD, a CQ or the
/// SRQ of another device, and a UD endpoint with the PD of another device, are refused with
/// [`Error::DeviceMismatch`] naming the object, before anything is created or sent.
pub fn objects_of_another_device_are_refused(spec: &ProviderSpec) {
    let (a, b) = (Node::open(spec), Node::open(spec));
    let expect = |result: Result<QueuePair>, verb: &str, object: &str| match result {
        Err(Error::DeviceMismatch { verb: v, object: o }) => assert_eq!((v, o), (verb, object)),
        other => panic!("{verb} with the {object} of another device gave {other:?}"),
    };
    let foreign_pd = QpInit::new(&b.pd, &a.cq);
    let foreign_send_cq = QpInit { send_cq: &b.cq, ..a.qp_init() };
    let foreign_recv_cq = QpInit { recv_cq: &b.cq, ..a.qp_init() };
    expect(a.fabric.create_qp(foreign_pd.clone()), "create_qp", "protection domain");
    expect(a.fabric.create_qp(foreign_send_cq), "create_qp", "completion queue");
    expect(a.fabric.create_qp(foreign_recv_cq), "create_qp", "completion queue");
    if a.fabric.attributes().max_srq_wr > 0 {
        let srq = b.pd.create_srq(4, 1).expect("create_srq");
        let foreign_srq = QpInit { srq: Some(&srq), ..a.qp_init() };
        expect(a.fabric.create_qp(foreign_srq), "create_qp", "shared receive queue");
    }

    // Connect and accept: `a` cannot connect with `b`'s PD; `b` cannot accept `a`'s request with
    // `a`'s CQ.
    let listener = b.events.listen(spec.listen_addr(), 8).expect("listen");
    let to = listener.local_addr();
    expect(a.events.connect(to, &foreign_pd, b"", WAIT), "connect", "protection domain");
    let client = a.events.connect(to, &a.qp_init(), b"", WAIT).expect("connect");
    let request = match next_event(&b.events, "the connect request") {
        CmEvent::ConnectRequest(request) => request,
        other => panic!("expected a connect request, got {other:?}"),
    };
    // A refused accept consumes the request; the connection then fails on the client's side.
    let foreign_to_b = QpInit { send_cq: &a.cq, ..b.qp_init() };
    expect(request.accept(&foreign_to_b, b""), "accept", "completion queue");
    drop(client);

    let init = UdInit {
        interface: spec.local_ip,
        port: spec.multicast("device_mismatch").port,
        unicast_port: 0,
        recv_depth: 4,
    };
    match a.fabric.create_ud(&b.pd, &init) {
        Err(Error::DeviceMismatch { verb: "create_ud", object: "protection domain" }) => {}
        Err(e) => panic!("create_ud with the PD of another device gave {e}"),
        Ok(_) => panic!("create_ud with the PD of another device succeeded"),
    }
}
