//! Memory regions: registering a buffer in the device's region table, and removing it when the
//! handle drops.

use std::sync::Arc;

use super::device::Device;
use crate::error::Result;
use crate::memory::RegisteredBuffer;
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

impl SoftMr {
    /// The region's key: both its lkey and its rkey.
    pub(crate) fn key(&self) -> u32 {
        self.key
    }
}

impl Drop for SoftMr {
    fn drop(&mut self) {
        self.dev.state.regions.remove(self.key);
    }
}
