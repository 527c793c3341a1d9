//! Shared receive queues of the soft provider: one receive list that several queue pairs take
//! their receives from.

use std::os::fd::OwnedFd;
use std::sync::Arc;

use parking_lot::Mutex;

use super::device::{Device, DeviceState};
use super::recv::{RecvList, RecvWr, Taker};
use super::shm::NoCredit;
use crate::error::{Error, Result};
use crate::provider::Sge;

/// The receive list of a shared receive queue.
pub(crate) struct SrqInner {
    pub(crate) pd: u32,
    max_wr: u32,
    max_sge: u32,
    queue: Mutex<RecvList>,
}

impl SrqInner {
    /// Takes the oldest posted receive (see [`RecvList::take`]).
    pub(crate) fn take(&self, taker: Taker) -> std::result::Result<Option<RecvWr>, NoCredit> {
        self.queue.lock().take(taker)
    }

    /// A new same-host sender of this queue (see [`RecvList::attach`]).
    pub(crate) fn attach(&self) -> Option<(u64, OwnedFd)> {
        self.queue.lock().attach()
    }

    /// Same-host sender `id` is gone (see [`RecvList::detach`]).
    pub(crate) fn detach(&self, id: u64) {
        self.queue.lock().detach(id);
    }
}

/// A shared receive queue handle.
pub(crate) struct SoftSrq {
    pub(crate) inner: Arc<SrqInner>,
    dev: Arc<Device>,
}

impl SoftSrq {
    /// A shared receive queue of `dev` in protection domain `pd`.
    pub(crate) fn new(dev: Arc<Device>, pd: u32, max_wr: u32, max_sge: u32) -> Self {
        SoftSrq { inner: Arc::new(SrqInner { pd, max_wr, max_sge, queue: Mutex::new(RecvList::new(true)) }), dev }
    }

    /// Whether the queue belongs to the device of `state`.
    pub(crate) fn is_of(&self, state: &DeviceState) -> bool {
        std::ptr::eq(&*self.dev.state, state)
    }

    /// Posts a receive.
    pub(crate) fn post_recv(&self, wr_id: u64, sges: &[Sge<'_>]) -> Result<()> {
        let s = &self.inner;
        if sges.len() > s.max_sge as usize {
            return Err(Error::invalid("post_srq_recv", format!("{} SGEs, the limit is {}", sges.len(), s.max_sge)));
        }
        let wr = RecvWr::new(wr_id, sges, s.pd, "post_srq_recv")?;
        let mut q = s.queue.lock();
        if q.len() >= s.max_wr as usize {
            return Err(Error::QueueFull { queue: "shared receive queue", depth: s.max_wr });
        }
        q.push(wr);
        Ok(())
    }
}
