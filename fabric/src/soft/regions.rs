//! The region table of a device: its registered regions by key, with the protection domain and
//! access each grants; the check of every remote READ and WRITE against it, as a NIC makes it;
//! and what a same-host peer is given of a region.

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::sync::Arc;

use parking_lot::RwLock;
use rand::RngExt;

use super::seg::Seg;
use super::shm::{self, HeldSlot, KeySlot};
use crate::error::{Error, Result};
use crate::memory::RegisteredBuffer;
use crate::types::Access;

struct RegionEntry {
    buf: Arc<RegisteredBuffer>,
    access: Access,
    pd: u32,
    /// Its slot in the same-host key table (regions with remote access), revoked when the
    /// entry is dropped.
    slot: Option<HeldSlot>,
}

/// The registered regions of a device, by key (a region's lkey and rkey are the same random
/// value).
#[derive(Default)]
pub(crate) struct RegionTable {
    regions: RwLock<HashMap<u32, RegionEntry>>,
}

impl RegionTable {
    /// The registered range a remote READ or WRITE addresses, if `rkey` names a live region of
    /// protection domain `pd` that grants `need` and contains `[addr, addr + len)`.
    pub(crate) fn remote_range(&self, rkey: u32, pd: u32, addr: u64, len: u64, need: Access) -> Option<Seg> {
        let regions = self.regions.read();
        let r = regions.get(&rkey)?;
        if r.pd != pd || !r.access.contains(need) {
            return None;
        }
        let off = addr.checked_sub(r.buf.addr())?;
        let end = off.checked_add(len)?;
        if end > r.buf.len() as u64 {
            return None;
        }
        Seg::new(r.buf.clone(), off as usize, len as usize).ok()
    }

    /// Adds a region under a fresh random key; one with remote access also takes a slot in
    /// the key table of the same-host endpoint `same_host` (when the device has one).
    pub(crate) fn add(
        &self,
        buf: Arc<RegisteredBuffer>,
        access: Access,
        pd: u32,
        same_host: Option<&shm::Endpoint>,
    ) -> Result<u32> {
        let mut regions = self.regions.write();
        let mut rng = rand::rng();
        let key = loop {
            let key: u32 = rng.random();
            if key != 0 && !regions.contains_key(&key) {
                break key;
            }
        };
        let remote = access.contains(Access::REMOTE_READ) || access.contains(Access::REMOTE_WRITE);
        let slot = match same_host.filter(|_| remote) {
            Some(ep) => Some(HeldSlot::publish(&ep.keys, key).ok_or(Error::QueueFull {
                queue: "same-host key table (regions with remote access and same-host connections)",
                depth: shm::KEY_SLOTS,
            })?),
            None => None,
        };
        regions.insert(key, RegionEntry { buf, access, pd, slot });
        Ok(key)
    }

    /// Removes a region; its key-table slot is revoked before this returns.
    pub(crate) fn remove(&self, key: u32) {
        drop(self.regions.write().remove(&key));
    }

    /// What a same-host peer is given of region `rkey` for a connection of protection domain
    /// `pd` whose queue pair allows the remote access `allowed` and whose key slot is `live`:
    /// the region's memory object (read-only unless both grant remote write) and where it is,
    /// with the rights both grant, if it exists, is in `pd` and both grant remote access.
    pub(crate) fn grant(&self, rkey: u32, pd: u32, allowed: Access, live: KeySlot) -> Option<(OwnedFd, shm::Answer)> {
        let regions = self.regions.read();
        let r = regions.get(&rkey).filter(|r| r.pd == pd)?;
        let slot = r.slot.as_ref()?.slot();
        let access = Access::from_bits_truncate(r.access.bits() & (allowed | Access::LOCAL_WRITE).bits());
        if !access.contains(Access::REMOTE_READ) && !access.contains(Access::REMOTE_WRITE) {
            return None;
        }
        let fd = if access.contains(Access::REMOTE_WRITE) {
            r.buf.memfd().try_clone_to_owned().ok()?
        } else {
            shm::reopen_read_only(r.buf.memfd()).ok()?
        };
        let answer = shm::Answer {
            granted: true,
            access: access.bits(),
            slot: slot.index,
            word: slot.word,
            base: r.buf.addr(),
            len: r.buf.len() as u64,
            conn_slot: live.index,
            conn_word: live.word,
        };
        Some((fd, answer))
    }
}
