//! The key table of a device: one shared word per registered region that grants remote access,
//! holding the region's key while it is registered and 0 once it is not, and one per same-host
//! connection, holding a key while the connection's queue pair can answer requests. Peers on the same host
//! map the table read-only and check the word before and after every copy, so deregistration
//! revokes their access at once: a copy that overlaps it fails as a remote access error.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{fence, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use super::map::{reopen_read_only, PeerMapping};
use crate::error::{Error, Result};
use crate::memory::RegisteredBuffer;

/// Slots of a key table (regions with remote access one device may have registered at once).
pub(crate) const SLOTS: u32 = 1 << 16;
/// Bytes of a key table.
pub(crate) const TABLE_LEN: usize = SLOTS as usize * 8;

/// A registered region's entry: its slot and the word the slot holds while it is registered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct KeySlot {
    /// Index into the table.
    pub(crate) index: u32,
    /// `generation << 32 | rkey`, never 0.
    pub(crate) word: u64,
}

/// Slots handed out so far (one generation each) and the revoked ones free again.
struct Allocator {
    free: Vec<u32>,
    generations: Vec<u32>,
}

/// The owner's side of a key table.
pub(crate) struct KeyTable {
    table: RegisteredBuffer,
    read_only: OwnedFd,
    alloc: Mutex<Allocator>,
}

impl KeyTable {
    /// A new, empty table with a read-only descriptor for peers.
    pub(crate) fn new() -> Result<KeyTable> {
        let table = RegisteredBuffer::new(TABLE_LEN)?;
        let read_only = reopen_read_only(table.memfd())?;
        Ok(KeyTable { table, read_only, alloc: Mutex::new(Allocator { free: Vec::new(), generations: Vec::new() }) })
    }

    /// The descriptor a peer maps (read-only).
    pub(crate) fn peer_fd(&self) -> BorrowedFd<'_> {
        self.read_only.as_fd()
    }

    /// Publishes `rkey` in a free slot; `None` when every slot is taken. Held through
    /// [`HeldSlot`], which revokes it.
    pub(super) fn publish(&self, rkey: u32) -> Option<KeySlot> {
        let mut a = self.alloc.lock();
        let index = match a.free.pop() {
            Some(i) => i,
            None if a.generations.len() < SLOTS as usize => {
                a.generations.push(0);
                (a.generations.len() - 1) as u32
            }
            None => return None,
        };
        let generation = &mut a.generations[index as usize];
        *generation = generation.wrapping_add(1).max(1);
        let word = u64::from(*generation) << 32 | u64::from(rkey);
        self.slot(index).store(word, Ordering::Release);
        Some(KeySlot { index, word })
    }

    /// Revokes a slot: copies that have not finished checking it fail from now on.
    pub(super) fn revoke(&self, slot: KeySlot) {
        self.slot(slot.index).store(0, Ordering::SeqCst);
        // Later writes of the owner to the region must not become visible before the
        // revocation (a copy that sees them then sees the revocation too).
        fence(Ordering::SeqCst);
        self.alloc.lock().free.push(slot.index);
    }

    fn slot(&self, index: u32) -> &std::sync::atomic::AtomicU64 {
        self.table.atomic_u64(index as usize * 8).expect("slot index below SLOTS")
    }
}

/// A slot held for as long as something stays reachable by peers (a connection's queue pair);
/// revoked when dropped.
pub(crate) struct HeldSlot {
    table: Arc<KeyTable>,
    slot: KeySlot,
}

impl HeldSlot {
    /// Publishes a slot for `key` in `table`; `None` when every slot is taken.
    pub(crate) fn publish(table: &Arc<KeyTable>, key: u32) -> Option<HeldSlot> {
        Some(HeldSlot { table: table.clone(), slot: table.publish(key)? })
    }

    /// The slot and the word it holds.
    pub(crate) fn slot(&self) -> KeySlot {
        self.slot
    }
}

impl Drop for HeldSlot {
    fn drop(&mut self) {
        self.table.revoke(self.slot);
    }
}

/// A peer's key table, mapped read-only.
pub(crate) struct PeerKeys {
    map: PeerMapping,
}

impl PeerKeys {
    /// Maps a table received from a peer.
    pub(crate) fn map(fd: BorrowedFd<'_>) -> Result<PeerKeys> {
        let map = PeerMapping::new(fd, TABLE_LEN, false)?;
        Ok(PeerKeys { map })
    }

    /// Whether `slot` still holds the word it held when the region was handed over.
    pub(crate) fn live(&self, slot: KeySlot) -> bool {
        self.map.word(slot.index as usize * 8).is_some_and(|w| w.load(Ordering::Acquire) == slot.word)
    }
}

impl KeySlot {
    /// Checks an index received from a peer.
    pub(crate) fn from_peer(index: u32, word: u64) -> Result<KeySlot> {
        if index >= SLOTS || word == 0 {
            return Err(Error::invalid("same-host region", format!("key slot {index} / {word:#x} is out of range")));
        }
        Ok(KeySlot { index, word })
    }
}
