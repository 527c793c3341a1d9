//! Faults on the soft fabric while traffic flows: RC connections cut (as a cable pull: no
//! disconnect handshake) on the subscriber's side in the middle of its READs and on the
//! publisher's side in the middle of the acks; a subscriber process and a publisher process
//! killed with SIGKILL mid-stream.
//!
//! What must hold: under `Block`, surviving subscribers lose, duplicate or reorder nothing; the
//! victims get a readable event (`SubscriptionEvent::Disconnected`) and then `Error::NotConnected`
//! after a gap-free, intact prefix of the stream (never a partial or corrupt message); the
//! publisher drops the dead connection and keeps publishing; nothing hangs: every wait is
//! bounded.

#[path = "../fabric/tests/common/child.rs"]
mod child;

#[path = "common/nodes.rs"]
mod nodes;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use child::ChildProcess;
use rdma_pubsub::fabric::Fabric;
use rdma_pubsub::{Error, Node, Policy, Publisher, Start, Subscription, SubscriptionEvent};

const WAIT: Duration = Duration::from_secs(20);

/// A self-checking payload: length and bytes derived from the sequence; some are fragmented
/// (larger than a record of the 64 KiB rings used here).
fn payload(seq: u64) -> Vec<u8> {
    let len = if seq % 97 == 0 { 40_000 } else { 16 + (seq.wrapping_mul(0x9e37_79b9) >> 7) as usize % 1500 };
    let mut v = seq.to_le_bytes().to_vec();
    v.extend((8..len).map(|i| (seq as u8).wrapping_mul(101) ^ (i as u8) ^ (i >> 8) as u8));
    v
}

fn check(seq: u64, data: &[u8]) {
    assert!(data == payload(seq), "message {seq} is not intact ({} bytes)", data.len());
}

fn block_publisher(node: &Node, topic: &str) -> Publisher {
    node.publisher(topic)
        .policy(Policy::Block { timeout: Duration::from_secs(10) })
        .ring_capacity(64 * 1024)
        .create()
        .expect("publisher")
}

fn subscribe(node: &Node, topic: &str, addr: SocketAddr) -> Subscription {
    let mut sub = node.subscriber(topic).start(Start::Earliest).busy_poll(true).create().expect("subscription");
    sub.connect_wait(addr, WAIT).expect("connected");
    sub
}

fn wait_subscribers(p: &Publisher, n: usize) {
    let deadline = Instant::now() + WAIT;
    while p.subscriber_count() != n {
        assert!(Instant::now() < deadline, "{} subscribers, expected {n}", p.subscriber_count());
        thread::yield_now();
    }
}

/// Cuts every RC connection open on `fabric` (a cable pull of that node); returns how many.
/// Connection ids of a soft device are small integers given in order; ids that are not open
/// connections (listeners, closed connections) are refused by `cut`.
fn cut_all(fabric: &Fabric) -> usize {
    let faults = fabric.faults().expect("the soft fabric injects faults");
    (1..=512).filter(|&id| faults.cut(id).is_ok()).count()
}

/// A subscriber that must get everything: `from..=to` in order, intact.
fn survivor(mut sub: Subscription, from: u64, to: u64) -> thread::JoinHandle<()> {
    thread::spawn(move || {
        let deadline = Instant::now() + WAIT * 3;
        for expected in from..=to {
            let m = loop {
                assert!(Instant::now() < deadline, "the survivor stalled before message {expected}");
                if let Some(m) = sub.recv_timeout(Duration::from_millis(100)).expect("the survivor's recv") {
                    break m;
                }
            };
            assert_eq!(m.seq, expected, "the survivor loses, repeats or reorders nothing");
            check(m.seq, &m.data);
        }
        while let Some(ev) = sub.try_event() {
            assert!(matches!(ev, SubscriptionEvent::Connected(_)), "the survivor saw {ev:?}");
        }
    })
}

/// A subscriber that will be cut off: receives an intact, gap-free prefix, then must learn of
/// the failure as an event and then `Error::NotConnected` (no discovery: its last stream
/// broke). Reports its progress in `progress`.
fn victim(mut sub: Subscription, progress: Arc<AtomicU64>) -> thread::JoinHandle<(u64, Vec<SubscriptionEvent>)> {
    thread::spawn(move || {
        let deadline = Instant::now() + WAIT * 3;
        let mut last = 0;
        loop {
            assert!(Instant::now() < deadline, "the victim never learned it was cut off (at {last})");
            match sub.recv_timeout(Duration::from_millis(100)) {
                Ok(Some(m)) => {
                    assert_eq!(m.seq, last + 1, "a gap-free prefix");
                    check(m.seq, &m.data);
                    last = m.seq;
                    progress.store(last, Ordering::Release);
                }
                Ok(None) => {}
                Err(Error::NotConnected { .. }) => break,
                Err(e) => panic!("the victim's recv failed with {e} instead of NotConnected"),
            }
        }
        (last, std::iter::from_fn(|| sub.try_event()).collect())
    })
}

fn assert_disconnected(events: &[SubscriptionEvent], addr: SocketAddr) {
    let disconnected = events
        .iter()
        .filter(|e| matches!(e, SubscriptionEvent::Disconnected { addr: a, publisher: Some(_) } if *a == addr))
        .count();
    assert_eq!(disconnected, 1, "exactly one Disconnected event for the publisher: {events:?}");
    assert!(!events.iter().any(|e| matches!(e, SubscriptionEvent::Ended { .. })), "not an orderly end: {events:?}");
}

/// Publishes `1..=count`; calls `fault` once, when `progress` passes `at`.
fn publish_with_fault(publisher: &Publisher, count: u64, progress: &AtomicU64, at: u64, mut fault: impl FnMut()) {
    let mut fired = false;
    for seq in 1..=count {
        assert_eq!(publisher.publish(&payload(seq)).expect("publishing survives the fault"), seq);
        if !fired && progress.load(Ordering::Acquire) >= at {
            fault();
            fired = true;
        }
    }
    assert!(fired, "the fault was never injected (the victim made no progress)");
}

#[test]
fn a_subscriber_connection_cut_mid_read_surfaces_and_spares_the_others() {
    const COUNT: u64 = 20_000;
    let pub_node = nodes::soft_node_without_discovery();
    let publisher = block_publisher(&pub_node, "cut-sub");
    let (survivor_node, victim_node) = (nodes::soft_node_without_discovery(), nodes::soft_node_without_discovery());
    let good = survivor(subscribe(&survivor_node, "cut-sub", pub_node.local_addr()), 1, COUNT);
    let progress = Arc::new(AtomicU64::new(0));
    let bad = victim(subscribe(&victim_node, "cut-sub", pub_node.local_addr()), progress.clone());
    wait_subscribers(&publisher, 2);
    // The victim READs back to back (busy polling): the cut lands on READs in flight.
    publish_with_fault(&publisher, COUNT, &progress, 2_000, || {
        assert_eq!(cut_all(victim_node.fabric()), 1, "the victim node has one connection");
    });
    wait_subscribers(&publisher, 1);
    good.join().expect("the survivor got everything");
    let (last, events) = bad.join().expect("the victim learned of the cut");
    assert!((2_000..COUNT).contains(&last), "the victim got a prefix ({last})");
    assert_disconnected(&events, pub_node.local_addr());
    assert_eq!(publisher.counters().published(), COUNT);
}

#[test]
fn publisher_side_cuts_mid_ack_surface_to_every_subscriber_and_publishing_goes_on() {
    const COUNT: u64 = 10_000;
    let pub_node = nodes::soft_node_without_discovery();
    let publisher = block_publisher(&pub_node, "cut-pub");
    let sub_node = nodes::soft_node_without_discovery();
    let progress: Vec<Arc<AtomicU64>> = (0..3).map(|_| Arc::new(AtomicU64::new(0))).collect();
    let victims: Vec<_> =
        progress.iter().map(|p| victim(subscribe(&sub_node, "cut-pub", pub_node.local_addr()), p.clone())).collect();
    wait_subscribers(&publisher, 3);
    // Under Block on a 64 KiB ring, acks flow back continuously while the subscribers keep up.
    let acks_before = publisher.counters().acks();
    publish_with_fault(&publisher, COUNT, &progress[0], 1_000, || {
        assert!(publisher.counters().acks() > acks_before, "acks were flowing");
        assert_eq!(cut_all(pub_node.fabric()), 3, "the publisher node has three connections");
    });
    for v in victims {
        let (last, events) = v.join().expect("each subscriber learned of the cut");
        assert!(last < COUNT, "cut before the end ({last})");
        assert_disconnected(&events, pub_node.local_addr());
    }
    wait_subscribers(&publisher, 0);
    // A new subscriber gets what follows, intact and in order.
    let next = publisher.next_seq();
    let mut late = sub_node.subscriber("cut-pub").create().expect("subscription");
    late.connect_wait(pub_node.local_addr(), WAIT).expect("reconnected");
    wait_subscribers(&publisher, 1);
    let reader = survivor(late, next, next + 499);
    for seq in next..next + 500 {
        assert_eq!(publisher.publish(&payload(seq)).expect("publish after the cut"), seq);
    }
    reader.join().expect("the new subscriber got everything");
}

const ADDR_ENV: &str = "RDMA_PUBSUB_FAULTS_PUBLISHER";

/// Child role `subscriber`: subscribes to the parent's publisher and reads (checking every
/// message) until killed, reporting progress.
fn child_subscriber() {
    let addr: SocketAddr = std::env::var(ADDR_ENV).expect("publisher address").parse().expect("an address");
    let sub_node = nodes::soft_node_without_discovery();
    let mut sub = subscribe(&sub_node, "killed-sub", addr);
    child::report("connected", 1);
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut last = 0;
    while Instant::now() < deadline {
        if let Ok(Some(m)) = sub.recv_timeout(Duration::from_millis(100)) {
            assert_eq!(m.seq, last + 1);
            check(m.seq, &m.data);
            last = m.seq;
            if last % 100 == 0 {
                child::report("got", last);
            }
        }
    }
}

#[test]
fn a_subscriber_process_killed_mid_stream_is_dropped_and_the_others_lose_nothing() {
    if child::role().as_deref() == Some("subscriber") {
        return child_subscriber();
    }
    const COUNT: u64 = 20_000;
    let pub_node = nodes::soft_node_without_discovery();
    let publisher = block_publisher(&pub_node, "killed-sub");
    let survivor_node = nodes::soft_node_without_discovery();
    let good = survivor(subscribe(&survivor_node, "killed-sub", pub_node.local_addr()), 1, COUNT);
    let mut child = ChildProcess::spawn(
        "a_subscriber_process_killed_mid_stream_is_dropped_and_the_others_lose_nothing",
        "subscriber",
        &[(ADDR_ENV, pub_node.local_addr().to_string())],
    );
    child.expect("connected", WAIT);
    wait_subscribers(&publisher, 2);
    let progress = AtomicU64::new(0);
    let mut killed_at = 0;
    let mut fired = false;
    for seq in 1..=COUNT {
        assert_eq!(publisher.publish(&payload(seq)).expect("publishing survives the kill"), seq);
        if !fired {
            if let Some(got) = child.latest("got") {
                progress.store(got.parse().expect("a count"), Ordering::Relaxed);
            }
            if progress.load(Ordering::Relaxed) >= 2_000 {
                child.kill();
                killed_at = seq;
                fired = true;
            }
        }
    }
    assert!(fired, "the child subscriber made no progress");
    assert!(killed_at < COUNT, "killed mid-stream");
    wait_subscribers(&publisher, 1);
    good.join().expect("the survivor got everything");
}

/// Child role `publisher`: publishes (big fragmented messages among small ones) until killed.
fn child_publisher() {
    let pub_node = nodes::soft_node_without_discovery();
    let publisher = block_publisher(&pub_node, "killed-pub");
    child::report("addr", pub_node.local_addr());
    wait_subscribers(&publisher, 1);
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut seq = 0;
    while Instant::now() < deadline {
        match publisher.publish(&payload(seq + 1)) {
            Ok(s) => seq = s,
            Err(Error::Timeout { .. }) => {}
            Err(e) => panic!("publish: {e}"),
        }
    }
}

#[test]
fn a_publisher_process_killed_mid_write_leaves_an_intact_prefix_and_a_disconnect() {
    if child::role().as_deref() == Some("publisher") {
        return child_publisher();
    }
    let mut child = ChildProcess::spawn(
        "a_publisher_process_killed_mid_write_leaves_an_intact_prefix_and_a_disconnect",
        "publisher",
        &[],
    );
    let addr: SocketAddr = child.expect("addr", WAIT).parse().expect("an address");
    let sub_node = nodes::soft_node_without_discovery();
    let progress = Arc::new(AtomicU64::new(0));
    let sub = victim(subscribe(&sub_node, "killed-pub", addr), progress.clone());
    let deadline = Instant::now() + WAIT;
    while progress.load(Ordering::Acquire) < 3_000 {
        assert!(Instant::now() < deadline, "the subscriber got only {}", progress.load(Ordering::Acquire));
        thread::yield_now();
    }
    // The child writes continuously (every 97th message is fragmented over several records).
    child.kill();
    let (last, events) = sub.join().expect("the subscriber learned the publisher died");
    assert!(last >= 3_000, "an intact prefix ({last})");
    assert_disconnected(&events, addr);
}
