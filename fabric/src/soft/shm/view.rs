//! A same-host peer's region seen in place: a read-only mapping of a range the peer granted,
//! checked once as a READ of it is checked, then read with acquire loads of words and copies
//! out of it, each bounds-checked; copies check the key-table words of the region and of the
//! connection before and after, so a deregistration or a closed connection turns into an error,
//! never stale bytes. The mapping is sealed and stays mapped while the view lives: no access
//! faults, whatever the peer does.

use std::sync::atomic::{fence, AtomicBool, Ordering};
use std::sync::Arc;

use super::keys::{KeySlot, PeerKeys};
use super::map::PeerMapping;

/// Why a view cannot be had or read: as the completion status a READ would get.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ViewRefused {
    /// The peer refused the rkey, the range or the access, or deregistered the region
    /// (a READ's `RemoteAccessError`).
    Access,
    /// The connection closed or the peer's queue pair failed (a READ's
    /// `TransportRetryExceeded`).
    Transport,
}

/// A checked read-only view of `[start, start + len)` of a same-host peer's region.
pub(crate) struct ShmView {
    map: Arc<PeerMapping>,
    keys: Arc<PeerKeys>,
    region: KeySlot,
    conn: KeySlot,
    closed: Arc<AtomicBool>,
    start: usize,
    len: usize,
}

impl ShmView {
    /// A view of `len` bytes at `start` of `map` (the caller checked the range against the
    /// region and its access).
    pub(super) fn new(
        map: Arc<PeerMapping>,
        keys: Arc<PeerKeys>,
        region: KeySlot,
        conn: KeySlot,
        closed: Arc<AtomicBool>,
        start: u64,
        len: usize,
    ) -> ShmView {
        ShmView { map, keys, region, conn, closed, start: start as usize, len }
    }

    /// Bytes of the view.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Whether the region is still registered and the connection still answers.
    pub(crate) fn check_live(&self) -> Result<(), ViewRefused> {
        if !self.keys.live(self.region) {
            return Err(ViewRefused::Access);
        }
        if self.closed.load(Ordering::Acquire) || !self.keys.live(self.conn) {
            return Err(ViewRefused::Transport);
        }
        Ok(())
    }

    /// The 8-aligned little-endian word at `offset` of the view, loaded with acquire
    /// ordering; `None` out of bounds or unaligned. No revocation check (see
    /// [`check_live`](Self::check_live)).
    pub(crate) fn load_acquire(&self, offset: usize) -> Option<u64> {
        if offset.checked_add(8).is_none_or(|end| end > self.len) {
            return None;
        }
        let word = self.map.word(self.start.checked_add(offset)?)?;
        Some(u64::from_le(word.load(Ordering::Acquire)))
    }

    /// Copies `dst.len()` bytes at `offset` of the view into `dst` (an opaque copy, as a DMA
    /// engine's: the peer may be writing them), with the liveness checks before and after.
    pub(crate) fn copy_to(&self, offset: usize, dst: &mut [u8]) -> Result<(), ViewRefused> {
        if offset.checked_add(dst.len()).is_none_or(|end| end > self.len) {
            return Err(ViewRefused::Access);
        }
        self.check_live()?;
        // SAFETY: `dst` is a unique borrow of `dst.len()` bytes; the source range is checked
        // against the mapping by `copy_out` (and against the view above).
        let copied = unsafe { self.map.copy_out(self.start + offset, dst.as_mut_ptr(), dst.len()) };
        if !copied {
            return Err(ViewRefused::Access);
        }
        // The copy's loads come before the second look at the slots: a revocation that raced
        // them is seen (the owner revokes before it writes the region again).
        fence(Ordering::Acquire);
        self.check_live()
    }
}
