//! Completion queues: polling, arming, waiting, and the descriptor event loops wait on.

use std::os::fd::BorrowedFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::error::Result;
use crate::soft::SoftCq;
use crate::types::WorkCompletion;
#[cfg(feature = "verbs")]
use crate::verbs;

/// A provider's completion queue.
#[derive(Clone)]
pub(crate) enum CqFlavor {
    /// A soft completion queue.
    Soft(Arc<SoftCq>),
    /// A verbs completion queue.
    #[cfg(feature = "verbs")]
    Verbs(Arc<verbs::Cq>),
}

/// Polls between two clock reads (and yields) while [`CompletionQueue::poll_wait`] spins (a few µs).
const SPIN_POLLS_PER_CLOCK_READ: u32 = 64;

/// A completion queue. Cheap to clone.
#[derive(Clone)]
pub struct CompletionQueue {
    flavor: CqFlavor,
}

impl CompletionQueue {
    /// Wraps a soft completion queue.
    pub(super) fn from_soft(cq: SoftCq) -> Self {
        CompletionQueue { flavor: CqFlavor::Soft(Arc::new(cq)) }
    }
    /// Wraps a verbs completion queue.
    #[cfg(feature = "verbs")]
    pub(super) fn from_verbs(cq: verbs::Cq) -> Self {
        CompletionQueue { flavor: CqFlavor::Verbs(Arc::new(cq)) }
    }
    /// Moves up to `out.len()` completions into `out`; returns how many (0 when empty).
    ///
    /// # Errors
    /// [`Error::CqOverrun`](crate::Error::CqOverrun) once more completions arrived than the queue holds (sticky: the
    /// queue is unusable after it).
    #[inline]
    pub fn poll(&self, out: &mut [WorkCompletion]) -> Result<usize> {
        dispatch!(CqFlavor, &self.flavor, cq => cq.poll(out))
    }
    /// Polls into `batch` until the queue is empty, handing each batch to `each`, without
    /// waiting.
    ///
    /// # Errors
    /// What [`poll`](Self::poll) returns: [`Error::CqOverrun`](crate::Error::CqOverrun).
    pub fn drain(&self, batch: &mut [WorkCompletion], mut each: impl FnMut(&[WorkCompletion])) -> Result<()> {
        loop {
            let n = self.poll(batch)?;
            each(&batch[..n]);
            if n < batch.len() {
                return Ok(());
            }
        }
    }
    /// Requests a notification for the next completion (`ibv_req_notify_cq`).
    ///
    /// # Errors
    /// [`Error::Os`](crate::Error::Os) when the device refuses the request (verbs: `ibv_req_notify_cq`).
    pub fn arm(&self) -> Result<()> {
        match &self.flavor {
            CqFlavor::Soft(cq) => {
                cq.arm();
                Ok(())
            }
            #[cfg(feature = "verbs")]
            CqFlavor::Verbs(cq) => cq.arm(),
        }
    }
    /// Requests a notification for the next receive completion of a solicited SEND (or the
    /// next failed completion) only (`ibv_req_notify_cq` with `solicited_only`).
    ///
    /// # Errors
    /// [`Error::Os`](crate::Error::Os) when the device refuses the request (verbs: `ibv_req_notify_cq`).
    pub fn arm_solicited(&self) -> Result<()> {
        match &self.flavor {
            CqFlavor::Soft(cq) => {
                cq.arm_solicited();
                Ok(())
            }
            #[cfg(feature = "verbs")]
            CqFlavor::Verbs(cq) => cq.arm_solicited(),
        }
    }
    /// Waits up to `timeout` for the notification requested by [`arm`](Self::arm).
    ///
    /// # Errors
    /// [`Error::Os`](crate::Error::Os) when waiting on the completion channel fails (verbs: `poll`,
    /// `ibv_get_cq_event`). A timeout is `Ok(false)`, not an error.
    pub fn wait(&self, timeout: Duration) -> Result<bool> {
        match &self.flavor {
            CqFlavor::Soft(cq) => Ok(cq.wait(timeout)),
            #[cfg(feature = "verbs")]
            CqFlavor::Verbs(cq) => cq.wait(timeout),
        }
    }
    /// A descriptor for an event loop (`poll(2)`, `epoll`, tokio's `AsyncFd`): it polls
    /// readable once a notification requested by [`arm`](Self::arm) or
    /// [`arm_solicited`](Self::arm_solicited) has arrived, that is for every completion that
    /// would end a [`wait`](Self::wait), whoever queued it (on soft, a peer process on this
    /// host writing a SEND into this CQ's inbox too), and stays readable until
    /// [`take_notification`](Self::take_notification). It never blocks a read: take
    /// notifications with `take_notification`, not by reading it.
    ///
    /// The protocol, which loses no wake-up (a completion that arrives while the caller is
    /// between its steps is either found by the poll or makes the descriptor readable):
    ///
    /// 1. [`poll`](Self::poll); if it found completions, handle them and start again;
    /// 2. `arm` (or `arm_solicited`);
    /// 3. `poll` again: a completion queued before the arm raises no notification;
    /// 4. if still empty, wait for the descriptor to poll readable;
    /// 5. `take_notification`, then start again at 1.
    ///
    /// A readable descriptor may find the CQ empty (a completion polled in step 3 may also
    /// have raised the notification): callers poll, they do not count notifications.
    ///
    /// # Errors
    /// The provider could not set the descriptor up (soft: never; its epoll set is made with
    /// the CQ).
    pub fn notify_fd(&self) -> Result<BorrowedFd<'_>> {
        dispatch!(CqFlavor, &self.flavor, cq => cq.notify_fd())
    }
    /// Takes a notification without blocking (verbs: `ibv_get_cq_event` and
    /// `ibv_ack_cq_events`; soft: takes the events of its epoll set), so that [`notify_fd`](Self::notify_fd)
    /// polls readable only for the next one, after the next arm. Returns whether one had
    /// arrived. See `notify_fd` for the protocol.
    ///
    /// # Errors
    /// The provider failed to read its completion channel.
    pub fn take_notification(&self) -> Result<bool> {
        dispatch!(CqFlavor, &self.flavor, cq => cq.take_notification())
    }
    /// The depth.
    pub fn depth(&self) -> u32 {
        dispatch!(CqFlavor, &self.flavor, cq => cq.depth())
    }
    /// Polls; when empty, spins for up to `spin` (a pause instruction between polls; the clock
    /// read and one yield per 64 polls, so a thread sharing this CPU gets a turn every few
    /// µs), then arms and blocks on the completion channel until a completion arrives or
    /// `timeout` (counted from the call) passes. Returns the number of completions moved into
    /// `out` (0 on timeout).
    ///
    /// # Errors
    /// What [`poll`](Self::poll), [`arm`](Self::arm) and [`wait`](Self::wait) return:
    /// [`Error::CqOverrun`](crate::Error::CqOverrun), [`Error::Os`](crate::Error::Os). A timeout is `Ok(0)`.
    pub fn poll_wait(&self, out: &mut [WorkCompletion], spin: Duration, timeout: Duration) -> Result<usize> {
        let n = self.poll(out)?;
        if n > 0 {
            return Ok(n);
        }
        let start = Instant::now();
        loop {
            let elapsed = start.elapsed();
            if elapsed >= timeout {
                return Ok(0);
            }
            if elapsed < spin {
                for _ in 0..SPIN_POLLS_PER_CLOCK_READ {
                    std::hint::spin_loop();
                    let n = self.poll(out)?;
                    if n > 0 {
                        return Ok(n);
                    }
                }
                std::thread::yield_now();
                continue;
            }
            self.arm()?;
            let n = self.poll(out)?;
            if n > 0 {
                return Ok(n);
            }
            self.wait(timeout - elapsed)?;
            let n = self.poll(out)?;
            if n > 0 {
                return Ok(n);
            }
        }
    }
    /// Polls; when empty, arms for a solicited completion and blocks until one arrives (or a
    /// completion fails) or `timeout` passes, then polls again. Completions that raise no
    /// notification are queued meanwhile and returned by this poll. Returns the number moved
    /// into `out` (0 when none).
    ///
    /// # Errors
    /// What [`poll`](Self::poll), [`arm_solicited`](Self::arm_solicited) and
    /// [`wait`](Self::wait) return: [`Error::CqOverrun`](crate::Error::CqOverrun), [`Error::Os`](crate::Error::Os). A timeout is `Ok(0)`.
    pub fn poll_wait_solicited(&self, out: &mut [WorkCompletion], timeout: Duration) -> Result<usize> {
        let n = self.poll(out)?;
        if n > 0 {
            return Ok(n);
        }
        self.arm_solicited()?;
        let n = self.poll(out)?;
        if n > 0 {
            return Ok(n);
        }
        self.wait(timeout)?;
        self.poll(out)
    }
    /// The provider's completion queue (for the handles that pair it with other objects).
    pub(super) fn flavor(&self) -> &CqFlavor {
        &self.flavor
    }
}
