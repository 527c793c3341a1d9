//! The single writer of a ring: appends messages (fragmenting large ones), publishes `tail`,
//! and advances `head` past whole messages before it overwrites them.
//!
//! The producer never blocks. Every write takes a `limit`: the absolute position it may not
//! write past (for flow control, the slowest subscriber's acknowledged position plus the
//! capacity, see [`RingProducer::limit_for`]; [`NO_LIMIT`] to overwrite freely). A message
//! that does not fit is written as far as the limit allows and resumed by a later `append`.

use std::collections::VecDeque;
use std::sync::atomic::{fence, Ordering};
use std::sync::Arc;

use super::checksum::Checksum;
use super::error::RingError;
use super::layout::{
    self, ctrl, RecordHeader, CONTROL_SIZE, FLAG_FIRST, FLAG_LAST, FLAG_NO_CHECKSUM, FLAG_PADDING, HEADER_LEN,
    RECORD_ALIGN,
};
use rdma_fabric::RegisteredBuffer;

/// A `limit` that never stops the producer (overwrite mode, or no subscriber).
pub const NO_LIMIT: u64 = u64::MAX;

/// The producer frees the ring for new records in steps of `capacity / HEAD_STEP` (see
/// `RingProducer::ensure_head`).
const HEAD_STEP: usize = 16;

/// Geometry and identity of a ring.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RingConfig {
    /// Data-area bytes: a power of two, at least [`layout::MIN_CAPACITY`].
    pub capacity: usize,
    /// Largest payload of one record; larger messages are fragmented. At most
    /// `capacity / 2 - 32`.
    pub max_record_payload: usize,
    /// Publisher epoch written into the control block.
    pub epoch: u64,
    /// The function the records' checksums are computed with.
    pub checksum: Checksum,
}

impl RingConfig {
    /// A ring of `capacity` bytes with the default record size (a quarter of the ring) and
    /// CRC-32C checksums.
    pub fn new(capacity: usize, epoch: u64) -> RingConfig {
        RingConfig {
            capacity,
            max_record_payload: layout::default_max_record_payload(capacity),
            epoch,
            checksum: Checksum::default(),
        }
    }

    /// Bytes of the memory region this ring needs (control block + data).
    pub fn region_len(&self) -> usize {
        layout::region_len(self.capacity)
    }
}

/// Where a subscriber starts reading: the record at `position` carries `seq`; the first message
/// the subscriber is owed is `first_seq` (`seq + 1` when `position` is inside a message whose
/// beginning is gone). Carried to the subscriber in the accept private data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StartPoint {
    /// Absolute position of the first record to read.
    pub position: u64,
    /// Sequence that record carries (or will carry, when not yet written).
    pub seq: u64,
    /// First message sequence the subscriber must get (or be told it lost).
    pub first_seq: u64,
}

/// A partly written fragmented message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InProgress {
    /// Its sequence number.
    pub seq: u64,
    /// Its whole length.
    pub total_len: u64,
    /// Payload bytes written so far.
    pub written: u64,
}

/// Result of [`RingProducer::append`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Append {
    /// The whole message is committed.
    Complete {
        /// Its sequence number.
        seq: u64,
    },
    /// The limit stopped the producer. If `written > 0` the message is in progress: call
    /// `append` again with the same payload once the limit reaches `needed_limit`.
    Blocked {
        /// The message's sequence number (reserved only when `written > 0`).
        seq: u64,
        /// Payload bytes written so far.
        written: u64,
        /// The smallest limit that lets the next fragment through.
        needed_limit: u64,
    },
}

/// The writer of a ring in a registered buffer.
#[derive(Debug)]
pub struct RingProducer {
    buf: Arc<RegisteredBuffer>,
    capacity: usize,
    max_record_payload: usize,
    epoch: u64,
    checksum: Checksum,
    tail: u64,
    /// Sequence of the next record written at `tail`.
    tail_seq: u64,
    head: u64,
    head_seq: u64,
    /// Whether the record at `head` is (or will be) the first fragment of its message.
    head_first: bool,
    /// The records from `head` to `tail`, oldest first, as [`RecordEntry`]s: moving head walks
    /// this log, not the ring's headers (a chain of dependent loads, one per record, of lines
    /// written a lap earlier). At most `capacity / 32` entries of 4 bytes.
    records: VecDeque<RecordEntry>,
    /// Every byte below this position may have been overwritten.
    floor: u64,
    in_progress: Option<InProgress>,
    /// A claim is outstanding: nothing else is written until it is committed or abandoned.
    claimed: bool,
    /// Message records carry their checksum (some reader READs the ring); otherwise they carry
    /// [`FLAG_NO_CHECKSUM`] (see [`set_checksums`](Self::set_checksums)).
    checksums: bool,
    /// Message records written without a checksum so far.
    unchecked: u64,
    /// Headers read back from the ring (only completing checksums does), for the tests.
    #[cfg(test)]
    header_reads: std::sync::atomic::AtomicU64,
}

#[allow(clippy::missing_errors_doc, reason = "the publisher documents its errors")]
impl RingProducer {
    /// Initialises the ring in `buf` (zeroes the data area, writes the control block). The first
    /// record is at position `capacity` with sequence 1 ([`start_at_seq`](Self::start_at_seq)
    /// numbers it otherwise).
    pub fn new(buf: Arc<RegisteredBuffer>, config: RingConfig) -> Result<RingProducer, RingError> {
        layout::check_geometry(config.capacity, config.max_record_payload)?;
        if buf.len() < config.region_len() {
            return Err(RingError::InvalidConfig(format!(
                "buffer of {} bytes is smaller than the {}-byte region",
                buf.len(),
                config.region_len()
            )));
        }
        let zeros = [0u8; 4096];
        for off in (CONTROL_SIZE..config.region_len()).step_by(zeros.len()) {
            buf.write(off, &zeros[..zeros.len().min(config.region_len() - off)])?;
        }
        let start = config.capacity as u64;
        let p = RingProducer {
            buf,
            capacity: config.capacity,
            max_record_payload: config.max_record_payload,
            epoch: config.epoch,
            checksum: config.checksum,
            tail: start,
            tail_seq: 1,
            head: start,
            head_seq: 1,
            head_first: true,
            records: VecDeque::with_capacity(config.capacity / 1024),
            floor: start,
            in_progress: None,
            claimed: false,
            checksums: true,
            unchecked: 0,
            #[cfg(test)]
            header_reads: Default::default(),
        };
        p.store(ctrl::VERSION, layout::LAYOUT_VERSION)?;
        p.store(ctrl::CAPACITY, config.capacity as u64)?;
        p.store(ctrl::EPOCH, config.epoch)?;
        p.store(ctrl::MAX_RECORD_PAYLOAD, config.max_record_payload as u64)?;
        p.store(ctrl::FLOOR, start)?;
        p.store(ctrl::HEAD_SEQ, 1)?;
        p.store(ctrl::HEAD, start)?;
        p.store(ctrl::TAIL_SEQ, 1)?;
        p.store(ctrl::TAIL, start)?;
        p.store(ctrl::MAGIC, layout::MAGIC)?;
        Ok(p)
    }

    /// Numbers the first message `first_seq` instead of 1. A publisher re-created on its node
    /// goes on after its predecessor's last sequence, so that a subscriber that read the
    /// predecessor (same publisher id and epoch) takes nothing of the successor for a
    /// duplicate. Only before anything was written.
    pub fn start_at_seq(&mut self, first_seq: u64) -> Result<(), RingError> {
        let untouched = self.tail == self.capacity as u64 && self.in_progress.is_none() && !self.claimed;
        if !untouched || first_seq == 0 || first_seq > u64::MAX / 2 {
            return Err(RingError::InvalidConfig(format!(
                "the first sequence ({first_seq}) is set once, before any record, within 1..=2^63"
            )));
        }
        self.tail_seq = first_seq;
        self.head_seq = first_seq;
        self.store(ctrl::HEAD_SEQ, first_seq)?;
        self.store(ctrl::TAIL_SEQ, first_seq)?;
        Ok(())
    }

    /// The registered buffer holding the ring.
    pub fn buffer(&self) -> &Arc<RegisteredBuffer> {
        &self.buf
    }

    /// Data-area capacity.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// The function the records' checksums are computed with.
    pub fn checksum(&self) -> Checksum {
        self.checksum
    }

    /// Largest payload of one record.
    pub fn max_record_payload(&self) -> usize {
        self.max_record_payload
    }

    /// Publisher epoch.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Absolute position after the last committed record.
    pub fn tail(&self) -> u64 {
        self.tail
    }

    /// Sequence the next record written at `tail` carries.
    pub fn tail_seq(&self) -> u64 {
        self.tail_seq
    }

    /// Absolute position of the oldest retained record.
    pub fn head(&self) -> u64 {
        self.head
    }

    /// Sequence of the record at `head`.
    pub fn head_seq(&self) -> u64 {
        self.head_seq
    }

    /// Whether message records carry their checksum.
    pub fn checksums(&self) -> bool {
        self.checksums
    }

    /// Message records written without a checksum so far.
    pub fn unchecked_records(&self) -> u64 {
        self.unchecked
    }

    /// Whether message records carry their checksum from now on: on while some reader READs
    /// the ring (a READ may race a write: only the checksum tells), off while every reader
    /// reads it in place ([`RingReader::read_in_place`](super::RingReader::read_in_place)),
    /// where the checksum is ~40% of a small message's cost. Turning it on first gives every
    /// retained record (from `head` to `tail`) that lacks one its checksum, so a reader that
    /// starts at any start point this producer offers finds every record checked; returns how
    /// many records it completed.
    pub fn set_checksums(&mut self, on: bool) -> Result<u64, RingError> {
        let was = std::mem::replace(&mut self.checksums, on);
        if !on || was {
            return Ok(0);
        }
        let (mut position, mut completed) = (self.head, 0);
        let mut payload = Vec::new();
        while position < self.tail {
            let mut h = self.read_header(position)?;
            if h.flags & FLAG_NO_CHECKSUM != 0 {
                payload.resize(h.len as usize, 0);
                self.buf.read(layout::data_offset(position, self.capacity) + HEADER_LEN, &mut payload)?;
                h.flags &= !FLAG_NO_CHECKSUM;
                h.crc = h.compute_crc(self.checksum, &payload);
                self.write_header(&h)?;
                completed += 1;
            }
            position += h.size();
        }
        Ok(completed)
    }

    /// Seals a message record's header: its checksum over `payload`, or the flag saying it has
    /// none.
    fn seal(&mut self, h: &mut RecordHeader, payload: &[u8]) {
        if self.checksums {
            h.crc = h.compute_crc(self.checksum, payload);
        } else {
            h.flags |= FLAG_NO_CHECKSUM;
            h.crc = 0;
            self.unchecked += 1;
        }
    }

    /// The partly written message, if any.
    pub fn in_progress(&self) -> Option<InProgress> {
        self.in_progress
    }

    /// Start point of a subscriber that wants only new messages.
    pub fn latest(&self) -> StartPoint {
        StartPoint {
            position: self.tail,
            seq: self.tail_seq,
            first_seq: self.tail_seq + self.in_progress.is_some() as u64,
        }
    }

    /// Start point of a subscriber that wants every retained message.
    pub fn earliest(&self) -> StartPoint {
        StartPoint { position: self.head, seq: self.head_seq, first_seq: self.head_seq + !self.head_first as u64 }
    }

    /// The limit flow control allows when the slowest subscriber has consumed up to
    /// `min_consumed` (an absolute position from its acks).
    pub fn limit_for(&self, min_consumed: u64) -> u64 {
        min_consumed.saturating_add(self.capacity as u64)
    }

    /// The limit needed to write the next record of `payload_len` bytes now (padding included).
    pub fn needed_limit(&self, payload_len: usize) -> u64 {
        let (start, size) = self.placement(payload_len);
        start + size
    }

    /// Appends `payload` as one message, fragmenting it into records of at most
    /// `max_record_payload` bytes, without writing past `limit`. When a fragment does not fit,
    /// returns [`Append::Blocked`]; if some fragments were written the message stays in
    /// progress and the next call must pass the same payload (it resumes where it stopped).
    pub fn append(&mut self, payload: &[u8], limit: u64) -> Result<Append, RingError> {
        self.check_unclaimed()?;
        let total = payload.len() as u64;
        if total > u32::MAX as u64 {
            return Err(RingError::MessageTooLarge { len: total, max: u32::MAX as u64 });
        }
        let (seq, mut written) = match self.in_progress {
            Some(p) if p.total_len != total => {
                return Err(RingError::MessageInProgress { seq: p.seq, in_progress_len: p.total_len, len: total })
            }
            Some(p) => (p.seq, p.written as usize),
            None => (self.tail_seq, 0),
        };
        loop {
            let first = self.in_progress.is_none();
            let frag = (payload.len() - written).min(self.max_record_payload);
            let last = written + frag == payload.len();
            let Some(start) = self.place(frag, limit, seq, first)? else {
                return Ok(Append::Blocked { seq, written: written as u64, needed_limit: self.needed_limit(frag) });
            };
            let flags = if first { FLAG_FIRST } else { 0 } | if last { FLAG_LAST } else { 0 };
            let body = &payload[written..written + frag];
            self.buf.write(layout::data_offset(start, self.capacity) + HEADER_LEN, body)?;
            let mut h = RecordHeader {
                position: start,
                seq,
                len: frag as u32,
                flags,
                reserved: 0,
                total_len: total as u32,
                crc: 0,
            };
            self.seal(&mut h, body);
            written += frag;
            if last {
                self.in_progress = None;
                self.commit_record(&h, seq + 1)?;
                return Ok(Append::Complete { seq });
            }
            self.in_progress = Some(InProgress { seq, total_len: total, written: written as u64 });
            self.commit_record(&h, seq)?;
        }
    }

    /// Reserves one record of `len` payload bytes (at most `max_record_payload`) for writing a
    /// message in place, zeroed. `None` when `limit` does not leave room now. Nothing is
    /// visible to readers until [`commit`](Self::commit); the claim must be committed or
    /// [`abandon`](Self::abandon)ed, and until then the producer writes nothing else.
    pub fn claim(&mut self, len: usize, limit: u64) -> Result<Option<Claim>, RingError> {
        self.check_unclaimed()?;
        if len > self.max_record_payload {
            return Err(RingError::MessageTooLarge { len: len as u64, max: self.max_record_payload as u64 });
        }
        if let Some(p) = self.in_progress {
            return Err(RingError::MessageInProgress { seq: p.seq, in_progress_len: p.total_len, len: len as u64 });
        }
        let seq = self.tail_seq;
        let Some(start) = self.place(len, limit, seq, true)? else { return Ok(None) };
        let offset = layout::data_offset(start, self.capacity) + HEADER_LEN;
        self.buf.check_range(offset, len)?;
        self.claimed = true;
        let mut claim = Claim { buf: self.buf.clone(), offset, start, len, seq };
        claim.bytes_mut().fill(0);
        Ok(Some(claim))
    }

    /// Publishes a claimed message; returns its sequence number.
    pub fn commit(&mut self, claim: Claim) -> Result<u64, RingError> {
        self.check_own(&claim)?;
        self.claimed = false;
        let mut h = RecordHeader {
            position: claim.start,
            seq: claim.seq,
            len: claim.len as u32,
            flags: FLAG_FIRST | FLAG_LAST,
            reserved: 0,
            total_len: claim.len as u32,
            crc: 0,
        };
        self.seal(&mut h, claim.bytes());
        self.commit_record(&h, claim.seq + 1)?;
        Ok(claim.seq)
    }

    /// Gives a claim up: nothing of it is published, and the producer writes again.
    pub fn abandon(&mut self, claim: Claim) {
        if Arc::ptr_eq(&claim.buf, &self.buf) {
            self.claimed = false;
        }
    }

    fn check_unclaimed(&self) -> Result<(), RingError> {
        if self.claimed {
            return Err(RingError::ClaimOutstanding);
        }
        Ok(())
    }

    fn check_own(&self, claim: &Claim) -> Result<(), RingError> {
        if !self.claimed || !Arc::ptr_eq(&claim.buf, &self.buf) || claim.seq != self.tail_seq {
            return Err(RingError::ClaimOutstanding);
        }
        Ok(())
    }

    /// Where the next record of `payload_len` bytes goes: its start and size.
    fn placement(&self, payload_len: usize) -> (u64, u64) {
        let size = layout::record_size(payload_len);
        let room = layout::room_to_end(self.tail, self.capacity);
        let start = if room < size { self.tail + room } else { self.tail };
        (start, size)
    }

    /// Makes room for a record of `payload_len` bytes (advancing head, writing padding) if the
    /// limit allows; returns its start. Inlined: most records need neither.
    #[inline]
    fn place(&mut self, payload_len: usize, limit: u64, seq: u64, first: bool) -> Result<Option<u64>, RingError> {
        let (start, size) = self.placement(payload_len);
        if start + size > limit {
            return Ok(None);
        }
        if self.floor < (start + size).saturating_sub(self.capacity as u64) {
            self.ensure_head(start + size, limit, start, seq, first)?;
        }
        if start != self.tail {
            self.write_padding(start)?;
        }
        Ok(Some(start))
    }

    /// Fills the data area from the tail up to `start` (its end) with a padding record.
    #[cold]
    fn write_padding(&mut self, start: u64) -> Result<(), RingError> {
        let mut pad = RecordHeader {
            position: self.tail,
            seq: self.tail_seq,
            len: (start - self.tail) as u32 - HEADER_LEN as u32,
            flags: FLAG_PADDING,
            reserved: 0,
            total_len: 0,
            crc: 0,
        };
        pad.crc = pad.compute_crc(self.checksum, &[]);
        self.write_header(&pad)?;
        self.log_record(&pad);
        self.tail = start;
        self.store(ctrl::TAIL, start)
    }

    /// Before the bytes up to `end` are written, moves `head` past every message they would
    /// overwrite (to the next first fragment, or to the record about to be written), then
    /// raises `floor` to the first byte that stays intact. [`place`](Self::place) calls it only
    /// when the floor is below `end - capacity`.
    ///
    /// Under flow control (a `limit` other than [`NO_LIMIT`]) both move in steps of
    /// [`HEAD_STEP`] of the ring rather than one record at a time: a full ring would otherwise
    /// pay the walk's call, the three control stores and the fence on every record. The step
    /// frees bytes a little before they are overwritten, never bytes a subscriber still needs:
    /// it stops at `limit - capacity` (the slowest subscriber's acknowledged position) and at
    /// the tail; a subscriber that joins at the earliest message finds up to a step less.
    /// Without a limit (overwrite, or no subscriber) nothing is freed early: an overrun
    /// subscriber loses exactly the messages overwritten.
    #[inline(never)]
    fn ensure_head(
        &mut self,
        end: u64,
        limit: u64,
        rec_start: u64,
        rec_seq: u64,
        rec_first: bool,
    ) -> Result<(), RingError> {
        let needed = end.saturating_sub(self.capacity as u64);
        let step = if limit == NO_LIMIT { 0 } else { (self.capacity / HEAD_STEP) as u64 };
        let keep_from =
            needed.saturating_add(step).min(limit.saturating_sub(self.capacity as u64)).min(self.tail).max(needed);
        if self.head < keep_from {
            self.advance_head(keep_from, rec_start, rec_seq, rec_first)?;
        }
        self.floor = keep_from;
        self.store(ctrl::FLOOR, keep_from)?;
        // Head and floor must be visible before any byte below the floor changes: the release
        // fence orders these stores before the overwriting stores that follow.
        fence(Ordering::Release);
        Ok(())
    }

    /// Moves `head` to the first message start at or after `keep_from`, walking the record log
    /// (no header is read back from the ring); the records it passes leave the log.
    fn advance_head(&mut self, keep_from: u64, rec_start: u64, rec_seq: u64, rec_first: bool) -> Result<(), RingError> {
        let (mut head, mut seq) = (self.head, self.head_seq);
        loop {
            if head >= self.tail {
                self.records.clear();
                self.head = rec_start;
                self.head_seq = rec_seq;
                self.head_first = rec_first;
                break;
            }
            let Some(&record) = self.records.front() else {
                return Err(RingError::Corrupt {
                    position: head,
                    detail: "producer lost track of its own records".into(),
                });
            };
            if head >= keep_from && record.starts_message() {
                self.head = head;
                self.head_seq = seq;
                self.head_first = true;
                break;
            }
            head += record.size();
            seq += record.ends_message() as u64;
            self.records.pop_front();
        }
        self.store(ctrl::HEAD_SEQ, self.head_seq)?;
        self.store(ctrl::HEAD, self.head)?;
        Ok(())
    }

    /// Adds a record just written to the log, unless head has already moved past it (a padding
    /// record written after head jumped to the record it precedes).
    fn log_record(&mut self, h: &RecordHeader) {
        if h.position >= self.head {
            self.records.push_back(RecordEntry::of(h));
        }
    }

    /// A header the producer wrote earlier (only the producer writes the ring): its words
    /// loaded one by one (a record is 32-aligned), after one bounds check.
    fn read_header(&self, position: u64) -> Result<RecordHeader, RingError> {
        #[cfg(test)]
        self.header_reads.fetch_add(1, Ordering::Relaxed);
        let off = layout::data_offset(position, self.capacity);
        let mut b = [0u8; HEADER_LEN];
        for (word, atomic) in b.chunks_exact_mut(8).zip(self.buf.atomic_u64s(off, HEADER_LEN / 8)?) {
            word.copy_from_slice(&atomic.load(Ordering::Relaxed).to_ne_bytes());
        }
        match RecordHeader::decode(&b) {
            Some(h) if h.position == position => Ok(h),
            _ => Err(RingError::Corrupt { position, detail: "producer lost track of its own records".into() }),
        }
    }

    /// Writes a header after its payload, a word at a time (a record is 32-aligned, its words
    /// checked once); its position word, the record's commit word, goes last. The words are
    /// computed in registers ([`RecordHeader::words`]): encoding them through memory made each
    /// header wait for the payload's stores to leave the store buffer (a load spanning several
    /// smaller stores is not forwarded), which cost most of a 64-byte message's time while a
    /// reader in place held the lines being written.
    fn write_header(&self, h: &RecordHeader) -> Result<(), RingError> {
        let off = layout::data_offset(h.position, self.capacity);
        let slots = self.buf.atomic_u64s(off, HEADER_LEN / 8)?;
        let words = h.words();
        fence(Ordering::Release);
        for (slot, word) in slots[1..].iter().zip(&words[1..]) {
            slot.store(word.to_le(), Ordering::Relaxed);
        }
        fence(Ordering::Release);
        slots[0].store(words[0].to_le(), Ordering::Relaxed);
        Ok(())
    }

    /// Writes the header of a record whose payload is in place and publishes the new tail.
    fn commit_record(&mut self, h: &RecordHeader, next_tail_seq: u64) -> Result<(), RingError> {
        self.write_header(h)?;
        self.log_record(h);
        self.tail = h.position + h.size();
        self.tail_seq = next_tail_seq;
        const _: () = assert!(ctrl::TAIL_SEQ == ctrl::TAIL + 8);
        let tail_words = self.buf.atomic_u64s(ctrl::TAIL, 2)?;
        tail_words[1].store(self.tail_seq.to_le(), Ordering::Release);
        tail_words[0].store(self.tail.to_le(), Ordering::Release);
        Ok(())
    }

    fn store(&self, offset: usize, value: u64) -> Result<(), RingError> {
        self.buf.atomic_u64(offset)?.store(value.to_le(), Ordering::Release);
        Ok(())
    }
}

#[cfg(test)]
impl RingProducer {
    /// Headers read back from the ring so far.
    pub(crate) fn header_reads(&self) -> u64 {
        self.header_reads.load(Ordering::Relaxed)
    }
}

/// One record in the producer's log: its size in units of [`RECORD_ALIGN`] and the header's
/// first, last and padding flags, in a `u32` (a record's size is at most `u32::MAX` payload
/// bytes plus a header: under 2^28 units).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct RecordEntry(u32);

impl RecordEntry {
    /// The header flags kept, each below [`FLAG_BITS`](Self::FLAG_BITS).
    const FLAGS: u16 = FLAG_FIRST | FLAG_LAST | FLAG_PADDING;
    const FLAG_BITS: u32 = 3;

    fn of(h: &RecordHeader) -> RecordEntry {
        let units = (h.size() / RECORD_ALIGN) as u32;
        RecordEntry(units << Self::FLAG_BITS | u32::from(h.flags & Self::FLAGS))
    }

    fn size(self) -> u64 {
        u64::from(self.0 >> Self::FLAG_BITS) * RECORD_ALIGN
    }

    /// Whether `flag` is set and the record is no padding.
    fn message_record_with(self, flag: u16) -> bool {
        self.0 & u32::from(flag | FLAG_PADDING) == u32::from(flag)
    }

    /// The first record of a message: head may land on it.
    fn starts_message(self) -> bool {
        self.message_record_with(FLAG_FIRST)
    }

    /// The last record of a message: the next record carries the next sequence.
    fn ends_message(self) -> bool {
        self.message_record_with(FLAG_LAST)
    }
}

const _: () = assert!(RecordEntry::FLAGS >> RecordEntry::FLAG_BITS == 0);

/// A record reserved by [`RingProducer::claim`]: its payload bytes, written in place, then
/// committed (or abandoned) through the producer.
#[derive(Debug)]
pub struct Claim {
    buf: Arc<RegisteredBuffer>,
    /// Offset of the payload in the buffer.
    offset: usize,
    /// Position of the record.
    start: u64,
    len: usize,
    seq: u64,
}

impl Claim {
    /// Payload length of the claim.
    pub fn payload_len(&self) -> usize {
        self.len
    }

    /// Sequence number the message gets on commit.
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// The payload, as written so far (zeroes where nothing was written).
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: the range was bounds-checked when the claim was made. While the claim lives,
        // the producer writes nothing (`claimed`), so the only writer is this claim's owner,
        // through `bytes_mut`, which needs `&mut self`. Readers of the ring reach these bytes only
        // outside this process's Rust code (the kernel sending them, a same-host peer's own
        // mapping, a NIC's DMA) and discard what they read before the commit (record checksum).
        unsafe { self.buf.slice(self.offset, self.len) }.unwrap_or(&[])
    }

    /// The payload, to write in place (zero copy).
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `bytes`; `&mut self` makes this the only reference to the range.
        unsafe { self.buf.slice_mut(self.offset, self.len) }.unwrap_or(&mut [])
    }
}
