//! The inbox of a same-host connection: a single-producer, single-consumer ring of SENDs in
//! shared memory. The receiving end owns it and hands it to the sending end, which writes each
//! SEND's bytes into it inline; the receiving end places them into its posted receives in order.
//!
//! Layout: the sender's tail (bytes written, ever) and the receiver's head (bytes consumed,
//! ever) on cache lines of their own in the first page, then [`DATA_LEN`] bytes of entries.
//! An entry is a 16-byte header (length, immediate, flags) and the payload padded to 16 bytes;
//! an entry never wraps: a padding entry fills the end of the ring instead.
//!
//! Neither end trusts the other's words: each keeps its own position and checks the peer's
//! against the ring's size, and the receiver checks every header before it uses it. A broken
//! invariant is reported as a corrupt inbox, never followed.

use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicU64, Ordering};

use super::map::PeerMapping;
use crate::error::Result;
use crate::memory::racy_copy;
use crate::memory::RegisteredBuffer;
use crate::soft::seg::Seg;

/// Offset of the sender's tail.
const TAIL: usize = 0;
/// Offset of the receiver's head.
const HEAD: usize = 64;
/// Offset of the first entry.
const DATA: usize = 4096;
/// Bytes of entries.
pub(crate) const DATA_LEN: usize = 64 * 1024;
/// Bytes of an inbox object.
pub(crate) const INBOX_LEN: usize = DATA + DATA_LEN;
/// Bytes of an entry's header.
const ENTRY_HEADER: usize = 16;
/// The largest SEND that goes through an inbox; larger ones take the connection's stream.
pub(crate) const MAX_INLINE: usize = 8 * 1024;

/// Entry flag: the SEND carries an immediate.
const HAS_IMM: u32 = 1;
/// Entry flag: the SEND was posted solicited.
const SOLICITED: u32 = 2;
/// Entry flag: padding to the end of the ring (no SEND).
const PAD: u32 = 4;

/// The ring broke an invariant: the peer wrote garbage into it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Corrupt;

/// Bytes an entry of a `len`-byte SEND takes.
fn entry_size(len: usize) -> usize {
    ENTRY_HEADER + len.next_multiple_of(ENTRY_HEADER)
}

fn header(len: u32, imm: u32, flags: u32) -> [u8; ENTRY_HEADER] {
    let mut h = [0u8; ENTRY_HEADER];
    h[0..4].copy_from_slice(&len.to_le_bytes());
    h[4..8].copy_from_slice(&imm.to_le_bytes());
    h[8..12].copy_from_slice(&flags.to_le_bytes());
    h
}

/// A SEND found in an inbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Entry {
    /// Payload bytes.
    pub(crate) len: u32,
    /// Its immediate, if it has one.
    pub(crate) imm: Option<u32>,
    /// It was posted solicited.
    pub(crate) solicited: bool,
    /// Offset of the payload in the inbox object.
    at: usize,
}

/// The receiving end of an inbox.
pub(crate) struct Inbox {
    page: RegisteredBuffer,
    /// Bytes consumed (the receiver's own count; the shared copy is for the sender).
    head: u64,
}

impl Inbox {
    /// A new, empty inbox.
    pub(crate) fn new() -> Result<Inbox> {
        Ok(Inbox { page: RegisteredBuffer::new(INBOX_LEN)?, head: 0 })
    }

    /// The descriptor the sending end maps (read-write).
    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        self.page.memfd()
    }

    fn word(&self, at: usize) -> &AtomicU64 {
        self.page.atomic_u64(at).expect("the inbox holds its words")
    }

    /// Whether an entry may be waiting (one load of the sender's tail).
    pub(crate) fn has_entries(&self) -> bool {
        self.word(TAIL).load(Ordering::Acquire) != self.head
    }

    /// The oldest SEND not consumed yet, skipping padding.
    pub(crate) fn peek(&mut self) -> std::result::Result<Option<Entry>, Corrupt> {
        loop {
            let tail = self.word(TAIL).load(Ordering::Acquire);
            let used = tail.wrapping_sub(self.head);
            if used == 0 {
                return Ok(None);
            }
            if used > DATA_LEN as u64 {
                return Err(Corrupt);
            }
            let pos = (self.head % DATA_LEN as u64) as usize;
            let mut h = [0u8; ENTRY_HEADER];
            self.page.read(DATA + pos, &mut h).map_err(|_| Corrupt)?;
            let field = |i: usize| u32::from_le_bytes(h[i..i + 4].try_into().expect("4 bytes"));
            let (len, imm, flags) = (field(0), field(4), field(8));
            if flags & !(HAS_IMM | SOLICITED | PAD) != 0 {
                return Err(Corrupt);
            }
            if flags & PAD != 0 {
                let skip = (DATA_LEN - pos) as u64;
                if skip > used {
                    return Err(Corrupt);
                }
                self.advance(skip);
                continue;
            }
            let size = entry_size(len as usize);
            if len as usize > MAX_INLINE || pos + size > DATA_LEN || size as u64 > used {
                return Err(Corrupt);
            }
            let imm = (flags & HAS_IMM != 0).then_some(imm);
            return Ok(Some(Entry { len, imm, solicited: flags & SOLICITED != 0, at: DATA + pos + ENTRY_HEADER }));
        }
    }

    /// Copies the payload of `entry` into `segs` (which hold at least its length); false if a
    /// segment cannot be written.
    pub(crate) fn copy_to(&self, entry: &Entry, segs: &[Seg]) -> bool {
        let mut left = entry.len as usize;
        let mut from = entry.at;
        for s in segs {
            if left == 0 {
                break;
            }
            let n = left.min(s.len);
            let (Ok(src), Ok(dst)) = (self.page.raw_range(from, n), s.buf.raw_range(s.off, n)) else { return false };
            // SAFETY: both ranges were bounds-checked just above and belong to different
            // objects (the inbox and a registered receive buffer); both are only accessed
            // through atomics and raw copies, and the sender may race us (a torn payload is
            // what a hostile sender gets).
            unsafe { racy_copy(src, dst, n) };
            left -= n;
            from += n;
        }
        left == 0
    }

    /// Consumes `entry` (it was placed), giving its space back to the sender.
    pub(crate) fn consume(&mut self, entry: &Entry) {
        self.advance(entry_size(entry.len as usize) as u64);
    }

    fn advance(&mut self, n: u64) {
        self.head += n;
        self.word(HEAD).store(self.head, Ordering::Release);
    }
}

/// Room [`InboxWriter::reserve`] found for one SEND.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Room {
    len: usize,
    /// Bytes of padding to the ring's end before the entry.
    pad: usize,
    size: usize,
}

/// The sending end of a peer's inbox.
pub(crate) struct InboxWriter {
    map: PeerMapping,
    /// Bytes written (the sender's own count).
    tail: u64,
}

impl InboxWriter {
    /// Maps a peer's inbox (checked to be sealed and large enough).
    pub(crate) fn map(fd: BorrowedFd<'_>) -> Result<InboxWriter> {
        Ok(InboxWriter { map: PeerMapping::new(fd, INBOX_LEN, true)?, tail: 0 })
    }

    /// Room for a `len`-byte SEND, if it fits now (it still does at [`write`](Self::write),
    /// as only this end writes).
    pub(crate) fn reserve(&self, len: usize) -> Option<Room> {
        if len > MAX_INLINE {
            return None;
        }
        let head = self.map.word(HEAD)?.load(Ordering::Acquire);
        let used = self.tail.wrapping_sub(head);
        if used > DATA_LEN as u64 {
            return None;
        }
        let size = entry_size(len);
        let pos = (self.tail % DATA_LEN as u64) as usize;
        let pad = if pos + size > DATA_LEN { DATA_LEN - pos } else { 0 };
        (used + (pad + size) as u64 <= DATA_LEN as u64).then_some(Room { len, pad, size })
    }

    /// Writes a SEND gathered from `segs` (`room.len` bytes) into the room reserved for it and
    /// publishes it; false only if a segment or the mapping refuses the copy.
    pub(crate) fn write(&mut self, room: Room, segs: &[Seg], imm: Option<u32>, solicited: bool) -> bool {
        let Room { len, pad, size } = room;
        let pos = (self.tail % DATA_LEN as u64) as usize;
        if pad > 0 && !self.put(DATA + pos, &header(0, 0, PAD)) {
            return false;
        }
        let at = DATA + (pos + pad) % DATA_LEN;
        let flags = if imm.is_some() { HAS_IMM } else { 0 } | if solicited { SOLICITED } else { 0 };
        if !self.put(at, &header(len as u32, imm.unwrap_or(0), flags)) {
            return false;
        }
        let mut off = at + ENTRY_HEADER;
        for s in segs {
            let Ok(src) = s.buf.raw_range(s.off, s.len) else { return false };
            // SAFETY: `src` is a bounds-checked range of a registered buffer kept alive by the
            // segment, accessed only through raw copies; the mapping bounds-checks its side.
            if !unsafe { self.map.copy_in(off, src, s.len) } {
                return false;
            }
            off += s.len;
        }
        let Some(tail) = self.map.word(TAIL) else { return false };
        self.tail += (pad + size) as u64;
        tail.store(self.tail, Ordering::Release);
        true
    }

    fn put(&self, at: usize, bytes: &[u8]) -> bool {
        // SAFETY: `bytes` is a live local array; the mapping bounds-checks its side.
        unsafe { self.map.copy_in(at, bytes.as_ptr(), bytes.len()) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn seg(bytes: &[u8]) -> Seg {
        let buf = Arc::new(RegisteredBuffer::new(bytes.len().max(1)).unwrap());
        buf.write(0, bytes).unwrap();
        Seg::new(buf, 0, bytes.len()).unwrap()
    }

    fn take(inbox: &mut Inbox) -> Option<(Entry, Vec<u8>)> {
        let e = inbox.peek().unwrap()?;
        let out = seg(&vec![0u8; MAX_INLINE]);
        assert!(inbox.copy_to(&e, std::slice::from_ref(&out)));
        let mut bytes = vec![0u8; e.len as usize];
        out.buf.read(0, &mut bytes).unwrap();
        inbox.consume(&e);
        Some((e, bytes))
    }

    #[test]
    fn sends_arrive_in_order_across_the_wrap_until_the_ring_is_full() {
        let mut inbox = Inbox::new().unwrap();
        let mut w = InboxWriter::map(inbox.fd()).unwrap();
        let mut n = 0u32;
        // Sizes that do not divide the ring, so entries meet its end mid-way and pad.
        for round in 0..4 {
            let mut written = Vec::new();
            loop {
                let len = 1000 + (n as usize * 37) % 3000;
                let payload: Vec<u8> = (0..len).map(|i| (i as u32 ^ n) as u8).collect();
                let Some(room) = w.reserve(len) else { break };
                assert!(w.write(room, &[seg(&payload)], Some(n), n % 2 == 0));
                written.push((n, payload));
                n += 1;
            }
            assert!(written.len() > 5, "round {round}: only {} fit", written.len());
            for (k, payload) in written {
                let (e, bytes) = take(&mut inbox).expect("an entry per write");
                assert_eq!((e.imm, e.solicited), (Some(k), k % 2 == 0));
                assert_eq!(bytes, payload, "entry {k}");
            }
            assert_eq!(inbox.peek(), Ok(None));
        }
    }

    #[test]
    fn a_sender_writing_garbage_is_detected_not_followed() {
        let mut inbox = Inbox::new().unwrap();
        let raw = PeerMapping::new(inbox.fd(), INBOX_LEN, true).unwrap();
        // SAFETY: `b` is a live slice of `b.len()` bytes; `copy_in` checks the range in the mapping.
        let put = |at: usize, b: &[u8]| assert!(unsafe { raw.copy_in(at, b.as_ptr(), b.len()) });
        // A tail past the ring's size.
        raw.word(TAIL).unwrap().store(DATA_LEN as u64 + 16, Ordering::Release);
        assert_eq!(inbox.peek(), Err(Corrupt));
        // An entry longer than the inline limit.
        put(DATA, &header(MAX_INLINE as u32 + 1, 0, 0));
        raw.word(TAIL).unwrap().store(64, Ordering::Release);
        assert_eq!(inbox.peek(), Err(Corrupt));
        // An entry longer than what the tail covers.
        put(DATA, &header(100, 0, 0));
        assert_eq!(inbox.peek(), Err(Corrupt));
        // Unknown flags.
        put(DATA, &header(8, 0, 0x80));
        assert_eq!(inbox.peek(), Err(Corrupt));
        // A padding entry that skips past the tail.
        put(DATA, &header(0, 0, PAD));
        assert_eq!(inbox.peek(), Err(Corrupt));
        // A sane entry is still read.
        put(DATA, &header(8, 7, HAS_IMM));
        raw.word(TAIL).unwrap().store(32, Ordering::Release);
        assert_eq!(inbox.peek().unwrap().map(|e| (e.len, e.imm)), Some((8, Some(7))));
    }

    #[test]
    fn a_receiver_lying_about_its_head_only_stops_the_sender() {
        let inbox = Inbox::new().unwrap();
        let mut w = InboxWriter::map(inbox.fd()).unwrap();
        inbox.word(HEAD).store(u64::MAX / 2, Ordering::Release);
        assert!(w.reserve(8).is_none(), "no room while the head lies");
        inbox.word(HEAD).store(0, Ordering::Release);
        let room = w.reserve(8).expect("room once it tells the truth");
        assert!(w.write(room, &[seg(&[1; 8])], None, false));
    }
}
