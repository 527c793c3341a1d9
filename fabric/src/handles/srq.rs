//! Shared receive queues, where the device has them.

use std::sync::Arc;

use super::device::ProtectionDomain;
use crate::error::{Error, Result};
use crate::provider::SrqOps;
use crate::region::{check_sges, Sge};

impl ProtectionDomain {
    /// Creates a shared receive queue of `max_wr` receives.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when the device has no shared receive queue or `max_wr` or
    /// `max_sge` is 0 or above its limits; [`Error::Os`] when the device refuses it (verbs).
    pub fn create_srq(&self, max_wr: u32, max_sge: u32) -> Result<SharedReceiveQueue> {
        let attrs = self.fabric.attributes();
        if attrs.max_srq_wr == 0 {
            return Err(Error::invalid(
                "create_srq",
                format!("device {} has no shared receive queue", self.fabric.device_name()),
            ));
        }
        if max_wr == 0 || max_wr > attrs.max_srq_wr || max_sge == 0 || max_sge > attrs.max_sge {
            return Err(Error::invalid("create_srq", format!("max_wr {max_wr} / max_sge {max_sge} out of range")));
        }
        Ok(SharedReceiveQueue { ops: self.ops.create_srq(max_wr, max_sge)? })
    }
}

/// A receive queue shared by many queue pairs. Cheap to clone.
#[derive(Clone)]
pub struct SharedReceiveQueue {
    pub(super) ops: Arc<dyn SrqOps>,
}

impl SharedReceiveQueue {
    /// Posts a receive into `sges`.
    ///
    /// # Errors
    /// [`Error::LocalBounds`] when an SGE is outside its region; [`Error::InvalidArgument`]
    /// for more SGEs than the queue's `max_sge` or a region not writable locally or of another
    /// protection domain; [`Error::QueueFull`] when `max_wr` receives are posted already.
    pub fn post_recv(&self, wr_id: u64, sges: &[Sge<'_>]) -> Result<()> {
        check_sges(sges)?;
        self.ops.post_recv(wr_id, sges)
    }
}
