//! One descriptor an event loop outside tokio (`poll(2)`, `epoll`, libuv, asio, a C program)
//! waits on for a subscription: see [`Subscription::ready_fd`](super::Subscription::ready_fd)
//! and [`Subscription::prepare_wait`](super::Subscription::prepare_wait).
//!
//! It is an epoll descriptor holding the two things that can make a subscription progress,
//! the same wake sources as the async stream's (`stream.rs`):
//!
//! - the CQ's notification descriptor
//!   ([`CompletionQueue::notify_fd`](rdma_fabric::CompletionQueue::notify_fd)), readable once
//!   a completion arrived after the arm: READs, acks and doorbell requests done, and the
//!   publisher's SENDs (doorbells, credit requests, end of stream, drop notices, flushes);
//! - an eventfd that the subscription's event channel writes as the CM thread and the
//!   connector send (established, refused, unreachable, disconnected, connections opened,
//!   publishers discovery lost): a [`Waker`] registered in the channel's [`EventWaker`],
//!   where the stream registers its task's. A write never blocks (the descriptor is
//!   non-blocking; a counter at its maximum is readable already) and costs one syscall.
//!
//! The third wake source of the stream, a READ its pacer holds back for microseconds, has no
//! descriptor: `prepare_wait` reports it as "try again" instead.
//!
//! Both members are level-triggered: the epoll descriptor polls readable while one of them
//! does, until `prepare_wait` takes the notification and clears the eventfd.

use std::os::fd::{AsFd, BorrowedFd};
use std::sync::Arc;
use std::task::{Wake, Waker};

use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags};
use nix::sys::eventfd::{EfdFlags, EventFd};
use rdma_fabric::CompletionQueue;

use super::feed_channel::EventWaker;
use crate::error::Result;

/// Most CQ notifications taken in one `arm` (a completion channel may hold several; on soft a
/// same-host peer can write its eventfd as fast as a loop takes the notifications).
const MAX_TAKES: usize = 16;

/// The epoll descriptor of a subscription and the eventfd its event channel writes.
#[derive(Debug)]
pub(super) struct Readiness {
    /// Holds the CQ's notification descriptor and `signal`'s eventfd.
    epoll: Epoll,
    signal: Arc<Signal>,
    /// `signal` as a waker, registered in the event channel at each arm.
    waker: Waker,
}

/// The eventfd the event channel's senders write.
#[derive(Debug)]
struct Signal(EventFd);

impl Wake for Signal {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        // EAGAIN: the counter is at its maximum, readable already.
        let _ = self.0.write(1);
    }
}

impl Readiness {
    /// An epoll descriptor holding `cq`'s notification descriptor and a new eventfd.
    ///
    /// # Errors
    /// [`Error::Fabric`](crate::Error::Fabric) when a descriptor cannot be made (the process is
    /// out of descriptors) or `cq`'s cannot be set up.
    pub(super) fn new(cq: &CompletionQueue) -> Result<Readiness> {
        let epoll = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC).map_err(|e| os("epoll_create1", e))?;
        let flags = EfdFlags::EFD_CLOEXEC | EfdFlags::EFD_NONBLOCK;
        let eventfd = EventFd::from_value_and_flags(0, flags).map_err(|e| os("eventfd", e))?;
        epoll.add(cq.notify_fd()?, EpollEvent::new(EpollFlags::EPOLLIN, 0)).map_err(|e| os("epoll_ctl", e))?;
        epoll.add(eventfd.as_fd(), EpollEvent::new(EpollFlags::EPOLLIN, 1)).map_err(|e| os("epoll_ctl", e))?;
        let signal = Arc::new(Signal(eventfd));
        let waker = Waker::from(signal.clone());
        Ok(Readiness { epoll, signal, waker })
    }

    /// The epoll descriptor.
    pub(super) fn fd(&self) -> BorrowedFd<'_> {
        self.epoll.0.as_fd()
    }

    /// Makes the descriptor unreadable and arms both wake sources: takes `cq`'s notifications
    /// and clears the eventfd, then registers the eventfd's waker in `events` and arms `cq`.
    /// What arrives after the arm makes the descriptor readable; the caller looks once more
    /// for what arrived before it.
    ///
    /// # Errors
    /// [`Error::Fabric`](crate::Error::Fabric) when the CQ cannot be read or armed.
    pub(super) fn arm(&self, cq: &CompletionQueue, events: &EventWaker) -> Result<()> {
        for _ in 0..MAX_TAKES {
            if !cq.take_notification()? {
                break;
            }
        }
        // EAGAIN: it was clear.
        let _ = self.signal.0.read();
        events.register(&self.waker);
        cq.arm()?;
        Ok(())
    }
}

/// A failed system call as the fabric's OS error.
fn os(verb: &'static str, errno: nix::Error) -> crate::Error {
    rdma_fabric::Error::os(verb, None, std::io::Error::from(errno)).into()
}
