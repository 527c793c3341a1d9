//! Subscriptions by pattern against exact ones, on the soft fabric over loopback: 64 B
//! messages per second delivered to one subscriber (its own thread) that reads
//!
//! - `exact/1`: one publisher, subscribed by its topic;
//! - `pattern/1`: the same publisher, subscribed by a pattern that matches only its topic;
//! - `pattern/100`: 100 publishers (one node), subscribed by one pattern that matches them all;
//! - `exact/100`: the baseline of `pattern/100`, one exact subscription reading 100 publishers
//!   (of one topic, so on 100 nodes, connected by address).
//!
//! The publishers are on another node of the same process, published round-robin from the
//! main thread (`Block`, 1 MiB rings); both nodes discover each other on a multicast group of
//! this run alone. Each point publishes [`MESSAGES`] messages, timed at the subscriber from
//! its first message to its last; the cases alternate for [`ROUNDS`] rounds and the median
//! is printed, with each case's ratio to its exact baseline (the issue asks for at least 0.9).
//!
//! Run: `flock /tmp/bench.lock cargo bench --bench patterns` (about 30 s).

use std::net::{Ipv4Addr, SocketAddr};
use std::thread;
use std::time::{Duration, Instant};

use rdma_pubsub::fabric::FabricKind;
use rdma_pubsub::{DiscoveryOptions, Node, Publisher, Start, SubscriptionEvent};

/// Messages of one point.
const MESSAGES: u64 = 1_000_000;
/// Rounds over the cases (the median is reported).
const ROUNDS: usize = 7;
const SIZE: usize = 64;
const WAIT: Duration = Duration::from_secs(30);

/// A node on loopback in this run's own discovery domain.
fn node(discovery: &DiscoveryOptions) -> Node {
    Node::builder()
        .fabric(FabricKind::Soft)
        .bind(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))
        .discovery(discovery.clone())
        .stats_dir(None)
        .build()
        .expect("node")
}

/// Messages per second at a subscriber of `filter` on `sub_node`, reading `publishers` (found
/// by discovery, or connected at `addrs` when given).
fn point(sub_node: &Node, filter: &str, publishers: &[Publisher], addrs: &[SocketAddr]) -> f64 {
    let mut builder = sub_node.subscriber(filter).start(Start::Latest);
    for addr in addrs {
        builder = builder.connect(*addr);
    }
    // The previous point's subscription is gone from every publisher first.
    let deadline = Instant::now() + WAIT;
    while publishers.iter().any(|p| p.subscriber_count() > 0) {
        assert!(Instant::now() < deadline, "{filter}: the previous subscription was not dropped within {WAIT:?}");
        thread::yield_now();
    }
    let mut sub = builder.create().expect("subscription");
    // Connected to every publisher before anything is published: drive it until each is.
    let mut connected = 0;
    while connected < publishers.len() {
        assert!(Instant::now() < deadline, "{filter}: {connected} publishers connected within {WAIT:?}");
        let _ = sub.recv_timeout(Duration::from_millis(5)).expect("recv");
        while let Some(event) = sub.try_event() {
            connected += usize::from(matches!(event, SubscriptionEvent::Connected(_)));
        }
    }
    // Messages published before the subscription's start position are not read (`Latest`):
    // the reader counts what it gets, until the last message of every publisher (marked).
    let n = publishers.len();
    let reader = thread::spawn(move || {
        let (mut got, mut ends) = (0u64, 0usize);
        let mut first = None;
        while ends < n {
            match sub.recv_ref(WAIT).expect("recv") {
                Some(m) => {
                    assert_eq!(m.data.len(), SIZE);
                    first.get_or_insert_with(Instant::now);
                    got += 1;
                    ends += usize::from(m.data[0] == 1);
                }
                None => panic!("no message within {WAIT:?} after {got}"),
            }
        }
        let elapsed = first.map_or(Duration::ZERO, |t| t.elapsed());
        got as f64 / elapsed.as_secs_f64()
    });
    let mut payload = [0u8; SIZE];
    let total = MESSAGES as usize;
    for i in 0..total {
        payload[0] = u8::from(i >= total - n);
        publishers[i % n].publish(&payload).expect("publish");
    }
    reader.join().expect("the reader")
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    // `cargo test --benches` runs this with `--bench`-less arguments: measure only when asked.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let pid = std::process::id();
    let discovery = DiscoveryOptions::default()
        .group(Ipv4Addr::new(239, 198, (pid % 251) as u8, 1))
        .port(40000 + (pid % 5000) as u16);
    let (pub_node, sub_node) = (node(&discovery), node(&discovery));
    let prefix = format!("pattern-bench-{pid}");
    let publishers: Vec<Publisher> = (0..100)
        .map(|i| pub_node.publisher(format!("{prefix}/t{i}")).ring_capacity(1 << 20).create().expect("publisher"))
        .collect();
    // The baseline of 100 feeds: one topic published on 100 nodes, read by one exact
    // subscription connected to each.
    let plain = || {
        Node::builder()
            .fabric(FabricKind::Soft)
            .bind(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))
            .discovery(DiscoveryOptions::disabled())
            .stats_dir(None)
            .build()
            .expect("node")
    };
    let nodes: Vec<Node> = (0..100).map(|_| plain()).collect();
    let same = format!("{prefix}/same");
    let spread: Vec<Publisher> =
        nodes.iter().map(|n| n.publisher(&same).ring_capacity(1 << 20).create().expect("publisher")).collect();
    let addrs: Vec<SocketAddr> = nodes.iter().map(Node::local_addr).collect();
    let plain_sub_node = plain();
    // `t0/**` includes `t0` alone (`**` is zero chunks or more): a pattern matching one topic.
    type Case<'a> = (&'a str, String, &'a [Publisher], &'a Node, &'a [SocketAddr], usize);
    let cases: [Case<'_>; 4] = [
        ("exact/1", format!("{prefix}/t0"), &publishers[..1], &sub_node, &[], 0),
        ("pattern/1", format!("{prefix}/t0/**"), &publishers[..1], &sub_node, &[], 0),
        ("exact/100", same.clone(), &spread[..], &plain_sub_node, &addrs[..], 2),
        ("pattern/100", format!("{prefix}/*"), &publishers[..], &sub_node, &[], 2),
    ];
    let mut rates: Vec<Vec<f64>> = vec![Vec::new(); cases.len()];
    for _ in 0..ROUNDS {
        for (i, (_, filter, publishers, node, addrs, _)) in cases.iter().enumerate() {
            rates[i].push(point(node, filter, publishers, addrs));
        }
    }
    println!("64 B messages/s at one subscriber, median of {ROUNDS} rounds of {MESSAGES} messages:");
    let medians: Vec<f64> = rates.iter().map(|r| median(r.clone())).collect();
    for ((name, filter, publishers, _, _, baseline), (m, r)) in cases.iter().zip(medians.iter().zip(&rates)) {
        println!(
            "  {name:<12} {m:>10.0} msg/s  x{:.2} of {}  ({} publisher(s), {filter:?}; rounds {:?})",
            m / medians[*baseline],
            cases[*baseline].0,
            publishers.len(),
            r.iter().map(|x| format!("{x:.0}")).collect::<Vec<_>>()
        );
    }
}
