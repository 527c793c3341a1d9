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
#[path = "common/nodes.rs"]
mod nodes;

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nodes::{bind_addr, fabric_kind};
use rdma_pubsub::fabric::UdFaults;
use rdma_pubsub::node::discovery::{DEFAULT_PORT, SECRET_FILE_ENV};
use rdma_pubsub::{
    DiscoveryOptions, FabricKind, LostReason, Message, Node, Policy, Publisher, PublisherBuilder, Start, Subscription,
    SubscriptionEvent,
};
use rdma_wire::protocol::{AnnounceKind, Announcement, Secret, TopicId, PROTOCOL_VERSION};

const WAIT: Duration = Duration::from_secs(20);

/// The multicast group and port of test number `index` (distinct per test and per process).
fn domain(index: u16) -> DiscoveryOptions {
    nodes::test_domain(193, 20000, 16, index)
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
                Ok(None) => {}
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
    assert_eq!(probe.sub.counters().reconnects(), 1);
    drop(second);
}

/// Waits up to [`WAIT`] for `done`, reporting `what` otherwise.
fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::yield_now();
    }
}

fn test_secret(fill: u8) -> Secret {
    Secret::new(vec![fill; 24]).expect("a valid secret")
}

#[path = "discovery/connecting.rs"]
mod connecting;
#[path = "discovery/datagrams.rs"]
mod datagrams;
#[path = "discovery/domains.rs"]
mod domains;
#[path = "discovery/outcomes.rs"]
mod outcomes;
