//! A hostile publisher's doorbells with records (`Control::DoorbellRecords`, network path): the
//! records a doorbell brings are validated as the READ they stand for. A record failing its
//! checksum is taken for a torn READ and delivers nothing (the feed READs the ring instead),
//! records for another position than the one armed only wake the subscriber, and a valid record
//! is delivered as a READ of it would be: the doorbell gives a publisher no power over its
//! subscribers that its own ring does not.

use super::raw_publisher::{RawPublisher, RawRing};
use super::*;

use rdma_pubsub::fabric::SameHost;
use rdma_wire::protocol::CONTROL_MSG_MAX;

/// Data-area capacity of the hostile ring (its start position too).
const CAPACITY: usize = 64 * 1024;

/// A doorbell with `records` from `position` on, the tail just past them.
fn doorbell(position: u64, records: &[u8]) -> Vec<u8> {
    let tail = position + records.len() as u64;
    let mut message = Control::DoorbellRecords { position, tail }.encode().unwrap();
    message.resize(CONTROL_MSG_MAX, 0);
    message.extend_from_slice(records);
    message
}

/// One record of sequence 1 holding `payload` at `position`, with its checksum (CRC-32C, what
/// the raw publisher's accept names) right or wrong.
fn record(position: u64, payload: &[u8], checksum_right: bool) -> Vec<u8> {
    let (len, flags) = (payload.len() as u32, layout::FLAG_FIRST | layout::FLAG_LAST);
    let mut header = RecordHeader { position, seq: 1, len, flags, reserved: 0, total_len: len, crc: 0 };
    header.crc = header.compute_crc(Checksum::Crc32c, payload) ^ u32::from(!checksum_right);
    let mut bytes = header.encode().to_vec();
    bytes.extend_from_slice(payload);
    bytes.resize(layout::record_size(payload.len()) as usize, 0);
    bytes
}

/// What [`rung`] leaves: the publisher, the subscriber's node and subscription, the messages
/// delivered while the doorbell came, and the subscription's READs before it came.
type Rung = (RawPublisher, rdma_pubsub::Node, Subscription, Vec<rdma_pubsub::Message>, u64);

/// A raw publisher of an empty ring (nothing is ever written in it) that answers its
/// subscriber's doorbell request with `message`, and a subscriber (no spin: it parks on the
/// empty ring at once) that received the doorbell.
fn rung(topic: &str, message: Vec<u8>) -> Rung {
    let ring = RawRing { capacity: CAPACITY, max_record_payload: 16 * 1024 - 32, publisher_id: 0xbe11 };
    let publisher = RawPublisher::start_ringing(topic, SameHost::Off, ring, |_| {}, Some(message));
    let node = nodes::soft_node_without_discovery();
    let mut sub = node.subscriber(topic).spin(Duration::ZERO).create().expect("subscribe");
    sub.connect_wait(publisher.addr, WAIT).expect("connect");
    let deadline = Instant::now() + WAIT;
    let (mut delivered, mut reads_before) = (Vec::new(), 0);
    while sub.counters().doorbells() == 0 {
        assert!(Instant::now() < deadline, "no doorbell came: {:?}", sub.counters());
        reads_before = sub.counters().reads();
        delivered.extend(sub.recv_timeout(Duration::from_millis(10)).expect("recv"));
    }
    (publisher, node, sub, delivered, reads_before)
}

#[test]
fn a_doorbell_record_failing_its_checksum_is_a_torn_read_and_delivers_nothing() {
    let start = CAPACITY as u64;
    let (_publisher, _node, mut sub, delivered, reads_before) =
        rung("bell-torn", doorbell(start, &record(start, b"forged!!", false)));
    assert!(delivered.is_empty(), "{delivered:?}");
    // Taken as a READ of the ring, whose parse finds the record torn.
    assert_eq!(sub.counters().doorbell_records(), 1);
    assert!(sub.counters().torn() >= 1, "{:?}", sub.counters());
    // The feed READs the (empty) ring instead and parks again: nothing is delivered, nothing failed.
    assert!(sub.recv_timeout(Duration::from_millis(50)).expect("recv").is_none());
    assert!(sub.counters().reads() > reads_before, "the ring is READ after the torn doorbell");
    assert_eq!(sub.counters().delivered(), 0);
}

#[test]
fn a_doorbell_for_another_position_only_wakes_the_subscriber() {
    let elsewhere = CAPACITY as u64 + 4096;
    let (_publisher, _node, mut sub, delivered, _) =
        rung("bell-elsewhere", doorbell(elsewhere, &record(elsewhere, b"genuine", true)));
    assert!(delivered.is_empty(), "{delivered:?}");
    assert_eq!(sub.counters().doorbell_records(), 0, "records of a position the feed is not at are not taken");
    assert!(sub.recv_timeout(Duration::from_millis(50)).expect("recv").is_none());
    assert_eq!(sub.counters().delivered(), 0);
}

#[test]
fn a_valid_doorbell_record_is_delivered_as_a_read_of_it_would_be() {
    let start = CAPACITY as u64;
    let (_publisher, _node, mut sub, delivered, _) =
        rung("bell-valid", doorbell(start, &record(start, b"genuine", true)));
    let m = match delivered.into_iter().next() {
        Some(m) => m,
        None => sub.recv_timeout(WAIT).expect("recv").expect("the record the doorbell brought"),
    };
    assert_eq!((m.seq, &m.data[..]), (1, &b"genuine"[..]));
    assert_eq!(sub.counters().doorbell_records(), 1);
}
