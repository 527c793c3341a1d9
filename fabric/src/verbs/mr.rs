//! The raw protection domain that everything created in it shares, and memory regions.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use rdma_sys::*;

use super::device::Device;
use super::os::{errno, last_os};
use crate::{Access, RegisteredBuffer, Result};

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
    /// Allocates a PD on `dev`.
    pub(super) fn new(dev: &Arc<Device>) -> Result<PdInner> {
        // SAFETY: the context is open while `dev` lives.
        let pd = unsafe { ibv_alloc_pd(dev.ctx()) };
        if pd.is_null() {
            return Err(last_os("ibv_alloc_pd"));
        }
        Ok(PdInner { pd, dev: dev.clone() })
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

/// A registered memory region.
pub(crate) struct Mr {
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

impl Mr {
    /// The local key.
    pub(crate) fn lkey(&self) -> u32 {
        // SAFETY: the MR is live while self is.
        unsafe { (*self.mr).lkey }
    }
    /// The remote key.
    pub(crate) fn rkey(&self) -> u32 {
        // SAFETY: as lkey.
        unsafe { (*self.mr).rkey }
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
