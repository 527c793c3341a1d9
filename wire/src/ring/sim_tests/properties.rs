//! Properties over random message sizes and READ batches (flow control, overwrite loss, torn
//! READs), and a producer and reader on two threads.

use std::time::Duration;

use proptest::prelude::*;

use super::*;

fn sizes(max: usize) -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(prop_oneof![4 => 0usize..600, 2 => 600usize..20_000, 1 => 20_000usize..max], 1..120)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Wherever the producer moves head (overwriting, or in steps under a limit, with padding and
    /// fragments), the record there carries `head_seq` and starts a message unless the earliest
    /// start point says it does not, as the ring's own headers say.
    #[test]
    fn head_always_names_a_record_and_its_sequence_as_the_headers_do(lens in sizes(100_000), limited in any::<bool>(), lag in 0usize..4) {
        let (buf, mut prod) = ring(CAP);
        let mut tails = std::collections::VecDeque::new();
        for (n, &len) in lens.iter().enumerate() {
            // Under a limit, a reader that consumed everything up to `lag` messages ago.
            let consumed = if limited { tails.get(tails.len().saturating_sub(lag + 1)).copied().unwrap_or(prod.head()) } else { 0 };
            let limit = if limited { prod.limit_for(consumed) } else { NO_LIMIT };
            let msg = payload(n as u64 + 1, len);
            let mut steps = 0;
            while let Append::Blocked { .. } = prod.append(&msg, if steps == 0 { limit } else { NO_LIMIT }).unwrap() {
                steps += 1;
            }
            tails.push_back(prod.tail());
            if prod.head() < prod.tail() {
                let at = prod.head();
                let h = RecordHeader::decode(&sim_read(&buf, ReadPlan { ring_offset: layout::data_offset(at, CAP), len: 32, position: at })).unwrap();
                prop_assert_eq!(h.position, at);
                prop_assert!(!h.is_padding(), "head at padding: {:?}", h);
                prop_assert_eq!(h.seq, prod.head_seq());
                // A message larger than the ring overwrote its own start: head is then at one of
                // its later fragments, and the earliest whole message is the next one.
                let whole = prod.earliest().first_seq == prod.head_seq();
                prop_assert_eq!(h.is_first(), whole, "{:?}", h);
            }
        }
        prop_assert_eq!(prod.header_reads(), 0);
    }

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

    /// A reader that keeps a READ planned behind the one in flight whenever it may (as a
    /// subscriber behind large records does), besides READs ahead, with the producer writing
    /// under flow control between every two READs (so READs find records unwritten, partly
    /// written messages, padding and sizes that change): every message exactly once, in
    /// order, byte for byte.
    #[test]
    fn reads_planned_behind_deliver_exactly(lens in sizes(150_000), batch in 2048usize..40_000) {
        let (buf, mut prod) = ring(CAP);
        let mut reader = reader_at(&prod, prod.latest());
        let len_of = |s: u64| lens[s as usize - 1];
        let mut seen = Seen::new(1);
        // The READs on the wire, in the order posted, each with the bytes it found when posted.
        let mut wire: std::collections::VecDeque<(ReadPlan, Vec<u8>)> = Default::default();
        let (mut behind, mut written, mut rounds) = (false, 0, 0);
        while seen.delivered.len() < lens.len() {
            rounds += 1;
            prop_assert!(rounds < 200_000, "stuck at seq {}", reader.next_seq());
            if written < lens.len() {
                let msg = payload(written as u64 + 1, lens[written]);
                if let Append::Complete { .. } = prod.append(&msg, prod.limit_for(reader.consumed_position())).unwrap() {
                    written += 1;
                }
            }
            if wire.is_empty() {
                let plan = reader.next_read(batch, behind);
                wire.push_back((plan, sim_read(&buf, plan)));
            }
            let (plan, bytes) = wire.pop_front().unwrap();
            if wire.is_empty() {
                if let Some(ahead) = reader.plan_ahead(&bytes, plan.position, batch) {
                    wire.push_back((ahead, sim_read(&buf, ahead)));
                }
            }
            let mut got = Vec::new();
            let parsed = reader.parse(&bytes, plan.position, |s, b| got.push((s, b.to_vec()))).unwrap();
            seen.record(&parsed, got, &len_of);
            prop_assert_ne!(parsed.stop, Stop::NeedControl, "no lap under flow control");
            if parsed.stop != Stop::Stale {
                behind = parsed.stop == Stop::End;
            }
            if wire.len() == 1 {
                if let Some(next) = reader.plan_behind(&wire[0].0, batch) {
                    wire.push_back((next, sim_read(&buf, next)));
                }
            }
        }
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
    let (buf, prod) = ring_checked_by(CAP, checksum);
    let reader = reader_at(&prod, prod.latest());
    let len_of: fn(u64) -> usize = |s| (s.wrapping_mul(2_654_435_761) % 30_000) as usize;
    race(prod, reader, (overwrite, messages, len_of), deadline, |reader, seen| {
        step(reader, &buf, 16 << 10, seen, &len_of)
    })
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
