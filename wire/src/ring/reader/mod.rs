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
#![allow(clippy::missing_errors_doc, reason = "the ring's own layer")]

use super::checksum::Checksum;
use super::error::RingError;
use super::layout::{self, ControlSnapshot, RecordHeader, CONTROL_READ_LEN, HEADER_LEN};
use super::producer::StartPoint;

mod in_place;
mod parse;
mod plan;

pub use in_place::RingMemory;
#[cfg(test)]
pub(crate) use in_place::{TAIL_CHECK_AFTER, WALK_BEFORE_TAIL};

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

/// How [`RingReader::parse_as`] validates records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Validation {
    /// The bytes came from a READ that may have raced the producer: a record is valid when its
    /// checksum matches; anything else may be a torn READ or a later lap.
    Checksum,
    /// The bytes were copied in place from below the ring's committed tail and above its
    /// floor (checked after the copy): every record there is whole and of this lap, so a
    /// record that breaks a rule is the publisher's doing.
    Committed,
}

/// What to do with a record after validation.
enum RecordVerdict {
    /// Take it and go on to the next record.
    Consume,
    /// Stop the parse here, for this reason.
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
    /// The last parse consumed records and stopped in the middle of written data: the
    /// producer is at least a record ahead (not after a probe of an idle ring found one
    /// record: the one after it is not written yet), so a READ planned behind another one
    /// likely finds its record written ([`plan_behind`](Self::plan_behind)).
    streaming: bool,
    /// The position and claimed length of the last header found longer than the ring's
    /// records may be (taken for a torn READ once; the same claim again is an error).
    oversized: Option<(u64, u32)>,
    /// In-place reads in a row that found nothing committed (when the producer's tail is
    /// checked: see `in_place`).
    empty_reads: u32,
    assembly: Vec<u8>,
    stats: ReaderStats,
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
            streaming: false,
            oversized: None,
            empty_reads: 0,
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

    /// Counters.
    pub fn stats(&self) -> ReaderStats {
        self.stats
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
