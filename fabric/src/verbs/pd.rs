//! Protection domains (registering memory, creating shared receive queues) and shared receive
//! queues.

use std::sync::Arc;

use rdma_sys::*;

use super::device::Device;
use super::mr::{Mr, PdInner};
use super::os::last_os;
use super::post::{post_error, with_sges};
use crate::provider::Sge;
use crate::{Access, RegisteredBuffer, Result};

/// A protection domain.
pub(crate) struct Pd {
    inner: Arc<PdInner>,
}

impl Pd {
    /// Allocates a PD on `dev`.
    pub(super) fn new(dev: &Arc<Device>) -> Result<Pd> {
        Ok(Pd { inner: Arc::new(PdInner::new(dev)?) })
    }

    /// The raw protection domain its regions, queue pairs and endpoints share.
    pub(super) fn inner(&self) -> &Arc<PdInner> {
        &self.inner
    }

    /// Registers `buffer` with `access`; the region is deregistered when the result drops.
    pub(crate) fn register(&self, buffer: Arc<RegisteredBuffer>, access: Access) -> Result<Mr> {
        self.inner.register(buffer, access)
    }

    /// Creates a shared receive queue (fails when the device has none).
    pub(crate) fn create_srq(&self, max_wr: u32, max_sge: u32) -> Result<Srq> {
        let mut attr = ibv_srq_init_attr {
            srq_context: std::ptr::null_mut(),
            attr: ibv_srq_attr { max_wr, max_sge, srq_limit: 0 },
        };
        // SAFETY: the PD is live; attr is valid for the call.
        let srq = unsafe { ibv_create_srq(self.inner.raw(), &mut attr) };
        if srq.is_null() {
            return Err(last_os("ibv_create_srq"));
        }
        // The device may round the depth up; a full queue reports what it allocated.
        Ok(Srq { srq, max_wr: attr.attr.max_wr.max(max_wr), pd: self.inner.clone() })
    }
}

/// A shared receive queue.
pub(crate) struct Srq {
    srq: *mut ibv_srq,
    max_wr: u32,
    pd: Arc<PdInner>,
}

// SAFETY: libibverbs SRQs are thread-safe (posting is locked by the provider).
unsafe impl Send for Srq {}
// SAFETY: see Send.
unsafe impl Sync for Srq {}

impl Srq {
    /// The raw SRQ (for queue-pair creation).
    pub(super) fn raw(&self) -> *mut ibv_srq {
        self.srq
    }

    /// The device of its protection domain.
    pub(super) fn dev(&self) -> &Arc<Device> {
        self.pd.dev()
    }

    /// Posts a receive.
    pub(crate) fn post_recv(&self, wr_id: u64, sges: &[Sge<'_>]) -> Result<()> {
        let rc = with_sges(sges, |sg_list, num_sge| {
            let mut wr = ibv_recv_wr { wr_id, next: std::ptr::null_mut(), sg_list, num_sge };
            let mut bad: *mut ibv_recv_wr = std::ptr::null_mut();
            // SAFETY: the SRQ is live; wr and its SGE list are valid for the call.
            unsafe { ibv_post_srq_recv(self.srq, &mut wr, &mut bad) }
        });
        post_error(rc, "ibv_post_srq_recv", "shared receive queue", self.max_wr)
    }
}

impl Drop for Srq {
    fn drop(&mut self) {
        // SAFETY: queue pairs using the SRQ hold an Arc of it, so none is left.
        unsafe { ibv_destroy_srq(self.srq) };
    }
}
