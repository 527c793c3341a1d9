//! Protection domains, memory regions and shared receive queues.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use rdma_sys::*;

use super::device::Device;
use super::os::{errno, last_os};
use super::post::{post_error, with_sges};
use crate::provider::{MrOps, PdOps, Sge, SrqOps};
use crate::{Access, Error, RegisteredBuffer, Result};

/// The raw protection domain, shared by everything created in it.
pub(super) struct PdInner {
    pd: *mut ibv_pd,
    dev: Arc<Device>,
}

// SAFETY: libibverbs PDs are thread-safe; the pointer is only used through verbs calls.
unsafe impl Send for PdInner {}
// SAFETY: see Send.
unsafe impl Sync for PdInner {}

impl Drop for PdInner {
    fn drop(&mut self) {
        // SAFETY: every MR, SRQ, QP and AH of the domain holds an Arc of it, so none is
        // left; deallocated once.
        unsafe { ibv_dealloc_pd(self.pd) };
    }
}

impl PdInner {
    /// The raw PD.
    pub(super) fn raw(&self) -> *mut ibv_pd {
        self.pd
    }
    /// The device.
    pub(super) fn dev(&self) -> &Arc<Device> {
        &self.dev
    }
    /// Registers `buffer` with `access`.
    pub(super) fn register(self: &Arc<Self>, buffer: Arc<RegisteredBuffer>, access: Access) -> Result<Mr> {
        // A zero-length region is registered as one byte of its (at least one page) buffer.
        let len = buffer.len().max(1);
        let addr = buffer.addr() as *mut std::ffi::c_void;
        // SAFETY: the PD is live; [addr, addr+len) lies inside the buffer's allocation,
        // which the returned Mr keeps alive until after deregistration.
        let mr = unsafe { ibv_reg_mr(self.pd, addr, len, access.bits() as i32) };
        if mr.is_null() {
            return Err(last_os("ibv_reg_mr"));
        }
        Ok(Mr { mr, _pd: self.clone(), _buffer: buffer })
    }
}

/// A protection domain: the provider's [`PdOps`].
pub(super) struct Pd {
    inner: Arc<PdInner>,
}

impl Pd {
    /// Allocates a PD on `dev`.
    pub(super) fn new(dev: &Arc<Device>) -> Result<Pd> {
        // SAFETY: the context is open while `dev` lives.
        let pd = unsafe { ibv_alloc_pd(dev.ctx()) };
        if pd.is_null() {
            return Err(last_os("ibv_alloc_pd"));
        }
        Ok(Pd { inner: Arc::new(PdInner { pd, dev: dev.clone() }) })
    }

    /// The shared raw PD of a provider PD.
    pub(super) fn downcast(pd: &Arc<dyn PdOps>) -> Result<Arc<PdInner>> {
        (**pd)
            .as_any()
            .downcast_ref::<Pd>()
            .map(|p| p.inner.clone())
            .ok_or_else(|| Error::invalid("verbs", "the protection domain belongs to another provider"))
    }
}

impl PdOps for Pd {
    fn register(&self, buffer: Arc<RegisteredBuffer>, access: Access) -> Result<Box<dyn MrOps>> {
        Ok(Box::new(self.inner.register(buffer, access)?))
    }

    fn create_srq(&self, max_wr: u32, max_sge: u32) -> Result<Arc<dyn SrqOps>> {
        let mut attr = ibv_srq_init_attr {
            srq_context: std::ptr::null_mut(),
            attr: ibv_srq_attr { max_wr, max_sge, srq_limit: 0 },
        };
        // SAFETY: the PD is live; attr is valid for the call.
        let srq = unsafe { ibv_create_srq(self.inner.pd, &mut attr) };
        if srq.is_null() {
            return Err(last_os("ibv_create_srq"));
        }
        // The device may round the depth up; a full queue reports what it allocated.
        Ok(Arc::new(Srq { srq, max_wr: attr.attr.max_wr.max(max_wr), _pd: self.inner.clone() }))
    }
}

/// A registered memory region: the provider's [`MrOps`].
pub(super) struct Mr {
    mr: *mut ibv_mr,
    // Released after deregistration (fields drop after `Drop::drop`).
    _pd: Arc<PdInner>,
    _buffer: Arc<RegisteredBuffer>,
}

// SAFETY: the MR is only read (keys) and deregistered once; libibverbs is thread-safe.
unsafe impl Send for Mr {}
// SAFETY: see Send.
unsafe impl Sync for Mr {}

impl Drop for Mr {
    fn drop(&mut self) {
        // SAFETY: registered in `register`, deregistered once, before the buffer is released.
        let rc = unsafe { ibv_dereg_mr(self.mr) };
        keep_if_still_registered(rc, &self._buffer);
    }
}

/// Regions whose deregistration failed, in this process (their memory is leaked).
static LEAKED_REGIONS: AtomicU64 = AtomicU64::new(0);

/// Regions of this process whose deregistration failed.
pub(super) fn leaked_regions() -> u64 {
    LEAKED_REGIONS.load(Ordering::Relaxed)
}

/// After `ibv_dereg_mr` returned `rc`: when it failed, the region may still be registered and
/// the device may still read or write its memory, so the memory is leaked (never freed, so
/// never reused by the allocator) with a warning and a count, instead of released.
fn keep_if_still_registered(rc: i32, buffer: &Arc<RegisteredBuffer>) {
    if rc == 0 {
        return;
    }
    std::mem::forget(Arc::clone(buffer));
    LEAKED_REGIONS.fetch_add(1, Ordering::Relaxed);
    tracing::warn!(
        "verbs: {}; the region's {} bytes at {:#x} are leaked, as the device may still access them",
        errno("ibv_dereg_mr", rc),
        buffer.len(),
        buffer.addr()
    );
}

impl MrOps for Mr {
    fn lkey(&self) -> u32 {
        // SAFETY: the MR is live while self is.
        unsafe { (*self.mr).lkey }
    }
    fn rkey(&self) -> u32 {
        // SAFETY: as lkey.
        unsafe { (*self.mr).rkey }
    }
}

/// A shared receive queue: the provider's [`SrqOps`].
pub(super) struct Srq {
    srq: *mut ibv_srq,
    max_wr: u32,
    _pd: Arc<PdInner>,
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
}

impl Drop for Srq {
    fn drop(&mut self) {
        // SAFETY: queue pairs using the SRQ hold an Arc of it, so none is left.
        unsafe { ibv_destroy_srq(self.srq) };
    }
}

impl SrqOps for Srq {
    fn post_recv(&self, wr_id: u64, sges: &[Sge<'_>]) -> Result<()> {
        let rc = with_sges(sges, |sg_list, num_sge| {
            let mut wr = ibv_recv_wr { wr_id, next: std::ptr::null_mut(), sg_list, num_sge };
            let mut bad: *mut ibv_recv_wr = std::ptr::null_mut();
            // SAFETY: the SRQ is live; wr and its SGE list are valid for the call.
            unsafe { ibv_post_srq_recv(self.srq, &mut wr, &mut bad) }
        });
        post_error(rc, "ibv_post_srq_recv", "shared receive queue", self.max_wr)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_deregistration_leaks_the_memory_and_counts_it() {
        let released = Arc::new(RegisteredBuffer::new(4096).unwrap());
        let watch = Arc::downgrade(&released);
        keep_if_still_registered(0, &released);
        drop(released);
        assert!(watch.upgrade().is_none(), "deregistered: the memory is freed");

        let before = leaked_regions();
        let kept = Arc::new(RegisteredBuffer::new(4096).unwrap());
        let watch = Arc::downgrade(&kept);
        keep_if_still_registered(libc::EBUSY, &kept);
        drop(kept);
        assert!(watch.upgrade().is_some(), "possibly still registered: the memory is never freed");
        assert_eq!(leaked_regions(), before + 1);
    }
}
