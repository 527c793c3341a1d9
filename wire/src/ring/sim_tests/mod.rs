//! A producer and readers driven through simulated one-sided READs (copies out of the
//! producer's registered buffer), including torn and concurrent READs.

use std::sync::Arc;

use super::layout::{self, RecordHeader};
use super::*;
use rdma_fabric::RegisteredBuffer;

mod in_place;
mod properties;
mod read_planning;

const CAP: usize = 64 * 1024;

/// The deterministic payload of message `seq` with `len` bytes.
fn payload(seq: u64, len: usize) -> Vec<u8> {
    (0..len).map(|i| (seq.wrapping_mul(0x9e37_79b9) as usize ^ (i * 7) ^ (i >> 8)) as u8).collect()
}

fn ring(capacity: usize) -> (Arc<RegisteredBuffer>, RingProducer) {
    ring_checked_by(capacity, Checksum::Crc32c)
}

fn ring_checked_by(capacity: usize, checksum: Checksum) -> (Arc<RegisteredBuffer>, RingProducer) {
    let config = RingConfig { checksum, ..RingConfig::new(capacity, 7) };
    let buf = Arc::new(RegisteredBuffer::new(config.region_len()).unwrap());
    let prod = RingProducer::new(buf.clone(), config).unwrap();
    (buf, prod)
}

fn reader_at(prod: &RingProducer, start: StartPoint) -> RingReader {
    RingReader::new(ReaderConfig {
        capacity: prod.capacity(),
        max_record_payload: prod.max_record_payload(),
        epoch: prod.epoch(),
        start,
        max_message_len: 1 << 30,
        checksum: prod.checksum(),
    })
    .unwrap()
}

/// A ring of `capacity` bytes holding messages 1..=`count` of `len` bytes each, and a reader
/// that started before them.
fn written(capacity: usize, count: u64, len: usize) -> (Arc<RegisteredBuffer>, RingProducer, RingReader) {
    let (buf, mut prod) = ring(capacity);
    let reader = reader_at(&prod, prod.latest());
    for seq in 1..=count {
        prod.append(&payload(seq, len), NO_LIMIT).unwrap();
    }
    (buf, prod, reader)
}

fn sim_read(buf: &RegisteredBuffer, plan: ReadPlan) -> Vec<u8> {
    let mut v = vec![0u8; plan.len];
    buf.read(plan.ring_offset, &mut v).unwrap();
    v
}

fn sim_control(buf: &RegisteredBuffer) -> ControlSnapshot {
    ControlSnapshot::decode(&sim_read(buf, ReadPlan::control())).unwrap()
}

/// Plans the next READ, simulates it and parses it, discarding the messages.
fn read_once(reader: &mut RingReader, buf: &RegisteredBuffer, batch: usize, behind: bool) -> Parsed {
    let plan = reader.next_read(batch, behind);
    reader.parse(&sim_read(buf, plan), plan.position, |_, _| {}).unwrap()
}

/// What a subscriber saw: delivered messages and lost counts, checked as they arrive.
#[derive(Default)]
struct Seen {
    delivered: Vec<u64>,
    lost: u64,
    next: u64,
}

impl Seen {
    fn new(first: u64) -> Seen {
        Seen { next: first, ..Seen::default() }
    }
    /// Checks one parse: the lost messages come first, then consecutive deliveries.
    fn record(&mut self, parsed: &Parsed, got: Vec<(u64, Vec<u8>)>, lens: &dyn Fn(u64) -> usize) {
        self.next += parsed.lost;
        self.lost += parsed.lost;
        for (seq, bytes) in got {
            assert_eq!(seq, self.next, "delivered out of order");
            assert_eq!(bytes, payload(seq, lens(seq)), "corrupt payload for seq {seq}");
            self.delivered.push(seq);
            self.next += 1;
        }
    }
}

/// One READ-and-parse round; applies the control block when asked.
fn step(
    reader: &mut RingReader,
    buf: &RegisteredBuffer,
    batch: usize,
    seen: &mut Seen,
    lens: &dyn Fn(u64) -> usize,
) -> Stop {
    let plan = reader.next_read(batch, batch % 2 == 0);
    let bytes = sim_read(buf, plan);
    let mut got = Vec::new();
    let parsed = reader.parse(&bytes, plan.position, |s, b| got.push((s, b.to_vec()))).unwrap();
    seen.record(&parsed, got, lens);
    if parsed.stop != Stop::End {
        // The simulation always checks the control block (a real flow-controlled reader need
        // not): when not lapped it must never resynchronise.
        let before = reader.consumed_position();
        let c = sim_control(buf);
        if let ControlOutcome::Resync { .. } = reader.apply_control(&c).unwrap() {
            assert!(c.floor > before, "resynchronised without being lapped");
        }
    }
    parsed.stop
}

/// Reads until the reader has accounted for every message up to `last`.
/// A producer on another thread appends messages 1..=`messages` of `len_of` bytes (under flow
/// control, limited by what the reader consumed, or overwriting) while this thread calls
/// `step` (one read, returning where it stopped) until the reader is past the last one or
/// `deadline` is up. Returns what was seen and the reader's counts.
fn race(
    mut prod: RingProducer,
    mut reader: RingReader,
    (overwrite, messages, len_of): (bool, u64, fn(u64) -> usize),
    deadline: std::time::Duration,
    mut step: impl FnMut(&mut RingReader, &mut Seen) -> Stop,
) -> (Seen, ReaderStats) {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    let acked = Arc::new(AtomicU64::new(reader.consumed_position()));
    let stop = Arc::new(AtomicBool::new(false));
    let start = std::time::Instant::now();
    let producer = {
        let (acked, stop) = (acked.clone(), stop.clone());
        std::thread::spawn(move || {
            for seq in 1..=messages {
                let msg = payload(seq, len_of(seq));
                loop {
                    let limit = if overwrite { NO_LIMIT } else { prod.limit_for(acked.load(Ordering::Acquire)) };
                    if let Append::Complete { .. } = prod.append(&msg, limit).unwrap() {
                        break;
                    }
                    if stop.load(Ordering::Relaxed) {
                        return;
                    }
                    std::thread::yield_now();
                }
            }
        })
    };
    let mut seen = Seen::new(1);
    while reader.next_seq() <= messages {
        if start.elapsed() > deadline {
            stop.store(true, Ordering::Relaxed);
            panic!("timed out at seq {} of {messages}", reader.next_seq());
        }
        if step(&mut reader, &mut seen) == Stop::NotYetWritten {
            std::thread::yield_now();
        }
        acked.store(reader.consumed_position(), Ordering::Release);
    }
    stop.store(true, Ordering::Relaxed);
    producer.join().unwrap();
    (seen, reader.stats())
}

fn drain(reader: &mut RingReader, buf: &RegisteredBuffer, seen: &mut Seen, last: u64, lens: &dyn Fn(u64) -> usize) {
    for _ in 0..1_000_000 {
        if reader.next_seq() > last {
            return;
        }
        step(reader, buf, 8192, seen, lens);
    }
    panic!("reader stuck at seq {} (last {last})", reader.next_seq());
}

#[test]
fn single_messages_roundtrip_zero_copy() {
    let (buf, mut prod) = ring(CAP);
    let mut reader = reader_at(&prod, prod.latest());
    for seq in 1..=3u64 {
        assert_eq!(prod.append(&payload(seq, 100), NO_LIMIT).unwrap(), Append::Complete { seq });
    }
    let plan = reader.next_read(4096, false);
    assert_eq!(plan.ring_offset, CONTROL_SIZE);
    let bytes = sim_read(&buf, plan);
    let range = bytes.as_ptr_range();
    let mut n = 0;
    let parsed = reader
        .parse(&bytes, plan.position, |seq, b| {
            assert!(range.contains(&b.as_ptr()), "unfragmented payload must borrow the READ buffer");
            assert_eq!(b, payload(seq, 100));
            n += 1;
        })
        .unwrap();
    assert_eq!(n, 3);
    assert_eq!(parsed.stop, Stop::NotYetWritten);
    assert_eq!(parsed.consumed, 3 * 160);
    assert_eq!(reader.consumed_position(), prod.tail());
    assert_eq!(reader.next_seq(), 4);
    // Reading the same bytes again at the old position is refused as stale.
    assert_eq!(reader.parse(&bytes, plan.position, |_, _| panic!("stale")).unwrap().stop, Stop::Stale);
}

/// A ring numbered from another first sequence (a publisher re-created on its node) is read
/// from that sequence, from the start and from the control block; it is set once, before
/// anything is written.
#[test]
fn a_ring_started_at_another_sequence_is_read_from_it() {
    let (buf, mut prod) = ring(CAP);
    prod.start_at_seq(42).unwrap();
    let mut reader = reader_at(&prod, prod.latest());
    let mut from_earliest = reader_at(&prod, prod.earliest());
    for seq in 42..=44u64 {
        assert_eq!(prod.append(&payload(seq, 100), NO_LIMIT).unwrap(), Append::Complete { seq });
    }
    for r in [&mut reader, &mut from_earliest] {
        let mut got = Vec::new();
        read_and_collect(r, &buf, &mut got);
        assert_eq!(got, (42..=44).map(|seq| (seq, payload(seq, 100))).collect::<Vec<_>>());
    }
    assert_eq!(sim_control(&buf).tail_seq, 45);
    assert_eq!(prod.earliest().seq, 42);
    assert!(matches!(prod.start_at_seq(50), Err(RingError::InvalidConfig(_))), "only before any record");
    let (_buf, mut fresh) = ring(CAP);
    assert!(fresh.start_at_seq(0).is_err(), "sequences start at 1");
}

#[test]
fn records_of_every_small_length_carry_their_checksum_with_either_function() {
    // Lengths on both sides of the one-call checksum over a 128-byte copy (96 payload bytes),
    // odd ones included: every record must pass the reader's checksum, its payload intact.
    for checksum in Checksum::ALL {
        let (buf, mut prod) = ring_checked_by(CAP, checksum);
        let mut reader = reader_at(&prod, prod.latest());
        let len = |seq: u64| (seq as usize - 1) % 131;
        for seq in 1..=262 {
            prod.append(&payload(seq, len(seq)), NO_LIMIT).unwrap();
        }
        let mut seen = Seen::new(1);
        drain(&mut reader, &buf, &mut seen, 262, &len);
        assert_eq!((seen.delivered.len(), seen.lost), (262, 0), "{checksum:?}");
    }
}

#[test]
fn control_block_is_published() {
    let (buf, mut prod) = ring(CAP);
    prod.append(&[1; 10], NO_LIMIT).unwrap();
    let c = sim_control(&buf);
    assert_eq!((c.capacity, c.epoch, c.max_record_payload), (CAP as u64, 7, prod.max_record_payload() as u64));
    assert_eq!((c.tail, c.tail_seq, c.head, c.head_seq), (CAP as u64 + 64, 2, CAP as u64, 1));
}

#[test]
fn a_full_ring_costs_the_producer_no_header_read_back() {
    let (_buf, mut prod) = ring(CAP);
    // Two laps of 64-byte messages (96-byte records): head moves for every record of the second.
    let per_lap = (CAP / 96) as u64;
    for seq in 1..=2 * per_lap {
        prod.append(&payload(seq, 64), NO_LIMIT).unwrap();
    }
    assert!(prod.head() > CAP as u64, "the ring has wrapped");
    let head = prod.head();
    for seq in 2 * per_lap + 1..=3 * per_lap {
        prod.append(&payload(seq, 64), NO_LIMIT).unwrap();
    }
    let moved = (prod.head() - head) / 96;
    assert!(moved + 2 >= per_lap, "head moved past {moved} records");
    // Head walks the producer's own log of its records, not the ring's headers.
    assert_eq!(prod.header_reads(), 0);
    // And head is still right: a reader from the earliest point gets whole messages.
    assert_eq!(prod.earliest().first_seq, prod.head_seq());
}

/// Under flow control a full ring frees room in steps of a sixteenth of the ring, not one
/// record at a time: the floor (and head with it) moves once per step, and never past what
/// the limit allows (the slowest subscriber's acknowledged position). Without a limit
/// (overwrite) it frees exactly what each record overwrites.
#[test]
fn a_full_ring_frees_room_in_steps_and_never_past_the_limit() {
    let (buf, mut prod) = ring(CAP);
    let step = (CAP / 16) as u64;
    let per_lap = (CAP / 96) as u64;
    for seq in 1..=per_lap {
        prod.append(&payload(seq, 64), NO_LIMIT).unwrap();
    }
    // Two laps with a subscriber caught up (the limit a capacity past the tail): count the
    // floor's moves and check its margin over what is overwritten.
    let mut moves = 0;
    let mut floor = sim_control(&buf).floor;
    for seq in per_lap + 1..=3 * per_lap {
        let limit = prod.tail() + CAP as u64;
        prod.append(&payload(seq, 64), limit).unwrap();
        let control = sim_control(&buf);
        let overwritten_to = prod.tail() - CAP as u64;
        assert!(control.floor >= overwritten_to, "the floor covers every overwritten byte");
        assert!(control.floor <= overwritten_to + step, "and frees at most a step ahead");
        assert!(control.head >= control.floor, "head is a message at or past the floor");
        if control.floor != floor {
            moves += 1;
            floor = control.floor;
        }
    }
    assert!(moves <= 2 * 16 + 2, "{moves} floor moves over two laps: one per step, not per record");
    assert!(moves >= 2 * 16 - 2, "{moves} floor moves over two laps");
    // Without a limit (overwrite), each record frees exactly what it overwrites: an overrun
    // subscriber loses no message that is still intact.
    let (buf, mut prod) = ring(CAP);
    for seq in 1..=3 * per_lap {
        prod.append(&payload(seq, 64), NO_LIMIT).unwrap();
        if seq > per_lap + 1 {
            assert_eq!(sim_control(&buf).floor, prod.tail() - CAP as u64, "record {seq}");
        }
    }
    // Under a limit, the step stops at `limit - capacity`: with a limit that leaves no slack
    // (room for exactly the next record), the floor never passes it.
    let (buf, mut prod) = ring(CAP);
    for seq in 1..=per_lap {
        prod.append(&payload(seq, 64), NO_LIMIT).unwrap();
    }
    for seq in per_lap + 1..=2 * per_lap {
        let limit = prod.needed_limit(64);
        assert_eq!(prod.append(&payload(seq, 64), limit).unwrap(), Append::Complete { seq });
        let floor = sim_control(&buf).floor;
        assert!(floor <= limit - CAP as u64, "floor {floor} past the limit's {}", limit - CAP as u64);
    }
}

#[test]
fn padding_fills_the_lap_and_head_moves_past_whole_messages() {
    let (buf, mut prod) = ring(CAP);
    let mrp = prod.max_record_payload();
    // Three full records fill 3/4 of the ring, then a message of two fragments.
    for seq in 1..=3 {
        prod.append(&payload(seq, mrp), NO_LIMIT).unwrap();
    }
    assert_eq!(prod.head(), CAP as u64);
    prod.append(&payload(4, mrp + 100), NO_LIMIT).unwrap();
    // Fragment 1 fills the last quarter; fragment 2 wraps and overwrites message 1 only.
    assert_eq!(prod.head(), CAP as u64 + (CAP / 4) as u64);
    assert_eq!(prod.head_seq(), 2);
    assert_eq!(prod.earliest(), StartPoint { position: prod.head(), seq: 2, first_seq: 2 });
    // Three more full records, then one that does not fit before the end: padding first.
    for seq in 5..=7 {
        prod.append(&payload(seq, mrp), NO_LIMIT).unwrap();
    }
    let before = prod.tail();
    prod.append(&payload(8, mrp), NO_LIMIT).unwrap();
    let pad = RecordHeader::decode(&sim_read(
        &buf,
        ReadPlan { ring_offset: layout::data_offset(before, CAP), len: 32, position: before },
    ))
    .unwrap();
    assert!(pad.is_padding());
    assert_eq!(pad.seq, 8, "padding carries the sequence of the record after it");
    assert_eq!(pad.position + pad.size(), 3 * CAP as u64);
    assert_eq!(prod.tail(), 3 * CAP as u64 + (CAP / 4) as u64);
    // A late reader from the earliest point gets exactly the retained messages.
    let mut reader = reader_at(&prod, prod.earliest());
    let first = prod.earliest().first_seq;
    let mut seen = Seen::new(first);
    let lens = |s: u64| if s == 4 { mrp + 100 } else { mrp };
    drain(&mut reader, &buf, &mut seen, 8, &lens);
    assert_eq!(seen.lost, 0);
    assert_eq!(seen.delivered, (first..=8).collect::<Vec<_>>());
}

#[test]
fn blocked_append_resumes_and_checks_the_payload() {
    let (buf, mut prod) = ring(CAP);
    let mut reader = reader_at(&prod, prod.latest());
    let big = payload(1, 3 * CAP);
    let limit = prod.limit_for(reader.consumed_position());
    let r = prod.append(&big, limit).unwrap();
    let Append::Blocked { seq: 1, written, needed_limit } = r else { panic!("{r:?}") };
    assert!(written > 0 && needed_limit > limit);
    assert_eq!(prod.in_progress().unwrap().written, written);
    assert!(matches!(prod.append(&[0; 5], NO_LIMIT), Err(RingError::MessageInProgress { .. })));
    assert!(matches!(prod.claim(5, NO_LIMIT), Err(RingError::MessageInProgress { .. })));
    assert_eq!(prod.latest().first_seq, 2, "a latest subscriber does not get a message already begun");
    let mut seen = Seen::new(1);
    let lens = |_| 3 * CAP;
    for _ in 0..1000 {
        let limit = prod.limit_for(reader.consumed_position());
        if let Append::Complete { seq } = prod.append(&big, limit).unwrap() {
            assert_eq!(seq, 1);
            break;
        }
        step(&mut reader, &buf, 16384, &mut seen, &lens);
    }
    drain(&mut reader, &buf, &mut seen, 1, &lens);
    assert_eq!(seen.delivered, vec![1]);
}

#[test]
fn sixteen_mib_message_through_a_one_mib_ring() {
    let (buf, mut prod) = ring(1 << 20);
    let mut reader = reader_at(&prod, prod.latest());
    let len = 16 << 20;
    let big = payload(1, len);
    let small = payload(2, 10);
    let lens = |s: u64| if s == 1 { len } else { 10 };
    let mut seen = Seen::new(1);
    let mut rounds = 0;
    while prod.append(&big, prod.limit_for(reader.consumed_position())).unwrap() != (Append::Complete { seq: 1 }) {
        step(&mut reader, &buf, 256 << 10, &mut seen, &lens);
        rounds += 1;
        assert!(rounds < 10_000);
    }
    assert_eq!(prod.append(&small, prod.limit_for(reader.consumed_position())).unwrap(), Append::Complete { seq: 2 });
    drain(&mut reader, &buf, &mut seen, 2, &lens);
    assert_eq!(seen.delivered, vec![1, 2]);
    assert_eq!(seen.lost, 0);
}

#[test]
fn claim_writes_in_place() {
    let (buf, mut prod) = ring(CAP);
    let mut reader = reader_at(&prod, prod.latest());
    let want = payload(1, 300);
    // Old contents where the claim lands are not lent out: a claim starts zeroed.
    let (_, mut dirty) = ring(CAP);
    dirty.append(&[0xee; 300], NO_LIMIT).unwrap();
    let lap = dirty.claim(300, NO_LIMIT).unwrap().unwrap();
    assert!(lap.bytes().iter().all(|&b| b == 0));
    dirty.abandon(lap);

    let mut c = prod.claim(300, NO_LIMIT).unwrap().unwrap();
    assert_eq!((c.payload_len(), c.seq()), (300, 1));
    c.bytes_mut()[100..].copy_from_slice(&want[100..]);
    c.bytes_mut()[..100].copy_from_slice(&want[..100]);
    // Nothing else is written while a claim is outstanding.
    assert!(matches!(prod.append(b"x", NO_LIMIT), Err(RingError::ClaimOutstanding)));
    assert!(matches!(prod.claim(1, NO_LIMIT), Err(RingError::ClaimOutstanding)));
    assert_eq!(prod.commit(c).unwrap(), 1);
    // An abandoned claim publishes nothing, and the producer writes again.
    let abandoned = prod.claim(10, NO_LIMIT).unwrap().unwrap();
    prod.abandon(abandoned);
    assert_eq!(prod.tail_seq(), 2);
    assert!(prod.claim(prod.max_record_payload() + 1, NO_LIMIT).is_err());
    assert!(prod.claim(100, prod.tail() + 64).unwrap().is_none(), "the limit applies");
    let mut seen = Seen::new(1);
    drain(&mut reader, &buf, &mut seen, 1, &|_| 300);
    assert_eq!(seen.delivered, vec![1]);
}

#[test]
fn valid_record_breaking_the_stream_is_corrupt() {
    let (buf, mut prod) = ring(CAP);
    let mut reader = reader_at(&prod, prod.latest());
    prod.append(b"hello", NO_LIMIT).unwrap();
    // Rewrite the record with seq 9 and a valid crc.
    let off = layout::data_offset(CAP as u64, CAP);
    let mut h = RecordHeader::decode(&sim_read(&buf, ReadPlan { ring_offset: off, len: 32, position: 0 })).unwrap();
    h.seq = 9;
    h.crc = h.compute_crc(Checksum::Crc32c, b"hello");
    buf.write(off, &h.encode()).unwrap();
    let plan = reader.next_read(4096, false);
    // The start point's anchor does not match: the reader asks for the control block...
    let p = reader.parse(&sim_read(&buf, plan), plan.position, |_, _| panic!()).unwrap();
    assert_eq!(p.stop, Stop::NeedControl);
    assert!(matches!(reader.apply_control(&sim_control(&buf)).unwrap(), ControlOutcome::Resync { seq: 1, .. }));
    let p = reader.parse(&sim_read(&buf, plan), plan.position, |_, _| panic!()).unwrap();
    assert_eq!(p.stop, Stop::NeedControl);
    // ...and once confirmed in the stream, a wrong sequence is corruption.
    let (buf, mut prod) = ring(CAP);
    let mut reader = reader_at(&prod, prod.latest());
    prod.append(b"one", NO_LIMIT).unwrap();
    prod.append(b"two", NO_LIMIT).unwrap();
    let off = layout::data_offset(CAP as u64 + 64, CAP);
    let mut h = RecordHeader::decode(&sim_read(&buf, ReadPlan { ring_offset: off, len: 32, position: 0 })).unwrap();
    h.seq = 5;
    h.crc = h.compute_crc(Checksum::Crc32c, b"two");
    buf.write(off, &h.encode()).unwrap();
    let plan = reader.next_read(4096, false);
    let r = reader.parse(&sim_read(&buf, plan), plan.position, |_, _| {});
    assert!(matches!(r, Err(RingError::Corrupt { .. })), "{r:?}");
}

#[test]
fn torn_record_is_reread() {
    let (buf, mut prod) = ring(CAP);
    let mut reader = reader_at(&prod, prod.latest());
    prod.append(&payload(1, 200), NO_LIMIT).unwrap();
    let plan = reader.next_read(4096, false);
    let mut bytes = sim_read(&buf, plan);
    bytes[100] ^= 1;
    let p = reader.parse(&bytes, plan.position, |_, _| panic!("torn delivered")).unwrap();
    assert_eq!((p.stop, reader.stats().torn), (Stop::Torn, 1));
    let mut seen = Seen::new(1);
    drain(&mut reader, &buf, &mut seen, 1, &|_| 200);
}

#[test]
fn lapped_reader_counts_losses_exactly() {
    let (buf, prod, mut reader) = written(CAP, 200, 1000);
    let lens = |_| 1000usize;
    let mut seen = Seen::new(1);
    assert_ne!(step(&mut reader, &buf, 4096, &mut seen, &lens), Stop::End);
    assert_eq!(reader.consumed_position(), prod.head(), "resynchronised at head");
    let head_seq = prod.head_seq();
    drain(&mut reader, &buf, &mut seen, 200, &lens);
    assert_eq!(seen.lost, head_seq - 1);
    assert_eq!(seen.delivered, (head_seq..=200).collect::<Vec<_>>());
    assert_eq!(reader.stats().lost, head_seq - 1);
}

#[test]
fn bad_configs_are_refused() {
    let (_buf, prod) = ring(CAP);
    let small = Arc::new(RegisteredBuffer::new(CAP).unwrap());
    assert!(RingProducer::new(small, RingConfig::new(CAP, 1)).is_err());
    let mut start = prod.latest();
    start.position += 1;
    let cfg = ReaderConfig {
        capacity: CAP,
        max_record_payload: prod.max_record_payload(),
        epoch: 7,
        start,
        max_message_len: 1 << 20,
        checksum: Checksum::Crc32c,
    };
    assert!(RingReader::new(cfg).is_err());
    let mut reader = reader_at(&prod, prod.latest());
    let snap = ControlSnapshot { epoch: 8, capacity: CAP as u64, head: CAP as u64, head_seq: 1, ..Default::default() };
    assert!(matches!(reader.apply_control(&snap), Err(RingError::BadControl(_))));
    let snap = ControlSnapshot { epoch: 7, ..snap };
    assert_eq!(reader.apply_control(&snap).unwrap(), ControlOutcome::CaughtUp);
    let snap = ControlSnapshot { tail: CAP as u64 + 64, ..snap };
    assert_eq!(reader.apply_control(&snap).unwrap(), ControlOutcome::Behind { available: 64 });
    // A floor past the reader with a head behind it is a torn snapshot.
    let snap = ControlSnapshot { floor: CAP as u64 + 64, ..snap };
    assert_eq!(reader.apply_control(&snap).unwrap(), ControlOutcome::Retry);
}

/// Reads once (a 4096-byte batch, caught up) and collects what the parse delivers.
fn read_and_collect(reader: &mut RingReader, buf: &RegisteredBuffer, got: &mut Vec<(u64, Vec<u8>)>) -> Parsed {
    let plan = reader.next_read(4096, false);
    reader.parse(&sim_read(buf, plan), plan.position, |s, b| got.push((s, b.to_vec()))).unwrap()
}
