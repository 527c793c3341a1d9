//! Subscriptions finding publishers by themselves: before or after they exist, in the background, with explicit connects, and what they hear when a publisher leaves.

use super::*;

#[test]
fn subscribe_before_any_publisher_exists() {
    let d = domain(1);
    let sub_node = node_with(d.clone());
    let pub_node = node_with(d);
    let mut probe = Probe::new(&sub_node, "early", Start::Latest);
    probe.until("nothing yet", |p| p.messages.is_empty());
    let publisher = pub_node.publisher("early").create().unwrap();
    // The subscription is driven while the publisher waits for it.
    probe.until("the connection", |p| p.events.iter().any(|e| matches!(e, SubscriptionEvent::Connected(_))));
    wait_subscribers(&publisher, 1);
    publish_range(&publisher, 1..=100);
    probe.until("100 messages", |p| p.messages.len() >= 100);
    assert_eq!(probe.seqs_of(publisher.id()), (1..=100).collect::<Vec<_>>());
    assert_eq!(probe.sub.counters().reconnects(), 0);
}

#[test]
fn publish_before_subscribe() {
    let d = domain(2);
    let pub_node = node_with(d.clone());
    let publisher = pub_node.publisher("late-sub").create().unwrap();
    publish_range(&publisher, 1..=10);
    let sub_node = node_with(d);
    let mut probe = Probe::new(&sub_node, "late-sub", Start::Earliest);
    probe.until("the 10 retained messages", |p| p.messages.len() >= 10);
    wait_subscribers(&publisher, 1);
    publish_range(&publisher, 11..=20);
    probe.until("20 messages", |p| p.messages.len() >= 20);
    assert_eq!(probe.seqs_of(publisher.id()), (1..=20).collect::<Vec<_>>());
    // The subscriber's node knows the publisher's node and topic.
    let peer = sub_node.peers().into_iter().find(|p| p.node == pub_node.id()).expect("publisher's node known");
    assert_eq!(
        (peer.addr, peer.epoch, peer.topics),
        (pub_node.local_addr(), pub_node.epoch(), vec!["late-sub".into()])
    );
}

#[test]
fn a_publisher_joining_a_running_subscription_is_connected() {
    let d = domain(3);
    let (sub_node, a, b) = (node_with(d.clone()), node_with(d.clone()), node_with(d));
    let pa = a.publisher("joined").create().unwrap();
    let mut probe = Probe::new(&sub_node, "joined", Start::Latest);
    probe.until("the first publisher", |p| p.events.iter().any(|e| matches!(e, SubscriptionEvent::Connected(_))));
    wait_subscribers(&pa, 1);
    publish_range(&pa, 1..=50);
    probe.until("the first publisher's messages", |p| p.messages.len() >= 50);
    let pb = b.publisher("joined").create().unwrap();
    // The subscription connects while it is driven.
    probe.until("the second publisher", |p| p.sub.publishers().len() == 2);
    wait_subscribers(&pb, 1);
    publish_range(&pb, 1..=50);
    publish_range(&pa, 51..=100);
    probe.until("both publishers' messages", |p| p.messages.len() >= 150);
    assert_eq!(probe.seqs_of(pa.id()), (1..=100).collect::<Vec<_>>());
    assert_eq!(probe.seqs_of(pb.id()), (1..=50).collect::<Vec<_>>());
    assert_eq!(probe.sub.publishers().len(), 2);
}

/// A subscription connects in the background: its application calls nothing on it, yet the
/// publisher sees it, and what is published meanwhile (after the connection, `Start::Latest`)
/// is all there when the application starts receiving.
#[test]
fn a_subscription_connects_without_any_call_of_its_application() {
    let d = domain(19);
    let (sub_node, pub_node) = (node_with(d.clone()), node_with(d));
    let publisher = small_ring(&pub_node, "background").create().unwrap();
    let mut probe = Probe::new(&sub_node, "background", Start::Latest);
    wait_subscribers(&publisher, 1);
    publish_range(&publisher, 1..=20);
    probe.until("the 20 messages published before the first call", |p| p.messages.len() >= 20);
    assert_eq!(probe.seqs_of(publisher.id()), (1..=20).collect::<Vec<_>>());
    assert!(probe.events.iter().any(|e| matches!(e, SubscriptionEvent::Connected(_))), "{:?}", probe.events);
}

#[test]
fn explicit_connect_and_discovery_share_one_connection() {
    let d = domain(4);
    let (sub_node, pub_node) = (node_with(d.clone()), node_with(d));
    let publisher = pub_node.publisher("both").create().unwrap();
    let mut probe = Probe::new(&sub_node, "both", Start::Latest);
    let info = probe.sub.connect_wait(pub_node.local_addr(), WAIT).expect("connect");
    assert_eq!(info.id, publisher.id());
    // Give discovery time to sight the publisher too (several heartbeats).
    let until = Instant::now() + Duration::from_millis(600);
    probe.until("a few heartbeats", |_| Instant::now() >= until);
    assert_eq!(publisher.subscriber_count(), 1);
    publish_range(&publisher, 1..=20);
    probe.until("20 messages", |p| p.messages.len() >= 20);
    assert_eq!(probe.seqs_of(publisher.id()), (1..=20).collect::<Vec<_>>());
    assert_eq!(probe.sub.publishers().len(), 1);
}

#[test]
fn a_goodbye_is_reported_promptly() {
    // Heartbeats every 10 s: within the test's bounds only the goodbye can tell.
    let d = domain(5).heartbeat(Duration::from_secs(10));
    let (sub_node, pub_node) = (node_with(d.clone()), node_with(d));
    let publisher = pub_node.publisher("bye").create().unwrap();
    let mut probe = Probe::new(&sub_node, "bye", Start::Latest);
    probe.until("the connection", |p| p.events.iter().any(|e| matches!(e, SubscriptionEvent::Connected(_))));
    wait_subscribers(&publisher, 1);
    publish_range(&publisher, 1..=5);
    probe.until("5 messages", |p| p.messages.len() >= 5);
    let gone = pub_node.id();
    let started = Instant::now();
    drop(pub_node);
    probe.until("the goodbye", |p| p.lost(LostReason::Goodbye));
    assert!(started.elapsed() < Duration::from_secs(10), "reported after {:?}", started.elapsed());
    assert!(!sub_node.peers().iter().any(|p| p.node == gone));
    // The publisher outlives its node: its connected subscription keeps receiving.
    publish_range(&publisher, 6..=8);
    probe.until("3 more messages", |p| p.messages.len() >= 8);
    assert_eq!(probe.messages.iter().map(|m| m.seq).collect::<Vec<_>>(), (1..=8).collect::<Vec<_>>());
}

#[test]
fn a_silent_publisher_is_lost_then_resumed_in_the_same_epoch_without_duplicates() {
    let d = domain(6);
    let (sub_node, pub_node) = (node_with(d.clone()), node_with(d));
    let publisher = small_ring(&pub_node, "partition").policy(Policy::Block { timeout: WAIT }).create().unwrap();
    let mut probe = Probe::new(&sub_node, "partition", Start::Latest);
    probe.until("the connection", |p| p.events.iter().any(|e| matches!(e, SubscriptionEvent::Connected(_))));
    wait_subscribers(&publisher, 1);
    publish_range(&publisher, 1..=30);
    probe.until("30 messages", |p| p.messages.len() >= 30);
    // A UD partition: the subscriber's node hears no announcement at all.
    let faults = sub_node.fabric().faults().expect("soft fault injector");
    faults.set_ud_faults(UdFaults { drop: 1.0, ..Default::default() });
    probe.until("the silence", |p| p.lost(LostReason::Silent));
    // The subscription closed its connection; the publisher carries on.
    publish_range(&publisher, 31..=60);
    faults.set_ud_faults(UdFaults::default());
    probe.until("the resumed stream", |p| p.messages.len() >= 60);
    assert_eq!(probe.seqs_of(publisher.id()), (1..=60).collect::<Vec<_>>());
    probe.assert_no_duplicates();
    let counters = probe.sub.counters();
    assert_eq!(counters.reconnects(), 1);
    // Resumed from the earliest retained message: the first 30 were skipped, not delivered.
    assert_eq!(counters.duplicates(), 30);
    assert!(sub_node.discovery_counters().received() > 0);
}

/// A publisher that closes ends its stream; until discovery hears that its node no longer
/// announces the topic, the subscription may try to connect again, and that node refuses with
/// `UnknownTopic`. That refusal is the end already reported, not news: no `Rejected` event
/// follows `Ended`. (The subscriber's node hears no announcement after the end here, so the
/// retry always happens.)
#[test]
fn no_rejected_event_follows_the_end_of_a_stream() {
    if fabric_kind() != FabricKind::Soft {
        return; // the fault injector is the soft provider's
    }
    let d = domain(14).heartbeat(Duration::from_secs(5));
    let (sub_node, pub_node) = (node_with(d.clone()), node_with(d));
    let publisher = small_ring(&pub_node, "ends").create().unwrap();
    let mut probe = Probe::new(&sub_node, "ends", Start::Latest);
    probe.until("the connection", |p| p.events.iter().any(|e| matches!(e, SubscriptionEvent::Connected(_))));
    wait_subscribers(&publisher, 1);
    publish_range(&publisher, 1..=3);
    probe.until("3 messages", |p| p.messages.len() >= 3);
    let faults = sub_node.fabric().faults().expect("soft fault injector");
    faults.set_ud_faults(UdFaults { drop: 1.0, ..Default::default() });
    drop(publisher);
    probe.until("the end", |p| p.events.iter().any(|e| matches!(e, SubscriptionEvent::Ended { .. })));
    // The subscription tries its node again (after its retry delay) and is refused.
    let refused = || pub_node.counters().rejected_connects();
    probe.until("a refused reconnection", |_| refused() >= 1);
    // The refusal reaches the subscription's node within milliseconds: give its calls a few
    // rounds to handle it (an absence can only be checked over a window).
    let mut rounds = 0;
    probe.until("the refusal handled", |_| {
        rounds += 1;
        rounds > 25
    });
    let after_end = probe.events.iter().skip_while(|e| !matches!(e, SubscriptionEvent::Ended { .. }));
    let rejected: Vec<_> = after_end.filter(|e| matches!(e, SubscriptionEvent::Rejected { .. })).collect();
    assert!(rejected.is_empty(), "events after the end: {rejected:?}");
}

#[test]
fn nodes_with_discovery_leak_no_threads_or_descriptors() {
    if !common::isolate::in_child_process(
        "connecting::nodes_with_discovery_leak_no_threads_or_descriptors",
        Duration::from_secs(60),
    ) {
        return;
    }
    let d = domain(11);
    let warm = node_with(d.clone());
    drop(warm);
    let baseline = common::resources::Usage::now();
    for _ in 0..5 {
        let a = node_with(d.clone());
        let b = node_with(d.clone());
        let publisher = a.publisher("leak").create().unwrap();
        let mut probe = Probe::new(&b, "leak", Start::Latest);
        probe.until("the connection", |p| p.events.iter().any(|e| matches!(e, SubscriptionEvent::Connected(_))));
        wait_subscribers(&publisher, 1);
        drop((probe, publisher, a, b));
    }
    let after = common::resources::Usage::settle_to(baseline, Duration::from_secs(10));
    assert!(after.threads <= baseline.threads, "threads {} > {}", after.threads, baseline.threads);
    assert!(after.fds <= baseline.fds, "fds {} > {}", after.fds, baseline.fds);
}

#[test]
fn an_ended_stream_is_followed_by_no_spurious_rejection() {
    let d = domain(13);
    let sub_node = node_with(d.clone());
    let pub_node = node_with(d);
    let mut probe = Probe::new(&sub_node, "ends", Start::Earliest);
    let publisher = pub_node.publisher("ends").create().unwrap();
    probe.until("the connection", |p| p.events.iter().any(|e| matches!(e, SubscriptionEvent::Connected(_))));
    wait_subscribers(&publisher, 1);
    publish_range(&publisher, 1..=10);
    // The publisher goes (its drop waits for the subscriber to consume) while discovery may
    // still announce its topic for a moment.
    let ending = std::thread::spawn(move || drop(publisher));
    probe.until("the end of the stream", |p| p.events.iter().any(|e| matches!(e, SubscriptionEvent::Ended { .. })));
    ending.join().expect("dropping the publisher");
    // Drive the subscription for a while longer (discovery heartbeats, reconnect attempts).
    let watch_until = Instant::now() + Duration::from_millis(1500);
    probe.until("a quiet while", |_| Instant::now() >= watch_until);
    let spurious: Vec<_> = probe.events.iter().filter(|e| matches!(e, SubscriptionEvent::Rejected { .. })).collect();
    assert!(spurious.is_empty(), "events after the end: {:?}", probe.events);
    assert_eq!(probe.messages.len(), 10);
}
