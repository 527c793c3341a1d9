//! A producer and readers driven through simulated one-sided READs (copies out of the
//! producer's registered buffer), including torn and concurrent READs.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use proptest::prelude::*;

use super::layout::{self, RecordHeader};
use super::*;
use crate::fabric::RegisteredBuffer;

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

#[test]
fn control_block_is_published() {
    let (buf, mut prod) = ring(CAP);
    prod.append(&[1; 10], NO_LIMIT).unwrap();
    let c = sim_control(&buf);
    assert_eq!((c.capacity, c.epoch, c.max_record_payload), (CAP as u64, 7, prod.max_record_payload() as u64));
    assert_eq!((c.tail, c.tail_seq, c.head, c.head_seq), (CAP as u64 + 64, 2, CAP as u64, 1));
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

fn sizes(max: usize) -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(prop_oneof![4 => 0usize..600, 2 => 600usize..20_000, 1 => 20_000usize..max], 1..120)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Flow control: every message exactly once, in order, byte for byte.
    #[test]
    fn flow_controlled_delivery_is_exact(lens in sizes(150_000), batches in prop::collection::vec(32usize..40_000, 1..16)) {
        let (buf, mut prod) = ring(CAP);
        let mut reader = reader_at(&prod, prod.latest());
        let len_of = |s: u64| lens[s as usize - 1];
        let mut seen = Seen::new(1);
        let mut i = 0;
        for (n, &len) in lens.iter().enumerate() {
            let msg = payload(n as u64 + 1, len);
            loop {
                match prod.append(&msg, prod.limit_for(reader.consumed_position())).unwrap() {
                    Append::Complete { seq } => { prop_assert_eq!(seq, n as u64 + 1); break; }
                    Append::Blocked { .. } => {
                        step(&mut reader, &buf, batches[i % batches.len()], &mut seen, &len_of);
                        i += 1;
                        prop_assert!(i < 1_000_000);
                    }
                }
            }
            if n % 3 == 0 {
                step(&mut reader, &buf, batches[i % batches.len()], &mut seen, &len_of);
                i += 1;
            }
        }
        drain(&mut reader, &buf, &mut seen, lens.len() as u64, &len_of);
        prop_assert_eq!(seen.lost, 0);
        prop_assert_eq!(seen.delivered, (1..=lens.len() as u64).collect::<Vec<_>>());
    }

    /// Overwrite with a slow reader: delivered + lost = produced, deliveries strictly
    /// increasing and exact.
    #[test]
    fn overwrite_loss_is_exact(lens in sizes(100_000), bursts in prop::collection::vec(0usize..12, 1..20).prop_filter("some progress", |b| b.iter().any(|&x| x > 0)), batch in 32usize..30_000) {
        let (buf, mut prod) = ring(CAP);
        let mut reader = reader_at(&prod, prod.latest());
        let len_of = |s: u64| lens[s as usize - 1];
        let mut seen = Seen::new(1);
        let mut n = 0;
        let mut b = 0;
        while n < lens.len() {
            for _ in 0..bursts[b % bursts.len()] {
                if n < lens.len() {
                    n += 1;
                    prop_assert_eq!(prod.append(&payload(n as u64, lens[n - 1]), NO_LIMIT).unwrap(), Append::Complete { seq: n as u64 });
                }
            }
            b += 1;
            step(&mut reader, &buf, batch, &mut seen, &len_of);
        }
        drain(&mut reader, &buf, &mut seen, lens.len() as u64, &len_of);
        prop_assert_eq!(seen.delivered.len() as u64 + seen.lost, lens.len() as u64);
        prop_assert!(seen.delivered.windows(2).all(|w| w[0] < w[1]));
        prop_assert_eq!(reader.stats().lost, seen.lost);
    }

    /// READs torn by a concurrent write (part copied before, part after, in either order)
    /// never yield a corrupt message, and the accounting stays exact.
    #[test]
    fn torn_reads_never_corrupt(
        lens in sizes(40_000),
        cuts in prop::collection::vec((0.0f64..1.0, any::<bool>(), 0usize..6), 1..40),
        batch in 64usize..40_000,
        xxh in any::<bool>(),
    ) {
        let (buf, mut prod) = ring_checked_by(CAP, if xxh { Checksum::XxHash64 } else { Checksum::Crc32c });
        let mut reader = reader_at(&prod, prod.latest());
        let len_of = |s: u64| lens[s as usize - 1];
        let mut seen = Seen::new(1);
        let mut n = 0;
        let mut round = 0;
        while n < lens.len() {
            let (frac, tail_first, burst) = cuts[round % cuts.len()];
            round += 1;
            let plan = reader.next_read(batch, burst % 2 == 0);
            let cut = (plan.len as f64 * frac) as usize;
            let mut bytes = vec![0u8; plan.len];
            let (first, second) = if tail_first { (cut..plan.len, 0..cut) } else { (0..cut, cut..plan.len) };
            buf.read(plan.ring_offset + first.start, &mut bytes[first.clone()]).unwrap();
            for _ in 0..burst.max(1) {
                if n < lens.len() {
                    n += 1;
                    prod.append(&payload(n as u64, lens[n - 1]), NO_LIMIT).unwrap();
                }
            }
            buf.read(plan.ring_offset + second.start, &mut bytes[second.clone()]).unwrap();
            let mut got = Vec::new();
            let parsed = reader.parse(&bytes, plan.position, |s, b| got.push((s, b.to_vec()))).unwrap();
            seen.record(&parsed, got, &len_of);
            if parsed.stop != Stop::End {
                reader.apply_control(&sim_control(&buf)).unwrap();
            }
        }
        drain(&mut reader, &buf, &mut seen, lens.len() as u64, &len_of);
        prop_assert_eq!(seen.delivered.len() as u64 + seen.lost, lens.len() as u64);
    }
}

fn concurrent(overwrite: bool, checksum: Checksum, messages: u64, deadline: Duration) -> (Seen, ReaderStats) {
    let (buf, mut prod) = ring_checked_by(CAP, checksum);
    let reader = reader_at(&prod, prod.latest());
    let len_of = |s: u64| (s.wrapping_mul(2_654_435_761) % 30_000) as usize;
    let acked = Arc::new(AtomicU64::new(reader.consumed_position()));
    let stop = Arc::new(AtomicBool::new(false));
    let start = Instant::now();
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
                    std::hint::spin_loop();
                    std::thread::yield_now();
                }
            }
        })
    };
    let mut reader = reader;
    let mut seen = Seen::new(1);
    while reader.next_seq() <= messages {
        if start.elapsed() > deadline {
            stop.store(true, Ordering::Relaxed);
            panic!("timed out at seq {} of {messages}", reader.next_seq());
        }
        if step(&mut reader, &buf, 16 << 10, &mut seen, &len_of) == Stop::NotYetWritten {
            std::thread::yield_now();
        }
        acked.store(reader.consumed_position(), Ordering::Release);
    }
    producer.join().unwrap();
    (seen, reader.stats())
}

#[test]
fn concurrent_flow_controlled_reader_gets_everything() {
    let (seen, stats) = concurrent(false, Checksum::Crc32c, 3000, Duration::from_secs(60));
    assert_eq!(seen.delivered, (1..=3000).collect::<Vec<_>>());
    assert_eq!(stats.lost, 0);
}

#[test]
fn concurrent_overwrite_reader_never_sees_corruption() {
    for checksum in Checksum::ALL {
        let (seen, stats) = concurrent(true, checksum, 5000, Duration::from_secs(60));
        eprintln!("overwrite, {checksum:?}: {stats:?}");
        assert_eq!(seen.delivered.len() as u64 + seen.lost, 5000);
        assert!(seen.delivered.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(stats.delivered + stats.lost, 5000);
    }
}

/// The reader checks records with the function its configuration names: one told the wrong
/// function takes every record for torn and delivers nothing.
#[test]
fn records_are_checked_with_the_rings_function() {
    for (written, checked) in [(Checksum::Crc32c, Checksum::XxHash64), (Checksum::XxHash64, Checksum::Crc32c)] {
        let (buf, mut prod) = ring_checked_by(CAP, written);
        let start = prod.latest();
        prod.append(&payload(1, 100), NO_LIMIT).unwrap();
        let mut right = reader_at(&prod, start);
        let mut got = Vec::new();
        let parsed = read_and_collect(&mut right, &buf, &mut got);
        assert_eq!((parsed.stop, got), (Stop::NotYetWritten, vec![(1, payload(1, 100))]));
        let mut wrong = RingReader::new(ReaderConfig {
            capacity: CAP,
            max_record_payload: prod.max_record_payload(),
            epoch: prod.epoch(),
            start,
            max_message_len: 1 << 20,
            checksum: checked,
        })
        .unwrap();
        let mut got = Vec::new();
        let parsed = read_and_collect(&mut wrong, &buf, &mut got);
        assert_eq!((parsed.stop, got.len(), wrong.stats().torn), (Stop::Torn, 0, 1));
    }
}

fn read_and_collect(reader: &mut RingReader, buf: &RegisteredBuffer, got: &mut Vec<(u64, Vec<u8>)>) -> Parsed {
    let plan = reader.next_read(4096, false);
    reader.parse(&sim_read(buf, plan), plan.position, |s, b| got.push((s, b.to_vec()))).unwrap()
}

/// A reader that is behind ends its READs just past a record boundary: with 64 KiB records
/// and a 256 KiB batch, a READ of the batch would carry three records and most of a fourth
/// that the next READ brings again.
#[test]
fn behind_reads_end_at_a_record_boundary() {
    let (cap, len) = (1 << 20, 64 * 1024);
    let (buf, _prod, mut reader) = written(cap, 10, len);
    let record = layout::record_size(len) as usize;
    let batch = 256 * 1024;
    let mut behind = false;
    let mut delivered = 0;
    let mut reads = 0;
    while delivered < 10 {
        let plan = reader.next_read(batch, behind);
        reads += 1;
        if let Some(ahead) = reader.plan_ahead(&sim_read(&buf, plan), plan.position, batch) {
            assert_eq!(ahead.len, 3 * record + HEADER_LEN, "a READ ahead also ends at a boundary");
        }
        let parsed = reader.parse(&sim_read(&buf, plan), plan.position, |_, _| delivered += 1).unwrap();
        if behind {
            assert_eq!(plan.len, (3 * record + HEADER_LEN).min(cap - (plan.position as usize % cap)));
            assert_eq!(parsed.consumed % record, 0, "only whole records");
        }
        behind = parsed.stop == Stop::End;
    }
    // A probe finds the first header, then each READ brings three whole records.
    assert_eq!(reads, 5);
}

/// A reader that is behind plans READs as large as the last record it consumed, so a stream
/// of records larger than the batch costs one READ per record, not a short READ plus a whole
/// one; a caught-up reader keeps to the batch.
#[test]
fn behind_reader_reads_whole_large_records_at_once() {
    let len = 10_000;
    let (buf, _prod, mut reader) = written(CAP, 3, len);
    let record = layout::record_size(len) as usize;
    let mut reads = 0;
    let mut behind = false;
    let mut got = Vec::new();
    let mut more = Vec::new();
    while got.len() < 3 {
        let plan = reader.next_read(4096, behind);
        reads += 1;
        let bytes = sim_read(&buf, plan);
        more.push(reader.plan_ahead(&bytes, plan.position, 4096).is_some());
        let parsed = reader.parse(&bytes, plan.position, |s, _| got.push(s)).unwrap();
        behind = parsed.stop == Stop::End;
    }
    // The first record needs a short READ (the header) and a whole one; the next two, one each.
    // Each READ but the probe also brings the header after its record: it shows whether more
    // follows, and the next READ can go out before the checksums run.
    assert_eq!((got, reads), (vec![1, 2, 3], 4));
    assert_eq!(more, [true, true, true, false]);
    assert!(reader.next_read(4096, true).len >= record);
    assert_eq!(reader.next_read(4096, false).len, 4096);
}

/// Every READ the reader plans fits the destination size it announces, whatever it last saw.
#[test]
fn planned_reads_fit_the_announced_destination() {
    let (buf, mut prod) = ring(CAP);
    let mut reader = reader_at(&prod, prod.latest());
    let largest = prod.max_record_payload();
    prod.append(&payload(1, largest), NO_LIMIT).unwrap();
    let max = reader.max_read_len(4096);
    let mut got = Vec::new();
    let mut behind = false;
    while got.is_empty() {
        let plan = reader.next_read(4096, behind);
        assert!(plan.len <= max, "{} > {max}", plan.len);
        let parsed = reader.parse(&sim_read(&buf, plan), plan.position, |s, _| got.push(s)).unwrap();
        behind = parsed.stop == Stop::End;
    }
    prod.append(&payload(2, 10), NO_LIMIT).unwrap();
    // Behind after the largest record: the next READ asks for it plus a header, and still fits.
    assert!(reader.next_read(4096, true).len <= max);
}

/// A caught-up reader polls with a small READ (the last record and a header, at least a page),
/// not a whole batch of bytes that are not written yet; a reader behind READs the batch.
#[test]
fn caught_up_reader_probes_small_and_behind_reader_reads_the_batch() {
    let (buf, mut prod) = ring(CAP);
    let mut reader = reader_at(&prod, prod.latest());
    prod.append(&payload(1, 64), NO_LIMIT).unwrap();
    let plan = reader.next_read(32 * 1024, false);
    assert_eq!(plan.len, PROBE_LEN);
    let parsed = reader.parse(&sim_read(&buf, plan), plan.position, |_, _| {}).unwrap();
    assert_eq!((parsed.delivered, parsed.stop), (1, Stop::NotYetWritten));
    assert_eq!(reader.next_read(32 * 1024, false).len, PROBE_LEN);
    assert_eq!(reader.next_read(32 * 1024, true).len, 32 * 1024);
    assert_eq!(reader.next_read(2048, false).len, 2048, "never more than the batch when caught up");
}

/// After the control block showed written data past the position (a lap, or data behind), the
/// next READ is a whole batch even though the last data READ had caught up: what waits is READ
/// at once, not probed page by page.
#[test]
fn a_control_block_showing_data_makes_the_next_read_a_batch() {
    let (buf, prod, mut reader) = written(CAP, 200, 1000);
    // The reader was lapped: its READ finds a later lap and asks for the control block.
    let parsed = read_once(&mut reader, &buf, 16 * 1024, false);
    assert_eq!(parsed.stop, Stop::NeedControl);
    assert!(matches!(reader.apply_control(&sim_control(&buf)).unwrap(), ControlOutcome::Resync { .. }));
    let plan = reader.next_read(16 * 1024, false);
    assert_eq!(plan.len, 16 * 1024, "a batch after the resync");
    let parsed = reader.parse(&sim_read(&buf, plan), plan.position, |_, _| {}).unwrap();
    assert!(parsed.delivered > 10);
    // Caught up at the tail, the control block shows nothing more: back to probing.
    while reader.consumed_position() < prod.tail() {
        read_once(&mut reader, &buf, 16 * 1024, true);
    }
    let parsed = read_once(&mut reader, &buf, 16 * 1024, false);
    assert_eq!((parsed.consumed, parsed.stop), (0, Stop::NotYetWritten));
    assert!(matches!(reader.apply_control(&sim_control(&buf)).unwrap(), ControlOutcome::CaughtUp));
    assert_eq!(reader.next_read(16 * 1024, false).len, PROBE_LEN);
}

/// A caught-up reader's probe grows to twice what the last READ brought only when that was
/// several records (a trickle of small messages); after one large message it stays at that
/// message's size, so empty probes do not move two messages' worth of stale bytes.
#[test]
fn probes_grow_with_a_trickle_of_small_records_but_not_with_one_large_one() {
    let (buf, mut prod, mut reader) = written(CAP, 12, 200);
    let parsed = read_once(&mut reader, &buf, 32 * 1024, false);
    assert_eq!((parsed.delivered, parsed.stop), (12, Stop::NotYetWritten));
    assert_eq!(reader.next_read(32 * 1024, false).len, 2 * parsed.consumed);
    prod.append(&payload(13, 10_000), NO_LIMIT).unwrap();
    let mut got = Vec::new();
    while got.is_empty() {
        let plan = reader.next_read(32 * 1024, false);
        reader.parse(&sim_read(&buf, plan), plan.position, |s, _| got.push(s)).unwrap();
    }
    assert_eq!(got, [13]);
    let record = layout::record_size(10_000) as usize;
    assert_eq!(reader.next_read(32 * 1024, false).len, record + layout::HEADER_LEN);
}

/// A reader whose READs are copies probes an empty ring with at most the bound it gives, not
/// the whole next record; once a probe has seen part of a record, the next READ brings all of
/// it whatever the bound.
#[test]
fn probes_of_a_bounded_reader_stay_short_until_a_record_shows_its_length() {
    let len = 10_000;
    let (buf, mut prod, mut reader) = written(CAP, 1, len);
    let record = layout::record_size(len) as usize;
    let parsed = read_once(&mut reader, &buf, 32 * 1024, true);
    assert_eq!(parsed.delivered, 1);
    assert_eq!(reader.next_read(32 * 1024, false).len, record + layout::HEADER_LEN, "unbounded: the next record");
    let probe = reader.next_read_at_most(32 * 1024, false, PROBE_LEN);
    assert_eq!(probe.len, PROBE_LEN);
    let parsed = reader.parse(&sim_read(&buf, probe), probe.position, |_, _| {}).unwrap();
    assert_eq!((parsed.consumed, parsed.stop), (0, Stop::NotYetWritten), "nothing written yet");
    prod.append(&payload(2, len), NO_LIMIT).unwrap();
    let probe = reader.next_read_at_most(32 * 1024, false, PROBE_LEN);
    let parsed = reader.parse(&sim_read(&buf, probe), probe.position, |_, _| {}).unwrap();
    assert_eq!((parsed.delivered, parsed.stop), (0, Stop::End), "the probe saw only the record's start");
    let plan = reader.next_read_at_most(32 * 1024, true, PROBE_LEN);
    assert!(plan.len >= record, "the rest of a record seen partly is READ whole: {}", plan.len);
    let mut got = Vec::new();
    reader.parse(&sim_read(&buf, plan), plan.position, |s, _| got.push(s)).unwrap();
    assert_eq!(got, [2]);
    assert_eq!(reader.next_read_at_most(32 * 1024, false, 64).len, layout::HEADER_LEN.max(64));
}

/// The READ planned ahead from a completed READ's headers alone is the READ the reader plans
/// after validating it; none is planned when the READ ends on a record boundary; and when a
/// record turns out torn, the parse stops before it and the READ ahead is reported stale.
#[test]
fn reads_planned_ahead_from_headers_match_the_parse_or_are_stale() {
    let (buf, mut prod) = ring(CAP);
    let start = prod.latest();
    for seq in 1..=6 {
        prod.append(&payload(seq, 3000), NO_LIMIT).unwrap();
    }
    let record = layout::record_size(3000) as usize;
    // 8 KiB holds two records and part of the third.
    let mut reader = reader_at(&prod, start);
    let plan = reader.next_read(8192, true);
    let bytes = sim_read(&buf, plan);
    let ahead = reader.plan_ahead(&bytes, plan.position, 8192).expect("a record continues past the READ");
    reader.parse(&bytes, plan.position, |_, _| {}).unwrap();
    assert_eq!(ahead, reader.next_read(8192, true));
    assert_eq!(ahead.position, plan.position + 2 * record as u64);
    // A READ ending exactly after two records says nothing about the third.
    let reader = reader_at(&prod, start);
    let exact = ReadPlan { len: 2 * record, ..reader.next_read(8192, true) };
    assert_eq!(reader.plan_ahead(&sim_read(&buf, exact), exact.position, 8192), None);
    // The second record is torn in this READ: the READ ahead (planned past it) is stale.
    let mut reader = reader_at(&prod, start);
    let plan = reader.next_read(8192, true);
    let mut bytes = sim_read(&buf, plan);
    bytes[record + 100] ^= 0x40;
    let ahead = reader.plan_ahead(&bytes, plan.position, 8192).expect("headers look fine");
    let parsed = reader.parse(&bytes, plan.position, |_, _| {}).unwrap();
    assert_eq!((parsed.delivered, parsed.stop), (1, Stop::Torn));
    let parsed = reader.parse(&sim_read(&buf, ahead), ahead.position, |_, _| panic!("stale data delivered")).unwrap();
    assert_eq!(parsed.stop, Stop::Stale);
}
