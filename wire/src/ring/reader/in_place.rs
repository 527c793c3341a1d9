//! Reading a ring in place, from memory the producer writes while the reader reads (a same-host
//! publisher's ring, mapped read-only), with no checksum: records are validated by their commit
//! word, as Aeron's term reader validates frames, and a recheck of `floor` covers overwrites.
//!
//! 1. Walk the records from the position by their commit word: a record's `position` word,
//!    loaded with acquire ordering, equals its own position once it is committed (the producer
//!    writes the rest of the header and the payload first, then that word after a release
//!    fence). Each committed record's length word (loaded after it) gives the next record's
//!    place. The walk stops at the first word that carries another position, at the caller's
//!    buffer, at the end of the data area, and at padding (its header is taken: it ends the
//!    lap). The control block's `tail` is not loaded: the producer's per-message stores of
//!    `tail` and `tail_seq` hit a cache line (the control block's first) that only READers and
//!    a resync load, so a reader polling in place and the producer share no line but the
//!    records themselves, and a busy-polling reader spins on the next record's header line.
//!    A reader that walked [`WALK_BEFORE_TAIL`] committed records is behind: it loads `tail`
//!    (acquire) and takes everything below it, as committed, without walking it (a walk is a
//!    chain of dependent loads, one line of the producer's per record: four same-host readers of
//!    1 KiB messages went at 0.75x the rate walking every record). Only a caught-up reader, whose
//!    batches are short, reads no tail.
//! 2. Copy the committed records out of the memory at once.
//! 3. `fence(Acquire)`, then load `floor`. The producer raises `floor` (and `head` before it)
//!    and issues a release fence before it overwrites any byte below the new floor, so a walk
//!    or copy that saw an overwritten byte sees that floor here. A floor past the position
//!    means the reader was lapped: the copy is discarded, and the reader goes on from `head`,
//!    counting exactly what it lost, as after a READ found lapped
//!    ([`RingReader::apply_control`]). A walk that found nothing committed loads the floor too:
//!    a lap may have left anything at the position.
//! 4. Parse the copy with the reader's own record walk ([`Validation::Committed`]): a committed
//!    record that breaks a rule there (an impossible length, padding that does not end the lap,
//!    a record crossing the end of the data area, a sequence that does not continue) was
//!    written so, and is an error, never a retry: a hostile publisher can make its feed fail,
//!    not crash, hang or mislead it.
//!
//! A record that never commits at the position while the producer's `tail` is past it (a
//! header naming another position) cannot be told from "not yet written" by the commit word
//! alone: after [`TAIL_CHECK_AFTER`] empty reads in a row, and again after each doubling of
//! their count, the reader loads `tail`, and a word that still carries another position below
//! it (with the floor not past it) is an error. An honest producer's reader loads `tail` only
//! then, when it is idle.
//!
//! Every word taken from the producer's memory is bounded before it is used: the walk's lengths
//! by the buffer, the data area and the largest record, the parse's fields as in
//! [`RingReader::parse`].

use std::sync::atomic::{fence, Ordering};

use super::*;
use crate::ring::layout::ctrl;
use rdma_fabric::{RegisteredBuffer, RemoteView};

/// Committed records the in-place reader walks by their commit words before it copies on up to
/// the producer's tail (see the module doc).
pub(crate) const WALK_BEFORE_TAIL: usize = 8;

/// Empty in-place reads in a row after which the reader first checks the producer's `tail`
/// (and again each time their count doubles): see the module doc.
pub(crate) const TAIL_CHECK_AFTER: u32 = 8;

/// Memory holding a ring (its whole region: control block and data area), read in place.
pub trait RingMemory {
    /// The little-endian u64 at `offset`, loaded with acquire ordering.
    fn load_acquire(&self, offset: usize) -> Result<u64, RingError>;
    /// Copies `dst.len()` bytes at `offset` into `dst` (bytes the producer may be writing).
    fn copy_to(&self, offset: usize, dst: &mut [u8]) -> Result<(), RingError>;
}

impl RingMemory for RemoteView {
    fn load_acquire(&self, offset: usize) -> Result<u64, RingError> {
        Ok(RemoteView::load_acquire(self, offset)?)
    }

    fn copy_to(&self, offset: usize, dst: &mut [u8]) -> Result<(), RingError> {
        Ok(RemoteView::copy_to(self, offset, dst)?)
    }
}

/// The producer's own buffer (a reader in the publisher's process, and the tests).
impl RingMemory for RegisteredBuffer {
    fn load_acquire(&self, offset: usize) -> Result<u64, RingError> {
        Ok(u64::from_le(self.atomic_u64(offset)?.load(Ordering::Acquire)))
    }

    fn copy_to(&self, offset: usize, dst: &mut [u8]) -> Result<(), RingError> {
        Ok(self.read(offset, dst)?)
    }
}

/// What the commit-word walk found: the bytes of committed records from the position, and a
/// committed record that crosses the end of the data area (an error once the floor is checked).
struct Committed {
    len: usize,
    crossing: Option<u64>,
}

impl RingReader {
    /// Reads the ring in place from `mem` (see the module doc): the records committed past the
    /// position, at most `buf.len()` bytes of them, copied into `buf` and delivered as
    /// [`parse`](Self::parse) delivers (unfragmented payloads are sub-slices of `buf`).
    ///
    /// `stop` is [`Stop::NotYetWritten`] when nothing was committed past the position (caught
    /// up), [`Stop::NeedControl`] when the reader was lapped or its anchor contradicted and it
    /// moved to the control block's `head` (read again at once), [`Stop::End`] otherwise (read
    /// again: more may wait). `buf` must hold [`in_place_need`](Self::in_place_need) bytes.
    ///
    /// # Errors
    /// The memory's (the region was deregistered, the connection closed); the parse's, and
    /// [`RingError::Corrupt`] for a committed record that crosses the end of the data area, or
    /// a word that carries another position below the producer's tail.
    pub fn read_in_place<M, F>(&mut self, mem: &M, buf: &mut [u8], deliver: F) -> Result<Parsed, RingError>
    where
        M: RingMemory + ?Sized,
        F: FnMut(u64, &[u8]),
    {
        let position = self.position;
        let committed = self.committed_in_place(mem, buf.len())?;
        if committed.len == 0 {
            return self.nothing_in_place(mem);
        }
        self.empty_reads = 0;
        let bytes = &mut buf[..committed.len];
        mem.copy_to(layout::data_offset(position, self.capacity), bytes)?;
        if self.lapped_in_place(mem)? {
            return Ok(Parsed { stop: Stop::NeedControl, ..Parsed::default() });
        }
        if let Some(at) = committed.crossing {
            let room = layout::room_to_end(at, self.capacity);
            return Err(RingError::Corrupt {
                position: at,
                detail: format!("a committed record crosses the end of the data area ({room} bytes left)"),
            });
        }
        let parsed = self.parse_as(bytes, position, Validation::Committed, deliver)?;
        if parsed.stop == Stop::NeedControl {
            // The anchor's record carries another sequence: the control block says where the
            // stream is.
            self.resync_in_place(mem)?;
        }
        Ok(parsed)
    }

    /// Bytes the buffer of [`read_in_place`](Self::read_in_place) must hold now: at least the
    /// whole record at the position, when its header showed it longer than the last copy.
    pub fn in_place_need(&self) -> usize {
        self.need.max(HEADER_LEN)
    }

    /// Walks the commit words from the position (step 1 of the module doc), within `max`
    /// bytes: whole committed records, the header alone of one the parse must judge (padding,
    /// a length over the ring's largest record, one larger than `max` when it comes first).
    fn committed_in_place<M: RingMemory + ?Sized>(&self, mem: &M, max: usize) -> Result<Committed, RingError> {
        let room = layout::room_to_end(self.position, self.capacity) as usize;
        let max = max.min(room);
        let (mut len, mut at) = (0usize, self.position);
        let mut walked = 0;
        while len + HEADER_LEN <= max {
            if walked == WALK_BEFORE_TAIL {
                // A reader this far behind copies up to the tail instead of walking on: every
                // record below it is committed (the producer stores it after their commit
                // words), and one dependent load per record would cost more than the tail's
                // line. Whatever a lying tail covers, the parse validates.
                let tail = mem.load_acquire(ctrl::TAIL)?;
                if tail > at {
                    len = (tail - self.position).min(max as u64) as usize;
                }
                break;
            }
            walked += 1;
            let offset = layout::data_offset(at, self.capacity);
            if mem.load_acquire(offset)? != at {
                break;
            }
            let (record_len, flags) = RecordHeader::len_and_flags(mem.load_acquire(offset + layout::LEN_WORD)?);
            if flags & layout::FLAG_PADDING != 0 || record_len as usize > self.max_record_payload {
                len += HEADER_LEN;
                break;
            }
            let size = layout::record_size(record_len as usize) as usize;
            if size > room - len {
                return Ok(Committed { len: len + HEADER_LEN, crossing: Some(at) });
            }
            if size > max - len {
                if len == 0 {
                    // Its header tells the parse how much buffer the next read needs.
                    len = HEADER_LEN;
                }
                break;
            }
            len += size;
            at += size as u64;
        }
        Ok(Committed { len, crossing: None })
    }

    /// An in-place read that found nothing committed at the position: lapped (the floor passed
    /// it), caught up, or, when the producer's tail says otherwise (checked after
    /// [`TAIL_CHECK_AFTER`] empty reads in a row, then at each doubling), a ring whose record
    /// there names another position.
    fn nothing_in_place<M: RingMemory + ?Sized>(&mut self, mem: &M) -> Result<Parsed, RingError> {
        let position = self.position;
        if self.lapped_in_place(mem)? {
            self.empty_reads = 0;
            return Ok(Parsed { stop: Stop::NeedControl, ..Parsed::default() });
        }
        self.empty_reads = self.empty_reads.saturating_add(1);
        if self.empty_reads >= TAIL_CHECK_AFTER && self.empty_reads.is_power_of_two() {
            let tail = mem.load_acquire(ctrl::TAIL)?;
            if tail > position {
                // The producer stores the tail (release) after the record's commit word: it is
                // visible now, unless a lap (floor) or the publisher (error) replaced it.
                let offset = layout::data_offset(position, self.capacity);
                let word = mem.load_acquire(offset)?;
                fence(Ordering::Acquire);
                let floor = mem.load_acquire(ctrl::FLOOR)?;
                if word == position || floor > position {
                    // Committed or lapped since the walk: read again at once.
                    return Ok(Parsed::default());
                }
                return Err(RingError::Corrupt {
                    position,
                    detail: format!("below the tail {tail}, the record's position word is {word:#x}"),
                });
            }
        }
        Ok(Parsed { stop: Stop::NotYetWritten, ..Parsed::default() })
    }

    /// Step 3 of the module doc, after the walk (and the copy): whether the producer's `floor`
    /// passed the position, so that what they saw may be overwritten; if so the reader has moved
    /// to the control block's `head`.
    fn lapped_in_place<M: RingMemory + ?Sized>(&mut self, mem: &M) -> Result<bool, RingError> {
        // The walk's and the copy's loads before the floor's: an overwritten byte they saw
        // implies that floor.
        fence(Ordering::Acquire);
        if mem.load_acquire(ctrl::FLOOR)? <= self.position {
            return Ok(false);
        }
        self.resync_in_place(mem)?;
        Ok(true)
    }

    /// Reads the control block in place and applies it: after a lap the reader moves to
    /// `head` (a snapshot whose fields are from different moments is left for the next call).
    fn resync_in_place<M: RingMemory + ?Sized>(&mut self, mem: &M) -> Result<(), RingError> {
        // The floor first: the producer stores head (and head_seq) before it raises the floor,
        // so the head loaded after it is at least as new.
        let floor = mem.load_acquire(ctrl::FLOOR)?;
        let mut words = [0u8; CONTROL_READ_LEN];
        for (i, word) in words.chunks_exact_mut(8).enumerate() {
            let value = if i * 8 == ctrl::FLOOR { floor } else { mem.load_acquire(i * 8)? };
            word.copy_from_slice(&value.to_le_bytes());
        }
        let snapshot = ControlSnapshot::decode(&words)?;
        self.apply_control(&snapshot)?;
        Ok(())
    }
}
