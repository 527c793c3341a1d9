//! The event queue of a CM event channel: events wait in it until the channel's owner takes
//! them, and a connect request that finds the channel dropped is rejected.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use parking_lot::{Condvar, Mutex};

/// An event that may carry a connect request, which must be answered even when nobody takes it.
pub(crate) trait ChannelEvent {
    /// Rejects the connect request this event carries, if it carries one.
    fn reject_request(self);
}

/// The event queue of a channel.
pub(crate) struct EventQueue<E> {
    queue: Mutex<VecDeque<E>>,
    cv: Condvar,
    /// The owner dropped the channel: requests arriving now are rejected.
    closed: AtomicBool,
}

impl<E: ChannelEvent> EventQueue<E> {
    /// An open, empty queue.
    pub(crate) fn new() -> Self {
        EventQueue { queue: Mutex::new(VecDeque::new()), cv: Condvar::new(), closed: AtomicBool::new(false) }
    }

    /// Delivers an event; a request to a dropped channel is rejected.
    pub(crate) fn push(&self, ev: E) {
        if self.closed.load(Ordering::Acquire) {
            ev.reject_request();
            return;
        }
        self.queue.lock().push_back(ev);
        self.cv.notify_one();
    }

    /// The next event, waiting for one until `deadline`.
    pub(crate) fn next(&self, deadline: Instant) -> Option<E> {
        let mut q = self.queue.lock();
        loop {
            if let Some(ev) = q.pop_front() {
                return Some(ev);
            }
            if self.cv.wait_until(&mut q, deadline).timed_out() {
                return q.pop_front();
            }
        }
    }

    /// Closes the queue (its owner dropped the channel): the requests waiting in it, and those
    /// that arrive later, are rejected.
    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::Release);
        let pending: Vec<E> = self.queue.lock().drain(..).collect();
        for ev in pending {
            ev.reject_request();
        }
    }
}
