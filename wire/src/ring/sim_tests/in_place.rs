//! The in-place reader ([`RingReader::read_in_place`]) against a producer writing the same
//! memory: racing on another thread, and deterministically with writes landing in the middle
//! of its copies; and against a ring full of garbage.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;

use super::layout::ctrl;
use super::*;
use crate::ring::reader::{TAIL_CHECK_AFTER, WALK_BEFORE_TAIL};

/// One in-place read into a buffer of `buf_len` bytes (grown to what the reader needs),
/// checking what it delivers.
fn in_place_step(
    reader: &mut RingReader,
    mem: &dyn RingMemory,
    buf_len: usize,
    seen: &mut Seen,
    lens: &dyn Fn(u64) -> usize,
) -> Stop {
    let mut buf = vec![0u8; buf_len.max(reader.in_place_need())];
    let mut got = Vec::new();
    let parsed = reader.read_in_place(mem, &mut buf, |s, b| got.push((s, b.to_vec()))).unwrap();
    seen.record(&parsed, got, lens);
    parsed.stop
}

/// A producer on another thread, an in-place reader on this one (with flow control or
/// overwriting): every message delivered is exact and in order; with flow control all arrive.
fn concurrent_in_place(overwrite: bool, messages: u64, buf_len: usize) -> (Seen, ReaderStats) {
    let (buf, prod) = ring(CAP);
    let reader = reader_at(&prod, prod.latest());
    let len_of: fn(u64) -> usize = |s| (s.wrapping_mul(2_654_435_761) % 9_000) as usize;
    race(prod, reader, (overwrite, messages, len_of), Duration::from_secs(60), |reader, seen| {
        in_place_step(reader, &*buf, buf_len, seen, &len_of)
    })
}

#[test]
fn a_racing_in_place_reader_under_flow_control_gets_everything_exactly() {
    let (seen, stats) = concurrent_in_place(false, 20_000, 16 << 10);
    assert_eq!(seen.delivered, (1..=20_000).collect::<Vec<_>>());
    assert_eq!((stats.lost, stats.torn), (0, 0));
}

#[test]
fn a_racing_in_place_reader_under_overwrite_never_delivers_a_torn_record() {
    for buf_len in [64, 4096, 64 << 10] {
        let (seen, stats) = concurrent_in_place(true, 20_000, buf_len);
        eprintln!("overwrite, buffer {buf_len}: {stats:?}");
        assert_eq!(seen.delivered.len() as u64 + seen.lost, 20_000);
        assert!(seen.delivered.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(stats.delivered + stats.lost, 20_000);
    }
}

/// The producer's memory, with a producer that writes a burst of messages (overwriting)
/// in the middle of each copy the reader makes: after the first `cut` of the copy's bytes,
/// or before it starts.
struct RacingMemory {
    buf: Arc<RegisteredBuffer>,
    prod: std::cell::RefCell<RingProducer>,
    lens: Vec<usize>,
    written: std::cell::Cell<usize>,
    /// (fraction of the copy before the writes, messages written) per copy, in turn.
    cuts: Vec<(f64, usize)>,
    copies: std::cell::Cell<usize>,
}

impl RacingMemory {
    fn write_burst(&self, count: usize) {
        for _ in 0..count {
            let n = self.written.get();
            if n == self.lens.len() {
                return;
            }
            let seq = n as u64 + 1;
            let done = self.prod.borrow_mut().append(&payload(seq, self.lens[n]), NO_LIMIT).unwrap();
            assert_eq!(done, Append::Complete { seq });
            self.written.set(n + 1);
        }
    }
}

impl RingMemory for RacingMemory {
    fn load_acquire(&self, offset: usize) -> Result<u64, RingError> {
        self.buf.load_acquire(offset)
    }

    fn copy_to(&self, offset: usize, dst: &mut [u8]) -> Result<(), RingError> {
        let i = self.copies.get();
        self.copies.set(i + 1);
        let (frac, burst) = self.cuts[i % self.cuts.len()];
        let cut = (dst.len() as f64 * frac) as usize;
        self.buf.copy_to(offset, &mut dst[..cut])?;
        self.write_burst(burst);
        self.buf.copy_to(offset + cut, &mut dst[cut..])
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Overwrites landing in the middle of the reader's copies (the writes a racing producer
    /// makes between the copy's loads) never yield a torn message: what is delivered is exact
    /// and in order, and delivered + lost = written.
    #[test]
    fn overwrites_in_the_middle_of_a_copy_never_deliver_a_torn_record(
        lens in prop::collection::vec(prop_oneof![4 => 0usize..600, 1 => 600usize..20_000], 1..200),
        cuts in prop::collection::vec((0.0f64..1.0, 0usize..12), 1..30),
        buf_len in 64usize..40_000,
    ) {
        let (buf, prod) = ring(CAP);
        let mut reader = reader_at(&prod, prod.latest());
        let total = lens.len();
        let len_of = |s: u64| lens[s as usize - 1];
        let mem = RacingMemory {
            buf,
            prod: std::cell::RefCell::new(prod),
            lens: lens.clone(),
            written: std::cell::Cell::new(0),
            cuts,
            copies: std::cell::Cell::new(0),
        };
        let mut seen = Seen::new(1);
        for round in 0..1_000_000 {
            if reader.next_seq() > total as u64 {
                break;
            }
            if in_place_step(&mut reader, &mem, buf_len, &mut seen, &len_of) == Stop::NotYetWritten {
                // Caught up: the producer writes on (no copy is under way).
                prop_assert!(mem.written.get() < total, "caught up at seq {} after everything was written", reader.next_seq());
                mem.write_burst(1 + round % 5);
            }
        }
        prop_assert_eq!(seen.delivered.len() as u64 + seen.lost, total as u64);
        prop_assert!(seen.delivered.windows(2).all(|w| w[0] < w[1]));
    }

    /// A ring whose data area and tail the publisher filled with garbage: the in-place reader
    /// returns records, nothing or an error, each call bounded, and never panics.
    #[test]
    fn garbage_in_the_ring_is_an_error_or_nothing_never_a_panic(
        words in prop::collection::vec(any::<u64>(), 1..512),
        tail_ahead in 0u64..(2 * CAP as u64),
        floor_back in prop_oneof![Just(0u64), 0u64..(2 * CAP as u64)],
        aligned_positions in any::<bool>(),
        buf_len in 32usize..20_000,
    ) {
        let (buf, mut prod) = ring(CAP);
        prod.append(&payload(1, 100), NO_LIMIT).unwrap();
        let mut reader = reader_at(&prod, prod.latest());
        let start = reader.consumed_position();
        for (i, &w) in words.iter().enumerate() {
            // Headers claiming this very position, or not, with any other fields.
            let w = if aligned_positions && i % 4 == 0 { start + (i as u64 / 4) * 32 } else { w };
            buf.atomic_u64(layout::data_offset(start, CAP) + 8 * i).unwrap().store(w, Ordering::Relaxed);
        }
        buf.atomic_u64(ctrl::TAIL).unwrap().store(start + tail_ahead, Ordering::Release);
        buf.atomic_u64(ctrl::FLOOR).unwrap().store(start.saturating_sub(floor_back) + floor_back / 2, Ordering::Release);
        let mut outcome = "nothing";
        for _ in 0..64 {
            let mut b = vec![0u8; buf_len.max(reader.in_place_need())];
            match reader.read_in_place(&*buf, &mut b, |_, _| {}) {
                Ok(p) if p.stop == Stop::NotYetWritten => break,
                Ok(_) => outcome = "records",
                Err(_) => { outcome = "error"; break; }
            }
        }
        prop_assert!(["nothing", "records", "error"].contains(&outcome));
    }
}

/// A committed record claiming more than the ring's records may hold is an error at once (no
/// checksum to blame a torn READ on), and so is one crossing the end of the data area.
#[test]
fn a_broken_committed_record_is_an_error_at_once() {
    let (buf, mut prod) = ring(CAP);
    let mut reader = reader_at(&prod, prod.latest());
    let start = reader.consumed_position();
    prod.append(&payload(1, 100), NO_LIMIT).unwrap();
    let len_word = buf.atomic_u64(layout::data_offset(start, CAP) + 16).unwrap();
    let honest = len_word.load(Ordering::Relaxed);
    len_word.store((honest & !0xffff_ffff) | 0xffff_fff0, Ordering::Relaxed);
    let mut b = vec![0u8; 4096];
    let err = reader.read_in_place(&*buf, &mut b, |_, _| panic!("nothing is delivered")).unwrap_err();
    assert!(matches!(err, RingError::RecordTooLarge { .. }), "{err}");

    // A record committed 64 bytes before the end of the data area, 160 bytes long.
    let (buf, prod) = ring(CAP);
    let near_end = 2 * CAP as u64 - 64;
    let mut reader = reader_at(&prod, StartPoint { position: near_end, seq: 1, first_seq: 1 });
    let flags = layout::FLAG_FIRST | layout::FLAG_LAST;
    let h = RecordHeader { position: near_end, seq: 1, len: 128, flags, reserved: 0, total_len: 128, crc: 0 };
    buf.write(layout::data_offset(near_end, CAP), &h.encode()).unwrap();
    let err = reader.read_in_place(&*buf, &mut b, |_, _| panic!("nothing is delivered")).unwrap_err();
    assert!(matches!(err, RingError::Corrupt { position, .. } if position == near_end), "{err}");
}

/// The producer's memory, counting the loads of the control block's `tail` word, and of the
/// data area's words (the commit-word walk).
struct TailCountingMemory {
    buf: Arc<RegisteredBuffer>,
    tail_loads: std::cell::Cell<u64>,
    data_loads: std::cell::Cell<u64>,
}

impl TailCountingMemory {
    fn new(buf: Arc<RegisteredBuffer>) -> TailCountingMemory {
        TailCountingMemory { buf, tail_loads: Default::default(), data_loads: Default::default() }
    }
}

impl RingMemory for TailCountingMemory {
    fn load_acquire(&self, offset: usize) -> Result<u64, RingError> {
        if offset == ctrl::TAIL {
            self.tail_loads.set(self.tail_loads.get() + 1);
        }
        if offset >= layout::CONTROL_SIZE {
            self.data_loads.set(self.data_loads.get() + 1);
        }
        self.buf.load_acquire(offset)
    }

    fn copy_to(&self, offset: usize, dst: &mut [u8]) -> Result<(), RingError> {
        self.buf.copy_to(offset, dst)
    }
}

/// The reader in place finds committed records by their commit (position) word: it never
/// loads the tail while it reads a stream, even one it keeps catching up with, nor over a few
/// empty reads (the producer's per-message tail stores then hit a line no reader loads); a
/// tail published ahead of the records is not taken for records.
#[test]
fn the_in_place_reader_finds_records_by_their_commit_word_without_loading_the_tail() {
    let (buf, mut prod) = ring(CAP);
    let mut reader = reader_at(&prod, prod.latest());
    let mem = TailCountingMemory::new(buf.clone());
    let len_of = |s: u64| (s as usize * 37) % 3000;
    let mut seen = Seen::new(1);
    let mut seq = 0;
    for round in 0..400u64 {
        for _ in 0..1 + round % 7 {
            seq += 1;
            prod.append(&payload(seq, len_of(seq)), NO_LIMIT).unwrap();
        }
        while in_place_step(&mut reader, &mem, 8192, &mut seen, &len_of) != Stop::NotYetWritten {}
    }
    assert!(prod.tail() > 3 * CAP as u64, "the stream went round the ring");
    assert_eq!(seen.delivered, (1..=seq).collect::<Vec<_>>());
    // A tail ahead of what is committed (only a producer that lies publishes one) is not taken
    // for records; the last round ended with one empty read: up to `TAIL_CHECK_AFTER - 1` in a
    // row do not load the tail.
    buf.atomic_u64(ctrl::TAIL).unwrap().store(prod.tail() + 4096, Ordering::Release);
    for _ in 2..TAIL_CHECK_AFTER {
        let parsed = reader.read_in_place(&mem, &mut [0u8; 8192], |_, _| panic!("nothing is committed")).unwrap();
        assert_eq!(parsed.stop, Stop::NotYetWritten);
    }
    assert_eq!(mem.tail_loads.get(), 0, "the tail was loaded");
}

/// Below a published tail, a record whose commit word names another position never commits:
/// the reader takes it for unwritten for `TAIL_CHECK_AFTER - 1` empty reads, then checks the
/// tail and fails with a typed error (a hostile ring cannot hold its reader forever); an
/// honest record committed meanwhile is read.
#[test]
fn a_misplaced_record_below_the_tail_is_an_error_once_the_reader_checks_the_tail() {
    let (buf, mut prod) = ring(CAP);
    let mut reader = reader_at(&prod, prod.latest());
    let start = reader.consumed_position();
    prod.append(&payload(1, 100), NO_LIMIT).unwrap();
    let position_word = buf.atomic_u64(layout::data_offset(start, CAP)).unwrap();
    position_word.store(start + 4096, Ordering::Release);
    let mut b = vec![0u8; 4096];
    for _ in 1..TAIL_CHECK_AFTER {
        let parsed = reader.read_in_place(&*buf, &mut b, |_, _| panic!("nothing is delivered")).unwrap();
        assert_eq!(parsed.stop, Stop::NotYetWritten);
    }
    let err = reader.read_in_place(&*buf, &mut b, |_, _| panic!("nothing is delivered")).unwrap_err();
    assert!(matches!(err, RingError::Corrupt { position, .. } if position == start), "{err}");

    // The same ring with its record committed after the empty reads: delivered.
    let mut reader = reader_at(&prod, StartPoint { position: start, seq: 1, first_seq: 1 });
    for _ in 1..TAIL_CHECK_AFTER {
        reader.read_in_place(&*buf, &mut b, |_, _| panic!("nothing is committed yet")).unwrap();
    }
    position_word.store(start, Ordering::Release);
    let mut got = Vec::new();
    reader.read_in_place(&*buf, &mut b, |seq, p| got.push((seq, p.to_vec()))).unwrap();
    assert_eq!(got, vec![(1, payload(1, 100))]);
}

/// Caught up, the in-place reader copies nothing; a lapped one counts exactly what it lost.
#[test]
fn an_in_place_reader_lapped_counts_exactly_what_it_lost() {
    let (buf, mut prod) = ring(CAP);
    let mut reader = reader_at(&prod, prod.latest());
    let mut b = vec![0u8; 8192];
    let parsed = reader.read_in_place(&*buf, &mut b, |_, _| panic!("nothing was written")).unwrap();
    assert_eq!(parsed.stop, Stop::NotYetWritten);
    for seq in 1..=100 {
        prod.append(&payload(seq, 1000), NO_LIMIT).unwrap();
    }
    let mut seen = Seen::new(1);
    let len_of = |_| 1000;
    for _ in 0..100 {
        if in_place_step(&mut reader, &*buf, 8192, &mut seen, &len_of) == Stop::NotYetWritten {
            break;
        }
    }
    assert_eq!(seen.delivered.len() as u64 + seen.lost, 100);
    assert!(seen.lost > 0, "a 64 KiB ring holds fewer than 100 KiB of messages");
    assert_eq!(seen.delivered, ((100 - seen.delivered.len() as u64 + 1)..=100).collect::<Vec<_>>());
}

/// Records written while no reader needs a checksum carry none (a READ takes them for torn, in
/// place they read as any other); turning checksums back on completes every retained record's,
/// so a READ from the earliest message gets them all, and later records carry theirs.
#[test]
fn records_without_a_checksum_are_read_in_place_and_completed_for_a_reader_of_reads() {
    let (buf, mut prod) = ring(CAP);
    let earliest = prod.earliest();
    prod.set_checksums(false).unwrap();
    for seq in 1..=20 {
        prod.append(&payload(seq, 100 + seq as usize * 50), NO_LIMIT).unwrap();
    }
    assert_eq!(prod.unchecked_records(), 20);
    let len_of = |s: u64| 100 + s as usize * 50;

    // READ: the first record has no checksum, so it may be torn: nothing is delivered.
    let mut reading = reader_at(&prod, earliest);
    let plan = reading.next_read(64 << 10, true);
    let parsed = reading.parse(&sim_read(&buf, plan), plan.position, |_, _| panic!("not delivered")).unwrap();
    assert_eq!((parsed.stop, reading.stats().torn), (Stop::Torn, 1));

    // In place: every message, exact.
    let mut in_place = reader_at(&prod, earliest);
    let mut seen = Seen::new(1);
    while in_place_step(&mut in_place, &*buf, 64 << 10, &mut seen, &len_of) != Stop::NotYetWritten {}
    assert_eq!(seen.delivered, (1..=20).collect::<Vec<_>>());

    // Back on: the 20 retained records get their checksums, and a READ delivers them all.
    assert_eq!(prod.set_checksums(true).unwrap(), 20);
    assert_eq!(prod.set_checksums(true).unwrap(), 0, "nothing left to complete");
    prod.append(&payload(21, len_of(21)), NO_LIMIT).unwrap();
    assert_eq!(prod.unchecked_records(), 20, "a record written with checksums on has one");
    let mut seen = Seen::new(1);
    drain(&mut reading, &buf, &mut seen, 21, &len_of);
    assert_eq!(seen.delivered, (1..=21).collect::<Vec<_>>());
    assert_eq!(seen.lost, 0);
    let mut seen = Seen::new(21);
    while in_place_step(&mut in_place, &*buf, 64 << 10, &mut seen, &len_of) != Stop::NotYetWritten {}
    assert_eq!(seen.delivered, vec![21], "the reader in place reads completed records as before");
}

/// A reader far behind walks the commit words of `WALK_BEFORE_TAIL` records only, then loads the
/// tail once and copies every record below it: a walk is a chain of dependent loads, one per
/// record, that would cost more than the tail's line.
#[test]
fn a_reader_far_behind_copies_up_to_the_tail_after_a_short_walk() {
    let (buf, mut prod) = ring(CAP);
    let mut reader = reader_at(&prod, prod.latest());
    let mem = TailCountingMemory::new(buf.clone());
    for seq in 1..=100u64 {
        prod.append(&payload(seq, 40), NO_LIMIT).unwrap();
    }
    let mut delivered = Vec::new();
    let mut out = vec![0u8; CAP];
    reader.read_in_place(&mem, &mut out, |seq, bytes| delivered.push((seq, bytes.to_vec()))).unwrap();
    let expected: Vec<(u64, Vec<u8>)> = (1..=100u64).map(|seq| (seq, payload(seq, 40))).collect();
    assert_eq!(delivered, expected);
    assert_eq!(mem.tail_loads.get(), 1, "the tail is loaded once, after the walk");
    assert_eq!(mem.data_loads.get(), 2 * WALK_BEFORE_TAIL as u64, "two words of each record walked");
}
