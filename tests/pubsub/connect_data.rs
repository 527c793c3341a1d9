//! Connect requests a publisher must refuse, with a reason.

use super::*;

#[test]
fn bad_private_data_is_rejected_with_a_reason_and_counted() {
    let pub_node = node();
    let _publisher = pub_node.publisher("guarded").create().unwrap();
    let config = FabricConfig { bind: bind_addr().ip(), ..FabricConfig::new(fabric_kind()) };
    let fabric = fabric::open(&config).unwrap();
    let pd = fabric.alloc_pd().unwrap();
    let cq = fabric.create_cq(64).unwrap();
    let channel = fabric.create_event_channel().unwrap();
    use rdma_wire::protocol::RejectCode;
    let cases: Vec<(Vec<u8>, RejectCode)> = vec![
        (vec![0xff; 40], RejectCode::VersionMismatch),
        (vec![PROTOCOL_VERSION, 0xff, 0xff, 0xff], RejectCode::Malformed),
        (vec![], RejectCode::Malformed),
        (
            ConnectData {
                topic: TopicId::of("nobody-publishes-this"),
                start: StartAt::Latest,
                accepts: PolicySet::ALL,
                node_id: 1,
                flags: ConnectFlags::WANTS_DOORBELLS,
                auth: rdma_wire::protocol::ConnectAuth::None,
            }
            .encode()
            .unwrap(),
            RejectCode::UnknownTopic,
        ),
    ];
    for (data, expected) in cases {
        let _qp = channel.connect(pub_node.local_addr(), &QpInit::new(&pd, &cq), &data, WAIT).unwrap();
        let deadline = Instant::now() + WAIT;
        let reject = loop {
            assert!(Instant::now() < deadline, "no answer to the connect");
            match channel.get_event(Duration::from_millis(100)).unwrap() {
                Some(CmEvent::Rejected { private_data, .. }) => break RejectData::decode(&private_data).unwrap(),
                Some(other) => panic!("expected a reject, got {other:?}"),
                None => {}
            }
        };
        assert_eq!(reject.reason, expected);
    }
    assert_eq!(pub_node.counters().rejected_connects(), 4);
}
