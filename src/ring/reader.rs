//! The subscriber side of a ring, as pure logic over bytes: plans the next READ, validates
//! and walks the records a READ brought back (which may be torn by concurrent producer
//! writes), reassembles fragmented messages, and resynchronises exactly after being lapped.
//!
//! Every record at the expected position is checked: its header must carry that position
//! (anything else is "not written yet", unless it is a checksum-valid record of a later lap:
//! then the producer lapped the reader), its crc must match (otherwise the READ raced a write: re-read), and its sequence
//! and flags must continue the stream. After a lap the reader needs the control block
//! ([`RingReader::apply_control`]): its `floor` says whether the reader's position was
//! overwritten; if so the reader continues from `head` and reports exactly how many messages it
//! lost, once the record at `head` confirms the control block's `head_seq`.
#![allow(clippy::missing_errors_doc, reason = "internal (feature `internals`): the ring's own layer")]

use super::checksum::Checksum;
use super::error::RingError;
use super::layout::{self, ControlSnapshot, RecordHeader, CONTROL_READ_LEN, HEADER_LEN};
use super::producer::StartPoint;

/// What a subscriber knows about the ring it reads (from the accept private data).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReaderConfig {
    /// Data-area capacity.
    pub capacity: usize,
    /// Largest payload of one record.
    pub max_record_payload: usize,
    /// Publisher epoch (checked against the control block).
    pub epoch: u64,
    /// Where to start.
    pub start: StartPoint,
    /// Largest message the reader reassembles (a bound on memory it allocates).
    pub max_message_len: u64,
    /// The function the records' checksums are computed with.
    pub checksum: Checksum,
}

/// One READ to post: `len` bytes at `ring_offset` in the ring's region (add the region's
/// remote address), which hold the ring from absolute `position` on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadPlan {
    /// Offset inside the registered region.
    pub ring_offset: usize,
    /// Bytes to read (never past the end of the data area).
    pub len: usize,
    /// Absolute ring position of the first byte; pass it back to [`RingReader::parse`].
    pub position: u64,
}

impl ReadPlan {
    /// The READ of the control block's fields.
    pub fn control() -> ReadPlan {
        ReadPlan { ring_offset: 0, len: CONTROL_READ_LEN, position: 0 }
    }
}

/// Why [`RingReader::parse`] stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Stop {
    /// The bytes ran out (or the lap ended): READ on from the new position.
    #[default]
    End,
    /// No valid record at the position: the producer has not written it yet (the reader
    /// caught up) or, only if the producer may overwrite unread data (Overwrite policy, or
    /// after being dropped), a later lap overwrote it without a header landing here. Readers
    /// that may be lapped check with [`RingReader::apply_control`].
    NotYetWritten,
    /// The record at the position failed its checksum: the READ raced a write. READ it again
    /// (a reader that may be lapped checks the control block first).
    Torn,
    /// A valid record of a later lap sits at the position (the producer lapped the reader), or
    /// the start point was not confirmed: READ the control block and call
    /// [`RingReader::apply_control`].
    NeedControl,
    /// The bytes were read for another position (a READ planned before a resync): discard.
    Stale,
}

/// Outcome of one [`RingReader::parse`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Parsed {
    /// Bytes of the input accepted as valid records.
    pub consumed: usize,
    /// Messages delivered to the callback.
    pub delivered: u64,
    /// Messages lost to an overrun, reported before any message this call delivered.
    pub lost: u64,
    /// Why parsing stopped.
    pub stop: Stop,
}

/// Outcome of [`RingReader::apply_control`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ControlOutcome {
    /// The reader was lapped: it now reads from the control block's `head`.
    Resync {
        /// The new read position.
        position: u64,
        /// The sequence expected there.
        seq: u64,
    },
    /// Not lapped; the producer has committed `available` bytes past the reader's position
    /// (a record that looked unwritten or torn is being written: READ again).
    Behind {
        /// `tail - position`.
        available: u64,
    },
    /// Not lapped and nothing new: wait for a doorbell (or poll later).
    CaughtUp,
    /// The snapshot's fields are from different moments: READ the control block again.
    Retry,
}

/// Counters of a reader.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ReaderStats {
    /// Messages delivered.
    pub delivered: u64,
    /// Messages lost to overruns.
    pub lost: u64,
    /// Records found torn (re-read).
    pub torn: u64,
    /// Valid records consumed (padding included).
    pub records: u64,
    /// Payload bytes delivered.
    pub bytes: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// The record at the position must carry `seq`: a start point or a head from the control
    /// block, not confirmed yet.
    Anchor { seq: u64 },
    /// Between messages: the next record starts message `next_seq`.
    Boundary,
    /// Reassembling message `next_seq` of `total_len` bytes.
    Assembling { total_len: u64 },
    /// Skipping the rest of message `seq` whose beginning is gone (`next_seq == seq + 1`).
    Skipping { seq: u64 },
}

/// What to do with a record after validation.
enum Step {
    Consume,
    Stop(Stop),
}

/// Smallest READ a caught-up reader polls with (one page).
pub const PROBE_LEN: usize = 4096;

/// The subscriber's reading state for one ring.
#[derive(Debug)]
pub struct RingReader {
    capacity: usize,
    max_record_payload: usize,
    epoch: u64,
    max_message_len: u64,
    checksum: Checksum,
    position: u64,
    /// First sequence neither delivered nor reported lost.
    next_seq: u64,
    state: State,
    /// The anchor's record contradicted it: the control block must be read again.
    anchor_invalid: bool,
    /// Bytes the record at `position` needs in one READ (when its header announced more).
    need: usize,
    /// Size of the last data record consumed: the READ length worth asking for while behind.
    last_record: usize,
    /// Bytes the last parse consumed when they held several records: a caught-up reader probes
    /// with twice as many.
    last_fill: usize,
    /// The control block showed written data past the position: READ a batch next.
    data_waits: bool,
    /// The position and claimed length of the last header found longer than the ring's
    /// records may be (taken for a torn READ once; the same claim again is an error).
    oversized: Option<(u64, u32)>,
    assembly: Vec<u8>,
    stats: ReaderStats,
}

/// The length of a READ that brings a record of `first` bytes, then as many records of
/// `stride` bytes as fit within `max_batch`, then the header after them: it ends just past a
/// record boundary when the records are of the sizes expected (at least the first record and a
/// header, even past `max_batch`).
fn whole_records_len(first: usize, stride: usize, max_batch: usize) -> usize {
    let stride = stride.max(HEADER_LEN);
    let budget = max_batch.max(first + HEADER_LEN);
    first + (budget - first - HEADER_LEN) / stride * stride + HEADER_LEN
}

impl RingReader {
    /// A reader at the config's start point.
    pub fn new(config: ReaderConfig) -> Result<RingReader, RingError> {
        layout::check_geometry(config.capacity, config.max_record_payload)?;
        let s = config.start;
        if s.position % layout::RECORD_ALIGN != 0 || !(s.seq..=s.seq + 1).contains(&s.first_seq) || s.seq == 0 {
            return Err(RingError::InvalidConfig(format!("invalid start point {s:?}")));
        }
        Ok(RingReader {
            capacity: config.capacity,
            max_record_payload: config.max_record_payload,
            epoch: config.epoch,
            max_message_len: config.max_message_len.min(u32::MAX as u64),
            checksum: config.checksum,
            position: s.position,
            next_seq: s.first_seq,
            state: State::Anchor { seq: s.seq },
            anchor_invalid: false,
            need: HEADER_LEN,
            last_record: HEADER_LEN,
            last_fill: 0,
            data_waits: false,
            oversized: None,
            assembly: Vec::new(),
            stats: ReaderStats::default(),
        })
    }

    /// Absolute position up to which everything is consumed (what to acknowledge).
    pub fn consumed_position(&self) -> u64 {
        self.position
    }

    /// First sequence not yet delivered nor reported lost.
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// The READ to post before `bytes` (a completed READ from `position`) is validated, when
    /// its headers alone show that a written record continues past it: the plan
    /// [`next_read`](Self::next_read) would make after a parse that accepts every record up to
    /// that one (at least `max_batch`, and the whole record and a header). The headers are read
    /// without their checksums: if the parse then stops earlier (a torn record, a broken
    /// stream), the READ is stale and [`parse`](Self::parse) says so. `None` when the headers
    /// end at a record boundary, at the end of the data area or on anything unexpected.
    pub fn plan_ahead(&self, bytes: &[u8], position: u64, max_batch: usize) -> Option<ReadPlan> {
        if position != self.position {
            return None;
        }
        let avail = bytes.len().min(layout::room_to_end(position, self.capacity) as usize);
        let (mut off, mut pos, mut largest) = (0, position, self.last_record);
        while off < avail {
            let h = RecordHeader::decode(&bytes[off..avail])?;
            if h.position != pos || h.is_padding() || h.len as usize > self.max_record_payload {
                return None;
            }
            let size = h.size() as usize;
            largest = largest.max(size);
            if avail - off < size {
                let room = layout::room_to_end(pos, self.capacity) as usize;
                let len = whole_records_len(size, largest, max_batch).min(room);
                return Some(ReadPlan { ring_offset: layout::data_offset(pos, self.capacity), len, position: pos });
            }
            off += size;
            pos += size as u64;
        }
        None
    }

    /// The longest READ [`next_read`](Self::next_read) plans with `max_batch` (or the control
    /// block READ): the size a READ destination needs.
    pub fn max_read_len(&self, max_batch: usize) -> usize {
        let largest_record = layout::record_size(self.max_record_payload) as usize;
        max_batch.max(largest_record + HEADER_LEN).max(layout::CONTROL_READ_LEN)
    }

    /// Counters.
    #[cfg(any(test, feature = "internals"))]
    pub fn stats(&self) -> ReaderStats {
        self.stats
    }

    /// The next READ, from the current position.
    ///
    /// While `behind` (the last READ ended in the middle of written data, or the last control
    /// block READ showed data waiting) it brings at least `max_batch` bytes, and at least the
    /// last record consumed plus the header after it: a stream of records larger than
    /// `max_batch` costs one READ each (rather than a short READ that finds the header and a
    /// second for the rest), and each READ shows whether the next record is written.
    ///
    /// A reader that caught up probes with a READ of the last record and a header, or of twice
    /// what the last READ brought when that was several records (at least [`PROBE_LEN`], at
    /// most `max_batch`): polling an idle ring does not move a batch of stale bytes each time,
    /// and a trickle of small messages grows the probes.
    ///
    /// A READ while behind ends just past a record boundary (whole records of the last size,
    /// then the next header), not in the middle of a record whose bytes the next READ would
    /// bring again: with 64 KiB records and a 256 KiB batch, a READ of exactly `max_batch`
    /// wasted a quarter of every READ.
    ///
    /// Either way it covers the whole record the last parse saw only partly, and never passes
    /// the end of the data area.
    pub fn next_read(&self, max_batch: usize, behind: bool) -> ReadPlan {
        let room = layout::room_to_end(self.position, self.capacity) as usize;
        let behind = behind || self.data_waits;
        let next = self.last_record + HEADER_LEN;
        let want = if behind {
            // The record at the position is `need` bytes when its header was seen; the ones
            // after it are guessed to be the size of the last one consumed.
            let first = if self.need > HEADER_LEN { self.need } else { self.last_record };
            let stride = if self.last_record > HEADER_LEN { self.last_record } else { first };
            whole_records_len(first, stride, max_batch)
        } else {
            next.max(2 * self.last_fill).max(PROBE_LEN).min(max_batch)
        };
        let len = want.max(self.need).max(HEADER_LEN).min(room);
        ReadPlan { ring_offset: layout::data_offset(self.position, self.capacity), len, position: self.position }
    }

    /// As [`next_read`](Self::next_read), but at most `max` bytes unless the record at the
    /// position is known to be longer: a reader whose READs cost a copy per byte (the same-host
    /// path) probes an empty ring with a short READ instead of the whole next record, then
    /// READs the record once a probe has seen its header.
    pub fn next_read_at_most(&self, max_batch: usize, behind: bool, max: usize) -> ReadPlan {
        let plan = self.next_read(max_batch, behind);
        ReadPlan { len: plan.len.min(max.max(self.need).max(HEADER_LEN)), ..plan }
    }

    /// Walks the records in `bytes` (a READ of the ring from absolute `position`), delivering
    /// each complete message to `deliver(seq, payload)` in order. Unfragmented payloads are
    /// sub-slices of `bytes`; reassembled ones borrow the reader's buffer.
    pub fn parse<F>(&mut self, bytes: &[u8], position: u64, mut deliver: F) -> Result<Parsed, RingError>
    where
        F: FnMut(u64, &[u8]),
    {
        let mut out = Parsed::default();
        if position != self.position {
            out.stop = Stop::Stale;
            return Ok(out);
        }
        self.data_waits = false;
        let records_before = self.stats.records;
        let avail = bytes.len().min(layout::room_to_end(position, self.capacity) as usize);
        let mut off = 0;
        while off < avail {
            let rest = &bytes[off..avail];
            let Some(h) = RecordHeader::decode(rest) else {
                self.need = HEADER_LEN;
                break;
            };
            if h.position != self.position {
                // Either bytes of an older lap (or of no record at all: the producer has not
                // reached this position), or a record of a later lap (the reader was lapped).
                // Only a checksum-valid later record proves the lap.
                out.stop = if self.is_later_record(&h, rest) { Stop::NeedControl } else { Stop::NotYetWritten };
                break;
            }
            if h.is_padding() {
                let room = layout::room_to_end(self.position, self.capacity);
                if h.len as u64 + HEADER_LEN as u64 != room || h.compute_crc(self.checksum, &[]) != h.crc {
                    self.stats.torn += 1;
                    out.stop = Stop::Torn;
                    break;
                }
                if h.flags != layout::FLAG_PADDING || h.reserved != 0 {
                    return Err(self.corrupt(&h, "padding with other flags"));
                }
                match self.expect_seq(&h)? {
                    Step::Stop(s) => {
                        out.stop = s;
                        break;
                    }
                    Step::Consume => {}
                }
                // The lap ends here.
                self.advance(room);
                out.consumed = avail;
                self.last_fill = self.fill_hint(out.consumed, records_before);
                return Ok(out);
            }
            if h.len as usize > self.max_record_payload {
                // A header torn between two writes: its length is not trustworthy. The same
                // claim at the same position twice is no race (the producer writes the position
                // last) but a record larger than the ring allows.
                let claim = (self.position, h.len);
                if self.oversized == Some(claim) {
                    let (position, len, max) = (self.position, h.len.into(), self.max_record_payload as u64);
                    return Err(RingError::RecordTooLarge { position, len, max });
                }
                self.oversized = Some(claim);
                self.stats.torn += 1;
                out.stop = Stop::Torn;
                break;
            }
            let size = h.size() as usize;
            if rest.len() < size {
                self.need = size;
                break;
            }
            let payload = &rest[HEADER_LEN..HEADER_LEN + h.len as usize];
            if h.compute_crc(self.checksum, payload) != h.crc {
                self.stats.torn += 1;
                out.stop = Stop::Torn;
                break;
            }
            if let Step::Stop(s) = self.accept(&h, payload, &mut out, &mut deliver)? {
                out.stop = s;
                break;
            }
            self.advance(size as u64);
            self.last_record = size;
            off += size;
            out.consumed = off;
        }
        self.last_fill = self.fill_hint(out.consumed, records_before);
        Ok(out)
    }

    /// Learns the control block (after [`Stop::NeedControl`], or after [`Stop::NotYetWritten`]
    /// / [`Stop::Torn`] when the reader may have been lapped). If the producer has overwritten
    /// (or is overwriting) the reader's position, continues from `head`; the loss is counted
    /// when the record there confirms `head_seq`.
    pub fn apply_control(&mut self, snap: &ControlSnapshot) -> Result<ControlOutcome, RingError> {
        if snap.capacity != self.capacity as u64 || snap.epoch != self.epoch {
            return Err(RingError::BadControl(format!(
                "capacity {} epoch {} (expected {} and {})",
                snap.capacity, snap.epoch, self.capacity, self.epoch
            )));
        }
        if snap.head % layout::RECORD_ALIGN != 0 || snap.head_seq == 0 {
            return Err(RingError::BadControl(format!("head {} head_seq {}", snap.head, snap.head_seq)));
        }
        let lapped = snap.floor > self.position;
        if !lapped && !self.anchor_invalid {
            return Ok(if snap.tail > self.position {
                self.data_waits = true;
                ControlOutcome::Behind { available: snap.tail - self.position }
            } else {
                ControlOutcome::CaughtUp
            });
        }
        // Fields from different moments (the READ raced the producer): read them again.
        if snap.head < snap.floor || snap.head < self.position {
            return Ok(ControlOutcome::Retry);
        }
        self.position = snap.head;
        self.state = State::Anchor { seq: snap.head_seq };
        self.anchor_invalid = false;
        self.need = HEADER_LEN;
        self.assembly.clear();
        self.data_waits = snap.tail > snap.head;
        Ok(ControlOutcome::Resync { position: snap.head, seq: snap.head_seq })
    }

    /// Whether `h` (at the reader's offset) is a complete, valid record of a later lap.
    fn is_later_record(&mut self, h: &RecordHeader, rest: &[u8]) -> bool {
        let cap = self.capacity as u64;
        if h.position <= self.position || (h.position - self.position) % cap != 0 {
            return false;
        }
        if h.is_padding() {
            return h.len as u64 + HEADER_LEN as u64 == layout::room_to_end(h.position, self.capacity)
                && h.compute_crc(self.checksum, &[]) == h.crc;
        }
        if h.len as usize > self.max_record_payload {
            return false;
        }
        let size = h.size() as usize;
        if rest.len() < size {
            // Read the whole record next time to check it.
            self.need = size;
            return false;
        }
        h.compute_crc(self.checksum, &rest[HEADER_LEN..HEADER_LEN + h.len as usize]) == h.crc
    }

    /// What a parse that consumed `consumed` bytes teaches the next probe: the bytes, when they
    /// held several records (a trickle of small messages: probe for as many again); nothing
    /// when one record (one large message at a time: probing twice its size would move a whole
    /// stale message with every empty READ).
    fn fill_hint(&self, consumed: usize, records_before: u64) -> usize {
        if self.stats.records - records_before >= 2 {
            consumed
        } else {
            0
        }
    }

    fn advance(&mut self, size: u64) {
        self.position += size;
        self.need = HEADER_LEN;
        self.stats.records += 1;
    }

    fn corrupt(&self, h: &RecordHeader, detail: &str) -> RingError {
        RingError::Corrupt { position: h.position, detail: format!("{detail} (header {h:?}, state {:?})", self.state) }
    }

    /// Checks the sequence of a padding record (it carries the sequence of the record after it).
    fn expect_seq(&mut self, h: &RecordHeader) -> Result<Step, RingError> {
        let want = match self.state {
            State::Anchor { seq } => {
                if h.seq != seq {
                    self.anchor_invalid = true;
                    return Ok(Step::Stop(Stop::NeedControl));
                }
                return Ok(Step::Consume);
            }
            State::Boundary | State::Assembling { .. } => self.next_seq,
            State::Skipping { seq } => seq,
        };
        if h.seq == want {
            Ok(Step::Consume)
        } else {
            Err(self.corrupt(h, "padding with a sequence that does not continue the stream"))
        }
    }

    /// Applies one valid (crc-checked) message record.
    fn accept<F>(
        &mut self,
        h: &RecordHeader,
        payload: &[u8],
        out: &mut Parsed,
        deliver: &mut F,
    ) -> Result<Step, RingError>
    where
        F: FnMut(u64, &[u8]),
    {
        let known = layout::FLAG_FIRST | layout::FLAG_LAST;
        if h.flags & !known != 0 || h.reserved != 0 || h.len > h.total_len {
            return Err(self.corrupt(h, "bad flags or lengths"));
        }
        if let State::Anchor { seq } = self.state {
            let target = seq + !h.is_first() as u64;
            if h.seq != seq || target < self.next_seq {
                self.anchor_invalid = true;
                return Ok(Step::Stop(Stop::NeedControl));
            }
            let lost = target - self.next_seq;
            out.lost += lost;
            self.stats.lost += lost;
            self.next_seq = target;
            self.state = if h.is_first() { State::Boundary } else { State::Skipping { seq } };
        }
        match self.state {
            State::Anchor { .. } => unreachable!("resolved above"),
            State::Skipping { seq } => {
                if h.is_first() || h.seq != seq {
                    return Err(self.corrupt(h, "expected a continuation of a skipped message"));
                }
                if h.is_last() {
                    self.state = State::Boundary;
                }
            }
            State::Boundary => {
                if !h.is_first() || h.seq != self.next_seq {
                    return Err(self.corrupt(h, "expected the first fragment of the next message"));
                }
                let total = h.total_len as u64;
                if total > self.max_message_len {
                    return Err(RingError::MessageTooLarge { len: total, max: self.max_message_len });
                }
                if h.is_last() {
                    if h.len != h.total_len {
                        return Err(self.corrupt(h, "single-record message with a different total"));
                    }
                    self.deliver(payload, out, deliver);
                } else {
                    self.assembly.clear();
                    self.assembly.reserve(total as usize);
                    self.assembly.extend_from_slice(payload);
                    self.state = State::Assembling { total_len: total };
                }
            }
            State::Assembling { total_len } => {
                let received = self.assembly.len() as u64 + h.len as u64;
                if h.is_first()
                    || h.seq != self.next_seq
                    || h.total_len as u64 != total_len
                    || received > total_len
                    || h.is_last() != (received == total_len)
                {
                    return Err(self.corrupt(h, "fragment does not continue the message"));
                }
                self.assembly.extend_from_slice(payload);
                if h.is_last() {
                    let whole = std::mem::take(&mut self.assembly);
                    self.deliver(&whole, out, deliver);
                    self.assembly = whole;
                    self.assembly.clear();
                }
            }
        }
        Ok(Step::Consume)
    }

    fn deliver<F: FnMut(u64, &[u8])>(&mut self, payload: &[u8], out: &mut Parsed, deliver: &mut F) {
        deliver(self.next_seq, payload);
        self.next_seq += 1;
        self.state = State::Boundary;
        out.delivered += 1;
        self.stats.delivered += 1;
        self.stats.bytes += payload.len() as u64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CAPACITY: usize = 64 * 1024;
    const MAX_PAYLOAD: usize = 1024;

    fn reader() -> RingReader {
        let start = StartPoint { position: CAPACITY as u64, seq: 1, first_seq: 1 };
        let checksum = Checksum::Crc32c;
        let config = ReaderConfig {
            capacity: CAPACITY,
            max_record_payload: MAX_PAYLOAD,
            epoch: 1,
            start,
            max_message_len: 1 << 20,
            checksum,
        };
        RingReader::new(config).unwrap()
    }

    /// The bytes of a READ at the ring's first position: one record header claiming `len`
    /// payload bytes (its checksum over what follows is beside the point), then zeros.
    fn header_claiming(len: u32) -> Vec<u8> {
        let flags = layout::FLAG_FIRST | layout::FLAG_LAST;
        let h = RecordHeader { position: CAPACITY as u64, seq: 1, len, flags, reserved: 0, total_len: len, crc: 0 };
        let mut bytes = h.encode().to_vec();
        bytes.resize(4096, 0);
        bytes
    }

    #[test]
    fn a_header_claiming_more_than_a_record_may_hold_twice_is_an_error_naming_both() {
        let mut r = reader();
        let bytes = header_claiming(u32::MAX);
        // Once: perhaps a READ that raced the header's write.
        let parsed = r.parse(&bytes, CAPACITY as u64, |_, _| panic!("nothing is delivered")).unwrap();
        assert_eq!((parsed.stop, r.stats().torn), (Stop::Torn, 1));
        assert!(r.next_read(256 * 1024, false).len <= r.max_read_len(256 * 1024), "the READ stays bounded");
        // Twice: the publisher wrote it so.
        let err = r.parse(&bytes, CAPACITY as u64, |_, _| panic!("nothing is delivered")).unwrap_err();
        let expected = (CAPACITY as u64, u32::MAX as u64, MAX_PAYLOAD as u64);
        assert!(matches!(err, RingError::RecordTooLarge { position, len, max } if (position, len, max) == expected));
    }

    #[test]
    fn an_oversized_header_read_once_then_another_claim_is_still_taken_for_a_torn_read() {
        let mut r = reader();
        for len in [MAX_PAYLOAD as u32 + 1, MAX_PAYLOAD as u32 + 2, u32::MAX] {
            let parsed = r.parse(&header_claiming(len), CAPACITY as u64, |_, _| {}).unwrap();
            assert_eq!(parsed.stop, Stop::Torn, "a different claim each time: {len}");
        }
        assert_eq!(r.stats().torn, 3);
    }
}
