//! Hostile peers and hostile bytes. A subscriber that connects properly (valid connect data,
//! reads the accept data) and then misbehaves with the raw fabric API: READs outside the ring,
//! with forged or foreign rkeys, acks for positions never published, garbage control messages.
//! Each is refused, counted or reported, and the publisher keeps serving a well-behaved
//! subscriber. Then ring bytes from a broken or malicious publisher: the reader never panics and
//! never delivers a record whose checksum does not match (property tests).

#[path = "../fabric/tests/common/isolate.rs"]
mod isolate;
#[path = "common/nodes.rs"]
mod nodes;
#[allow(dead_code)]
#[path = "../fabric/tests/common/resources.rs"]
mod resources;

// One file per kind of attack; they share the attacker and the helpers here.
#[path = "hostile/accepts.rs"]
mod accepts;
#[path = "hostile/access.rs"]
mod access;
#[path = "hostile/discovery.rs"]
mod discovery;
#[path = "hostile/doorbell.rs"]
mod doorbell;
#[path = "hostile/in_place.rs"]
mod in_place;
#[path = "hostile/limits.rs"]
mod limits;
#[path = "hostile/listing.rs"]
mod listing;
#[path = "hostile/nic.rs"]
mod nic;
#[path = "hostile/node.rs"]
mod node;
#[path = "hostile/raw_publisher.rs"]
mod raw_publisher;

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use proptest::prelude::*;
use rdma_pubsub::fabric::{
    self, Access, CmEvent, CompletionQueue, EventChannel, Fabric, FabricConfig, FabricKind, MemoryRegion,
    ProtectionDomain, QpInit, QueuePair, RegisteredBuffer, RemoteAddr, SendOp, SendRequest, WcOpcode, WcStatus,
    WorkCompletion,
};
use rdma_pubsub::{Error, Policy, Publisher, Start, Subscription};
use rdma_wire::protocol::{
    AcceptData, AcceptTags, ConnectAuth, ConnectData, ConnectFlags, Control, PolicySet, StartAt, TopicId,
};
use rdma_wire::ring::{
    layout, Checksum, ControlOutcome, ControlSnapshot, ReaderConfig, RecordHeader, RingConfig, RingProducer,
    RingReader, StartPoint, Stop, NO_LIMIT,
};

const WAIT: Duration = Duration::from_secs(10);

fn payload(seq: u64) -> Vec<u8> {
    (0..64 + seq as usize % 200).map(|i| (seq as u8).wrapping_mul(13) ^ i as u8).collect()
}

/// A subscriber on its own node that must receive messages `from..=to` in order, intact.
fn expect_messages(sub: &mut Subscription, from: u64, to: u64) {
    let deadline = Instant::now() + WAIT;
    for seq in from..=to {
        let m = loop {
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(!left.is_zero(), "message {seq} did not arrive");
            if let Some(m) = sub.recv_timeout(left).expect("recv") {
                break m;
            }
        };
        assert_eq!(m.seq, seq, "in order, nothing lost or repeated");
        assert_eq!(m.data, payload(seq), "content of message {seq}");
    }
}

fn wait_subscribers(p: &Publisher, n: usize) {
    let deadline = Instant::now() + WAIT;
    while p.subscriber_count() != n {
        assert!(Instant::now() < deadline, "{} subscribers instead of {n}", p.subscriber_count());
        std::thread::yield_now();
    }
}

/// The connect request a subscriber of `topic` sends, without a credential's proof.
fn connect_request(topic: &str) -> ConnectData {
    ConnectData {
        topic: TopicId::of(topic),
        start: StartAt::Latest,
        accepts: PolicySet::ALL,
        node_id: 0xbad,
        flags: ConnectFlags::NONE,
        auth: ConnectAuth::None,
    }
}

/// A raw-fabric peer that speaks the protocol only as far as it wants to.
struct Attacker {
    _fabric: Fabric,
    pd: ProtectionDomain,
    cq: CompletionQueue,
    channel: EventChannel,
    /// READ destination and SEND source.
    buf: MemoryRegion,
    /// The challenge its connect requests carry, if any.
    challenge: Option<u64>,
}

impl Attacker {
    fn new() -> Attacker {
        let fabric = fabric::open(&FabricConfig::new(FabricKind::Soft)).expect("attacker fabric");
        let pd = fabric.alloc_pd().unwrap();
        let cq = fabric.create_cq(256).unwrap();
        let channel = fabric.create_event_channel().unwrap();
        let buf = pd.register(128 * 1024, Access::LOCAL_WRITE).unwrap();
        Attacker { _fabric: fabric, pd, cq, channel, buf, challenge: None }
    }

    /// Connects as a legitimate subscriber of `topic` and returns the accept data.
    fn subscribe(&self, addr: SocketAddr, topic: &str) -> (QueuePair, AcceptData) {
        self.subscribe_asking_rnr_retry(addr, topic, QpInit::new(&self.pd, &self.cq).rnr_retry)
    }

    /// [`Attacker::subscribe`], asking the publisher to retry its SENDs `rnr_retry` times when
    /// this end has no receive posted (the requester's choice, as in an RDMA-CM connect).
    fn subscribe_asking_rnr_retry(&self, addr: SocketAddr, topic: &str, rnr_retry: u8) -> (QueuePair, AcceptData) {
        let request = connect_request(topic);
        let request = match self.challenge {
            Some(nonce) => request.with_challenge(nonce),
            None => request,
        };
        let data = request.encode().unwrap();
        let init = QpInit { rnr_retry, ..QpInit::new(&self.pd, &self.cq) };
        let qp = self.channel.connect(addr, &init, &data, WAIT).expect("connect");
        loop {
            match self.channel.get_event(WAIT).expect("get_event") {
                Some(CmEvent::Established { conn, private_data }) if conn == qp.conn_id() => {
                    return (qp, AcceptData::decode(&private_data).expect("accept data"));
                }
                // Earlier connections of this attacker, refused and dropped, going away.
                Some(CmEvent::Disconnected { conn }) if conn != qp.conn_id() => {}
                other => panic!("expected Established, got {other:?}"),
            }
        }
    }

    fn completion(&self) -> WorkCompletion {
        let mut wc = [WorkCompletion::default(); 1];
        let n = self.cq.poll_wait(&mut wc, Duration::from_micros(50), WAIT).expect("poll");
        assert_eq!(n, 1, "no completion within {WAIT:?}");
        wc[0]
    }

    /// Posts a READ of `len` bytes at `remote` on a fresh connection and returns its status
    /// (a READ refused puts the requester's queue pair in error, as verbs does).
    fn read(&self, addr: SocketAddr, topic: &str, remote: impl Fn(&AcceptData) -> RemoteAddr, len: usize) -> WcStatus {
        let (qp, accept) = self.subscribe(addr, topic);
        self.buf.buffer().fill(0, len.min(self.buf.len()), 0xee).unwrap();
        let sge = [self.buf.sge(0, len)];
        let op = SendOp::RdmaRead(remote(&accept));
        qp.post_send(&SendRequest::new(7, op, &sge)).expect("post READ");
        let wc = self.completion();
        assert_eq!((wc.wr_id, wc.opcode), (7, WcOpcode::RdmaRead));
        if wc.status != WcStatus::Success {
            let mut b = vec![0u8; len.min(self.buf.len())];
            self.buf.buffer().read(0, &mut b).unwrap();
            assert!(b.iter().all(|&x| x == 0xee), "a refused READ wrote nothing locally");
        }
        wc.status
    }

    /// SENDs `bytes` as a control message on `qp`.
    fn send(&self, qp: &QueuePair, bytes: &[u8]) {
        self.buf.buffer().write(0, bytes).unwrap();
        let sge = [self.buf.sge(0, bytes.len())];
        qp.post_send(&SendRequest::new(9, SendOp::Send, &sge)).expect("post SEND");
        let wc = self.completion();
        assert_eq!((wc.wr_id, wc.status), (9, WcStatus::Success), "the publisher takes the SEND");
    }
}

#[test]
fn reads_outside_the_ring_or_with_foreign_keys_are_refused() {
    let pub_node = nodes::soft_node_without_discovery();
    let small_ring = |topic| pub_node.publisher(topic).ring_capacity(64 * 1024).create().unwrap();
    let publisher = small_ring("guarded");
    // A second ring on the same node: its rkey is valid on the device, for its own memory only.
    let _other = small_ring("other");
    let sub_node = nodes::soft_node_without_discovery();
    let mut good = sub_node.subscriber("guarded").start(Start::Earliest).create().unwrap();
    good.connect_wait(pub_node.local_addr(), WAIT).unwrap();
    for seq in 1..=5 {
        publisher.publish(&payload(seq)).unwrap();
    }
    expect_messages(&mut good, 1, 5);

    let attacker = Attacker::new();
    let addr = pub_node.local_addr();
    let (_probe_qp, other) = attacker.subscribe(addr, "other");
    let at = |a: &AcceptData, off: i64, rkey: u32| RemoteAddr { addr: a.ring.addr.wrapping_add_signed(off), rkey };
    let len_of = |a: &AcceptData| a.region_len as i64;

    // The READ a subscriber is entitled to works: the refusals below are about bounds and keys.
    assert_eq!(attacker.read(addr, "guarded", |a| at(a, 0, a.ring.rkey), layout::CONTROL_READ_LEN), WcStatus::Success);
    let mut magic = [0u8; 8];
    attacker.buf.buffer().read(0, &mut magic).unwrap();
    assert_eq!(u64::from_le_bytes(magic), layout::MAGIC);
    let region_len = 4096 + 64 * 1024;
    assert_eq!(attacker.read(addr, "guarded", |a| at(a, 0, a.ring.rkey), region_len), WcStatus::Success);

    type Case = (&'static str, Box<dyn Fn(&AcceptData) -> RemoteAddr>, usize);
    let forged = other.ring.rkey;
    let cases: Vec<Case> = vec![
        ("one byte before the ring", Box::new(move |a| at(a, -1, a.ring.rkey)), 1),
        ("a READ starting before the ring", Box::new(move |a| at(a, -64, a.ring.rkey)), 128),
        ("one byte past the ring", Box::new(move |a| at(a, len_of(a), a.ring.rkey)), 1),
        ("a READ crossing the end", Box::new(move |a| at(a, len_of(a) - 1, a.ring.rkey)), 2),
        ("the whole region plus one byte", Box::new(move |a| at(a, 0, a.ring.rkey)), region_len + 1),
        ("far away", Box::new(move |a| at(a, 1 << 40, a.ring.rkey)), 8),
        ("a forged rkey", Box::new(move |a| at(a, 0, a.ring.rkey ^ 0x5a5a_5a5a)), 8),
        ("rkey 0", Box::new(move |a| at(a, 0, 0)), 8),
        ("another ring's rkey on this ring", Box::new(move |a| at(a, 0, forged)), 8),
        (
            "this ring's rkey on another ring",
            Box::new(move |a| RemoteAddr { addr: other.ring.addr, rkey: a.ring.rkey }),
            8,
        ),
        // A captured accept of another topic (accepts travel in clear): that ring's own
        // address and rkey, READ from a connection this publisher accepted. Each publisher has
        // its own protection domain, so the key does not reach across.
        ("another topic's ring, with its own address and rkey", Box::new(move |_| other.ring), 8),
    ];
    for (what, remote, len) in &cases {
        let status = attacker.read(addr, "guarded", remote, *len);
        assert_eq!(status, WcStatus::RemoteAccessError, "{what}: the READ must be refused");
    }
    // The attacks cost the well-behaved subscriber nothing.
    for seq in 6..=20 {
        publisher.publish(&payload(seq)).unwrap();
    }
    expect_messages(&mut good, 6, 20);
}

#[test]
fn acks_for_unpublished_positions_are_refused_counted_and_grant_no_credit() {
    let pub_node = nodes::soft_node_without_discovery();
    let publisher = pub_node
        .publisher("acked")
        .policy(Policy::Block { timeout: Duration::from_millis(300) })
        .ring_capacity(64 * 1024)
        .create()
        .unwrap();
    let sub_node = nodes::soft_node_without_discovery();
    let mut good = sub_node.subscriber("acked").create().unwrap();
    good.connect_wait(pub_node.local_addr(), WAIT).unwrap();
    let attacker = Attacker::new();
    let (qp, accept) = attacker.subscribe(pub_node.local_addr(), "acked");
    wait_subscribers(&publisher, 2);
    for seq in 1..=10 {
        publisher.publish(&payload(seq)).unwrap();
    }
    expect_messages(&mut good, 1, 10);

    let beyond = accept.start_position + (1 << 30);
    let hostile: Vec<Vec<u8>> = vec![
        Control::Ack { position: beyond, seq: 10 }.encode().unwrap(),
        Control::Ack { position: u64::MAX, seq: u64::MAX }.encode().unwrap(),
        Control::Ack { position: 0, seq: 0 }.encode().unwrap(),
        Control::Doorbell { tail: 1 }.encode().unwrap(),
        vec![0xff; 40],
    ];
    for bytes in &hostile {
        attacker.send(&qp, bytes);
    }
    // The publisher reads its acks while it publishes.
    let deadline = Instant::now() + WAIT;
    let mut seq = 10;
    while publisher.counters().bad_acks() < hostile.len() as u64 {
        assert!(Instant::now() < deadline, "bad acks: {:?}", publisher.counters());
        seq += 1;
        publisher.publish(&payload(seq)).unwrap();
    }
    assert_eq!(publisher.counters().bad_acks(), hostile.len() as u64);
    expect_messages(&mut good, 11, seq);
    // None of them granted credit: the attacker holds the publisher at one ring past its start,
    // and Block says so with a timeout, while the good subscriber has everything before it.
    let err = loop {
        assert!(seq < 10_000, "the attacker's forged acks granted credit");
        match publisher.publish(&payload(seq + 1)) {
            Ok(s) => seq = s,
            Err(e) => break e,
        }
        expect_messages(&mut good, seq, seq);
    };
    assert!(matches!(err, Error::Timeout { .. }), "error: {err}");
    // The attacker leaves: the publisher serves the good subscriber again.
    drop(qp);
    wait_subscribers(&publisher, 1);
    for s in seq + 1..=seq + 200 {
        publisher.publish(&payload(s)).unwrap();
    }
    expect_messages(&mut good, seq + 1, seq + 200);
}

/// A reader over arbitrary bytes: checks that what it delivers in place is a checksum-valid
/// record of those bytes, in sequence order.
fn parse_arbitrary(bytes: &[u8], max_record_payload: usize, position: u64, seq: u64) {
    let capacity = 64 * 1024;
    let start = StartPoint { position, seq, first_seq: seq };
    let config = ReaderConfig {
        capacity,
        max_record_payload,
        epoch: 1,
        start,
        max_message_len: 1 << 20,
        checksum: Checksum::Crc32c,
    };
    let mut reader = RingReader::new(config).expect("a valid reader config");
    let base = bytes.as_ptr() as usize;
    let mut last = 0;
    let parsed = reader.parse(bytes, position, |s, p| {
        assert!(s > last, "sequence order");
        last = s;
        let at = p.as_ptr() as usize;
        if at >= base + 32 && at + p.len() <= base + bytes.len() {
            let h = RecordHeader::decode(&bytes[at - base - 32..]).unwrap();
            assert_eq!(h.compute_crc(Checksum::Crc32c, p), h.crc, "delivered a record whose crc does not match");
        }
    });
    if let Ok(parsed) = parsed {
        assert!(parsed.consumed <= bytes.len());
    }
}

/// Writes `lens.len()` messages into a fresh 64 KiB ring and returns a copy of its region.
fn written_ring(lens: &[usize], max_record_payload: usize) -> Vec<u8> {
    let config = RingConfig { capacity: 64 * 1024, max_record_payload, epoch: 3, checksum: Checksum::Crc32c };
    let buf = Arc::new(RegisteredBuffer::new(config.region_len()).unwrap());
    let mut producer = RingProducer::new(buf.clone(), config).unwrap();
    for (i, &len) in lens.iter().enumerate() {
        producer.append(&message(i as u64 + 1, len), NO_LIMIT).unwrap();
    }
    let mut region = vec![0u8; config.region_len()];
    buf.read(0, &mut region).unwrap();
    region
}

fn message(seq: u64, len: usize) -> Vec<u8> {
    (0..len).map(|i| (seq as u8).wrapping_mul(29) ^ (i as u8) ^ (i >> 9) as u8).collect()
}

/// Reads a ring region copy to its end as a subscriber would; returns the delivered messages.
fn read_ring(region: &[u8], max_record_payload: usize) -> Result<Vec<(u64, Vec<u8>)>, rdma_wire::ring::RingError> {
    let capacity = 64 * 1024;
    let start = StartPoint { position: capacity as u64, seq: 1, first_seq: 1 };
    let config = ReaderConfig {
        capacity,
        max_record_payload,
        epoch: 3,
        start,
        max_message_len: 1 << 20,
        checksum: Checksum::Crc32c,
    };
    let mut reader = RingReader::new(config).unwrap();
    let mut out = Vec::new();
    for _ in 0..512 {
        let plan = reader.next_read(8192, false);
        let bytes = &region[plan.ring_offset..plan.ring_offset + plan.len];
        let parsed = reader.parse(bytes, plan.position, |s, p| out.push((s, p.to_vec())))?;
        // End: READ on (a record the READ held only partly is READ whole next time).
        if matches!(parsed.stop, Stop::End | Stop::Stale) {
            continue;
        }
        let snap = ControlSnapshot::decode(&region[..layout::CONTROL_READ_LEN])?;
        match reader.apply_control(&snap)? {
            ControlOutcome::Resync { .. } => {}
            ControlOutcome::Behind { .. } if parsed.consumed > 0 => {}
            _ => break,
        }
    }
    Ok(out)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    /// Arbitrary bytes at an arbitrary position: no panic; only checksum-valid records.
    #[test]
    fn ring_parse_of_arbitrary_bytes_never_panics_nor_delivers_a_bad_crc(
        bytes in prop::collection::vec(any::<u8>(), 0..4096),
        max_record_payload in 64usize..=16352,
        slot in 0u64..2048,
        seq in 1u64..1_000_000,
    ) {
        parse_arbitrary(&bytes, max_record_payload, 65536 + slot * 32, seq);
    }

    /// Arbitrary bytes behind a valid record header (so the deeper checks run).
    #[test]
    fn ring_parse_of_valid_headers_with_garbage_payloads(
        payload in prop::collection::vec(any::<u8>(), 0..2048),
        len in 0u32..4096,
        total_len in 0u32..1 << 20,
        flags in 0u16..8,
        fix_crc in any::<bool>(),
        tail in prop::collection::vec(any::<u8>(), 0..256),
    ) {
        let mut h = RecordHeader { position: 65536, seq: 1, len, flags, reserved: 0, total_len, crc: 0 };
        h.crc = if fix_crc { h.compute_crc(Checksum::Crc32c, payload.get(..len as usize).unwrap_or(&payload)) } else { 0xdead_beef };
        let mut bytes = h.encode().to_vec();
        bytes.extend_from_slice(&payload);
        bytes.extend_from_slice(&tail);
        parse_arbitrary(&bytes, 4096, 65536, 1);
    }

    /// A real ring (laps, padding, fragments) with corrupted bytes: every message delivered is
    /// exactly one that was written, in order; corruption stops the reader or is skipped as
    /// torn, never delivered.
    #[test]
    fn a_corrupted_ring_delivers_only_messages_that_were_written(
        lens in prop::collection::vec(0usize..12_000, 1..40),
        max_record_payload in prop::sample::select(vec![64usize, 1000, 4096, 16352]),
        flips in prop::collection::vec((0usize..4096 + 65536, 1u8..=255), 0..6),
    ) {
        let mut region = written_ring(&lens, max_record_payload);
        let clean = read_ring(&region, max_record_payload).expect("an intact ring reads cleanly");
        for (seq, data) in &clean {
            prop_assert_eq!(data, &message(*seq, lens[*seq as usize - 1]));
        }
        prop_assert_eq!(clean.last().map(|m| m.0), Some(lens.len() as u64), "the last message is retained");
        for (off, x) in flips {
            region[off] ^= x;
        }
        if let Ok(got) = read_ring(&region, max_record_payload) {
            let mut last = 0;
            for (seq, data) in got {
                prop_assert!(seq > last);
                last = seq;
                prop_assert_eq!(data, message(seq, lens[seq as usize - 1]));
            }
        }
    }
}
