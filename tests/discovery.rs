//! Discovery on the soft fabric over loopback: subscriptions find publishers by themselves
//! (before or after they exist, and when one joins later), learn of a goodbye or a crash,
//! reconnect without duplicates (same epoch after a UD partition, new epoch after a restart),
//! work by unicast without multicast, survive junk datagrams, and handle topic lists split
//! across datagrams.
//!
//! Tests of one binary run in parallel: each uses its own multicast group and port (distinct
//! per test index and per process) so they never hear each other. Every wait is bounded; the
//! waits poll the subscription (which is how it makes progress), never sleep to synchronise.
//!
//! The provider-independent tests also run on the verbs provider inside the Soft-RoCE guest
//! (`scripts/verbs-vm-tests.sh`): `RDMA_PUBSUB_TEST_FABRIC=verbs` selects it and `RXE_IP` the
//! address; the script skips the soft-only ones (fault injection, raw UDP, unicast peers).
//!
//! A crash is a real one: the publisher runs in a child process (this test binary re-executed
//! on the ignored test `child_publisher`) that the test kills with SIGKILL, so its node sends no
//! goodbye and closes nothing in order.

mod common;

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use rdma_pubsub::fabric::UdFaults;
use rdma_pubsub::node::discovery::{DEFAULT_PORT, SECRET_FILE_ENV};
use rdma_pubsub::protocol::{AnnounceKind, Announcement, Secret, TopicId, PROTOCOL_VERSION};
use rdma_pubsub::{
    DiscoveryOptions, FabricKind, LostReason, Message, Node, Policy, Publisher, PublisherBuilder, Start, Subscription,
    SubscriptionEvent,
};

const WAIT: Duration = Duration::from_secs(20);

/// The multicast group and port of test number `index` (distinct per test and per process).
fn domain(index: u16) -> DiscoveryOptions {
    let pid = std::process::id();
    let port = 20000 + ((pid % 700) as u16 * 16 + index) % 12000;
    let group = Ipv4Addr::new(239, 193, (pid % 251) as u8, index as u8 + 1);
    DiscoveryOptions::default().group(group).port(port)
}

/// The provider under test: soft unless `RDMA_PUBSUB_TEST_FABRIC` says otherwise.
fn fabric_kind() -> FabricKind {
    std::env::var("RDMA_PUBSUB_TEST_FABRIC").ok().and_then(|v| v.parse().ok()).unwrap_or(FabricKind::Soft)
}

/// Loopback on soft; the rxe device's address (`RXE_IP`) on verbs.
fn bind_addr() -> SocketAddr {
    let ip = match fabric_kind() {
        FabricKind::Verbs => std::env::var("RXE_IP").unwrap_or_else(|_| "10.0.2.15".into()),
        _ => "127.0.0.1".into(),
    };
    SocketAddr::new(ip.parse().expect("RXE_IP is an IP address"), 0)
}

fn node_with(options: DiscoveryOptions) -> Node {
    Node::builder().fabric(fabric_kind()).bind(bind_addr()).discovery(options).build().expect("node")
}

/// The publisher of `topic` on `node` with a 64 KiB ring, to configure further or create.
fn small_ring<'n>(node: &'n Node, topic: &str) -> PublisherBuilder<'n> {
    node.publisher(topic).ring_capacity(64 * 1024)
}

/// A subscription driven by the test: everything it delivers is kept.
struct Probe {
    sub: Subscription,
    messages: Vec<Message>,
    events: Vec<SubscriptionEvent>,
}

impl Probe {
    fn new(node: &Node, topic: &str, start: Start) -> Probe {
        let sub = node.subscriber(topic).start(start).create().expect("subscribe");
        Probe { sub, messages: Vec::new(), events: Vec::new() }
    }

    /// Drives the subscription until `done` holds, failing after [`WAIT`].
    fn until(&mut self, what: &str, mut done: impl FnMut(&Probe) -> bool) {
        let deadline = Instant::now() + WAIT;
        while !done(self) {
            assert!(Instant::now() < deadline, "timed out waiting for {what}; events: {:?}", self.events);
            match self.sub.recv_timeout(Duration::from_millis(20)) {
                Ok(Some(m)) => self.messages.push(m),
                Ok(None) | Err(rdma_pubsub::Error::Closed(_)) => {}
                Err(e) => panic!("recv: {e}"),
            }
            while let Some(e) = self.sub.try_event() {
                self.events.push(e);
            }
        }
    }

    fn seqs_of(&self, publisher: u64) -> Vec<u64> {
        self.messages.iter().filter(|m| m.publisher.id == publisher).map(|m| m.seq).collect()
    }

    fn lost(&self, reason: LostReason) -> bool {
        self.events.iter().any(|e| matches!(e, SubscriptionEvent::PublisherLost { reason: r, .. } if *r == reason))
    }

    /// Every (publisher, epoch, seq) delivered at most once.
    fn assert_no_duplicates(&self) {
        let mut seen = HashSet::new();
        for m in &self.messages {
            assert!(seen.insert((m.publisher.id, m.publisher.epoch, m.seq)), "delivered twice: {:?}", m.publisher);
        }
    }
}

fn wait_subscribers(p: &Publisher, n: usize) {
    p.wait_for_subscribers(n, WAIT).unwrap_or_else(|e| panic!("{n} subscribers did not arrive: {e}"));
}

fn publish_range(p: &Publisher, seqs: std::ops::RangeInclusive<u64>) {
    for seq in seqs {
        assert_eq!(p.publish(&seq.to_le_bytes()).expect("publish"), seq);
    }
}

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
    assert_eq!(probe.sub.counters().reconnects.load(Ordering::Relaxed), 0);
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
    assert_eq!(counters.reconnects.load(Ordering::Relaxed), 1);
    // Resumed from the earliest retained message: the first 30 were skipped, not delivered.
    assert_eq!(counters.duplicates.load(Ordering::Relaxed), 30);
    assert!(sub_node.discovery_counters().received.load(Ordering::Relaxed) > 0);
}

#[test]
fn unicast_peers_discover_without_multicast() {
    // Multicast off: no group is joined or sent to; each node has its own port.
    let base = domain(7).multicast(false).port(0);
    let pub_node = node_with(base.clone());
    let to_v4 = |a: SocketAddr| match a {
        SocketAddr::V4(v4) => v4,
        other => panic!("IPv6 discovery address {other}"),
    };
    let pub_disc = to_v4(pub_node.discovery_addr().expect("discovery on"));
    // Only the subscriber lists the publisher: the publisher learns the subscriber from it.
    let sub_node = node_with(base.peers(vec![pub_disc]));
    assert_ne!(sub_node.discovery_addr(), pub_node.discovery_addr());
    let publisher = pub_node.publisher("uni").create().unwrap();
    let mut probe = Probe::new(&sub_node, "uni", Start::Latest);
    probe.until("the connection", |p| p.events.iter().any(|e| matches!(e, SubscriptionEvent::Connected(_))));
    wait_subscribers(&publisher, 1);
    publish_range(&publisher, 1..=20);
    probe.until("20 messages", |p| p.messages.len() >= 20);
    assert_eq!(probe.seqs_of(publisher.id()), (1..=20).collect::<Vec<_>>());
    let deadline = Instant::now() + WAIT;
    while !pub_node.peers().iter().any(|p| p.node == sub_node.id()) {
        assert!(Instant::now() < deadline, "the publisher's node never heard the subscriber's");
        std::thread::yield_now();
    }
}

/// Unicast only, on a fixed port: the node is heard at `interface:port`, so a peer (on another
/// host, say) can list it before it exists, without learning a port it picked.
#[test]
fn a_unicast_node_on_a_fixed_port_is_heard_there() {
    if fabric_kind() != FabricKind::Soft {
        return; // verbs addresses a UD endpoint by its queue pair number
    }
    let d = domain(13);
    let fixed = d.clone().multicast(false);
    let pub_node = node_with(fixed.clone());
    let at = SocketAddrV4::new(Ipv4Addr::LOCALHOST, fixed.domain_port());
    assert_eq!(pub_node.discovery_addr(), Some(SocketAddr::V4(at)), "the endpoint is on the fixed port");
    let sub_node = node_with(d.multicast(false).port(0).peers(vec![at]));
    let publisher = pub_node.publisher("fixed-port").create().unwrap();
    let mut probe = Probe::new(&sub_node, "fixed-port", Start::Latest);
    probe.until("the connection", |p| p.events.iter().any(|e| matches!(e, SubscriptionEvent::Connected(_))));
    wait_subscribers(&publisher, 1);
    publish_range(&publisher, 1..=5);
    probe.until("5 messages", |p| p.messages.len() >= 5);
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
    let refused = || pub_node.counters().rejected_connects.load(Ordering::Relaxed);
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

/// Sends raw bytes to a test's group from loopback.
fn send_raw(d: &DiscoveryOptions, payloads: &[Vec<u8>]) {
    let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::DGRAM, None).expect("socket");
    sock.bind(&SocketAddr::from((Ipv4Addr::LOCALHOST, 0)).into()).expect("bind");
    // Multicast only via loopback.
    sock.set_multicast_if_v4(&Ipv4Addr::LOCALHOST).expect("IP_MULTICAST_IF");
    let sock: UdpSocket = sock.into();
    for p in payloads {
        sock.send_to(p, d.group_addr()).expect("send junk");
    }
}

#[test]
fn junk_datagrams_are_counted_and_dropped() {
    let d = domain(8);
    let sub_node = node_with(d.clone());
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, 1));
    let topics = vec![("junk".to_string(), TopicId::of("junk"))];
    let valid = Announcement::split(AnnounceKind::Hello, 0, 42, 1, addr, &topics, 1024).unwrap()[0].encode().unwrap();
    let mut future = valid.clone();
    future[0] = PROTOCOL_VERSION + 1;
    let mut wrong_id = Announcement::split(AnnounceKind::Hello, 0, 43, 1, addr, &topics, 1024).unwrap();
    wrong_id[0].topics[0].1 = TopicId(7);
    let junk = vec![
        Vec::new(),
        vec![0xff; 700],
        future,
        valid[..valid.len() - 3].to_vec(),
        wrong_id[0].encode().unwrap(),
        (0..1000u32).map(|i| (i * 7919 % 251) as u8).collect(),
    ];
    send_raw(&d, &junk);
    let deadline = Instant::now() + WAIT;
    while sub_node.discovery_counters().bad_datagrams.load(Ordering::Relaxed) < junk.len() as u64 {
        assert!(Instant::now() < deadline, "junk not counted: {:?}", sub_node.counters());
        std::thread::yield_now();
    }
    assert!(sub_node.peers().is_empty(), "junk created a peer: {:?}", sub_node.peers());
    // Discovery still works.
    let pub_node = node_with(d);
    let publisher = pub_node.publisher("after-junk").create().unwrap();
    let mut probe = Probe::new(&sub_node, "after-junk", Start::Latest);
    probe.until("the connection", |p| p.events.iter().any(|e| matches!(e, SubscriptionEvent::Connected(_))));
    wait_subscribers(&publisher, 1);
    publish_range(&publisher, 1..=3);
    probe.until("3 messages", |p| p.messages.len() >= 3);
}

#[test]
fn many_topics_are_split_across_datagrams() {
    let d = domain(9);
    let names: Vec<String> = (0..40).map(|i| format!("topic-{i:02}-{}", "x".repeat(50))).collect();
    let listed: Vec<(String, TopicId)> = names.iter().map(|n| (n.clone(), TopicId::of(n))).collect();
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, 1));
    let parts = Announcement::split(AnnounceKind::Hello, 0, 1, 1, addr, &listed, 1024).unwrap();
    assert!(parts.len() >= 3, "{} parts", parts.len());
    let pub_node = node_with(d.clone());
    let publishers: Vec<Publisher> = names.iter().map(|n| small_ring(&pub_node, n).create().unwrap()).collect();
    let sub_node = node_with(d);
    let deadline = Instant::now() + WAIT;
    loop {
        let topics = sub_node.peers().into_iter().find(|p| p.node == pub_node.id()).map(|p| p.topics);
        if topics.as_ref() == Some(&names) {
            break;
        }
        assert!(Instant::now() < deadline, "topics heard: {topics:?}");
        std::thread::yield_now();
    }
    // A topic of the last part is connected to.
    let last = publishers.last().unwrap();
    let mut probe = Probe::new(&sub_node, last.topic(), Start::Latest);
    probe.until("the connection", |p| p.events.iter().any(|e| matches!(e, SubscriptionEvent::Connected(_))));
    wait_subscribers(last, 1);
    publish_range(last, 1..=3);
    probe.until("3 messages", |p| p.messages.len() >= 3);
}

/// Env of the child publisher: its discovery group/port, node id and topic.
const CHILD_ENV: &str = "RDMA_PUBSUB_DISCOVERY_CHILD";

/// Runs `child_publisher` in a child process with node id `id`.
fn spawn_publisher(d: &DiscoveryOptions, id: u64, topic: &str, count: u64) -> Child {
    Command::new(std::env::current_exe().expect("current_exe"))
        .args(["child_publisher", "--exact", "--ignored", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, format!("{} {} {id} {topic} {count}", d.group_addr().ip(), d.group_addr().port()))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn the child publisher")
}

/// Kills a child (SIGKILL: no goodbye, nothing closed in order) and reaps it.
struct Killed(Child);
impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Child process: a node with fixed id publishing `count` messages once a subscriber is
/// connected, then waiting (up to 60 s) to be killed or for its stdin to close.
#[test]
#[ignore = "runs in a child process of a_crashed_publisher_is_detected_and_its_restart_reconnected"]
fn child_publisher() {
    let Ok(spec) = std::env::var(CHILD_ENV) else { return };
    let f: Vec<&str> = spec.split(' ').collect();
    let d = DiscoveryOptions::default().group(f[0].parse().unwrap()).port(f[1].parse().unwrap());
    let node = Node::builder()
        .fabric(fabric_kind())
        .bind(bind_addr())
        .discovery(d)
        .node_id(f[2].parse().unwrap())
        .build()
        .expect("child node");
    let publisher = node.publisher(f[3]).create().unwrap();
    wait_subscribers(&publisher, 1);
    publish_range(&publisher, 1..=f[4].parse().unwrap());
    println!("published");
    // Until killed: stdin stays open while the parent lives.
    let mut line = String::new();
    let _ = std::io::stdin().read_line(&mut line);
}

/// Waits for the child's "published" line.
fn wait_published(child: &mut Child) {
    let out = child.stdout.take().expect("child stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if line.contains("published") {
                let _ = tx.send(());
            }
        }
    });
    rx.recv_timeout(WAIT).expect("the child did not publish");
}

#[test]
fn a_crashed_publisher_is_detected_and_its_restart_reconnected() {
    let d = domain(10);
    let sub_node = node_with(d.clone());
    let id: u64 = 0x5eed_0000_0000_0000 | u64::from(std::process::id());
    let mut probe = Probe::new(&sub_node, "crashy", Start::Latest);
    let mut first = Killed(spawn_publisher(&d, id, "crashy", 50));
    probe.until("50 messages of the first incarnation", |p| p.messages.len() >= 50);
    wait_published(&mut first.0);
    let epoch1 = probe.messages[0].publisher.epoch;
    drop(first); // SIGKILL
    probe
        .until("the connection loss", |p| p.events.iter().any(|e| matches!(e, SubscriptionEvent::Disconnected { .. })));
    probe.until("the missed heartbeats", |p| p.lost(LostReason::Silent));
    let second = Killed(spawn_publisher(&d, id, "crashy", 50));
    probe.until("50 messages of the second incarnation", |p| p.messages.len() >= 100);
    let by_epoch: HashMap<u64, Vec<u64>> = probe.messages.iter().fold(HashMap::new(), |mut m, msg| {
        m.entry(msg.publisher.epoch).or_default().push(msg.seq);
        m
    });
    assert_eq!(by_epoch.len(), 2, "epochs: {:?}", by_epoch.keys());
    let epoch2 = *by_epoch.keys().find(|&&e| e != epoch1).unwrap();
    assert!(epoch2 > epoch1);
    for seqs in by_epoch.values() {
        assert_eq!(seqs, &(1..=50).collect::<Vec<_>>());
    }
    probe.assert_no_duplicates();
    assert_eq!(probe.sub.counters().reconnects.load(Ordering::Relaxed), 1);
    drop(second);
}

#[test]
fn nodes_with_discovery_leak_no_threads_or_descriptors() {
    if !common::isolate::in_child_process(
        "nodes_with_discovery_leak_no_threads_or_descriptors",
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
fn discovery_survives_duplicated_delayed_and_dropped_datagrams() {
    // The subscriber's node receives every announcement twice, 30 ms late, and loses a fifth of
    // them (seeded): it still finds the publisher, keeps it (no false loss: heartbeats arrive
    // often enough), connects once and delivers everything once, in order. (With a third lost,
    // one run in eight here reported the publisher silent: five heartbeat intervals without
    // one, the silence limit, are then too likely.)
    let d = domain(12);
    let sub_node = node_with(d.clone());
    let pub_node = node_with(d);
    let faults = sub_node.fabric().faults().expect("soft faults");
    faults.set_ud_faults(UdFaults { drop: 0.2, duplicate: 1.0, delay: Duration::from_millis(30), seed: 7 });
    let publisher = small_ring(&pub_node, "noisy").create().unwrap();
    let mut probe = Probe::new(&sub_node, "noisy", Start::Latest);
    probe.until("the connection", |p| p.events.iter().any(|e| matches!(e, SubscriptionEvent::Connected(_))));
    wait_subscribers(&publisher, 1);
    publish_range(&publisher, 1..=200);
    probe.until("200 messages", |p| p.messages.len() >= 200);
    // Ten heartbeat intervals of noisy announcements change nothing.
    let until = Instant::now() + Duration::from_secs(2);
    probe.until("two seconds of noisy heartbeats", |_| Instant::now() >= until);
    publish_range(&publisher, 201..=210);
    probe.until("210 messages", |p| p.messages.len() >= 210);
    assert_eq!(probe.seqs_of(publisher.id()), (1..=210).collect::<Vec<_>>());
    probe.assert_no_duplicates();
    let connected = probe.events.iter().filter(|e| matches!(e, SubscriptionEvent::Connected(_))).count();
    assert_eq!(connected, 1, "one connection: {:?}", probe.events);
    assert!(!probe.events.iter().any(|e| matches!(e, SubscriptionEvent::PublisherLost { .. })), "{:?}", probe.events);
    assert_eq!(sub_node.peers().len(), 1);
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
    while other.discovery_counters().other_domain.load(Ordering::Relaxed) == 0 {
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

/// Waits up to [`WAIT`] for `done`, reporting `what` otherwise.
fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::yield_now();
    }
}

#[test]
fn unicast_to_the_group_port_does_not_reach_a_multicast_node() {
    // Raw UDP: soft only (the verbs run skips it). The node's group socket is bound to the
    // group's address: datagrams sent to the port by unicast never reach it, only those sent
    // to the group do (bound to 0.0.0.0, it took both, in the order sent).
    let d = domain(16);
    let node = node_with(d.clone());
    let sock = UdpSocket::bind("127.0.0.1:0").expect("socket");
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, 1));
    let topics = vec![("unicast-junk".to_string(), TopicId::of("unicast-junk"))];
    let unicast = Announcement::split(AnnounceKind::Hello, 0, 41, 1, addr, &topics, 1024).unwrap()[0].encode().unwrap();
    for datagram in [vec![0xff; 100], unicast] {
        sock.send_to(&datagram, SocketAddrV4::new(Ipv4Addr::LOCALHOST, d.domain_port())).expect("send unicast");
    }
    let marker = Announcement::split(AnnounceKind::Hello, 0, 42, 1, addr, &topics, 1024).unwrap()[0].encode().unwrap();
    send_raw(&d, &[marker]);
    wait_until("the announcement sent to the group", || node.peers().iter().any(|p| p.node == 42));
    assert!(node.peers().iter().all(|p| p.node != 41), "a unicast announcement was heard: {:?}", node.peers());
    assert_eq!(node.discovery_counters().bad_datagrams.load(Ordering::Relaxed), 0, "unicast junk was read");
    assert_eq!(node.discovery_counters().received.load(Ordering::Relaxed), 1);
}

fn test_secret(fill: u8) -> Secret {
    Secret::new(vec![fill; 24]).expect("a valid secret")
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
    let count = |node: &Node, of: fn(&rdma_pubsub::DiscoveryCounters) -> &std::sync::atomic::AtomicU64| {
        of(node.discovery_counters()).load(Ordering::Relaxed)
    };
    wait_until("the plain and foreign datagrams at the sealed node", || count(&pub_node, |c| &c.unauthenticated) >= 2);
    wait_until("sealed datagrams at the plain node", || count(&plain, |c| &c.sealed_ignored) >= 1);
    wait_until("datagrams at the foreign node", || count(&foreign, |c| &c.unauthenticated) >= 2);
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
    let path = "a_secret_file_named_by_the_environment_seals_discovery_and_a_bad_one_fails_the_build";
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
    wait_until("its datagrams refused by the other secret", || {
        explicit.discovery_counters().unauthenticated.load(Ordering::Relaxed) >= 2
    });
    assert!(explicit.peers().is_empty(), "{:?}", explicit.peers());
    std::fs::remove_dir_all(&dir).unwrap();
}
