//! Protection domains: a number that regions and queue pairs are matched on.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use super::device::Device;
use super::mr::SoftMr;
use super::srq::SoftSrq;
use crate::error::Result;
use crate::memory::RegisteredBuffer;
use crate::provider::{MrOps, PdOps, SrqOps};
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
}

impl PdOps for SoftPd {
    fn register(&self, buffer: Arc<RegisteredBuffer>, access: Access) -> Result<Box<dyn MrOps>> {
        Ok(Box::new(SoftMr::register(self.dev.clone(), buffer, access, self.id)?))
    }
    fn create_srq(&self, max_wr: u32, max_sge: u32) -> Result<Arc<dyn SrqOps>> {
        Ok(Arc::new(SoftSrq::new(self.dev.clone(), self.id, max_wr, max_sge)))
    }
}
