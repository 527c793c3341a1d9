//! Shared receive queues, where the device has them.

use std::sync::Arc;

use crate::error::Result;
use crate::region::{check_sges, Sge};
use crate::soft::SoftSrq;
use crate::types::FabricKind;
#[cfg(feature = "verbs")]
use crate::verbs;

/// A provider's shared receive queue.
#[derive(Clone)]
pub(crate) enum SrqFlavor {
    /// A soft shared receive queue.
    Soft(Arc<SoftSrq>),
    /// A verbs shared receive queue.
    #[cfg(feature = "verbs")]
    Verbs(Arc<verbs::Srq>),
}

/// A receive queue shared by many queue pairs. Cheap to clone.
#[derive(Clone)]
pub struct SharedReceiveQueue {
    flavor: SrqFlavor,
}

impl SharedReceiveQueue {
    /// Wraps a soft shared receive queue.
    pub(super) fn from_soft(srq: SoftSrq) -> Self {
        SharedReceiveQueue { flavor: SrqFlavor::Soft(Arc::new(srq)) }
    }
    /// Wraps a verbs shared receive queue.
    #[cfg(feature = "verbs")]
    pub(super) fn from_verbs(srq: verbs::Srq) -> Self {
        SharedReceiveQueue { flavor: SrqFlavor::Verbs(Arc::new(srq)) }
    }
    /// Posts a receive into `sges`.
    ///
    /// # Errors
    /// [`Error::LocalBounds`](crate::Error::LocalBounds) when an SGE is outside its region;
    /// [`Error::ProviderMismatch`](crate::Error::ProviderMismatch) when it names a region of
    /// another provider; [`Error::InvalidArgument`](crate::Error::InvalidArgument) for more SGEs
    /// than the queue's `max_sge` or a region not writable locally or of another protection
    /// domain; [`Error::QueueFull`](crate::Error::QueueFull) when `max_wr` receives are posted
    /// already.
    pub fn post_recv(&self, wr_id: u64, sges: &[Sge<'_>]) -> Result<()> {
        const VERB: &str = "post_srq_recv";
        match &self.flavor {
            SrqFlavor::Soft(srq) => {
                check_sges(sges, FabricKind::Soft, VERB)?;
                srq.post_recv(wr_id, sges)
            }
            #[cfg(feature = "verbs")]
            SrqFlavor::Verbs(srq) => {
                check_sges(sges, FabricKind::Verbs, VERB)?;
                srq.post_recv(wr_id, sges)
            }
        }
    }
    /// The provider's shared receive queue (for the handles that pair it with other objects).
    pub(super) fn flavor(&self) -> &SrqFlavor {
        &self.flavor
    }
}
