//! Attacks on a subscriber's memory by a hostile publisher: accept data advertising records
//! far larger than the subscriber READs, and record headers claiming more than the publisher
//! advertised. The subscriber's READ buffers stay within its own limits, and the application
//! gets a typed error naming the size and the limit.

use super::raw_publisher::{RawPublisher, RawRing};
use super::*;

use rdma_pubsub::fabric::SameHost;
use rdma_pubsub::SubscriptionEvent;

/// What a hostile publisher advertises and writes.
#[derive(Clone, Copy)]
struct Ring {
    /// Data-area capacity advertised (the region registered is as large).
    capacity: usize,
    /// `max_record_payload` advertised.
    max_record_payload: u32,
    /// The payload length the record header at the start position claims.
    claimed_len: u32,
}

/// A raw-fabric publisher of one ring, on the network path (on the same host its subscriber
/// would read the ring in place, where `in_place.rs` attacks it): one record header at the
/// start position claims `ring.claimed_len` bytes.
fn hostile_publisher(topic: &str, ring: Ring) -> RawPublisher {
    let raw = RawRing { capacity: ring.capacity, max_record_payload: ring.max_record_payload, publisher_id: 0x4057 };
    RawPublisher::start(topic, SameHost::Off, raw, move |region| {
        let start = ring.capacity as u64;
        let flags = layout::FLAG_FIRST | layout::FLAG_LAST;
        let (len, total_len) = (ring.claimed_len, ring.claimed_len);
        let header = RecordHeader { position: start, seq: 1, len, flags, reserved: 0, total_len, crc: 0 };
        region.buffer().write(layout::region_len(ring.capacity) - ring.capacity, &header.encode()).unwrap();
    })
}

/// Resident memory a refused publisher may cost the subscriber's process, at its peak (READing
/// its record would cost 32 MiB per READ buffer, and as much again in the copy's source pages).
const REFUSED_RSS_SLACK_KIB: u64 = 16 * 1024;

/// A publisher advertising 32 MiB records (a 64 MiB ring) to a subscription that READs at most
/// its default 16 MiB: the subscription refuses it before any READ, with the typed error naming
/// both sizes, and its memory does not grow. Runs alone in a child process: resident memory is
/// process-wide.
#[test]
fn a_publisher_advertising_records_over_the_limit_is_refused_before_any_read() {
    let path = "limits::a_publisher_advertising_records_over_the_limit_is_refused_before_any_read";
    if !isolate::in_child_process(path, Duration::from_secs(120)) {
        return;
    }
    let ring = Ring { capacity: 64 << 20, max_record_payload: (32 << 20) - 32, claimed_len: (32 << 20) - 32 };
    let hostile = hostile_publisher("huge-records", ring);
    let node = nodes::soft_node_without_discovery();
    let mut sub = node.subscriber("huge-records").create().unwrap();
    let limit: u64 = 16 << 20; // the default of SubscriberBuilder::max_record_payload
    let before = resources::Usage::now();
    match sub.connect_wait(hostile.addr, WAIT) {
        Err(Error::RecordTooLarge { peer, len, limit: l }) => {
            assert_eq!((peer, len, l), (hostile.addr, u64::from(ring.max_record_payload), limit))
        }
        other => panic!("expected Error::RecordTooLarge, got {other:?}"),
    }
    // Had it been connected, this would READ the record the header claims; the refusal stands.
    let outcome = sub.recv_timeout(Duration::from_millis(500));
    assert!(matches!(outcome, Err(Error::RecordTooLarge { .. })), "{outcome:?}");
    let after = resources::Usage::now();
    let counters = sub.counters();
    assert_eq!(counters.reads(), 0, "nothing was READ");
    assert_eq!(counters.read_buffer_bytes(), 0, "no READ buffer is held");
    eprintln!("refused a publisher of {} MiB records: {before:?} -> {after:?}", ring.max_record_payload >> 20);
    assert!(after.peak_rss_kib <= before.peak_rss_kib + REFUSED_RSS_SLACK_KIB, "memory grew: {before:?} -> {after:?}");
}

/// A publisher that advertises ordinary records but writes a header claiming 1 GiB: taken for
/// a torn READ once, then (the same header again) the typed event naming the claim and the
/// limit, a `Disconnected`, and the READ buffers never grew past what the advertised records
/// need.
#[test]
fn a_record_header_claiming_more_than_advertised_is_an_event_naming_both_and_ends_the_feed() {
    let ring = Ring { capacity: 64 * 1024, max_record_payload: 16 * 1024 - 32, claimed_len: 1 << 30 };
    let hostile = hostile_publisher("lying-header", ring);
    let node = nodes::soft_node_without_discovery();
    let batch: u64 = 256 << 10; // the default of SubscriberBuilder::batch
    let mut sub = node.subscriber("lying-header").auto_connect(false).create().unwrap();
    sub.connect_wait(hostile.addr, WAIT).expect("the advertised records are within the limit");
    let deadline = Instant::now() + WAIT;
    let mut events = Vec::new();
    while !events.iter().any(|e| matches!(e, SubscriptionEvent::Disconnected { .. })) {
        assert!(Instant::now() < deadline, "no Disconnected after the lying header: {events:?}");
        match sub.recv_timeout(Duration::from_millis(50)) {
            Ok(Some(m)) => panic!("message {} was delivered from a lying header", m.seq),
            Ok(None) | Err(Error::RecordTooLarge { .. }) => {}
            Err(e) => panic!("recv: {e}"),
        }
        let held = sub.counters().read_buffer_bytes();
        assert!(held <= 2 * batch, "READ buffers of {held} bytes for a feed of {batch}-byte batches");
        events.extend(std::iter::from_fn(|| sub.try_event()));
    }
    let too_large = events.iter().position(|e| {
        matches!(e, SubscriptionEvent::RecordTooLarge { addr, len, limit }
            if (*addr, *len, *limit) == (hostile.addr, 1 << 30, u64::from(ring.max_record_payload)))
    });
    let disconnected = events.iter().position(|e| matches!(e, SubscriptionEvent::Disconnected { .. }));
    assert!(too_large.is_some() && too_large < disconnected, "RecordTooLarge, then Disconnected: {events:?}");
    assert!(sub.counters().torn() >= 1, "the first sight was taken for a torn READ");
}

/// A publisher whose record never validates (its checksum is wrong, READ after READ): the
/// subscription keeps taking it for a torn READ, but `recv_timeout` and `try_recv` still return
/// on time instead of READing it again for as long as the publisher likes.
#[test]
fn a_record_that_never_validates_does_not_hold_recv_past_its_timeout() {
    let ring = Ring { capacity: 64 * 1024, max_record_payload: 16 * 1024 - 32, claimed_len: 100 };
    let hostile = hostile_publisher("never-valid", ring);
    let node = nodes::soft_node_without_discovery();
    let mut sub = node.subscriber("never-valid").auto_connect(false).create().unwrap();
    sub.connect_wait(hostile.addr, WAIT).unwrap();
    let timeout = Duration::from_millis(100);
    for _ in 0..3 {
        let started = Instant::now();
        assert_eq!(sub.recv_timeout(timeout).unwrap(), None, "nothing valid to deliver");
        let took = started.elapsed();
        assert!(took < timeout + WAIT / 4, "recv_timeout({timeout:?}) took {took:?}");
        let started = Instant::now();
        assert_eq!(sub.try_recv().unwrap(), None);
        assert!(started.elapsed() < WAIT / 4, "try_recv took {:?}", started.elapsed());
    }
    assert!(sub.counters().torn() > 1, "the record was READ again and again");
}
