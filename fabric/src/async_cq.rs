//! A completion queue's notifications in an async task (feature `async`): the descriptor of
//! [`CompletionQueue::notify_fd`] registered with tokio's reactor, so a task waits for an
//! armed CQ's next completion with no thread of its own and no timer.

use std::os::fd::{AsRawFd, RawFd};
use std::task::{Context, Poll};

use tokio::io::unix::AsyncFd;

use super::error::{Error, Result};
use super::CompletionQueue;

/// Most notifications one [`AsyncNotifier::poll_notified`] takes (one arm makes at most one).
const MAX_TAKES: usize = 16;

/// A CQ's descriptor as tokio's reactor holds it: the CQ keeps the descriptor open and the same
/// (verbs: its completion channel; soft: the bell's epoll set, made with the CQ).
struct NotifyFd {
    cq: CompletionQueue,
    fd: RawFd,
}

impl AsRawFd for NotifyFd {
    fn as_raw_fd(&self) -> RawFd {
        self.fd
    }
}

/// Waits in an async task for the notifications of one completion queue. Follow the protocol
/// of [`CompletionQueue::notify_fd`]: poll, arm, poll, then
/// [`poll_notified`](Self::poll_notified), which stands for "await the descriptor, then take
/// the notification".
pub struct AsyncNotifier {
    fd: AsyncFd<NotifyFd>,
}

impl std::fmt::Debug for AsyncNotifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AsyncNotifier").field("fd", &self.fd.get_ref().fd).finish()
    }
}

impl AsyncNotifier {
    /// Registers `cq`'s notification descriptor with the reactor of the current tokio runtime.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when called outside a tokio runtime; [`Error::Os`] when the
    /// descriptor cannot be made or registered.
    ///
    /// # Panics
    /// In a tokio runtime built without its I/O driver (`enable_io`), as tokio's `AsyncFd` does.
    pub fn new(cq: &CompletionQueue) -> Result<AsyncNotifier> {
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(Error::invalid("async completion queue", "not called inside a tokio runtime"));
        }
        let fd = cq.notify_fd()?.as_raw_fd();
        let inner = NotifyFd { cq: cq.clone(), fd };
        // SAFETY: `fd` belongs to the CQ that `inner` holds, so it stays open and refers to the
        // same descriptor for as long as the `AsyncFd` owns `inner`: the providers never close
        // or replace it while the CQ lives (verbs: the completion channel; soft: the bell's
        // epoll set, made with the CQ), and `as_raw_fd` always returns it.
        let fd = unsafe { AsyncFd::register_with_interest(inner, tokio::io::Interest::READABLE) }
            .map_err(|e| Error::os("register completion channel with tokio", None, e.into_parts().1))?;
        Ok(AsyncNotifier { fd })
    }

    /// `Ready(Ok(()))` once a notification of the armed CQ has arrived (and it has been taken,
    /// so the next one needs a new arm); `Pending` until then, with the task's waker registered
    /// with the reactor. A notification may find the CQ empty: poll it, then arm again.
    ///
    /// # Errors
    /// The reactor or the provider failed to read the descriptor.
    pub fn poll_notified(&self, cx: &mut Context<'_>) -> Poll<Result<()>> {
        let mut guard = match self.fd.poll_read_ready(cx) {
            Poll::Ready(Ok(guard)) => guard,
            Poll::Ready(Err(e)) => return Poll::Ready(Err(Error::os("poll completion channel", None, e))),
            Poll::Pending => return Poll::Pending,
        };
        // Cleared before the notifications are taken: one that arrives after the take is a
        // new readiness edge, so the reactor reports it.
        guard.clear_ready();
        let cq = &self.fd.get_ref().cq;
        // Taken until none is left (a completion channel may hold several, each its own
        // event): one left behind would keep the descriptor readable with no new edge. Bounded:
        // on soft a same-host peer can write its eventfd as fast as this loop takes it.
        for _ in 0..MAX_TAKES {
            if !cq.take_notification()? {
                break;
            }
        }
        Poll::Ready(Ok(()))
    }
}
