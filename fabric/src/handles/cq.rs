//! Completion queues: polling, arming, waiting, and the descriptor event loops wait on.

use std::os::fd::BorrowedFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::device::Fabric;
use crate::error::{Error, Result};
use crate::provider::CqOps;
use crate::types::WorkCompletion;

impl Fabric {
    /// Creates a completion queue of `depth` entries (with its completion channel).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `depth` is 0 or above the device's `max_cqe`;
    /// [`Error::Os`] when the device or the system refuses it (completion channel, eventfd).
    pub fn create_cq(&self, depth: u32) -> Result<CompletionQueue> {
        let max = self.attributes().max_cqe;
        if depth == 0 || depth > max {
            return Err(Error::invalid("create_cq", format!("depth {depth} is not in 1..={max}")));
        }
        Ok(CompletionQueue { ops: self.ops.create_cq(depth)? })
    }
}

/// Polls between two clock reads (and yields) while [`CompletionQueue::poll_wait`] spins (a few µs).
const SPIN_POLLS_PER_CLOCK_READ: u32 = 64;

/// A completion queue. Cheap to clone.
#[derive(Clone)]
pub struct CompletionQueue {
    ops: Arc<dyn CqOps>,
}

impl CompletionQueue {
    /// Moves up to `out.len()` completions into `out`; returns how many (0 when empty).
    ///
    /// # Errors
    /// [`Error::CqOverrun`] once more completions arrived than the queue holds (sticky: the
    /// queue is unusable after it).
    pub fn poll(&self, out: &mut [WorkCompletion]) -> Result<usize> {
        self.ops.poll(out)
    }
    /// Polls into `batch` until the queue is empty, handing each batch to `each`, without
    /// waiting.
    ///
    /// # Errors
    /// What [`poll`](Self::poll) returns: [`Error::CqOverrun`].
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
    /// [`Error::Os`] when the device refuses the request (verbs: `ibv_req_notify_cq`).
    pub fn arm(&self) -> Result<()> {
        self.ops.arm()
    }
    /// Requests a notification for the next receive completion of a solicited SEND (or the
    /// next failed completion) only (`ibv_req_notify_cq` with `solicited_only`).
    ///
    /// # Errors
    /// [`Error::Os`] when the device refuses the request (verbs: `ibv_req_notify_cq`).
    pub fn arm_solicited(&self) -> Result<()> {
        self.ops.arm_solicited()
    }
    /// Waits up to `timeout` for the notification requested by [`arm`](Self::arm).
    ///
    /// # Errors
    /// [`Error::Os`] when waiting on the completion channel fails (verbs: `poll`,
    /// `ibv_get_cq_event`). A timeout is `Ok(false)`, not an error.
    pub fn wait(&self, timeout: Duration) -> Result<bool> {
        self.ops.wait(timeout)
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
    /// The provider could not set the descriptor up (soft: creating its eventfd failed).
    pub fn notify_fd(&self) -> Result<BorrowedFd<'_>> {
        self.ops.notify_fd()
    }
    /// Takes a notification without blocking (verbs: `ibv_get_cq_event` and
    /// `ibv_ack_cq_events`; soft: clears the eventfd), so that [`notify_fd`](Self::notify_fd)
    /// polls readable only for the next one, after the next arm. Returns whether one had
    /// arrived. See `notify_fd` for the protocol.
    ///
    /// # Errors
    /// The provider failed to read its completion channel.
    pub fn take_notification(&self) -> Result<bool> {
        self.ops.take_notification()
    }
    /// The depth.
    pub fn depth(&self) -> u32 {
        self.ops.depth()
    }
    /// Polls; when empty, spins for up to `spin` (a pause instruction between polls; the clock
    /// read and one yield per 64 polls, so a thread sharing this CPU gets a turn every few
    /// µs), then arms and blocks on the completion channel until a completion arrives or
    /// `timeout` (counted from the call) passes. Returns the number of completions moved into
    /// `out` (0 on timeout).
    ///
    /// # Errors
    /// What [`poll`](Self::poll), [`arm`](Self::arm) and [`wait`](Self::wait) return:
    /// [`Error::CqOverrun`], [`Error::Os`]. A timeout is `Ok(0)`.
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
    /// [`wait`](Self::wait) return: [`Error::CqOverrun`], [`Error::Os`]. A timeout is `Ok(0)`.
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
    /// The provider object (for providers).
    pub(crate) fn ops(&self) -> &Arc<dyn CqOps> {
        &self.ops
    }
}
