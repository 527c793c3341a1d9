//! Protection domains: a number that regions and queue pairs are matched on.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use super::device::{Device, DeviceState};
use super::mr::SoftMr;
use super::srq::SoftSrq;
use crate::error::Result;
use crate::memory::RegisteredBuffer;
use crate::types::Access;

/// A protection domain: a number that regions and queue pairs are matched on.
pub(crate) struct SoftPd {
    pub(crate) id: u32,
    dev: Arc<Device>,
}

impl SoftPd {
    /// A protection domain of `dev` with a fresh number (unique in the process).
    pub(crate) fn new(dev: Arc<Device>) -> Self {
        static NEXT_PD: AtomicU32 = AtomicU32::new(1);
        SoftPd { id: NEXT_PD.fetch_add(1, Ordering::Relaxed), dev }
    }

    /// Whether the domain belongs to the device of `state`.
    pub(crate) fn is_of(&self, state: &DeviceState) -> bool {
        std::ptr::eq(&*self.dev.state, state)
    }

    /// Registers `buffer` with `access`; the region is deregistered when the result drops.
    pub(crate) fn register(&self, buffer: Arc<RegisteredBuffer>, access: Access) -> Result<SoftMr> {
        SoftMr::register(self.dev.clone(), buffer, access, self.id)
    }

    /// Creates a shared receive queue of `max_wr` receives of up to `max_sge` entries.
    pub(crate) fn create_srq(&self, max_wr: u32, max_sge: u32) -> SoftSrq {
        SoftSrq::new(self.dev.clone(), self.id, max_wr, max_sge)
    }
}
