//! How the reader plans its READs: batches while behind, probes while caught up, READs ahead.

use super::*;

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

/// Behind a stream of records larger than the batch, the READ after the one in flight is
/// planned before that one completes: from the header it ends with, of the size last consumed.
/// Driven as a subscriber drives it (always two READs out, validated in order), every message
/// arrives in order, one READ per record after the first; a READ guessed wrong (sizes that
/// change) is stale or short, never delivers anything twice or out of order.
#[test]
fn reads_planned_behind_the_one_in_flight_keep_two_on_the_wire() {
    let batch = 4096;
    let drive = |sizes: &[usize]| -> (Vec<u64>, usize, usize) {
        let (buf, mut prod) = ring(CAP);
        let mut reader = reader_at(&prod, prod.latest());
        for (i, &len) in sizes.iter().enumerate() {
            prod.append(&payload(i as u64 + 1, len), NO_LIMIT).unwrap();
        }
        let (mut got, mut reads, mut behind_reads) = (Vec::new(), 0, 0);
        // READs on the wire, in the order posted, each with the bytes it brings (posted =
        // read now: the producer writes nothing meanwhile).
        let mut wire: std::collections::VecDeque<(ReadPlan, Vec<u8>)> = Default::default();
        let mut behind = false;
        while got.len() < sizes.len() && reads < 4 * sizes.len() + 8 {
            if wire.is_empty() {
                let plan = reader.next_read(batch, behind);
                wire.push_back((plan, sim_read(&buf, plan)));
                reads += 1;
            }
            let (plan, bytes) = wire.pop_front().unwrap();
            let ahead = reader.plan_ahead(&bytes, plan.position, batch);
            if let (Some(ahead), true) = (ahead, wire.is_empty()) {
                wire.push_back((ahead, sim_read(&buf, ahead)));
                reads += 1;
            }
            let parsed = reader.parse(&bytes, plan.position, |s, _| got.push(s)).unwrap();
            if parsed.stop != Stop::Stale {
                behind = parsed.stop == Stop::End;
            }
            // What the subscriber does once this READ's messages are delivered: one more READ
            // behind the one in flight.
            if let Some(next) = wire.back().filter(|_| wire.len() == 1).and_then(|(p, _)| reader.plan_behind(p, batch))
            {
                wire.push_back((next, sim_read(&buf, next)));
                reads += 1;
                behind_reads += 1;
            }
        }
        (got, reads, behind_reads)
    };
    let expected = |n: u64| (1..=n).collect::<Vec<u64>>();
    // Ten 6,000-byte records: a probe, a READ of the first record, then one per record.
    let (got, reads, behind_reads) = drive(&[6000; 10]);
    assert_eq!(got, expected(10));
    assert!(behind_reads >= 7, "READs planned behind the one in flight: {behind_reads}");
    assert!(reads <= 12, "one READ per record after the first: {reads}");
    // Sizes that change: guesses go wrong, every message still arrives once, in order.
    let sizes = [6000, 9000, 5000, 5000, 12000, 4500, 4500, 4500, 7000, 6000];
    let (got, _, _) = drive(&sizes);
    assert_eq!(got, expected(sizes.len() as u64));
}

/// No READ is planned behind one that is not a READ of one large record of the size last
/// consumed from the position, nor when the next record would not fit before the end of the
/// data area.
#[test]
fn no_read_is_planned_behind_small_records_another_position_or_the_end_of_the_ring() {
    let batch = 4096;
    let len = 6000;
    let record = layout::record_size(len) as usize;
    // Consume two records, so the reader knows the size.
    let (buf, _prod, mut reader) = written(CAP, 9, len);
    let plan = reader.next_read(batch, false);
    reader.parse(&sim_read(&buf, plan), plan.position, |_, _| {}).unwrap();
    let plan = reader.next_read(batch, true);
    reader.parse(&sim_read(&buf, plan), plan.position, |_, _| {}).unwrap();
    let in_flight = reader.next_read(batch, true);
    assert_eq!(in_flight.len, record + HEADER_LEN);
    let behind = reader.plan_behind(&in_flight, batch).expect("one large record of the last size");
    assert_eq!((behind.position, behind.len), (in_flight.position + record as u64, record + HEADER_LEN));
    // Not a READ from the position.
    let elsewhere = ReadPlan { position: in_flight.position + 32, ..in_flight };
    assert_eq!(reader.plan_behind(&elsewhere, batch), None);
    // Not one record of the last size and its header.
    assert_eq!(reader.plan_behind(&ReadPlan { len: record, ..in_flight }, batch), None);
    // Records no larger than the batch are READ many at a time: no guessing.
    assert_eq!(reader.plan_behind(&in_flight, record + HEADER_LEN), None);
    // A parse that consumed a record and found nothing written after it (a probe of an idle
    // ring that found one message) proves nothing of the next record: no guessing.
    let (buf, mut prod, mut reader) = written(CAP, 2, len);
    let mut stop = Stop::End;
    while reader.next_seq() <= 2 {
        let plan = reader.next_read(batch, true);
        stop = reader.parse(&sim_read(&buf, plan), plan.position, |_, _| {}).unwrap().stop;
    }
    assert_eq!(stop, Stop::NotYetWritten, "the second record, and nothing after it");
    let in_flight = reader.next_read(batch, true);
    assert_eq!(in_flight.len, record + HEADER_LEN);
    assert_eq!(reader.plan_behind(&in_flight, batch), None, "caught up");
    prod.append(&payload(3, len), NO_LIMIT).unwrap();
    prod.append(&payload(4, len), NO_LIMIT).unwrap();
    let plan = reader.next_read(batch, true);
    let parsed = reader.parse(&sim_read(&buf, plan), plan.position, |_, _| {}).unwrap();
    assert_eq!((parsed.delivered, parsed.stop), (1, Stop::End));
    let in_flight = reader.next_read(batch, true);
    assert!(reader.plan_behind(&in_flight, batch).is_some(), "behind again");
    // Near the end of the data area the next record may be padded to the start: no guessing.
    let (buf, _prod, mut reader) = written(CAP, 10, len);
    let mut plan = reader.next_read(batch, false);
    let mut last = None;
    for _ in 0..10 {
        let parsed = reader.parse(&sim_read(&buf, plan), plan.position, |_, _| {}).unwrap();
        assert_ne!(parsed.stop, Stop::Stale);
        plan = reader.next_read(batch, parsed.stop == Stop::End);
        last = Some(plan);
        let room = layout::room_to_end(plan.position + record as u64, CAP) as usize;
        if room < record + HEADER_LEN && plan.len == record + HEADER_LEN {
            assert_eq!(reader.plan_behind(&plan, batch), None, "at {}", plan.position);
            return;
        }
    }
    panic!("no READ near the end of the data area: {last:?}");
}

/// A caught-up reader of records larger than the batch probes with a page, not a batch: no
/// probe could bring such a record whole, and the READ after the probe that finds the header
/// brings all of it.
#[test]
fn a_caught_up_reader_of_records_larger_than_the_batch_probes_with_a_page() {
    let (batch, len) = (4096, 10_000);
    let (buf, mut prod, mut reader) = written(CAP, 1, len);
    let record = layout::record_size(len) as usize;
    let mut got = Vec::new();
    while got.is_empty() {
        let plan = reader.next_read(batch, true);
        reader.parse(&sim_read(&buf, plan), plan.position, |s, _| got.push(s)).unwrap();
    }
    let probe = reader.next_read(batch, false);
    assert_eq!(probe.len, PROBE_LEN.min(batch));
    let parsed = reader.parse(&sim_read(&buf, probe), probe.position, |_, _| {}).unwrap();
    assert_eq!((parsed.consumed, parsed.stop), (0, Stop::NotYetWritten));
    prod.append(&payload(2, len), NO_LIMIT).unwrap();
    let probe = reader.next_read(batch, false);
    assert_eq!(probe.len, PROBE_LEN.min(batch), "still a page");
    let parsed = reader.parse(&sim_read(&buf, probe), probe.position, |_, _| {}).unwrap();
    assert_eq!((parsed.delivered, parsed.stop), (0, Stop::End), "the probe found the header");
    let plan = reader.next_read(batch, true);
    assert_eq!(plan.len, record + HEADER_LEN, "the whole record and the next header");
    reader.parse(&sim_read(&buf, plan), plan.position, |s, _| got.push(s)).unwrap();
    assert_eq!(got, [1, 2]);
    // A larger batch that holds the record probes for it whole, as before.
    assert_eq!(reader.next_read(32 * 1024, false).len, record + HEADER_LEN);
}
