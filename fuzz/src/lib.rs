//! Fuzz targets for every decoder of bytes that arrive from the network: connection-manager
//! private data (connect, accept, reject, a listing accept), control messages (acks...),
//! discovery announcements, a node's topic listing as a subscriber READs it, ring records and the ring's control block as a subscriber READs them, and the
//! soft provider's wire frame header.
//!
//! Each target must never panic on any input, and checks what a decoder promises beyond that:
//! whatever decodes re-encodes to a message that decodes to the same value, within its carrier's
//! size limit; the ring reader delivers only records whose checksum matches, in sequence order.
//! The targets run under libFuzzer (`fuzz_targets/`, `cargo fuzz run`) and under the plain
//! generator of `src/bin/fuzz_loop.rs`; [`TARGETS`] lists them with seed inputs.
#![warn(missing_docs)]

use std::cell::RefCell;
use std::net::SocketAddr;
use std::sync::Arc;

use rdma_fabric::soft::wire::{CmParams, FrameType, Header, HEADER_LEN as WIRE_HEADER_LEN, HELLO_LEN};
use rdma_fabric::{
    RegisteredBuffer, RemoteAddr, MAX_ACCEPT_PRIVATE_DATA, MAX_CONNECT_PRIVATE_DATA, MAX_REJECT_PRIVATE_DATA,
};
use rdma_wire::protocol::{
    AcceptData, AcceptTags, AnnounceKind, Announcement, ConnectAuth, ConnectData, ConnectFlags, Control, DropReason,
    ListedTopic, ListingAccept, ListingHeader, MessageTypeTag, PolicyKind, PolicySet, RejectCode, RejectData, Secret,
    StartAt, TopicId, TopicListing, CONTROL_MSG_MAX, LISTING_HEADER_LEN, LISTING_REGION_LEN, MAX_ANNOUNCEMENT,
    MAX_LISTED_NAME, MAX_LISTED_TOPICS,
};
use rdma_wire::ring::{
    layout, Checksum, ControlOutcome, ControlSnapshot, ReaderConfig, RecordHeader, RingConfig, RingProducer,
    RingReader, StartPoint, Stop, NO_LIMIT,
};

/// A fuzz target: runs one input, panics on a violated property; returns whether the input
/// was accepted (decoded, or delivered a message), for coverage statistics.
pub type Target = fn(&[u8]) -> bool;

/// Seed inputs of a target.
pub type Seeds = fn() -> Vec<Vec<u8>>;

/// Every target: name, function, seed inputs.
pub const TARGETS: &[(&str, Target, Seeds)] = &[
    ("connect_data", connect_data, seeds_connect),
    ("accept_data", accept_data, seeds_accept),
    ("reject_data", reject_data, seeds_reject),
    ("listing_accept", listing_accept, seeds_listing_accept),
    ("topic_listing", topic_listing, seeds_topic_listing),
    ("control", control, seeds_control),
    ("announcement", announcement, seeds_announcement),
    ("ring_records", ring_records, seeds_ring_records),
    ("ring_control", ring_control, seeds_ring_control),
    ("soft_wire", soft_wire, seeds_soft_wire),
];

/// The topic secret of the connect seeds with a proof.
fn seed_secret() -> &'static Secret {
    static SECRET: std::sync::OnceLock<Secret> = std::sync::OnceLock::new();
    SECRET.get_or_init(|| Secret::new(&b"fuzz seed topic secret"[..]).expect("a valid secret"))
}

/// Connect private data (what a would-be subscriber sends a publisher's node): decoding, and
/// a proof of a credential, which any request that decodes has room for.
pub fn connect_data(data: &[u8]) -> bool {
    if let Ok(d) = ConnectData::decode(data) {
        let bytes = d.encode().expect("a decoded connect data re-encodes");
        assert!(bytes.len() <= MAX_CONNECT_PRIVATE_DATA);
        assert_eq!(ConnectData::decode(&bytes).expect("re-decodes"), d);
        let proven = d.with_proof(seed_secret(), d.node_id, d.topic.0).expect("a proof can be made");
        let bytes = proven.encode().expect("a request with a proof fits the connect private data");
        assert_eq!(ConnectData::decode(&bytes).expect("re-decodes"), proven);
        true
    } else {
        false
    }
}

/// Accept private data (what a publisher answers): decoding, then setting up a reader from it.
pub fn accept_data(data: &[u8]) -> bool {
    if let Ok(a) = AcceptData::decode(data) {
        let bytes = a.encode().expect("a decoded accept data re-encodes");
        assert!(bytes.len() <= MAX_ACCEPT_PRIVATE_DATA);
        assert_eq!(AcceptData::decode(&bytes).expect("re-decodes"), a);
        // The subscriber builds its reader from these numbers: refused or usable, never a panic.
        if let Ok(mut reader) = RingReader::new(a.reader_config(64 << 20)) {
            let plan = reader.next_read(256 * 1024, data.len().is_multiple_of(2));
            assert!(plan.len <= a.capacity as usize && plan.ring_offset < layout::region_len(a.capacity as usize));
            let _ = reader.parse(&[0u8; 64], plan.position, |_, _| {});
        }
        true
    } else {
        false
    }
}

/// Reject private data.
pub fn reject_data(data: &[u8]) -> bool {
    if let Ok(r) = RejectData::decode(data) {
        assert!(r.detail.len() <= rdma_wire::protocol::MAX_REJECT_DETAIL);
        let bytes = r.encode().expect("a decoded reject data re-encodes");
        assert!(bytes.len() <= MAX_REJECT_PRIVATE_DATA);
        assert_eq!(RejectData::decode(&bytes).expect("re-decodes"), r);
        true
    } else {
        false
    }
}

/// A listing accept (what a node answers a listing connection): what decodes has a region
/// within a listing's length and re-encodes to itself.
pub fn listing_accept(data: &[u8]) -> bool {
    if let Ok(a) = ListingAccept::decode(data) {
        assert!((LISTING_HEADER_LEN..=LISTING_REGION_LEN).contains(&(a.region_len as usize)));
        let bytes = a.encode().expect("a decoded listing accept re-encodes");
        assert!(bytes.len() <= MAX_ACCEPT_PRIVATE_DATA);
        assert_eq!(ListingAccept::decode(&bytes).expect("re-decodes"), a);
        true
    } else {
        false
    }
}

/// A node's topic listing as a subscriber READs it: the input as the region's bytes, then as
/// a body under a header whose checksum holds (what a hostile node writes), for a few
/// generations. What decodes is within the bounds and re-encodes to itself.
pub fn topic_listing(data: &[u8]) -> bool {
    let check = |listing: TopicListing| {
        assert!(listing.topics.len() <= MAX_LISTED_TOPICS);
        assert!(listing.topics.iter().all(|t| t.name.len() <= MAX_LISTED_NAME));
        let bytes = listing.encode_region().expect("a decoded listing re-encodes");
        assert!(bytes.len() <= LISTING_REGION_LEN);
        assert_eq!(TopicListing::decode_region(&bytes).expect("re-decodes"), listing);
    };
    let mut accepted = false;
    if let Ok(listing) = TopicListing::decode_region(data) {
        let header = ListingHeader::read(data).expect("a listing has a header");
        assert!(header.region_bytes().is_some_and(|n| n <= data.len()));
        check(listing);
        accepted = true;
    }
    let body = &data[..data.len().min(LISTING_REGION_LEN - LISTING_HEADER_LEN)];
    for generation in [0, 1, data.get(4).map_or(0, |&b| u64::from(b))] {
        let mut region = generation.to_le_bytes().to_vec();
        region.extend_from_slice(&(body.len() as u32).to_le_bytes());
        let crc = Checksum::Crc32c.of_pair(&region, body);
        region.extend_from_slice(&crc.to_le_bytes());
        region.extend_from_slice(body);
        if let Ok(listing) = TopicListing::decode_region(&region) {
            assert_eq!(listing.generation, generation);
            check(listing);
            accepted = true;
        }
    }
    accepted
}

/// Control messages (acks, doorbell requests, doorbells, drops, end of stream).
pub fn control(data: &[u8]) -> bool {
    if let Ok(c) = Control::decode(data) {
        let bytes = c.encode().expect("a decoded control message re-encodes");
        assert!(bytes.len() <= CONTROL_MSG_MAX);
        assert_eq!(Control::decode(&bytes).expect("re-decodes"), c);
        true
    } else {
        false
    }
}

/// The domain secret the `announcement` target opens sealed datagrams with (its sealed seeds
/// carry valid tags under it).
fn fuzz_secret() -> &'static Secret {
    static SECRET: std::sync::OnceLock<Secret> = std::sync::OnceLock::new();
    SECRET.get_or_init(|| Secret::new(&b"rdma-pubsub fuzz domain secret"[..]).expect("a valid secret"))
}

/// Discovery announcements (UD multicast datagrams), plain and sealed with a domain secret.
pub fn announcement(data: &[u8]) -> bool {
    let plain = if let Ok(a) = Announcement::decode(data) {
        assert!(a.part < a.parts);
        let bytes = a.encode().expect("a decoded announcement re-encodes");
        assert!(bytes.len() <= MAX_ANNOUNCEMENT);
        assert_eq!(Announcement::decode(&bytes).expect("re-decodes"), a);
        true
    } else {
        false
    };
    let sealed = match Announcement::open(data, fuzz_secret()) {
        Ok(opened) => {
            assert!(!plain, "one datagram both plain and sealed");
            let a = &opened.announcement;
            assert!(a.part < a.parts);
            let bytes = a.seal(fuzz_secret(), opened.seq, opened.sent_ms).expect("an opened announcement re-seals");
            assert!(bytes.len() <= data.len(), "re-sealed without padding: {} > {} bytes", bytes.len(), data.len());
            assert_eq!(Announcement::open(&bytes, fuzz_secret()).expect("re-opens"), opened);
            true
        }
        Err(_) => false,
    };
    plain || sealed
}

/// The soft provider's frame header: decodes or is refused; what decodes re-encodes to the
/// same bytes and respects the length limits of its frame type.
pub fn soft_wire(data: &[u8]) -> bool {
    let mut b = [0u8; WIRE_HEADER_LEN];
    let n = data.len().min(WIRE_HEADER_LEN);
    b[..n].copy_from_slice(&data[..n]);
    let max_msg = match data.get(WIRE_HEADER_LEN) {
        Some(&x) => 1u64 << (x % 40),
        None => 1 << 31,
    };
    if let Ok(h) = Header::decode(&b, max_msg) {
        assert_eq!(h.encode(), b, "a decoded header re-encodes to the same bytes");
        let limit = match h.ty {
            FrameType::ConnectReq => MAX_CONNECT_PRIVATE_DATA as u64,
            FrameType::Accept => MAX_ACCEPT_PRIVATE_DATA as u64,
            FrameType::Reject => MAX_REJECT_PRIVATE_DATA as u64,
            FrameType::Hello => HELLO_LEN as u64,
            FrameType::Disconnect | FrameType::Ack | FrameType::ReadReq | FrameType::Ready => 0,
            _ => max_msg,
        };
        assert!(u64::from(h.len) <= limit, "{h:?} exceeds {limit}");
        if h.ty == FrameType::Hello {
            assert_eq!(h.len as usize, HELLO_LEN, "a hello has exactly its length");
        }
        if h.ty == FrameType::ReadReq {
            assert!(u64::from(h.aux) <= max_msg);
        }
        return true;
    }
    false
}

/// The ring's control block as a subscriber READs it, applied to a reader.
pub fn ring_control(data: &[u8]) -> bool {
    let Ok(snap) = ControlSnapshot::decode(data) else { return false };
    let capacity = 1usize << (16 + (snap.capacity % 8) as usize);
    let config = ReaderConfig {
        capacity,
        max_record_payload: layout::default_max_record_payload(capacity),
        epoch: snap.epoch,
        start: StartPoint { position: capacity as u64, seq: 1, first_seq: 1 },
        max_message_len: 1 << 20,
        checksum: Checksum::Crc32c,
    };
    let mut reader = RingReader::new(config).expect("a valid reader config");
    let mut snap = snap;
    snap.capacity = capacity as u64;
    let before = reader.consumed_position();
    if let Ok(outcome) = reader.apply_control(&snap) {
        match outcome {
            ControlOutcome::Resync { position, seq } => {
                assert_eq!((position, seq), (snap.head, snap.head_seq));
                assert!(position >= before, "a resync never moves the reader backwards");
                assert_eq!(position % layout::RECORD_ALIGN, 0);
            }
            ControlOutcome::Behind { available } => assert_eq!(available, snap.tail - before),
            ControlOutcome::CaughtUp | ControlOutcome::Retry => {}
        }
        for behind in [false, true] {
            let plan = reader.next_read(1 << 20, behind);
            assert!(plan.len <= capacity);
        }
        return true;
    }
    false
}

/// Ring records as a READ brings them. The first byte picks the mode: arbitrary bytes parsed
/// by a reader configured from the input, or a real ring written by the producer, corrupted at
/// offsets the input chooses, and read to the end as a subscriber would.
pub fn ring_records(data: &[u8]) -> bool {
    match data.split_first() {
        Some((&mode, rest)) if mode & 1 == 0 => ring_arbitrary(rest),
        Some((_, rest)) => ring_corrupted(rest),
        None => false,
    }
}

fn u64_at(data: &[u8], i: usize) -> u64 {
    let mut b = [0u8; 8];
    for (k, x) in b.iter_mut().enumerate() {
        *x = data.get(i + k).copied().unwrap_or(0);
    }
    u64::from_le_bytes(b)
}

/// Arbitrary bytes: whatever is delivered is a checksum-valid record of the input, in order.
fn ring_arbitrary(data: &[u8]) -> bool {
    let capacity = 64 * 1024;
    let max_record_payload = 64 + (u64_at(data, 0) as usize % (layout::default_max_record_payload(capacity) - 63));
    // Positions near the input's own headers are the interesting ones: take the start from it.
    let position = (u64_at(data, 8) % (1 << 40)) & !(layout::RECORD_ALIGN - 1);
    let seq = u64_at(data, 16).max(1) % (1 << 62) + 1;
    let bytes = data.get(24..).unwrap_or(&[]);
    let start = StartPoint { position, seq, first_seq: seq + (data.first().copied().unwrap_or(0) >> 7) as u64 };
    // The input's first byte also picks the checksum function the records are checked with.
    let checksum = Checksum::ALL[data.first().copied().unwrap_or(0) as usize % Checksum::ALL.len()];
    let config = ReaderConfig { capacity, max_record_payload, epoch: 7, start, max_message_len: 1 << 20, checksum };
    let Ok(mut reader) = RingReader::new(config) else { return false };
    let base = bytes.as_ptr() as usize;
    let mut last = None;
    let result = reader.parse(bytes, position, |s, payload| {
        assert!(last.is_none_or(|l| s > l), "delivered in sequence order");
        last = Some(s);
        let p = payload.as_ptr() as usize;
        if p >= base + layout::HEADER_LEN && p + payload.len() <= base + bytes.len() {
            // Delivered in place: the header before it must carry a matching checksum.
            let off = p - base - layout::HEADER_LEN;
            let h = RecordHeader::decode(&bytes[off..]).expect("a header precedes the payload");
            assert_eq!(h.compute_crc(checksum, payload), h.crc, "delivered a record whose crc does not match");
            assert_eq!(h.len as usize, payload.len());
        }
    });
    if let Ok(parsed) = result {
        assert!(parsed.consumed <= bytes.len());
        assert_eq!(reader.consumed_position(), position + parsed.consumed as u64);
    }
    last.is_some()
}

thread_local! {
    static RING: RefCell<Option<Arc<RegisteredBuffer>>> = const { RefCell::new(None) };
}

/// Payload of message `seq` in the corrupted-ring mode.
fn message(seq: u64, len: usize) -> Vec<u8> {
    (0..len).map(|i| (seq as u8).wrapping_mul(31) ^ (i as u8).wrapping_mul(7) ^ (i >> 8) as u8).collect()
}

/// A real ring, corrupted: the reader delivers exactly the messages written (checked byte by
/// byte), in order, or reports lost ones, or stops with a typed error; never a corrupt one.
fn ring_corrupted(data: &[u8]) -> bool {
    const CAPACITY: usize = 64 * 1024;
    let (&sizing, rest) = data.split_first().unwrap_or((&0, &[]));
    let max_record_payload = [64, 100, 1000, 4096, layout::default_max_record_payload(CAPACITY)][sizing as usize % 5];
    let buf = RING.with(|r| {
        r.borrow_mut()
            .get_or_insert_with(|| Arc::new(RegisteredBuffer::new(layout::region_len(CAPACITY)).expect("alloc")))
            .clone()
    });
    let checksum = Checksum::ALL[(sizing >> 7) as usize];
    let config = RingConfig { capacity: CAPACITY, max_record_payload, epoch: 9, checksum };
    let mut producer = RingProducer::new(buf.clone(), config).expect("producer");
    // Message lengths from the input (two bytes each, up to three records' worth), then
    // corruptions (three bytes: offset, xor) from what follows a zero-length terminator.
    let mut lens = Vec::new();
    let mut i = 0;
    while i + 1 < rest.len() && lens.len() < 64 {
        let l = u16::from_le_bytes([rest[i], rest[i + 1]]) as usize;
        i += 2;
        if l == 0 {
            break;
        }
        lens.push(l % (3 * max_record_payload + 1));
    }
    for (k, &len) in lens.iter().enumerate() {
        let seq = k as u64 + 1;
        producer.append(&message(seq, len), NO_LIMIT).expect("append");
    }
    let mut ring = vec![0u8; layout::region_len(CAPACITY)];
    buf.read(0, &mut ring).expect("copy the ring");
    let mut j = i;
    while j + 2 < rest.len() {
        let off = u16::from_le_bytes([rest[j], rest[j + 1]]) as usize % ring.len();
        let off = if rest[j + 2] & 0x80 != 0 { off % layout::CONTROL_READ_LEN } else { off };
        ring[off] ^= rest[j + 2] | 1;
        j += 3;
    }
    let start = StartPoint { position: CAPACITY as u64, seq: 1, first_seq: 1 };
    let config =
        ReaderConfig { capacity: CAPACITY, max_record_payload, epoch: 9, start, max_message_len: 1 << 20, checksum };
    let mut reader = RingReader::new(config).expect("reader");
    let mut next = 1u64;
    let mut delivered = false;
    let mut behind = false;
    for _ in 0..256 {
        let plan = reader.next_read(16 * 1024, behind);
        let bytes = &ring[plan.ring_offset..plan.ring_offset + plan.len];
        // A READ planned ahead from unvalidated headers stays inside the ring and the READ size.
        if let Some(ahead) = reader.plan_ahead(bytes, plan.position, 16 * 1024) {
            assert!(ahead.ring_offset + ahead.len <= ring.len() && ahead.len <= reader.max_read_len(16 * 1024));
            assert!(ahead.position >= plan.position);
        }
        let mut bad = None;
        let parsed = reader.parse(bytes, plan.position, |seq, payload| {
            if seq < next || lens.get(seq as usize - 1).is_none_or(|&l| message(seq, l) != payload) {
                bad = Some(seq);
            }
            next = seq + 1;
            delivered = true;
        });
        assert_eq!(bad, None, "delivered a message that was not written so (or out of order)");
        let Ok(parsed) = parsed else { return delivered };
        behind = parsed.stop == Stop::End;
        let control = match parsed.stop {
            Stop::End if parsed.consumed > 0 => continue,
            Stop::End | Stop::Stale => return delivered,
            Stop::NotYetWritten | Stop::Torn | Stop::NeedControl => &ring[..layout::CONTROL_READ_LEN],
        };
        let Ok(snap) = ControlSnapshot::decode(control) else { return delivered };
        match reader.apply_control(&snap) {
            Ok(ControlOutcome::Resync { .. }) => {}
            Ok(ControlOutcome::Behind { .. }) if parsed.consumed > 0 => {}
            _ => return delivered,
        }
    }
    delivered
}

/// The one-byte-longer and truncated variants of a seed.
fn with_variants(seeds: Vec<Vec<u8>>) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for s in seeds {
        let mut padded = s.clone();
        padded.extend_from_slice(&[0; 8]);
        out.push(padded);
        if s.len() > 3 {
            out.push(s[..s.len() - 1].to_vec());
        }
        out.push(s);
    }
    out
}

fn seeds_connect() -> Vec<Vec<u8>> {
    let d = ConnectData {
        topic: TopicId::of("prices"),
        start: StartAt::Earliest,
        accepts: PolicySet::of(&[PolicyKind::Block, PolicyKind::Overwrite]),
        node_id: u64::MAX,
        flags: ConnectFlags::WANTS_DOORBELLS,
        auth: ConnectAuth::None,
    };
    // With a proof of a topic credential (a valid tag under a fixed test secret), and the
    // largest such request: every varint at its longest, exactly the 56 bytes allowed.
    let proven = d.with_proof(seed_secret(), 0x0123_4567_89ab_cdef, 1_767_225_600_000).unwrap();
    let largest = ConnectData { topic: TopicId(u64::MAX), ..d }.with_proof(seed_secret(), u64::MAX, u64::MAX).unwrap();
    let challenged = d.with_challenge(0x0f0e_0d0c_0b0a_0908);
    with_variants(vec![
        d.encode().unwrap(),
        proven.encode().unwrap(),
        largest.encode().unwrap(),
        challenged.encode().unwrap(),
    ])
}

fn seeds_accept() -> Vec<Vec<u8>> {
    let a = AcceptData {
        topic: TopicId::of("prices"),
        ring: RemoteAddr { addr: 0x7f00_dead_b000, rkey: 0x1234_5678 },
        region_len: 4096 + 65536,
        capacity: 65536,
        epoch: 1_700_000_000_000_000,
        publisher_id: 42,
        policy: PolicyKind::Overwrite,
        max_record_payload: 16352,
        start_position: 65536 + 96,
        start_seq: 3,
        first_seq: 4,
        checksum: Checksum::XxHash64,
        message_type: Some(MessageTypeTag::new(0x1234, "prices::Quote")),
        tags: AcceptTags::default(),
    };
    let tagged = a.clone().with_tags(Some(7), Some(seed_secret()), Some(seed_secret()));
    with_variants(vec![a.encode().unwrap(), tagged.encode().unwrap()])
}

fn seeds_reject() -> Vec<Vec<u8>> {
    let long = "é".repeat(100);
    with_variants(vec![
        RejectData::new(RejectCode::UnknownTopic, "no publisher").encode().unwrap(),
        RejectData::new(RejectCode::TooManySubscribers, &long).encode().unwrap(),
        RejectData::new(RejectCode::Unauthorized, "the proof's nonce was used before").encode().unwrap(),
    ])
}

fn seeds_listing_accept() -> Vec<Vec<u8>> {
    let a = ListingAccept {
        node_id: 42,
        epoch: 1_700_000_000_000_000,
        region: RemoteAddr { addr: 0x7f00_dead_c000, rkey: 0x1234_5678 },
        region_len: LISTING_REGION_LEN as u32,
        tag: None,
    };
    let tagged = a.clone().with_tag(Some(7), Some(seed_secret()));
    with_variants(vec![a.encode().unwrap(), tagged.encode().unwrap()])
}

fn seeds_topic_listing() -> Vec<Vec<u8>> {
    let topics = ["sensors/a/temp", "sensors/b", "@admin/x"].map(|name| ListedTopic { name: name.into(), instance: 3 });
    let region = TopicListing::fitted(42, 7, 1, topics).encode_region().unwrap();
    // The body alone too: the target wraps it under a good checksum.
    let body = region[LISTING_HEADER_LEN..].to_vec();
    with_variants(vec![region, body])
}

fn seeds_control() -> Vec<Vec<u8>> {
    let msgs = [
        Control::Ack { position: 1 << 40, seq: 12345 },
        Control::DoorbellRequest { armed: true, position: 65536 },
        Control::Bye,
        Control::Doorbell { tail: 99 },
        Control::Dropped { reason: DropReason::TooSlow { lag: 1 << 20 } },
        Control::Dropped { reason: DropReason::ProtocolViolation },
        Control::EndOfStream { final_seq: 7 },
        Control::CreditWanted { position: 65536 + 4096 },
        Control::ReadsInPlace,
    ];
    with_variants(msgs.iter().map(|m| m.encode().unwrap()).collect())
}

fn seeds_announcement() -> Vec<Vec<u8>> {
    let connect: SocketAddr = "127.0.0.1:4791".parse().unwrap();
    let v6: SocketAddr = "[::1]:4791".parse().unwrap();
    let topics: Vec<(String, TopicId)> =
        ["a", "prices", "orders/eu"].iter().map(|t| (t.to_string(), TopicId::of(t))).collect();
    let mut out = Vec::new();
    let mut announcements = Announcement::split(AnnounceKind::Hello, 9, 1, 2, connect, &topics, 1024).unwrap();
    announcements.push(Announcement {
        kind: AnnounceKind::Goodbye,
        domain: 7,
        node_id: 3,
        epoch: 4,
        connect: v6,
        part: 0,
        parts: 1,
        topics,
    });
    for a in &announcements {
        out.push(a.encode().unwrap());
    }
    // The same sealed with the fuzz secret: valid tags, sequence numbers and clocks.
    for (seq, a) in announcements.iter().enumerate() {
        out.push(a.seal(fuzz_secret(), seq as u64 + 1, 1_800_000_000_000).unwrap());
    }
    with_variants(out)
}

fn seeds_ring_records() -> Vec<Vec<u8>> {
    // Corrupted-ring mode: a few message lengths, a terminator, no corruption / a few.
    let mut clean = vec![1u8, 4];
    for l in [10u16, 5000, 300, 70, 12000] {
        clean.extend_from_slice(&l.to_le_bytes());
    }
    clean.extend_from_slice(&[0, 0]);
    let mut corrupt = clean.clone();
    corrupt.extend_from_slice(&[0x20, 0x10, 0x04, 0x40, 0x00, 0x01, 0x08, 0x00, 0x80]);
    // The same rings checksummed with XXH64 (the top bit of the sizing byte, after the mode).
    let mut clean_xxh = clean.clone();
    clean_xxh[1] |= 0x80;
    let mut corrupt_xxh = corrupt.clone();
    corrupt_xxh[1] |= 0x80;
    // Arbitrary mode: a config prefix then a real record.
    let mut arbitrary = vec![0u8];
    arbitrary.extend_from_slice(&1000u64.to_le_bytes());
    arbitrary.extend_from_slice(&65536u64.to_le_bytes());
    arbitrary.extend_from_slice(&1u64.to_le_bytes());
    let payload = b"hello, ring";
    let mut h = RecordHeader {
        position: 65536,
        seq: 1,
        len: payload.len() as u32,
        flags: layout::FLAG_FIRST | layout::FLAG_LAST,
        reserved: 0,
        total_len: payload.len() as u32,
        crc: 0,
    };
    h.crc = h.compute_crc(Checksum::Crc32c, payload);
    arbitrary.extend_from_slice(&h.encode());
    arbitrary.extend_from_slice(payload);
    arbitrary.resize(arbitrary.len().div_ceil(32) * 32, 0);
    vec![clean, corrupt, clean_xxh, corrupt_xxh, arbitrary]
}

fn seeds_ring_control() -> Vec<Vec<u8>> {
    let mut b = vec![0u8; layout::CONTROL_READ_LEN];
    let words = [layout::MAGIC, layout::LAYOUT_VERSION, 0, 9, 200_000, 30, 140_000, 20, 16352, 139_000];
    for (i, w) in words.iter().enumerate() {
        b[i * 8..i * 8 + 8].copy_from_slice(&w.to_le_bytes());
    }
    vec![b]
}

fn seeds_soft_wire() -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let cm = |rnr_retry, depth| CmParams { rnr_retry, initiator_depth: depth, responder_resources: depth }.to_aux();
    for (ty, len, aux) in [
        (FrameType::ConnectReq, 56, cm(7, 16)),
        (FrameType::Accept, 196, cm(6, 128)),
        (FrameType::Reject, 148, 0),
        (FrameType::Send, 4096, 0),
        (FrameType::ReadReq, 0, 65536),
        (FrameType::ReadResp, 65536, 0),
        (FrameType::Ack, 0, 0),
        (FrameType::Hello, HELLO_LEN as u32, 0),
        (FrameType::Ready, 0, cm(7, 16)),
    ] {
        let mut h = Header::new(ty);
        h.len = len;
        h.aux = aux;
        h.psn = 77;
        h.addr = 0x7f00_0000_1000;
        out.push(h.encode().to_vec());
    }
    out
}
