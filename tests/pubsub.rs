//! End-to-end publish/subscribe on the soft fabric over loopback: delivery guarantees of each
//! slow-subscriber policy, late joins, several publishers, stream end, fragmentation, rejects.
//!
//! Every wait is bounded; payloads are a deterministic function of (sequence, size) so a
//! subscriber checks each byte without the publisher keeping copies.
//!
//! The same tests run on the verbs provider inside the Soft-RoCE guest
//! (`scripts/verbs-vm-tests.sh`): `RDMA_PUBSUB_TEST_FABRIC=verbs` selects it, `RXE_IP` the
//! address to bind, and `RDMA_PUBSUB_TEST_SCALE=N` divides the message counts of the bulk tests
//! (the guest is emulated and about 100 times slower).
//!
//! On soft, `RDMA_PUBSUB_TEST_SAME_HOST=off` turns the same-host path off (`scripts/test.sh`
//! runs this file both ways): with it on (the default), every subscriber reads its
//! publisher's ring through shared memory.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use rdma_pubsub::fabric::{self, CmEvent, DataPath, FabricConfig, FabricKind, QpInit, SameHost};
use rdma_pubsub::protocol::{ConnectData, ConnectFlags, PolicySet, RejectData, StartAt, TopicId, PROTOCOL_VERSION};
use rdma_pubsub::{Checksum, DropReason, Error, Message, Node, Policy, RejectCode, Start, SubscriptionEvent};

const WAIT: Duration = Duration::from_secs(30);

/// The provider under test: soft unless `RDMA_PUBSUB_TEST_FABRIC` says otherwise.
fn fabric_kind() -> FabricKind {
    std::env::var("RDMA_PUBSUB_TEST_FABRIC").ok().and_then(|v| v.parse().ok()).unwrap_or(FabricKind::Soft)
}

/// Divides the message counts of the bulk tests (1 on soft).
fn scale(count: u64) -> u64 {
    let divisor = std::env::var("RDMA_PUBSUB_TEST_SCALE").ok().and_then(|v| v.parse::<u64>().ok()).unwrap_or(1);
    (count / divisor.max(1)).max(1)
}

fn bind_addr() -> SocketAddr {
    let ip = match fabric_kind() {
        FabricKind::Verbs => std::env::var("RXE_IP").unwrap_or_else(|_| "10.0.2.15".into()),
        _ => "127.0.0.1".into(),
    };
    SocketAddr::new(ip.parse().expect("RXE_IP is an IP address"), 0)
}

#[path = "common/nodes.rs"]
mod nodes;
#[path = "common/unused_addr.rs"]
mod unused_addr;

use nodes::same_host_under_test as same_host;

/// How a subscriber of this process reads a publisher of this process.
fn expected_data_path() -> DataPath {
    match (fabric_kind(), same_host()) {
        (FabricKind::Soft, SameHost::Auto) => DataPath::SharedMemory,
        _ => DataPath::Network,
    }
}

/// A node builder for the provider, address and same-host setting under test.
fn builder() -> rdma_pubsub::NodeBuilder {
    Node::builder().fabric(fabric_kind()).bind(bind_addr()).same_host(same_host())
}

fn node() -> Node {
    builder().build().expect("node")
}

/// xorshift64*: the payload and size generator.
fn mix(mut x: u64) -> u64 {
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    x.wrapping_mul(0x2545_f491_4f6c_dd1d)
}

/// The payload of message `seq` with `len` bytes.
fn payload(seq: u64, len: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(len + 8);
    let mut x = mix(seq.wrapping_add(0x9e37_79b9_7f4a_7c15));
    while v.len() < len {
        x = mix(x);
        v.extend_from_slice(&x.to_le_bytes());
    }
    v.truncate(len);
    v
}

/// Checks a delivered message against what its sequence implies.
fn check(m: &Message, size_of: impl Fn(u64) -> usize) {
    let len = size_of(m.seq);
    assert_eq!(m.data.len(), len, "length of message {}", m.seq);
    assert!(m.data == payload(m.seq, len), "content of message {}", m.seq);
}

/// The mixed size distribution: most under 1 KiB, some up to 64 KiB, a few of 4 MiB.
fn mixed_size(seq: u64) -> usize {
    let r = mix(seq ^ 0x5151);
    if seq % 25_000 == 7 {
        4 << 20
    } else if r % 1000 < 11 {
        1024 + (r >> 20) as usize % (63 * 1024)
    } else {
        (r >> 32) as usize % 1024
    }
}

fn recv_until(sub: &mut rdma_pubsub::Subscription, deadline: Instant) -> Message {
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(!left.is_zero(), "timed out waiting for a message");
        if let Some(m) = sub.recv_timeout(left).expect("recv") {
            return m;
        }
    }
}

fn subscribe(sub_node: &Node, topic: &str, start: Start, addr: SocketAddr) -> rdma_pubsub::Subscription {
    let mut sub = sub_node.subscriber(topic).start(start).create().expect("subscription");
    sub.connect_wait(addr, WAIT).expect("connected");
    sub
}

fn wait_subscribers<T: ?Sized + rdma_pubsub::MessageType>(p: &rdma_pubsub::Publisher<T>, n: usize) {
    p.wait_for_subscribers(n, WAIT).expect("subscribers did not arrive");
}

#[test]
fn block_delivers_a_million_mixed_messages_exactly_once_in_order_to_four_subscribers() {
    let count = scale(1_000_000);
    let pub_node = node();
    let sub_node = node();
    let publisher = pub_node.publisher("bulk").policy(Policy::Block { timeout: WAIT }).create().unwrap();
    let subs: Vec<_> = (0..4).map(|_| subscribe(&sub_node, "bulk", Start::Latest, pub_node.local_addr())).collect();
    wait_subscribers(&publisher, 4);
    let readers: Vec<_> = subs
        .into_iter()
        .map(|mut sub| {
            thread::spawn(move || {
                let deadline = Instant::now() + Duration::from_secs(600);
                let mut bytes = 0u64;
                for expected in 1..=count {
                    let m = recv_until(&mut sub, deadline);
                    assert_eq!(m.seq, expected, "in order, nothing lost or repeated");
                    check(&m, mixed_size);
                    bytes += m.data.len() as u64;
                }
                assert!(sub.try_recv().unwrap().is_none(), "nothing beyond the last message");
                bytes
            })
        })
        .collect();
    let mut total = 0u64;
    for seq in 1..=count {
        let len = mixed_size(seq);
        total += len as u64;
        assert_eq!(publisher.publish(&payload(seq, len)).unwrap(), seq);
    }
    assert!(total > (900 << 20) / (1_000_000 / count), "about 1 GiB in all ({total} bytes)");
    for r in readers {
        assert_eq!(r.join().expect("reader thread"), total);
    }
}

#[test]
fn overwrite_reports_exact_lost_counts() {
    let count = scale(20_000).max(2_000);
    let pub_node = node();
    let sub_node = node();
    let publisher = pub_node.publisher("lossy").policy(Policy::Overwrite).ring_capacity(64 * 1024).create().unwrap();
    let mut sub = subscribe(&sub_node, "lossy", Start::Latest, pub_node.local_addr());
    wait_subscribers(&publisher, 1);
    let size = |seq: u64| 16 + (seq % 200) as usize;
    // The subscriber reads nothing while the publisher laps the ring many times.
    for seq in 1..=count {
        publisher.publish(&payload(seq, size(seq))).unwrap();
    }
    let deadline = Instant::now() + WAIT;
    let (mut delivered, mut lost, mut last) = (0u64, 0u64, 0u64);
    while last < count {
        let m = recv_until(&mut sub, deadline);
        let mut lost_before = 0;
        while let Some(ev) = sub.try_event() {
            if let SubscriptionEvent::Lost { count, .. } = ev {
                lost_before += count;
            }
        }
        assert_eq!(m.seq, last + 1 + lost_before, "the lost count accounts exactly for the gap");
        check(&m, size);
        lost += lost_before;
        delivered += 1;
        last = m.seq;
    }
    assert!(lost > 0, "the ring was overrun");
    assert_eq!(delivered + lost, count);
    assert_eq!(sub.counters().lost.load(Ordering::Relaxed), lost);
}

#[test]
fn drop_slow_disconnects_the_slow_subscriber_and_keeps_the_fast_one() {
    const COUNT: u64 = 5_000;
    let pub_node = node();
    let sub_node = node();
    let publisher = pub_node
        .publisher("dropslow")
        .policy(Policy::DropSlow { grace: Duration::from_millis(500) })
        .ring_capacity(64 * 1024)
        .create()
        .unwrap();
    let mut fast = subscribe(&sub_node, "dropslow", Start::Latest, pub_node.local_addr());
    let mut slow = subscribe(&sub_node, "dropslow", Start::Latest, pub_node.local_addr());
    wait_subscribers(&publisher, 2);
    let size = |_| 100;
    let fast_reader = thread::spawn(move || {
        let deadline = Instant::now() + WAIT;
        for expected in 1..=COUNT {
            let m = recv_until(&mut fast, deadline);
            assert_eq!(m.seq, expected);
            check(&m, size);
        }
        fast
    });
    for seq in 1..=COUNT {
        publisher.publish(&payload(seq, 100)).unwrap();
    }
    let _fast = fast_reader.join().expect("the fast subscriber got everything");
    assert_eq!(publisher.counters().dropped.load(Ordering::Relaxed), 1, "only the slow one was dropped");
    assert_eq!(publisher.subscriber_count(), 1, "the fast one is still connected");
    assert_eq!(publisher.counters().dropped.load(Ordering::Relaxed), 1);
    // The slow subscriber learns why, after the messages it had room for.
    let deadline = Instant::now() + WAIT;
    let reason = loop {
        assert!(Instant::now() < deadline, "the slow subscriber was not told");
        match slow.recv_timeout(Duration::from_millis(50)) {
            Ok(Some(m)) => check(&m, size),
            Ok(None) | Err(Error::Closed(_)) => {}
            Err(e) => panic!("unexpected error {e}"),
        }
        if let Some(SubscriptionEvent::Dropped { reason, .. }) =
            std::iter::from_fn(|| slow.try_event()).find(|e| matches!(e, SubscriptionEvent::Dropped { .. }))
        {
            break reason;
        }
    };
    assert!(matches!(reason, DropReason::TooSlow { lag } if lag > 0), "reason: {reason:?}");
}

#[test]
fn late_join_from_latest_and_from_earliest() {
    let pub_node = node();
    let sub_node = node();
    let publisher = pub_node.publisher("late").create().unwrap();
    let size = |seq: u64| seq as usize * 10;
    for seq in 1..=10 {
        publisher.publish(&payload(seq, size(seq))).unwrap();
    }
    let mut earliest = subscribe(&sub_node, "late", Start::Earliest, pub_node.local_addr());
    let mut latest = subscribe(&sub_node, "late", Start::Latest, pub_node.local_addr());
    wait_subscribers(&publisher, 2);
    for seq in 11..=20 {
        publisher.publish(&payload(seq, size(seq))).unwrap();
    }
    let deadline = Instant::now() + WAIT;
    for expected in 1..=20 {
        let m = recv_until(&mut earliest, deadline);
        assert_eq!(m.seq, expected);
        check(&m, size);
    }
    for expected in 11..=20 {
        let m = recv_until(&mut latest, deadline);
        assert_eq!(m.seq, expected, "latest starts after what was published before it joined");
        check(&m, size);
    }
}

/// The publisher picks the record checksum function and each subscriber learns it from the
/// accept private data: a subscriber checking with another function would take every record
/// for torn and deliver nothing.
#[test]
fn each_checksum_function_carries_messages_end_to_end() {
    let pub_node = node();
    let sub_node = node();
    let size = |seq: u64| (mix(seq) % 300_000) as usize + 1;
    for (i, checksum) in Checksum::ALL.into_iter().enumerate() {
        let topic = format!("checksum-{i}");
        let publisher = pub_node.publisher(&topic).checksum(checksum).create().unwrap();
        assert_eq!(publisher.checksum(), checksum);
        let mut sub = subscribe(&sub_node, &topic, Start::Earliest, pub_node.local_addr());
        wait_subscribers(&publisher, 1);
        let deadline = Instant::now() + WAIT;
        for seq in 1..=50 {
            publisher.publish(&payload(seq, size(seq))).unwrap();
            let m = recv_until(&mut sub, deadline);
            assert_eq!(m.seq, seq, "{checksum:?}");
            check(&m, size);
        }
        assert_eq!(sub.counters().torn.load(Ordering::Relaxed), 0, "{checksum:?}: no record failed its check");
    }
    let default = pub_node.publisher("checksum-default").create().unwrap();
    assert_eq!(default.checksum(), Checksum::fastest_here(), "by default, the faster function here");
}

#[test]
fn two_publishers_on_one_topic_are_merged_in_order_per_publisher() {
    let a = node();
    let b = node();
    let sub_node = node();
    let pa = a.publisher("shared").create().unwrap();
    let pb = b.publisher("shared").create().unwrap();
    let mut sub = sub_node.subscriber("shared").create().unwrap();
    let ia = sub.connect_wait(a.local_addr(), WAIT).unwrap();
    let ib = sub.connect_wait(b.local_addr(), WAIT).unwrap();
    assert_ne!(ia.id, ib.id);
    wait_subscribers(&pa, 1);
    wait_subscribers(&pb, 1);
    for seq in 1..=500u64 {
        pa.publish(&payload(seq, 64)).unwrap();
        pb.publish(&payload(seq, 32)).unwrap();
    }
    let deadline = Instant::now() + WAIT;
    let (mut next_a, mut next_b) = (1, 1);
    while next_a <= 500 || next_b <= 500 {
        let m = recv_until(&mut sub, deadline);
        if m.publisher.id == ia.id {
            assert_eq!(m.seq, next_a);
            check(&m, |_| 64);
            next_a += 1;
        } else {
            assert_eq!(m.publisher.id, ib.id);
            assert_eq!(m.seq, next_b);
            check(&m, |_| 32);
            next_b += 1;
        }
    }
}

#[test]
fn a_dropped_publisher_ends_the_stream_after_its_last_message() {
    let pub_node = node();
    let sub_node = node();
    let publisher = pub_node.publisher("ending").create().unwrap();
    let mut sub = subscribe(&sub_node, "ending", Start::Latest, pub_node.local_addr());
    wait_subscribers(&publisher, 1);
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = stop.clone();
    let reader = thread::spawn(move || {
        let deadline = Instant::now() + WAIT;
        let mut got = Vec::new();
        loop {
            assert!(Instant::now() < deadline, "the stream did not end");
            match sub.recv_timeout(Duration::from_millis(100)) {
                Ok(Some(m)) => got.push(m.seq),
                Ok(None) => {}
                Err(Error::Closed(_)) => break,
                Err(e) => panic!("unexpected error {e}"),
            }
        }
        stop2.store(true, Ordering::Release);
        let events: Vec<_> = std::iter::from_fn(|| sub.try_event()).collect();
        (got, events)
    });
    for seq in 1..=100 {
        publisher.publish(&payload(seq, 256)).unwrap();
    }
    drop(publisher);
    let (got, events) = reader.join().unwrap();
    assert!(stop.load(Ordering::Acquire));
    assert_eq!(got, (1..=100).collect::<Vec<_>>());
    assert!(
        events.iter().any(|e| matches!(e, SubscriptionEvent::Ended { final_seq: 100, complete: true, .. })),
        "events: {events:?}"
    );
}

#[test]
fn a_sixteen_mib_message_passes_through_a_one_mib_ring() {
    let pub_node = node();
    let sub_node = node();
    let publisher = pub_node.publisher("huge").ring_capacity(1 << 20).create().unwrap();
    let mut sub = subscribe(&sub_node, "huge", Start::Latest, pub_node.local_addr());
    wait_subscribers(&publisher, 1);
    let size = |seq: u64| if seq == 2 { 16 << 20 } else { 1000 };
    let reader = thread::spawn(move || {
        let deadline = Instant::now() + WAIT;
        for expected in 1..=3 {
            let m = recv_until(&mut sub, deadline);
            assert_eq!(m.seq, expected);
            check(&m, size);
        }
    });
    for seq in 1..=3 {
        publisher.publish(&payload(seq, size(seq))).unwrap();
    }
    reader.join().unwrap();
}

#[test]
fn read_buffers_grow_with_the_records_read_not_with_the_ring() {
    let pub_node = node();
    let sub_node = node();
    // A 16 MiB ring allows records of 4 MiB; the subscription's two READ buffers start at the
    // batch size (256 KiB) and grow only when a record needs more.
    let publisher = pub_node.publisher("grow").ring_capacity(16 << 20).create().unwrap();
    let mut sub = subscribe(&sub_node, "grow", Start::Latest, pub_node.local_addr());
    wait_subscribers(&publisher, 1);
    let held = |sub: &rdma_pubsub::Subscription| sub.counters().read_buffer_bytes.load(Ordering::Relaxed);
    let batch: u64 = 256 << 10; // the subscription's default batch (SubscriberBuilder::batch)
    assert_eq!(held(&sub), 2 * batch, "two READ buffers of the batch size to start with");
    let big = 3 << 20;
    let size = move |seq: u64| if seq == 101 { big } else { 1000 };
    let deadline = Instant::now() + WAIT;
    let exchange = |seqs: std::ops::RangeInclusive<u64>, sub: &mut rdma_pubsub::Subscription| {
        for seq in seqs.clone() {
            publisher.publish(&payload(seq, size(seq))).unwrap();
        }
        for expected in seqs {
            let m = recv_until(sub, deadline);
            assert_eq!(m.seq, expected);
            check(&m, size);
        }
    };
    exchange(1..=100, &mut sub);
    assert_eq!(held(&sub), 2 * batch, "small messages need no larger buffer");
    exchange(101..=102, &mut sub);
    let grown = held(&sub);
    assert!(grown > 2 * batch && grown >= big as u64, "a buffer grew to hold the 3 MiB record: {grown}");
    assert!(grown <= 2 * ((4 << 20) + 64), "never past what the ring's largest record needs: {grown}");
    drop(sub);
}

#[test]
fn sixty_four_subscribers_on_one_publisher() {
    let pub_node = node();
    let sub_node = node();
    let publisher = pub_node.publisher("wide").create().unwrap();
    let mut subs: Vec<_> =
        (0..64).map(|_| subscribe(&sub_node, "wide", Start::Latest, pub_node.local_addr())).collect();
    wait_subscribers(&publisher, 64);
    for seq in 1..=200 {
        publisher.publish(&payload(seq, 128)).unwrap();
    }
    let deadline = Instant::now() + WAIT;
    for sub in &mut subs {
        for expected in 1..=200 {
            let m = recv_until(sub, deadline);
            assert_eq!(m.seq, expected);
            check(&m, |_| 128);
        }
    }
}

/// A publisher held back by several subscribers asks the one that will probably ack last for
/// a solicited ack and wakes for that ack alone, not for every ack: far fewer waits than acks,
/// and nothing lost.
#[test]
fn a_publisher_blocked_by_several_subscribers_does_not_wake_for_every_ack() {
    let pub_node = node();
    let sub_node = node();
    let publisher =
        pub_node.publisher("rhythm").policy(Policy::Block { timeout: WAIT }).ring_capacity(64 * 1024).create().unwrap();
    // At least six laps of the ring, even scaled down: each subscriber must have acked a few
    // times for its rhythm to show.
    let count = scale(1500).max(400);
    let readers: Vec<_> = (0..8)
        .map(|_| {
            let mut sub = subscribe(&sub_node, "rhythm", Start::Earliest, pub_node.local_addr());
            thread::spawn(move || {
                let deadline = Instant::now() + WAIT;
                for expected in 1..=count {
                    let m = recv_until(&mut sub, deadline);
                    assert_eq!(m.seq, expected);
                    check(&m, |_| 1024);
                    // A consumer slower than the publisher: the ring stays full.
                    let busy = Instant::now();
                    while busy.elapsed() < Duration::from_micros(100) {
                        std::hint::spin_loop();
                    }
                }
                let c = sub.counters();
                (c.credit_requests.load(Ordering::Relaxed), c.solicited_acks.load(Ordering::Relaxed))
            })
        })
        .collect();
    wait_subscribers(&publisher, 8);
    for seq in 1..=count {
        publisher.publish(&payload(seq, 1024)).unwrap();
    }
    let answered: u64 = readers.into_iter().map(|r| r.join().expect("every subscriber got every message").1).sum();
    let c = publisher.counters();
    let load = |v: &std::sync::atomic::AtomicU64| v.load(Ordering::Relaxed);
    let (waits, solicited, asked, acks) =
        (load(&c.waits), load(&c.solicited_waits), load(&c.credit_requests), load(&c.acks));
    eprintln!("waits {waits} (solicited {solicited}), credit requests {asked} (answered {answered}), acks {acks}");
    assert!(solicited > 0 && asked > 0, "the publisher asked for credit and waited for the answer alone");
    assert!(answered > 0, "subscribers answered with solicited acks");
    assert!(waits < acks, "fewer waits ({waits}) than acks ({acks})");
}

#[test]
fn block_times_out_when_a_subscriber_does_not_read() {
    let pub_node = node();
    let sub_node = node();
    let publisher = pub_node
        .publisher("stuck")
        .policy(Policy::Block { timeout: Duration::from_millis(200) })
        .ring_capacity(64 * 1024)
        .create()
        .unwrap();
    let _sub = subscribe(&sub_node, "stuck", Start::Latest, pub_node.local_addr());
    wait_subscribers(&publisher, 1);
    let mut published = 0;
    let err = loop {
        match publisher.publish(&[7u8; 1000]) {
            Ok(_) => published += 1,
            Err(e) => break e,
        }
        assert!(published < 1000, "the ring should fill");
    };
    assert!(matches!(err, Error::Timeout { millis: 200, .. }), "the error names the Block timeout: {err}");
    assert!(published >= 60, "a whole ring was published first ({published})");
}

/// A flush that times out while finishing a message a timed-out publish left partly written
/// reports its own call and timeout, not the Block policy's.
#[test]
fn flush_times_out_with_its_own_timeout_while_finishing_a_partly_written_message() {
    let (pub_node, sub_node) = (node(), node());
    let publisher = pub_node
        .publisher("stuck-flush")
        .policy(Policy::Block { timeout: Duration::from_millis(200) })
        .ring_capacity(64 * 1024)
        .create()
        .unwrap();
    let _sub = subscribe(&sub_node, "stuck-flush", Start::Latest, pub_node.local_addr());
    wait_subscribers(&publisher, 1);
    // Four rings' worth: its first fragments fill the ring, then it waits its Block timeout.
    let partly = publisher.publish(&vec![7u8; 256 * 1024]).unwrap_err();
    assert!(matches!(partly, Error::Timeout { millis: 200, .. }), "{partly}");
    let err = publisher.flush(Duration::from_millis(50)).unwrap_err();
    match err {
        Error::Timeout { what, millis } => {
            assert!(what.starts_with("flush"), "the flush timed out, not a publish: {what}");
            assert_eq!(millis, 50, "the flush's timeout");
        }
        other => panic!("a timeout, not {other}"),
    }
}

#[derive(serde::Serialize, serde::Deserialize, Debug, Clone, PartialEq)]
struct Quote {
    symbol: String,
    price: f64,
    size: u32,
}

#[test]
fn a_loan_is_written_in_place_zeroed_and_sent_or_dropped() {
    let pub_node = node();
    let sub_node = node();
    let publisher = pub_node.publisher("zc").create().unwrap();
    let mut sub = subscribe(&sub_node, "zc", Start::Latest, pub_node.local_addr());
    wait_subscribers(&publisher, 1);
    let mut loan = publisher.loan(11).unwrap();
    assert_eq!(&loan[..], &[0; 11], "a loan starts zeroed");
    loan[..5].copy_from_slice(b"hello");
    loan[5..].copy_from_slice(b" world");
    assert_eq!(loan.send().unwrap(), 1);
    // Dropped without send: nothing is published, and the publisher goes on.
    drop(publisher.loan(3).unwrap());
    // Left partly written: the rest is zeroes, never older ring contents.
    let mut partly = publisher.loan(8).unwrap();
    partly[0] = 9;
    assert_eq!(partly.send().unwrap(), 2);
    let view = sub.recv_ref(WAIT).unwrap().expect("a message");
    assert_eq!((view.seq, view.data), (1, &b"hello world"[..]));
    let next = sub.recv_timeout(WAIT).unwrap().expect("a message");
    assert_eq!((next.seq, next.data), (2, vec![9, 0, 0, 0, 0, 0, 0, 0]));
    let too_large = publisher.loan(1 << 30).unwrap_err();
    assert!(matches!(too_large, Error::MessageTooLarge { len: 1073741824, limit } if limit < 1 << 30), "{too_large}");
}

#[test]
fn typed_handles_carry_values_and_a_message_of_another_type_is_a_decode_error() {
    // Two nodes publish the topic: one typed, one raw bytes that are no Quote.
    let (typed_node, raw_node, sub_node) = (node(), node(), node());
    let typed = typed_node.publisher("typed").typed::<Quote>().create().unwrap();
    let raw = raw_node.publisher("typed").create().unwrap();
    let mut quotes = sub_node
        .subscriber("typed")
        .start(Start::Earliest)
        .connect(typed_node.local_addr())
        .connect(raw_node.local_addr())
        .typed::<Quote>()
        .create()
        .unwrap();
    wait_subscribers(&typed, 1);
    wait_subscribers(&raw, 1);
    let quote = Quote { symbol: "RDMA".into(), price: 42.5, size: 7 };
    assert_eq!(typed.publish(&quote).unwrap(), 1);
    raw.publish(b"\xff not a quote").unwrap();
    let (mut good, mut bad) = (Vec::new(), Vec::new());
    let deadline = Instant::now() + WAIT;
    while good.is_empty() || bad.is_empty() {
        assert!(Instant::now() < deadline, "good {good:?}, bad {bad:?}");
        match quotes.recv_timeout(Duration::from_millis(50)) {
            Ok(Some(m)) => good.push(m),
            Ok(None) => {}
            Err(e) => bad.push(e),
        }
    }
    assert_eq!((good[0].seq, &good[0].data, good[0].publisher.id), (1, &quote, typed.id()));
    assert!(
        matches!(&bad[0], Error::Decode(d) if d.contains("message 1") && d.contains(&format!("{:016x}", raw.id()))),
        "{}",
        bad[0]
    );
    // The iterator yields a decode error and goes on.
    raw.publish(b"junk").unwrap();
    typed.publish(&quote).unwrap();
    let items: Vec<_> = quotes.iter().take(2).collect();
    assert_eq!(items.iter().filter(|i| matches!(i, Err(Error::Decode(_)))).count(), 1, "{items:?}");
    assert!(items.iter().any(|i| i.as_ref().is_ok_and(|m| m.data == quote && m.seq == 2)), "{items:?}");
}

#[test]
fn bad_private_data_is_rejected_with_a_reason_and_counted() {
    let pub_node = node();
    let _publisher = pub_node.publisher("guarded").create().unwrap();
    let config = FabricConfig { bind: bind_addr().ip(), ..FabricConfig::new(fabric_kind()) };
    let fabric = fabric::open(&config).unwrap();
    let pd = fabric.alloc_pd().unwrap();
    let cq = fabric.create_cq(64).unwrap();
    let channel = fabric.create_event_channel().unwrap();
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
                proof: None,
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
    assert_eq!(pub_node.counters().rejected_connects.load(Ordering::Relaxed), 4);
}

#[test]
fn an_orderly_end_is_reported_once_and_never_as_a_disconnect() {
    let pub_node = node();
    let sub_node = node();
    for round in 0..40 {
        let topic = format!("orderly-{round}");
        let publisher = pub_node.publisher(&topic).create().unwrap();
        let mut sub = sub_node.subscriber(&topic).busy_poll(true).auto_connect(false).create().unwrap();
        sub.connect_wait(pub_node.local_addr(), WAIT).unwrap();
        wait_subscribers(&publisher, 1);
        let reader = thread::spawn(move || {
            let deadline = Instant::now() + WAIT;
            let mut events = Vec::new();
            let mut got = 0;
            loop {
                assert!(Instant::now() < deadline, "the stream did not end");
                match sub.recv_timeout(Duration::from_millis(20)) {
                    Ok(Some(m)) => {
                        got += 1;
                        assert_eq!(m.seq, got);
                    }
                    Ok(None) => {}
                    Err(Error::Closed(_)) => break,
                    Err(e) => panic!("unexpected error {e}"),
                }
                events.extend(std::iter::from_fn(|| sub.try_event()));
            }
            events.extend(std::iter::from_fn(|| sub.try_event()));
            (got, events)
        });
        for seq in 1..=100 {
            publisher.publish(&payload(seq, 64)).unwrap();
        }
        // A busy-polling subscriber that caught up acknowledges everything (it does not park).
        publisher.flush(Duration::from_secs(5)).expect("every subscriber acknowledged the tail");
        drop(publisher);
        let (got, events) = reader.join().unwrap();
        assert_eq!(got, 100);
        let ended = events.iter().filter(|e| matches!(e, SubscriptionEvent::Ended { complete: true, .. })).count();
        let failed = events.iter().filter(|e| matches!(e, SubscriptionEvent::Disconnected { .. })).count();
        assert_eq!((ended, failed), (1, 0), "round {round}: {events:?}");
    }
}

/// A READ whose headers show more written data after it is followed by the next READ before
/// its records are validated and its messages handed out, so the next batch travels while the
/// subscriber checks this one and the caller works on it.
#[test]
fn the_next_read_is_in_flight_while_a_message_is_delivered() {
    let (pub_node, sub_node) = (node(), node());
    let publisher = pub_node.publisher("pipelined").create().expect("publisher");
    // Two messages that one minimum-size READ (4 KiB) cannot hold together.
    for seq in 1..=2 {
        publisher.publish(&payload(seq, 3000)).expect("publish");
    }
    let mut sub = sub_node.subscriber("pipelined").start(Start::Earliest).batch(4096).create().expect("subscribe");
    sub.connect_wait(pub_node.local_addr(), WAIT).expect("connect");
    let first = recv_until(&mut sub, Instant::now() + WAIT);
    assert_eq!(first.seq, 1);
    check(&first, |_| 3000);
    assert_eq!(sub.counters().reads.load(Ordering::Relaxed), 2, "the second READ was posted before delivery");
    // It went out as soon as the headers showed the second record, before the first was validated.
    assert_eq!(sub.counters().reads_ahead.load(Ordering::Relaxed), 1);
    let second = recv_until(&mut sub, Instant::now() + WAIT);
    check(&second, |_| 3000);
}

#[test]
fn publishers_on_several_threads_take_turns_through_credit_waits_and_fragments() {
    // Two threads share one Block publisher whose 64 KiB ring fills all the time, with
    // messages of up to 40 KiB (fragmented at the 16 KiB record limit): a call waiting for
    // credit in the middle of a message holds the turn, so the other thread's messages never
    // land between its fragments, and nothing is lost or damaged.
    let pub_node = node();
    let sub_node = node();
    let publisher = Arc::new(
        pub_node
            .publisher("turns")
            .policy(Policy::Block { timeout: Duration::from_secs(30) })
            .ring_capacity(64 * 1024)
            .create()
            .unwrap(),
    );
    let mut sub = subscribe(&sub_node, "turns", Start::Latest, pub_node.local_addr());
    wait_subscribers(&publisher, 1);
    // Enough to fill the ring many times over, even scaled down in the emulated guest.
    let per_thread = scale(400).max(16);
    // Message i of thread t: 8 bytes (t, i) then a pattern of a size that varies with i.
    let message = |t: u64, i: u64| {
        let len = 8 + (mix(t << 32 | i) % (40 * 1024)) as usize;
        let mut v = payload(t << 32 | i, len);
        v[..8].copy_from_slice(&(t << 32 | i).to_le_bytes());
        v
    };
    let threads: Vec<_> = (0..2u64)
        .map(|t| {
            let publisher = publisher.clone();
            thread::spawn(move || {
                for i in 0..per_thread {
                    publisher.publish(&message(t, i)).expect("publish");
                }
            })
        })
        .collect();
    // Nothing is consumed until the publisher has waited for credit: the ring is full, and the
    // turn is in use from here on.
    let deadline = Instant::now() + WAIT;
    while publisher.counters().waits.load(Ordering::Relaxed) == 0 {
        assert!(Instant::now() < deadline, "the publisher never waited for credit");
        thread::yield_now();
    }
    let mut next = [0u64; 2];
    for _ in 0..2 * per_thread {
        let m = recv_until(&mut sub, deadline);
        let id = u64::from_le_bytes(m.data[..8].try_into().unwrap());
        let (t, i) = (id >> 32, id & 0xffff_ffff);
        assert!(t < 2, "a message of no thread");
        assert_eq!(i, next[t as usize], "thread {t}'s messages arrive in its order");
        assert!(m.data == message(t, i), "message {i} of thread {t} is intact");
        next[t as usize] += 1;
    }
    for t in threads {
        t.join().expect("publishing thread");
    }
    assert_eq!(next, [per_thread, per_thread]);
}

#[test]
fn every_duration_is_a_valid_timeout() {
    let pub_node = node();
    let sub_node = node();
    let publisher = pub_node.publisher("forever").policy(Policy::Block { timeout: Duration::MAX }).create().unwrap();
    let mut sub = sub_node.subscriber("forever").create().expect("subscription");
    sub.connect_wait(pub_node.local_addr(), Duration::MAX).expect("connect_wait(Duration::MAX)");
    wait_subscribers(&publisher, 1);
    publisher.publish(b"no overflow").expect("publish with a Duration::MAX Block timeout");
    let m = sub.recv_timeout(Duration::MAX).expect("recv_timeout(Duration::MAX)").expect("a message");
    assert_eq!(m.data, b"no overflow");
    publisher.publish(b"again").unwrap();
    let r = sub.recv_ref(Duration::MAX).expect("recv_ref(Duration::MAX)").expect("a message");
    assert_eq!(r.data, b"again");
    // Without a subscriber left, flush returns once the publisher has seen it go.
    drop(sub);
    publisher.flush(Duration::MAX).expect("flush(Duration::MAX)");
}

/// A node of the fabric under test without discovery: only explicit connects reach publishers.
fn node_without_discovery() -> Node {
    builder().discovery(rdma_pubsub::DiscoveryOptions::disabled()).build().expect("node")
}

#[test]
fn a_subscriber_reads_through_the_path_its_node_chose_and_counts_it() {
    let pub_node = node_without_discovery();
    let sub_node = node_without_discovery();
    let publisher = pub_node.publisher("path").create().unwrap();
    let mut sub = sub_node.subscriber("path").create().unwrap();
    let info = sub.connect_wait(pub_node.local_addr(), WAIT).expect("connect");
    assert_eq!(info.data_path, expected_data_path());
    let (shared, network) = match expected_data_path() {
        DataPath::SharedMemory => (1, 0),
        DataPath::Network => (0, 1),
    };
    assert_eq!(sub.counters().shared_memory_connects.load(Ordering::Relaxed), shared);
    assert_eq!(sub.counters().network_connects.load(Ordering::Relaxed), network);
    publisher.publish(&payload(1, 100)).unwrap();
    let m = sub.recv_timeout(WAIT).unwrap().expect("a message");
    assert_eq!(m.data, payload(1, 100));
    assert_eq!(m.publisher.data_path, info.data_path);
}

/// `NodeBuilder::same_host` wins over `soft_options` whichever is called first: a node told
/// `same_host(Off)` before its soft options are set still reads over the network.
#[test]
fn the_same_host_shorthand_wins_over_soft_options_called_after_it() {
    if fabric_kind() != FabricKind::Soft {
        return; // a soft setting
    }
    let pub_node = node_without_discovery();
    let publisher = pub_node.publisher("shorthand").create().unwrap();
    let sub_node = Node::builder()
        .fabric(FabricKind::Soft)
        .bind(bind_addr())
        .same_host(SameHost::Off)
        .soft_options(fabric::SoftOptions::default())
        .discovery(rdma_pubsub::DiscoveryOptions::disabled())
        .build()
        .expect("node");
    let mut sub = sub_node.subscriber("shorthand").create().unwrap();
    let info = sub.connect_wait(pub_node.local_addr(), WAIT).expect("connect");
    assert_eq!(info.data_path, DataPath::Network);
    drop(publisher);
}

#[test]
fn receiving_with_nothing_to_receive_from_says_so_instead_of_waiting_forever() {
    let pub_node = node_without_discovery();
    let sub_node = node_without_discovery();
    let _publisher = pub_node.publisher("somewhere").create().unwrap();
    // Never connected, and discovery is off: every receiving call says so at once.
    let mut sub = sub_node.subscriber("nowhere").create().unwrap();
    let started = Instant::now();
    assert!(matches!(sub.recv(), Err(Error::NotConnected { ref topic }) if topic == "nowhere"));
    assert!(matches!(sub.recv_timeout(Duration::MAX), Err(Error::NotConnected { .. })));
    assert!(matches!(sub.recv_ref(WAIT), Err(Error::NotConnected { .. })));
    assert!(matches!(sub.try_recv(), Err(Error::NotConnected { .. })));
    assert!(started.elapsed() < WAIT, "none of them waited");
    // A connect the publisher's node refuses (no publisher of that topic there) leaves it so.
    let err = sub.connect_wait(pub_node.local_addr(), WAIT).expect_err("no publisher of that topic");
    assert!(matches!(err, Error::Rejected { reason: RejectCode::UnknownTopic, .. }), "{err}");
    assert!(matches!(sub.recv(), Err(Error::NotConnected { .. })));
}

#[test]
fn connecting_where_nothing_listens_is_an_unreachable_error() {
    let unused = unused_addr::unused_addr(bind_addr().ip());
    let addr = unused.addr;
    let sub_node = node_without_discovery();
    let mut sub = sub_node.subscriber("lonely").create().unwrap();
    match sub.connect_wait(addr, WAIT) {
        Err(Error::Unreachable { peer, .. }) => assert_eq!(peer, addr),
        other => panic!("expected Error::Unreachable naming {addr}, got {other:?}"),
    }
}

#[test]
fn iter_yields_results_ends_at_the_close_and_reports_other_errors() {
    let pub_node = node_without_discovery();
    let sub_node = node_without_discovery();
    let publisher = pub_node.publisher("iterated").create().unwrap();
    let mut sub = subscribe(&sub_node, "iterated", Start::Latest, pub_node.local_addr());
    wait_subscribers(&publisher, 1);
    // Dropping the publisher (once the subscriber consumed everything) ends its stream: the
    // iterator ends after the last message.
    let publishing = thread::spawn(move || {
        for i in 0..3u8 {
            publisher.publish(&[i]).unwrap();
        }
        drop(publisher);
    });
    let got: Vec<Vec<u8>> = sub.iter().map(|m| m.expect("a message").data).collect();
    publishing.join().expect("publishing thread");
    assert_eq!(got, [[0u8], [1], [2]]);
    // An error other than the end is yielded once, then the iterator ends.
    let mut lonely = sub_node.subscriber("nobody-publishes").create().unwrap();
    let mut it = lonely.iter();
    assert!(matches!(it.next(), Some(Err(Error::NotConnected { .. }))));
    assert!(it.next().is_none());
}

#[test]
fn a_message_over_the_subscribers_limit_is_a_recv_error_naming_both_sizes() {
    let pub_node = node_without_discovery();
    let sub_node = node_without_discovery();
    let publisher = pub_node
        .publisher("too-large")
        .policy(Policy::Block { timeout: WAIT })
        .ring_capacity(1 << 20)
        .create()
        .unwrap();
    let mut sub = sub_node
        .subscriber("too-large")
        .start(Start::Latest)
        .max_message_len(64 * 1024)
        .connect(pub_node.local_addr())
        .create()
        .unwrap();
    wait_subscribers(&publisher, 1);
    let len = 100 * 1024;
    publisher.publish(b"small").unwrap();
    publisher.publish(&payload(1, len)).unwrap();
    // The message before it is delivered, then recv says what was too large, by how much.
    let first = sub.recv_timeout(WAIT).unwrap().expect("the small message");
    assert_eq!(first.data, b"small");
    match sub.recv_timeout(WAIT) {
        Err(Error::MessageTooLarge { len: l, limit: 65536 }) => assert_eq!(l, len as u64),
        other => panic!("expected Error::MessageTooLarge naming {len} and 65536, got {other:?}"),
    }
    // That publisher's connection is closed, and it was the only one: the next call says so.
    assert!(matches!(sub.recv_timeout(WAIT), Err(Error::Closed(_))));
    let events: Vec<SubscriptionEvent> = std::iter::from_fn(|| sub.try_event()).collect();
    let too_large = events
        .iter()
        .position(|e| matches!(e, SubscriptionEvent::MessageTooLarge { len: l, limit: 65536, .. } if *l == len as u64));
    let disconnected = events.iter().position(|e| matches!(e, SubscriptionEvent::Disconnected { .. }));
    assert!(too_large.is_some() && too_large < disconnected, "MessageTooLarge, then Disconnected: {events:?}");
}

#[test]
fn iter_goes_on_after_a_message_over_the_limit() {
    let (too_large_node, other_node, sub_node) =
        (node_without_discovery(), node_without_discovery(), node_without_discovery());
    let too_large = too_large_node.publisher("iter-too-large").ring_capacity(1 << 20).create().unwrap();
    let other = other_node.publisher("iter-too-large").create().unwrap();
    let mut sub = sub_node
        .subscriber("iter-too-large")
        .max_message_len(1024)
        .connect(too_large_node.local_addr())
        .connect(other_node.local_addr())
        .create()
        .unwrap();
    wait_subscribers(&too_large, 1);
    wait_subscribers(&other, 1);
    too_large.publish(&payload(1, 4096)).unwrap();
    // The other publisher's message goes out once the subscriber has closed the first
    // connection, that is after it queued the error for the iterator.
    let publishing = thread::spawn(move || {
        let deadline = Instant::now() + WAIT;
        while too_large.subscriber_count() > 0 {
            assert!(Instant::now() < deadline, "the subscriber kept the connection of the message over its limit");
            thread::yield_now();
        }
        other.publish(b"after").unwrap();
        other
    });
    let got: Vec<Result<Vec<u8>, Error>> = sub.iter().take(2).map(|r| r.map(|m| m.data)).collect();
    let _other = publishing.join().expect("publishing thread");
    assert!(
        got.iter().any(|r| matches!(r, Err(Error::MessageTooLarge { len: 4096, limit: 1024 }))),
        "the message over the limit is yielded as an error: {got:?}"
    );
    assert!(got.iter().any(|r| matches!(r, Ok(d) if d == b"after")), "the iterator went on after it: {got:?}");
}

#[test]
fn a_publisher_waits_for_its_subscribers_or_says_how_long_it_waited() {
    let pub_node = node_without_discovery();
    let sub_node = node_without_discovery();
    let publisher = pub_node.publisher("awaited").create().unwrap();
    let none = publisher.wait_for_subscribers(1, Duration::from_millis(50));
    assert!(matches!(none, Err(Error::Timeout { millis: 50, .. })), "{none:?}");
    assert_eq!(publisher.wait_for_subscribers(0, Duration::ZERO).unwrap(), 0);
    let addr = pub_node.local_addr();
    let subscribers = thread::spawn(move || {
        let subs: Vec<_> = (0..2).map(|_| subscribe(&sub_node, "awaited", Start::Latest, addr)).collect();
        (sub_node, subs)
    });
    assert_eq!(publisher.wait_for_subscribers(2, Duration::MAX).unwrap(), 2);
    let (_node, subs) = subscribers.join().expect("subscribing thread");
    drop(subs);
    assert_eq!(publisher.counters().accepted.load(Ordering::Relaxed), 2);
}
