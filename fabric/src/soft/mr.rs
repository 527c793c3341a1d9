//! Memory regions: registering a buffer in the device's region table, removing it when the
//! handle drops, and the local check of a work request's SGEs against the regions they name.

use std::sync::Arc;

use super::device::Device;
use super::seg::Seg;
use crate::error::Result;
use crate::memory::RegisteredBuffer;
use crate::provider::{MrOps, Sge};
use crate::types::Access;

/// A registered region; dropping it removes its key from the device at once.
pub(crate) struct SoftMr {
    key: u32,
    pub(crate) pd: u32,
    pub(crate) access: Access,
    dev: Arc<Device>,
}

impl SoftMr {
    /// Registers `buffer` with `access` in protection domain `pd`, under a fresh random key.
    pub(crate) fn register(dev: Arc<Device>, buffer: Arc<RegisteredBuffer>, access: Access, pd: u32) -> Result<SoftMr> {
        let key = dev.state.regions.add(buffer, access, pd, dev.state.shm.as_ref())?;
        Ok(SoftMr { key, pd, access, dev })
    }
}

impl MrOps for SoftMr {
    fn lkey(&self) -> u32 {
        self.key
    }
    fn rkey(&self) -> u32 {
        self.key
    }
}

impl Drop for SoftMr {
    fn drop(&mut self) {
        self.dev.state.regions.remove(self.key);
    }
}

/// The segment of an SGE if its region is a soft region of protection domain `pd` that grants
/// `need`; `None` is a local protection error.
pub(crate) fn sge_segment(sge: &Sge<'_>, pd: u32, need: Access) -> Option<Seg> {
    let mr = sge.mr.ops().as_any().downcast_ref::<SoftMr>()?;
    if mr.pd != pd || !mr.access.contains(need) {
        return None;
    }
    Seg::new(sge.mr.buffer_arc().clone(), sge.offset, sge.len).ok()
}
