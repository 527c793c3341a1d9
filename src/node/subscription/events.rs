//! The events a subscription holds for its application until `try_event` takes them: at most
//! [`MAX_EVENTS`]; past that the oldest is dropped and counted (`events_dropped`), so an
//! application that never looks at events does not let peers grow its memory.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::{SubscriptionCounters, SubscriptionEvent};

/// Most events a subscription holds for its application.
pub const MAX_EVENTS: usize = 1024;

/// Most errors about undeliverable messages a subscription holds for `recv` (older ones are
/// dropped: the events still name each).
pub(super) const MAX_UNDELIVERABLE: usize = 16;

/// A bounded queue of [`SubscriptionEvent`]s, oldest first.
pub(super) struct EventQueue {
    events: VecDeque<SubscriptionEvent>,
    counters: Arc<SubscriptionCounters>,
}

impl EventQueue {
    /// An empty queue counting what it drops in `counters`.
    pub(super) fn new(counters: Arc<SubscriptionCounters>) -> EventQueue {
        EventQueue { events: VecDeque::new(), counters }
    }

    /// Adds `event` last; when the queue is full, drops (and counts) the oldest first.
    pub(super) fn push_back(&mut self, event: SubscriptionEvent) {
        if self.events.len() >= MAX_EVENTS {
            self.events.pop_front();
            self.counters.events_dropped.fetch_add(1, Ordering::Relaxed);
        }
        self.events.push_back(event);
    }

    /// Takes the oldest event.
    pub(super) fn pop_front(&mut self) -> Option<SubscriptionEvent> {
        self.events.pop_front()
    }

    /// Takes the oldest event for which `wanted` holds, leaving the others in order.
    pub(super) fn take_first(&mut self, wanted: impl FnMut(&SubscriptionEvent) -> bool) -> Option<SubscriptionEvent> {
        let at = self.events.iter().position(wanted)?;
        self.events.remove(at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An event numbered `n` (in its address's port).
    fn event(n: u64) -> SubscriptionEvent {
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], n as u16));
        SubscriptionEvent::Unreachable { addr, detail: String::new() }
    }

    fn number(e: &SubscriptionEvent) -> u64 {
        match e {
            SubscriptionEvent::Unreachable { addr, .. } => u64::from(addr.port()),
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn a_full_queue_drops_and_counts_the_oldest() {
        let counters = Arc::new(SubscriptionCounters::default());
        let mut q = EventQueue::new(counters.clone());
        for i in 0..MAX_EVENTS as u64 + 10 {
            q.push_back(event(i));
        }
        assert_eq!(counters.events_dropped.load(Ordering::Relaxed), 10);
        let kept: Vec<u64> = std::iter::from_fn(|| q.pop_front()).map(|e| number(&e)).collect();
        assert_eq!(kept, (10..MAX_EVENTS as u64 + 10).collect::<Vec<_>>(), "the newest, in order");
    }

    #[test]
    fn take_first_takes_the_oldest_match_and_keeps_the_order_of_the_rest() {
        let mut q = EventQueue::new(Arc::default());
        for i in 0..5 {
            q.push_back(event(i));
        }
        assert_eq!(q.take_first(|e| number(e) % 2 == 1).map(|e| number(&e)), Some(1));
        assert!(q.take_first(|e| number(e) > 10).is_none());
        let rest: Vec<u64> = std::iter::from_fn(|| q.pop_front()).map(|e| number(&e)).collect();
        assert_eq!(rest, [0, 2, 3, 4]);
    }
}
