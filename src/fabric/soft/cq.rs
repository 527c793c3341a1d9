//! Completion queues and shared receive queues of the soft provider.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

use super::conn::RecvWr;
use super::device::Device;
use crate::fabric::error::{Error, Result};
use crate::fabric::provider::{CqOps, Sge, SrqOps};
use crate::fabric::types::WorkCompletion;

/// The state of a completion queue shared by the NIC (producer) and the owner (consumer).
pub(crate) struct CqInner {
    depth: u32,
    /// Completions queued (a copy of `st.queue.len()` written under the lock): an empty poll
    /// reads it and returns without taking the lock, so a spinning poller costs the NIC
    /// thread that pushes nothing.
    queued: AtomicUsize,
    /// The queue overflowed (sticky, as on hardware).
    overrun: AtomicBool,
    st: Mutex<CqState>,
    cv: Condvar,
}

/// What an armed CQ notifies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Notify {
    /// The next completion.
    Next,
    /// The next receive of a solicited SEND, or failed completion.
    Solicited,
}

#[derive(Default)]
struct CqState {
    queue: VecDeque<WorkCompletion>,
    armed: Option<Notify>,
    notified: bool,
}

impl CqInner {
    pub(crate) fn new(depth: u32) -> Self {
        CqInner {
            depth,
            queued: AtomicUsize::new(0),
            overrun: AtomicBool::new(false),
            st: Mutex::new(CqState::default()),
            cv: Condvar::new(),
        }
    }

    /// Adds a completion; past `depth` the queue is overrun (sticky, as on hardware).
    pub(crate) fn push(&self, wc: WorkCompletion) {
        self.push_solicited(wc, false);
    }

    /// Adds a completion that may be the receive of a solicited SEND.
    pub(crate) fn push_solicited(&self, wc: WorkCompletion, solicited: bool) {
        let mut st = self.st.lock();
        let fire = match st.armed {
            Some(Notify::Next) => true,
            Some(Notify::Solicited) => solicited || !wc.status.is_success(),
            None => false,
        };
        if st.queue.len() >= self.depth as usize {
            self.overrun.store(true, Ordering::Release);
        } else {
            st.queue.push_back(wc);
            self.queued.store(st.queue.len(), Ordering::Release);
        }
        if fire {
            st.armed = None;
            st.notified = true;
            self.cv.notify_all();
        }
    }

    /// Moves completions into `out`. An empty queue is seen from one atomic load, without the
    /// lock; the poller never yields here (waiting is `poll_wait`'s business).
    fn poll(&self, out: &mut [WorkCompletion]) -> Result<usize> {
        if self.overrun.load(Ordering::Acquire) {
            return Err(Error::CqOverrun { depth: self.depth });
        }
        if out.is_empty() || self.queued.load(Ordering::Acquire) == 0 {
            return Ok(0);
        }
        let mut st = self.st.lock();
        let n = out.len().min(st.queue.len());
        for (slot, wc) in out.iter_mut().zip(st.queue.drain(..n)) {
            *slot = wc;
        }
        self.queued.store(st.queue.len(), Ordering::Release);
        Ok(n)
    }

    fn arm(&self) {
        let mut st = self.st.lock();
        st.armed = Some(Notify::Next);
    }

    /// Arms for a solicited (or failed) completion, unless armed for the next one already.
    fn arm_solicited(&self) {
        let mut st = self.st.lock();
        st.armed.get_or_insert(Notify::Solicited);
    }

    fn wait(&self, timeout: Duration) -> bool {
        let deadline = crate::time::deadline_after(timeout);
        let mut st = self.st.lock();
        while !st.notified {
            if self.cv.wait_until(&mut st, deadline).timed_out() {
                break;
            }
        }
        std::mem::take(&mut st.notified)
    }
}

/// A completion queue handle.
pub(crate) struct SoftCq {
    pub(crate) inner: Arc<CqInner>,
    _dev: Arc<Device>,
}

impl SoftCq {
    pub(crate) fn new(dev: Arc<Device>, depth: u32) -> Self {
        SoftCq { inner: Arc::new(CqInner::new(depth)), _dev: dev }
    }
}

impl CqOps for SoftCq {
    fn poll(&self, out: &mut [WorkCompletion]) -> Result<usize> {
        self.inner.poll(out)
    }
    fn arm(&self) -> Result<()> {
        self.inner.arm();
        Ok(())
    }
    fn arm_solicited(&self) -> Result<()> {
        self.inner.arm_solicited();
        Ok(())
    }
    fn wait(&self, timeout: Duration) -> Result<bool> {
        Ok(self.inner.wait(timeout))
    }
    fn depth(&self) -> u32 {
        self.inner.depth
    }
}

/// The receive list of a shared receive queue.
pub(crate) struct SrqInner {
    pub(crate) pd: u32,
    max_wr: u32,
    max_sge: u32,
    queue: Mutex<VecDeque<RecvWr>>,
}

impl SrqInner {
    /// Takes the oldest posted receive.
    pub(crate) fn take(&self) -> Option<RecvWr> {
        self.queue.lock().pop_front()
    }
}

/// A shared receive queue handle.
pub(crate) struct SoftSrq {
    pub(crate) inner: Arc<SrqInner>,
    _dev: Arc<Device>,
}

impl SoftSrq {
    pub(crate) fn new(dev: Arc<Device>, pd: u32, max_wr: u32, max_sge: u32) -> Self {
        SoftSrq { inner: Arc::new(SrqInner { pd, max_wr, max_sge, queue: Mutex::new(VecDeque::new()) }), _dev: dev }
    }
}

impl SrqOps for SoftSrq {
    fn post_recv(&self, wr_id: u64, sges: &[Sge<'_>]) -> Result<()> {
        let s = &self.inner;
        if sges.len() > s.max_sge as usize {
            return Err(Error::invalid("post_srq_recv", format!("{} SGEs, the limit is {}", sges.len(), s.max_sge)));
        }
        let wr = RecvWr::new(wr_id, sges, s.pd, "post_srq_recv")?;
        let mut q = s.queue.lock();
        if q.len() >= s.max_wr as usize {
            return Err(Error::QueueFull { queue: "shared receive queue", depth: s.max_wr });
        }
        q.push_back(wr);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_poll_does_not_take_the_lock_the_nic_pushes_under() {
        let cq = Arc::new(CqInner::new(4));
        let held = cq.st.lock();
        let (tx, rx) = std::sync::mpsc::channel();
        let poller = {
            let cq = cq.clone();
            std::thread::spawn(move || {
                let mut out = [WorkCompletion::default(); 4];
                tx.send(cq.poll(&mut out).map_err(|e| e.to_string())).unwrap();
            })
        };
        let polled = rx.recv_timeout(Duration::from_secs(10));
        drop(held);
        poller.join().unwrap();
        assert_eq!(polled.expect("an empty poll returned while the lock was held").unwrap(), 0);
    }

    #[test]
    fn overrun_is_sticky_and_arm_wakes_a_waiter() {
        let cq = Arc::new(CqInner::new(2));
        let mut out = [WorkCompletion::default(); 4];
        assert!(!cq.wait(Duration::from_millis(1)), "no notification without a completion");
        cq.arm();
        let waiter = {
            let cq = cq.clone();
            std::thread::spawn(move || cq.wait(Duration::from_secs(10)))
        };
        cq.push(WorkCompletion { wr_id: 1, ..Default::default() });
        assert!(waiter.join().unwrap());
        cq.push(WorkCompletion { wr_id: 2, ..Default::default() });
        assert_eq!(cq.poll(&mut out).unwrap(), 2);
        assert_eq!((out[0].wr_id, out[1].wr_id), (1, 2));
        for i in 0..3 {
            cq.push(WorkCompletion { wr_id: i, ..Default::default() });
        }
        assert!(matches!(cq.poll(&mut out), Err(Error::CqOverrun { depth: 2 })));
        assert!(matches!(cq.poll(&mut out), Err(Error::CqOverrun { .. })), "overrun is sticky");
    }
}
