//! Discovery domains: numeric ids that never hear each other, and domain secrets that seal announcements.

use super::*;

#[test]
fn nodes_of_different_domains_never_see_each_other() {
    let base = domain(14);
    let in_domain = |d: u16| base.clone().domain(d);
    let pub_node = node_with(in_domain(1));
    let same = node_with(in_domain(1));
    let other = node_with(in_domain(0));
    let publisher = pub_node.publisher("one-name").create().unwrap();
    let mut same_probe = Probe::new(&same, "one-name", Start::Earliest);
    let mut other_probe = Probe::new(&other, "one-name", Start::Earliest);
    same_probe.until("the connection in the same domain", |p| {
        p.events.iter().any(|e| matches!(e, SubscriptionEvent::Connected(_)))
    });
    wait_subscribers(&publisher, 1);
    publish_range(&publisher, 1..=5);
    same_probe.until("5 messages", |p| p.messages.len() >= 5);
    // Five heartbeats later the other domain has heard of nobody.
    let quiet_until = Instant::now() + base.heartbeat_interval() * 5;
    other_probe.until("five heartbeats", |_| Instant::now() >= quiet_until);
    assert!(other_probe.events.is_empty() && other_probe.messages.is_empty(), "{:?}", other_probe.events);
    assert!(other.peers().is_empty(), "domain 0 sees {:?}", other.peers());
    assert_eq!(publisher.subscriber_count(), 1);
}

#[test]
fn an_announcement_of_another_domain_is_counted_and_dropped() {
    // Raw UDP on the group: soft only (the verbs run skips it).
    let d = domain(15);
    let other = node_with(d.clone());
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, 1));
    let topics = vec![("one-name".to_string(), TopicId::of("one-name"))];
    let foreign = Announcement::split(AnnounceKind::Hello, 7, 77, 1, addr, &topics, 1024).unwrap()[0].encode().unwrap();
    send_raw(&d, &[foreign]);
    let deadline = Instant::now() + WAIT;
    while other.discovery_counters().other_domain() == 0 {
        assert!(Instant::now() < deadline, "the foreign announcement was not counted");
        std::thread::yield_now();
    }
    assert!(other.peers().iter().all(|p| p.node != 77), "a node of domain 7 was admitted");
}

#[test]
fn a_domain_past_the_last_port_is_refused() {
    // Refused before anything is bound: the group and port are never used.
    let options = domain(15).port(65000).domain(1000);
    let err = Node::builder().fabric(fabric_kind()).bind(bind_addr()).discovery(options).build().err();
    assert!(matches!(err, Some(rdma_pubsub::Error::InvalidOption { option: "discovery domain", .. })), "{err:?}");
    assert_eq!(DiscoveryOptions::default().domain(3).domain_port(), DEFAULT_PORT + 3);
    assert_eq!(DiscoveryOptions::unicast(Vec::new()).domain(3).domain_port(), 0);
}

#[test]
fn nodes_sharing_a_domain_secret_find_each_other_and_no_one_else() {
    let d = domain(17);
    let sealed = d.clone().secret(test_secret(1));
    let pub_node = node_with(sealed);
    let publisher = small_ring(&pub_node, "sealed").create().unwrap();
    // The same secret given to the builder; no secret; another secret.
    let builder = Node::builder().fabric(fabric_kind()).bind(bind_addr()).discovery(d.clone());
    let sub_node = builder.domain_secret(test_secret(1)).build().expect("node");
    let plain = node_with(d.clone());
    let foreign = node_with(d.secret(test_secret(2)));
    let mut probe = Probe::new(&sub_node, "sealed", Start::Latest);
    probe.until("the connection", |p| p.events.iter().any(|e| matches!(e, SubscriptionEvent::Connected(_))));
    wait_subscribers(&publisher, 1);
    publish_range(&publisher, 1..=3);
    probe.until("3 messages", |p| p.messages.len() >= 3);
    // The others' datagrams are counted and dropped, both ways.
    let count = |node: &Node, of: fn(&rdma_pubsub::DiscoveryCounters) -> u64| of(node.discovery_counters());
    wait_until("the plain and foreign datagrams at the sealed node", || count(&pub_node, |c| c.unauthenticated()) >= 2);
    wait_until("sealed datagrams at the plain node", || count(&plain, |c| c.sealed_ignored()) >= 1);
    wait_until("datagrams at the foreign node", || count(&foreign, |c| c.unauthenticated()) >= 2);
    let ids = |node: &Node| node.peers().iter().map(|p| p.node).collect::<Vec<_>>();
    assert_eq!(ids(&pub_node), vec![sub_node.id()]);
    assert_eq!(ids(&sub_node), vec![pub_node.id()]);
    assert!(ids(&plain).iter().all(|&id| id != pub_node.id() && id != sub_node.id()), "{:?}", plain.peers());
    assert!(ids(&foreign).is_empty(), "{:?}", foreign.peers());
    assert_eq!(publisher.subscriber_count(), 1);
}

#[test]
fn a_secret_file_named_by_the_environment_seals_discovery_and_a_bad_one_fails_the_build() {
    // The variable is process-wide: alone in a child process.
    let path = "domains::a_secret_file_named_by_the_environment_seals_discovery_and_a_bad_one_fails_the_build";
    if !common::isolate::in_child_process(path, Duration::from_secs(60)) {
        return;
    }
    let dir = std::env::temp_dir().join(format!("rdma-pubsub-secret-env-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (good, short) = (dir.join("good"), dir.join("short"));
    std::fs::write(&good, [3u8; 24]).unwrap();
    std::fs::write(&short, b"short\n").unwrap();
    let d = domain(18);
    std::env::set_var(SECRET_FILE_ENV, &short);
    match Node::builder().fabric(fabric_kind()).bind(bind_addr()).discovery(d.clone()).build() {
        Err(rdma_pubsub::Error::InvalidOption { option: SECRET_FILE_ENV, detail }) => {
            assert!(detail.contains(&short.display().to_string()), "{detail}")
        }
        other => panic!("a secret file of 5 bytes: {other:?}"),
    }
    std::env::set_var(SECRET_FILE_ENV, &good);
    let from_env = node_with(d.clone());
    // A secret given explicitly wins over the file.
    let builder = Node::builder().fabric(fabric_kind()).bind(bind_addr()).discovery(d.clone());
    let explicit = builder.domain_secret(test_secret(4)).build().expect("node");
    std::env::remove_var(SECRET_FILE_ENV);
    let same = node_with(d.secret(test_secret(3)));
    wait_until("the node of the secret file", || same.peers().iter().any(|p| p.node == from_env.id()));
    wait_until("its datagrams refused by the other secret", || explicit.discovery_counters().unauthenticated() >= 2);
    assert!(explicit.peers().is_empty(), "{:?}", explicit.peers());
    std::fs::remove_dir_all(&dir).unwrap();
}
