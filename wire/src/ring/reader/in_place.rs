//! Reading a ring in place, from memory the producer writes while the reader reads (a same-host
//! publisher's ring, mapped read-only), with no checksum: validation is a seqlock's.
//!
//! 1. Load `tail` with acquire ordering: every record below it is whole (the producer writes a
//!    record, then publishes `tail` with a release store).
//! 2. Copy the records in `[position, tail)` out of the memory, bounded by the caller's buffer
//!    and by the end of the data area.
//! 3. `fence(Acquire)`, then load `floor`. The producer raises `floor` (and `head` before it)
//!    and issues a release fence before it overwrites any byte below the new floor, so a copy
//!    that saw an overwritten byte sees that floor here. A floor past the position means the
//!    reader was lapped: the copy is discarded, and the reader goes on from `head`, counting
//!    exactly what it lost, as after a READ found lapped ([`RingReader::apply_control`]).
//! 4. Parse the copy with the reader's own record walk ([`Validation::Committed`]): a record
//!    that breaks a rule there (another position, an impossible length, padding that does not
//!    end the lap, a record crossing the tail) was written so, and is an error, never a
//!    retry: a hostile publisher can make its feed fail, not crash, hang or mislead it.
//!
//! Every word taken from the producer's memory is bounded before it is used: the copy's length
//! by the buffer and the data area, the parse's fields as in [`RingReader::parse`].

use std::sync::atomic::{fence, Ordering};

use super::*;
use crate::ring::layout::ctrl;
use rdma_fabric::{RegisteredBuffer, RemoteView};

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
    /// [`RingError::Corrupt`] for a record that crosses the tail or the end of the data area.
    pub fn read_in_place<M, F>(&mut self, mem: &M, buf: &mut [u8], deliver: F) -> Result<Parsed, RingError>
    where
        M: RingMemory + ?Sized,
        F: FnMut(u64, &[u8]),
    {
        let position = self.position;
        let tail = mem.load_acquire(ctrl::TAIL)?;
        if tail <= position {
            // Caught up (or a tail that went back, which only a hostile producer writes: it
            // then publishes nothing, which it could do anyway).
            return Ok(Parsed { stop: Stop::NotYetWritten, ..Parsed::default() });
        }
        let room = layout::room_to_end(position, self.capacity);
        let committed = tail - position;
        let len = committed.min(room).min(buf.len() as u64) as usize;
        let bytes = &mut buf[..len];
        mem.copy_to(layout::data_offset(position, self.capacity), bytes)?;
        // The copy's loads before the floor's: an overwritten byte it saw implies that floor.
        fence(Ordering::Acquire);
        let floor = mem.load_acquire(ctrl::FLOOR)?;
        if floor > position {
            self.resync_in_place(mem)?;
            return Ok(Parsed { stop: Stop::NeedControl, ..Parsed::default() });
        }
        let parsed = self.parse_as(bytes, position, Validation::Committed, deliver)?;
        match parsed.stop {
            Stop::NeedControl => {
                // The anchor's record carries another sequence: the control block says where
                // the stream is.
                self.resync_in_place(mem)?;
            }
            Stop::End if parsed.consumed < len && len as u64 == committed && self.need > len - parsed.consumed => {
                let at = position + parsed.consumed as u64;
                return Err(RingError::Corrupt { position: at, detail: format!("a record crosses the tail {tail}") });
            }
            _ => {}
        }
        Ok(parsed)
    }

    /// Bytes the buffer of [`read_in_place`](Self::read_in_place) must hold now: at least the
    /// whole record at the position, when its header showed it longer than the last copy.
    pub fn in_place_need(&self) -> usize {
        self.need.max(HEADER_LEN)
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
