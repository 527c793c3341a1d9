//! Subscriptions by pattern (`node.subscriber("sensors/**")`) with discovery, on the soft
//! fabric over loopback: a pattern subscription reads every publisher, on any node of the
//! domain, whose topic the pattern includes (those there when it starts and those that come
//! later), none other, names each message's topic, lets go of each publisher that leaves,
//! keeps to its feed limit with an event, and is refused topic by topic where it lacks a
//! credential.
//!
//! `RDMA_PUBSUB_TEST_SAME_HOST=off` turns the same-host path off (`scripts/test.sh` runs this
//! suite both ways); `RDMA_PUBSUB_TEST_FABRIC=verbs` runs it on the verbs provider in the
//! Soft-RoCE guest (`scripts/verbs-vm-tests.sh`). Each test uses its own multicast group and port (distinct per test index
//! and per process). Every wait is bounded; the waits poll the subscription (which is how it
//! makes progress), never sleep to synchronise.

#[path = "common/nodes.rs"]
mod nodes;

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use rdma_pubsub::{
    DiscoveryOptions, Error, LostReason, Message, Node, Publisher, RejectCode, Secret, Start, Subscription,
    SubscriptionEvent,
};

const WAIT: Duration = Duration::from_secs(20);

/// The multicast group and port of test number `index` (distinct per test and per process, and
/// from those of `tests/discovery.rs`).
fn domain(index: u16) -> DiscoveryOptions {
    nodes::test_domain(197, 33000, 8, index)
}

/// A node of the provider under test in domain `d`, with the same-host setting under test
/// (soft).
fn node_in(d: &DiscoveryOptions) -> Node {
    Node::builder()
        .fabric(nodes::fabric_kind())
        .same_host(nodes::same_host_under_test())
        .bind(nodes::bind_addr())
        .discovery(d.clone())
        .build()
        .expect("node")
}

/// The publisher of `topic` on `node` with a 64 KiB ring.
fn publisher(node: &Node, topic: &str) -> Publisher {
    node.publisher(topic).ring_capacity(64 * 1024).create().expect("publisher")
}

/// A subscription driven by the test: everything it delivers is kept.
struct Probe {
    sub: Subscription,
    messages: Vec<Message>,
    events: Vec<SubscriptionEvent>,
    /// Refusals `recv` returned (while every publisher it knew had refused it).
    refusals: Vec<Error>,
}

impl Probe {
    fn new(sub: Subscription) -> Probe {
        Probe { sub, messages: Vec::new(), events: Vec::new(), refusals: Vec::new() }
    }

    /// Drives the subscription until `done` holds, failing after [`WAIT`].
    fn until(&mut self, what: &str, mut done: impl FnMut(&Probe) -> bool) {
        let deadline = Instant::now() + WAIT;
        while !done(self) {
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}; events: {:?}; topics of messages: {:?}",
                self.events,
                self.counts()
            );
            match self.sub.recv_timeout(Duration::from_millis(20)) {
                Ok(Some(m)) => self.messages.push(m),
                Ok(None) => {}
                Err(e @ Error::Rejected { .. }) => self.refusals.push(e),
                Err(e) => panic!("recv: {e}"),
            }
            while let Some(e) = self.sub.try_event() {
                self.events.push(e);
            }
        }
    }

    /// Messages delivered per topic.
    fn counts(&self) -> BTreeMap<String, usize> {
        let mut counts = BTreeMap::new();
        for m in &self.messages {
            *counts.entry(m.topic.to_string()).or_insert(0) += 1;
        }
        counts
    }

    /// Whether every topic of `topics` has delivered `n` messages.
    fn has(&self, topics: &[&str], n: usize) -> bool {
        let counts = self.counts();
        topics.iter().all(|t| counts.get(*t).copied().unwrap_or(0) >= n)
    }

    /// Whether discovery told that the publisher of `topic` left, for `reason`.
    fn left(&self, topic: &str, reason: LostReason) -> bool {
        self.events.iter().any(|e| {
            matches!(e, SubscriptionEvent::PublisherLost { topic: t, reason: r, .. } if t.as_str() == topic && *r == reason)
        })
    }
}

/// Waits (polling `probe`) until `p` has `n` subscribers, then publishes `count` messages whose
/// payload is the publisher's topic.
fn publish_topic(probe: &mut Probe, p: &Publisher, count: usize) {
    probe.until(&format!("a subscriber of {}", p.topic()), |_| p.subscriber_count() >= 1);
    for _ in 0..count {
        p.publish(p.topic().as_bytes()).expect("publish");
    }
}

/// Three nodes publish topics, some the pattern includes and some not, before and after the
/// subscription starts. It reads each matching one, each message naming its own topic (the
/// payload says which it is), none of the others, and is told when each matching publisher
/// leaves (withdrawn, then its node's goodbye), keeping to the others.
#[test]
fn a_pattern_subscription_follows_matching_publishers_on_three_nodes_as_they_come_and_go() {
    let d = domain(1);
    let (a, b, c) = (node_in(&d), node_in(&d), node_in(&d));
    // There before the subscription: one match on each of a and b, and topics it must not read.
    let a_temp = publisher(&a, "sensors/a/temp");
    let a_other = publisher(&a, "actuators/a");
    let b_temp = publisher(&b, "sensors/b/temp");
    let b_near = publisher(&b, "sensorsX/b");

    let sub = a.subscriber("sensors/**").start(Start::Earliest).create().expect("a pattern subscription");
    assert_eq!(sub.topic(), "sensors/**");
    let mut probe = Probe::new(sub);
    for p in [&a_temp, &b_temp] {
        publish_topic(&mut probe, p, 10);
    }
    // Later, on a third node: a match (`**` includes zero chunks) and two that are not.
    let c_root = publisher(&c, "sensors");
    let c_deep = publisher(&c, "other/sensors/c");
    let c_at = publisher(&c, "sensors/@private");
    publish_topic(&mut probe, &c_root, 10);
    probe.until("10 messages of each matching topic", |p| p.has(&["sensors/a/temp", "sensors/b/temp", "sensors"], 10));
    for p in [&a_other, &b_near, &c_deep, &c_at] {
        p.publish(p.topic().as_bytes()).expect("publish");
        assert_eq!(p.subscriber_count(), 0, "{} is not read by the pattern", p.topic());
    }
    for m in &probe.messages {
        assert_eq!(m.topic.as_str().as_bytes(), m.data.as_slice(), "each message names its own topic");
    }
    let topics: BTreeSet<String> = probe.sub.matched_topics().iter().map(|t| t.to_string()).collect();
    assert_eq!(topics, BTreeSet::from(["sensors".into(), "sensors/a/temp".into(), "sensors/b/temp".into()]));
    assert_eq!(probe.sub.counters().matched_topics(), 3);
    // Order is kept per publisher: each topic's messages come in sequence.
    for topic in ["sensors", "sensors/a/temp", "sensors/b/temp"] {
        let seqs: Vec<u64> = probe.messages.iter().filter(|m| m.topic.as_str() == topic).map(|m| m.seq).collect();
        assert_eq!(seqs, (1..=10).collect::<Vec<_>>(), "{topic}");
    }

    // c's publisher goes (withdrawn), then b's whole node (goodbye): the others go on.
    drop(c_root);
    probe.until("the withdrawal of sensors", |p| p.left("sensors", LostReason::Withdrawn));
    // The node goes first (its goodbye names its topics), its publishers after.
    drop(b);
    probe.until("the goodbye of b", |p| p.left("sensors/b/temp", LostReason::Goodbye));
    drop((b_temp, b_near));
    let before = probe.counts().get("sensors/a/temp").copied().unwrap_or(0);
    a_temp.publish(b"sensors/a/temp").expect("publish");
    probe.until("a's message after the others left", |p| p.has(&["sensors/a/temp"], before + 1));
    let topics: Vec<String> = probe.sub.matched_topics().iter().map(|t| t.to_string()).collect();
    assert_eq!(topics, ["sensors/a/temp"]);
    assert!(probe.messages.iter().all(|m| m.topic.as_str().as_bytes() == m.data.as_slice()));
    assert_eq!(probe.messages.len(), 31, "no message of a topic the pattern excludes: {:?}", probe.counts());
}

/// A pattern matching more publishers than the subscription's `max_feeds` reads that many, and
/// tells of each other one once (an event and a counter), without an error; when one it reads
/// leaves, it reads the one that waited.
#[test]
fn past_its_feed_limit_a_pattern_subscription_tells_of_each_publisher_it_does_not_read() {
    let d = domain(2);
    let (a, b) = (node_in(&d), node_in(&d));
    let publishers = [publisher(&a, "rooms/1"), publisher(&b, "rooms/2"), publisher(&b, "rooms/3")];
    let sub = a.subscriber("rooms/*").max_feeds(2).start(Start::Earliest).create().expect("subscription");
    let mut probe = Probe::new(sub);
    probe.until("a FeedLimit event", |p| p.events.iter().any(|e| matches!(e, SubscriptionEvent::FeedLimit { .. })));
    probe.until("two publishers read", |_| publishers.iter().filter(|p| p.subscriber_count() == 1).count() == 2);
    let limited: Vec<String> = probe
        .events
        .iter()
        .filter_map(|e| match e {
            SubscriptionEvent::FeedLimit { topic, limit, .. } => {
                assert_eq!(*limit, 2);
                Some(topic.to_string())
            }
            _ => None,
        })
        .collect();
    assert_eq!(limited.len(), 1, "told once: {limited:?}");
    let waiting = publishers.iter().position(|p| p.topic() == limited[0]).expect("a publisher of that topic");
    assert_eq!(publishers[waiting].subscriber_count(), 0);
    assert_eq!(probe.sub.counters().feed_limit_reached(), 1);
    for p in publishers.iter().filter(|p| p.subscriber_count() == 1) {
        p.publish(p.topic().as_bytes()).expect("publish");
    }
    probe.until("a message of each publisher read", |p| p.messages.len() == 2);

    // One it reads leaves: the one that waited is read.
    let mut slots: Vec<Option<Publisher>> = publishers.into_iter().map(Some).collect();
    let victim = (0..slots.len()).find(|&i| i != waiting).expect("another publisher");
    drop(slots[victim].take());
    let was_waiting = slots[waiting].as_ref().expect("the waiting publisher is kept");
    probe.until("the publisher that waited is read", |_| was_waiting.subscriber_count() == 1);
    was_waiting.publish(was_waiting.topic().as_bytes()).expect("publish");
    probe.until("its message", |p| p.messages.iter().any(|m| m.topic.as_str() == limited[0]));
    assert_eq!(probe.sub.counters().feed_limit_reached(), 1, "told once");
}

/// A pattern subscription with a credential reads the topics whose publisher takes it, and is
/// refused, topic by topic, by one that requires another: an event naming that topic, and the
/// other topics go on.
#[test]
fn a_pattern_subscription_is_refused_topic_by_topic_where_it_lacks_the_credential() {
    let d = domain(3);
    let (a, b) = (node_in(&d), node_in(&d));
    let ours = Secret::new(vec![7; 24]).expect("secret");
    let theirs = Secret::new(vec![9; 24]).expect("secret");
    let open = b.publisher("vault/open").ring_capacity(64 * 1024).credential(ours.clone()).create().unwrap();
    let _closed = b.publisher("vault/closed").ring_capacity(64 * 1024).credential(theirs).create().unwrap();
    let sub = a.subscriber("vault/*").credential(ours).start(Start::Earliest).create().expect("subscription");
    let mut probe = Probe::new(sub);
    probe.until("the refusal of vault/closed", |p| {
        p.events.iter().any(|e| {
            matches!(e, SubscriptionEvent::Rejected { topic, reason: RejectCode::Unauthorized, .. } if topic.as_str() == "vault/closed")
        })
    });
    publish_topic(&mut probe, &open, 3);
    probe.until("the messages of vault/open", |p| p.has(&["vault/open"], 3));
    assert!(probe.messages.iter().all(|m| m.topic.as_str() == "vault/open"));
    let refused_topics: BTreeSet<String> = probe
        .events
        .iter()
        .filter_map(|e| match e {
            SubscriptionEvent::Rejected { topic, .. } => Some(topic.to_string()),
            _ => None,
        })
        .collect();
    assert_eq!(refused_topics, BTreeSet::from(["vault/closed".to_owned()]));
    let unauthorized = |e: &Error| matches!(e, Error::Rejected { reason: RejectCode::Unauthorized, .. });
    assert!(probe.refusals.iter().all(unauthorized), "{:?}", probe.refusals);
}

/// A pattern with no way to find publishers (no discovery, no address to connect to) is refused
/// with an error saying what to do; a literal name with a wildcard-free form stays a topic.
#[test]
fn a_pattern_without_discovery_or_address_is_refused_and_says_why() {
    let node = nodes::soft_node_without_discovery();
    match node.subscriber("sensors/**/*").create() {
        // The pattern in canonical form, and what to do instead.
        Err(e) if matches!(&e, Error::PatternNeedsDiscovery { pattern, .. } if pattern == "sensors/*/**") => {
            let text = e.to_string();
            assert!(text.contains("SubscriberBuilder::connect") && text.contains("DiscoveryOptions::unicast"), "{e}")
        }
        other => panic!("a pattern without discovery: {other:?}"),
    }
    let d = domain(4);
    let with = node_in(&d);
    assert!(matches!(
        with.subscriber("sensors/*").auto_connect(false).create(),
        Err(Error::PatternNeedsDiscovery { .. })
    ));
    with.subscriber("sensors/*").connect(node.local_addr()).create().expect("given an address");
    let mut sub = with.subscriber("sensors/*").create().expect("with discovery");
    sub.connect(node.local_addr()).expect("a pattern connects to an address too");
    assert!(matches!(with.subscriber("sensors/a*").create(), Err(Error::InvalidTopic { .. })));
    assert!(matches!(with.subscriber("sensors").max_feeds(0).create(), Err(Error::InvalidOption { .. })));
}

/// A node of the provider under test without discovery, with the same-host setting under test.
fn node_without_discovery() -> Node {
    node_without_discovery_with(None)
}

/// Such a node, with `secret` as its domain secret.
fn node_without_discovery_with(secret: Option<Secret>) -> Node {
    let builder = Node::builder()
        .fabric(nodes::fabric_kind())
        .same_host(nodes::same_host_under_test())
        .bind(nodes::bind_addr())
        .discovery(DiscoveryOptions::disabled());
    match secret {
        Some(secret) => builder.domain_secret(secret),
        None => builder,
    }
    .build()
    .expect("node")
}

/// The topics the subscription reads publishers of now, as names.
fn matched(probe: &Probe) -> BTreeSet<String> {
    probe.sub.matched_topics().iter().map(|t| t.to_string()).collect()
}

/// Without discovery on either node, a pattern subscription connected to a node's address
/// reads every topic of that node the pattern includes and no other (the node lists its
/// topics); a publisher created there later is read too, one closed ends its stream and is no
/// longer matched, and a new publisher of that topic is read again.
#[test]
fn a_pattern_connected_to_a_node_address_reads_its_matching_topics_without_discovery() {
    let served = node_without_discovery();
    let first = publisher(&served, "plant/line-1/speed");
    let second = publisher(&served, "plant/line-2/speed");
    let other = publisher(&served, "office/speed");
    let reader = node_without_discovery();
    let sub = reader
        .subscriber("plant/**")
        .start(Start::Earliest)
        .connect(served.local_addr())
        .create()
        .expect("a pattern subscription connected to an address");
    let mut probe = Probe::new(sub);
    for p in [&first, &second] {
        publish_topic(&mut probe, p, 5);
    }
    other.publish(other.topic().as_bytes()).expect("publish");
    probe.until("both matching topics", |p| p.has(&["plant/line-1/speed", "plant/line-2/speed"], 5));
    assert_eq!(matched(&probe), BTreeSet::from(["plant/line-1/speed".into(), "plant/line-2/speed".into()]));
    assert_eq!(probe.sub.counters().matched_topics(), 2);
    assert_eq!(other.subscriber_count(), 0, "the topic the pattern does not include has no subscriber");

    // Created afterwards on that node: attached (the listing is READ again).
    let third = publisher(&served, "plant/line-3/speed");
    publish_topic(&mut probe, &third, 3);
    probe.until("the later topic", |p| p.has(&["plant/line-3/speed"], 3));

    // Closed: its stream ends, and it is no longer matched.
    let first_id = first.id();
    first.close(WAIT).expect("close");
    probe.until("the end of plant/line-1/speed", |p| {
        p.events.iter().any(|e| matches!(e, SubscriptionEvent::Ended { publisher, .. } if publisher.id == first_id))
    });
    probe.until("plant/line-1/speed no longer matched", |p| !matched(p).contains("plant/line-1/speed"));
    let before = probe.messages.len();
    second.publish(second.topic().as_bytes()).expect("publish");
    probe.until("the other topics go on", |p| p.messages.len() > before);

    // A new publisher of the closed topic is connected again, and read in full: it has the
    // same publisher id and node epoch as the closed one, and goes on after its sequences.
    let again = publisher(&served, "plant/line-1/speed");
    publish_topic(&mut probe, &again, 3);
    probe.until("the new publisher of plant/line-1/speed", |p| p.has(&["plant/line-1/speed"], 5 + 3));
    assert_eq!(probe.sub.counters().duplicates(), 0);
    for m in &probe.messages {
        assert_eq!(m.data, m.topic.as_str().as_bytes(), "each message names its own topic");
    }
    assert!(!probe.counts().contains_key("office/speed"), "{:?}", probe.counts());
    assert_eq!(probe.sub.counters().listing_failures(), 0);
}

/// Without discovery, a pattern connected to a node's address is refused topic by topic where
/// it lacks the credential (an event naming the topic), and reads the others; `connect_wait`
/// returns with the first publisher read.
#[test]
fn a_pattern_connected_to_an_address_is_refused_topic_by_topic_where_it_lacks_the_credential() {
    let served = node_without_discovery();
    let theirs = Secret::new(vec![9; 24]).expect("secret");
    let open = publisher(&served, "vault/open");
    let _closed = served.publisher("vault/closed").ring_capacity(64 * 1024).credential(theirs).create().unwrap();
    let reader = node_without_discovery();
    let addr = served.local_addr();
    let mut sub = reader.subscriber("vault/*").start(Start::Earliest).connect(addr).create().expect("subscription");
    let info = sub.connect_wait(served.local_addr(), WAIT).expect("the readable topic");
    assert_eq!(info.id, open.id());
    let mut probe = Probe::new(sub);
    probe.until("the refusal of vault/closed", |p| {
        p.events.iter().any(|e| {
            matches!(e, SubscriptionEvent::Rejected { topic, reason: RejectCode::Unauthorized, .. } if topic.as_str() == "vault/closed")
        })
    });
    publish_topic(&mut probe, &open, 3);
    probe.until("the messages of vault/open", |p| p.has(&["vault/open"], 3));
    assert!(probe.messages.iter().all(|m| m.topic.as_str() == "vault/open"));
}

/// Without discovery, a pattern connected to a node that lists more matching topics than its
/// `max_feeds` reads that many and tells of the other once; when one it reads closes, it reads
/// the one that waited.
#[test]
fn a_pattern_connected_to_an_address_keeps_to_its_feed_limit() {
    let served = node_without_discovery();
    let publishers = [publisher(&served, "rooms/1"), publisher(&served, "rooms/2")];
    let reader = node_without_discovery();
    let sub = reader.subscriber("rooms/*").max_feeds(1).connect(served.local_addr()).create().unwrap();
    let mut probe = Probe::new(sub);
    probe.until("a FeedLimit event", |p| p.events.iter().any(|e| matches!(e, SubscriptionEvent::FeedLimit { .. })));
    probe.until("one publisher read", |_| publishers.iter().any(|p| p.subscriber_count() == 1));
    let limited: Vec<String> = probe
        .events
        .iter()
        .filter_map(|e| match e {
            SubscriptionEvent::FeedLimit { topic, limit: 1, .. } => Some(topic.to_string()),
            _ => None,
        })
        .collect();
    assert_eq!(limited.len(), 1, "told once: {:?}", probe.events);
    assert_eq!(probe.sub.counters().feed_limit_reached(), 1);
    let [a, b] = publishers;
    let (read, waiting) = if a.topic() == limited[0] { (b, a) } else { (a, b) };
    assert_eq!(waiting.subscriber_count(), 0);
    read.close(WAIT).expect("close");
    publish_topic(&mut probe, &waiting, 1);
    probe.until("the publisher that waited", |p| p.has(&[limited[0].as_str()], 1));
    assert_eq!(probe.sub.counters().feed_limit_reached(), 1, "told once");
}

/// With a domain secret, a node's listing accept answers the subscriber's challenge under it:
/// a node of the same domain is read, one of another domain is not believed (the listing fails,
/// with an event and a count), and an address where no node listens fails too.
#[test]
fn a_listing_is_believed_only_from_a_node_of_the_domain() {
    let ours = Secret::new(vec![3; 24]).expect("secret");
    let theirs = Secret::new(vec![4; 24]).expect("secret");
    let served = node_without_discovery_with(Some(ours.clone()));
    let p = publisher(&served, "secure/a");
    let reader = node_without_discovery_with(Some(ours));
    let sub = reader.subscriber("secure/**").start(Start::Earliest).connect(served.local_addr()).create().unwrap();
    let mut probe = Probe::new(sub);
    publish_topic(&mut probe, &p, 2);
    probe.until("the messages of secure/a", |p| p.has(&["secure/a"], 2));

    let stranger = node_without_discovery_with(Some(theirs));
    let mut sub = stranger.subscriber("secure/**").connect(served.local_addr()).create().unwrap();
    let deadline = Instant::now() + WAIT;
    let failure = loop {
        assert!(Instant::now() < deadline, "timed out waiting for the listing to fail");
        // Once the listing failed, no publisher is left to connect: `NotConnected` at once.
        match sub.recv_timeout(Duration::from_millis(20)) {
            Ok(None) | Err(Error::NotConnected { .. }) => {}
            other => panic!("a subscription to a node of another domain: {other:?}"),
        }
        if let Some(SubscriptionEvent::ListingFailed { detail, .. }) = sub.try_event() {
            break detail;
        }
    };
    assert!(failure.contains("authenticate"), "{failure}");
    assert_eq!(sub.counters().listing_failures(), 1);
    assert_eq!(p.subscriber_count(), 1, "only the subscriber of the domain reads it");

    let nobody = {
        let gone = node_without_discovery();
        gone.local_addr()
    };
    let mut sub = reader.subscriber("secure/**").connect(nobody).create().expect("subscription");
    match sub.connect_wait(nobody, WAIT) {
        Err(Error::Unreachable { peer, .. }) => assert_eq!(peer, nobody),
        other => panic!("a listing where no node listens: {other:?}"),
    }
}

/// Without multicast, a pattern subscription on a node that lists another node's address
/// (unicast discovery) reads every topic of that node the pattern includes, and no other.
#[test]
fn a_pattern_reads_the_matching_topics_of_a_node_listed_by_address() {
    let unicast_node = |peers: Vec<std::net::SocketAddrV4>| {
        Node::builder()
            .fabric(nodes::fabric_kind())
            .same_host(nodes::same_host_under_test())
            .bind(nodes::bind_addr())
            .discovery(DiscoveryOptions::unicast(peers))
            .build()
            .expect("node")
    };
    let served = unicast_node(Vec::new());
    let listed = match served.discovery_addr() {
        Some(SocketAddr::V4(addr)) => addr,
        other => panic!("a unicast node has an IPv4 discovery address: {other:?}"),
    };
    let first = publisher(&served, "plant/line-1/speed");
    let second = publisher(&served, "plant/line-2/speed");
    let other = publisher(&served, "office/speed");
    let reader = unicast_node(vec![listed]);
    let mut probe = Probe::new(reader.subscriber("plant/**").create().expect("pattern subscription"));
    for p in [&first, &second] {
        publish_topic(&mut probe, p, 5);
    }
    other.publish(other.topic().as_bytes()).expect("publish");
    probe.until("both matching topics", |p| p.has(&["plant/line-1/speed", "plant/line-2/speed"], 5));
    for m in &probe.messages {
        assert_eq!(m.data, m.topic.as_str().as_bytes(), "each message names its own topic");
    }
    assert!(!probe.counts().contains_key("office/speed"), "{:?}", probe.counts());
    assert_eq!(other.subscriber_count(), 0, "the topic the pattern does not include has no subscriber");
}
