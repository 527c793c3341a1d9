//! A hostile publisher on the same host, whose ring its subscribers read in place (no READ, no
//! checksum): it publishes a tail past records that break the ring's rules. The feed reading it
//! fails with a typed error and the subscription's other feed goes on; nothing is delivered
//! from the broken ring, and nothing crashes or hangs.

use super::raw_publisher::{RawPublisher, RawRing};
use super::*;

use rdma_pubsub::fabric::SameHost;
use rdma_pubsub::SubscriptionEvent;
use rdma_wire::ring::layout::ctrl;

/// Data-area capacity of the hostile ring.
const CAPACITY: usize = 64 * 1024;
/// Largest record payload it advertises.
const MAX_RECORD: u32 = 16 * 1024 - 32;

/// A raw-fabric publisher (same-host path as the node setting under test allows) whose ring
/// holds one record header `bad` at the start position, below a published tail.
fn hostile_ring(topic: &str, bad: RecordHeader) -> RawPublisher {
    let ring = RawRing { capacity: CAPACITY, max_record_payload: MAX_RECORD, publisher_id: 0x1bad };
    RawPublisher::start(topic, SameHost::Auto, ring, move |region| {
        let start = CAPACITY as u64;
        let word = |offset: usize, value: u64| region.buffer().write(offset, &value.to_le_bytes()).unwrap();
        region.buffer().write(layout::data_offset(start, CAPACITY), &bad.encode()).unwrap();
        for (offset, value) in [
            (ctrl::MAGIC, layout::MAGIC),
            (ctrl::VERSION, layout::LAYOUT_VERSION),
            (ctrl::CAPACITY, CAPACITY as u64),
            (ctrl::EPOCH, 1),
            (ctrl::HEAD, start),
            (ctrl::HEAD_SEQ, 1),
            (ctrl::MAX_RECORD_PAYLOAD, u64::from(MAX_RECORD)),
            (ctrl::FLOOR, start),
            (ctrl::TAIL_SEQ, 2),
            // The tail says one 64-byte record is committed.
            (ctrl::TAIL, start + 64),
        ] {
            word(offset, value);
        }
    })
}

/// What a subscription to a hostile ring and an honest publisher of the same topic saw: the
/// honest messages received and the events.
fn read_beside_an_honest_publisher(
    topic: &str,
    bad: RecordHeader,
) -> (Subscription, SocketAddr, Vec<SubscriptionEvent>) {
    let hostile = hostile_ring(topic, bad);
    let honest_node = nodes::soft_node_without_discovery();
    let honest = honest_node.publisher(topic).create().unwrap();
    let node = nodes::soft_node_without_discovery();
    let mut sub = node.subscriber(topic).auto_connect(false).create().unwrap();
    sub.connect_wait(hostile.addr, WAIT).expect("the hostile accept is well formed");
    sub.connect_wait(honest_node.local_addr(), WAIT).expect("connect to the honest publisher");
    let deadline = Instant::now() + WAIT;
    let (mut events, mut got) = (Vec::new(), 0u64);
    let mut published = 0u64;
    let failed = |events: &[SubscriptionEvent]| {
        events.iter().any(|e| matches!(e, SubscriptionEvent::Disconnected { addr, .. } if *addr == hostile.addr))
    };
    while got < 100 || !failed(&events) {
        assert!(Instant::now() < deadline, "got {got} of 100, events {events:?}");
        if published < 100 {
            published = honest.publish(&published.to_le_bytes()[..]).unwrap();
        }
        match sub.recv_timeout(Duration::from_millis(20)) {
            Ok(Some(m)) => {
                assert_eq!(m.publisher.addr, honest_node.local_addr(), "nothing comes from the broken ring");
                got += 1;
                assert_eq!(m.seq, got, "the honest stream goes on, in order");
            }
            Ok(None) | Err(Error::RecordTooLarge { .. }) => {}
            Err(e) => panic!("recv: {e}"),
        }
        events.extend(std::iter::from_fn(|| sub.try_event()));
    }
    let addr = hostile.addr;
    drop(hostile);
    (sub, addr, events)
}

/// A record claiming 1 GiB below the tail: on the same host the feed fails at once with the
/// typed `RecordTooLarge` naming the claim and the limit (no torn READ to blame it on); the
/// honest publisher's messages all arrive.
#[test]
fn a_same_host_ring_with_a_record_over_the_limit_fails_only_its_feed_with_a_typed_error() {
    let flags = layout::FLAG_FIRST | layout::FLAG_LAST;
    let start = CAPACITY as u64;
    let bad = RecordHeader { position: start, seq: 1, len: 1 << 30, flags, reserved: 0, total_len: 1 << 30, crc: 0 };
    let (sub, hostile, events) = read_beside_an_honest_publisher("in-place-huge", bad);
    let too_large = events.iter().position(|e| {
        matches!(e, SubscriptionEvent::RecordTooLarge { addr, len, limit }
            if (*addr, *len, *limit) == (hostile, 1 << 30, u64::from(MAX_RECORD)))
    });
    assert!(too_large.is_some(), "the typed event names the claim: {events:?}");
    if sub.counters().in_place_connects() > 0 {
        assert_eq!(sub.counters().in_place_connects(), 2, "both rings read in place");
        assert_eq!(sub.counters().torn(), 0, "in place, a broken record is an error at once");
    }
}

/// Records below the tail whose header names another position or an impossible padding:
/// the feed reading them in place fails (the ring broke its rules, a typed `PeerMisbehaved`
/// inside, a `Disconnected` for that publisher outside) and the other feed goes on.
#[test]
fn a_same_host_ring_with_misplaced_records_fails_only_its_feed() {
    let start = CAPACITY as u64;
    let flags = layout::FLAG_FIRST | layout::FLAG_LAST;
    let misplaced = RecordHeader { position: start + 4096, seq: 1, len: 8, flags, reserved: 0, total_len: 8, crc: 0 };
    let padding = RecordHeader {
        position: start,
        seq: 1,
        len: 0,
        flags: layout::FLAG_PADDING,
        reserved: 0,
        total_len: 0,
        crc: 0,
    };
    for (topic, bad) in [("in-place-misplaced", misplaced), ("in-place-short-padding", padding)] {
        let node_setting_reads_in_place = nodes::same_host_under_test() != fabric::SameHost::Off;
        if !node_setting_reads_in_place {
            // READing over the network, such a record looks unwritten (or torn) forever: the
            // feed waits, which `limits.rs` bounds; the rule is checked in place only.
            return;
        }
        let (sub, _, events) = read_beside_an_honest_publisher(topic, bad);
        assert_eq!(sub.counters().in_place_connects(), 2, "{topic}");
        assert!(!events.iter().any(|e| matches!(e, SubscriptionEvent::RecordTooLarge { .. })), "{topic}: {events:?}");
    }
}
