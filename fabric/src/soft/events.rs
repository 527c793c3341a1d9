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

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;

    /// An event numbered `id`, a request or not; a rejected request counts itself in `rejected`.
    struct TestEvent {
        id: u32,
        request: bool,
        rejected: Arc<AtomicUsize>,
    }

    impl ChannelEvent for TestEvent {
        fn reject_request(self) {
            if self.request {
                self.rejected.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    fn events() -> (impl Fn(u32, bool) -> TestEvent, Arc<AtomicUsize>) {
        let rejected = Arc::new(AtomicUsize::new(0));
        let counter = rejected.clone();
        (move |id, request| TestEvent { id, request, rejected: counter.clone() }, rejected)
    }

    #[test]
    fn events_come_out_in_order_and_an_empty_queue_waits_until_the_deadline() {
        let (ev, rejected) = events();
        let q = EventQueue::new();
        for id in 0..3 {
            q.push(ev(id, id % 2 == 0));
        }
        let ids: Vec<u32> = std::iter::from_fn(|| q.next(Instant::now())).map(|e| e.id).collect();
        assert_eq!(ids, [0, 1, 2]);
        let wait = Duration::from_millis(20);
        let start = Instant::now();
        assert!(q.next(start + wait).is_none(), "an event from an empty queue");
        assert!(start.elapsed() >= wait, "returned before the deadline");
        assert_eq!(rejected.load(Ordering::Relaxed), 0, "an open queue rejects nothing");
    }

    #[test]
    fn a_waiter_wakes_when_an_event_arrives() {
        let (ev, _) = events();
        let q = Arc::new(EventQueue::new());
        let pusher = {
            let q = q.clone();
            std::thread::spawn(move || q.push(ev(7, false)))
        };
        let start = Instant::now();
        let got = q.next(start + Duration::from_secs(20)).expect("the event within the deadline");
        assert_eq!(got.id, 7);
        assert!(start.elapsed() < Duration::from_secs(10), "the waiter slept to its deadline");
        pusher.join().unwrap();
    }

    #[test]
    fn requests_waiting_when_the_queue_closes_and_those_arriving_later_are_rejected() {
        let (ev, rejected) = events();
        let q = EventQueue::new();
        q.push(ev(0, true));
        q.push(ev(1, false));
        q.push(ev(2, true));
        q.close();
        assert_eq!(rejected.load(Ordering::Relaxed), 2, "the two waiting requests");
        assert!(q.next(Instant::now()).is_none(), "closing empties the queue");
        q.push(ev(3, true));
        q.push(ev(4, false));
        assert_eq!(rejected.load(Ordering::Relaxed), 3, "a request arriving after the close");
        assert!(q.next(Instant::now()).is_none(), "nothing is queued once closed");
    }
}
