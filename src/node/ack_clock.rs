//! Whom a credit-blocked publisher asks for credit: each subscriber's acks keep a rhythm (one
//! per quarter ring consumed, a moving average of the gaps between them), so among the
//! subscribers holding the publisher back it can tell which one will probably ack last.
//!
//! The publisher asks that one (`Control::CreditWanted`) to ack as a solicited SEND and arms
//! its completion queue for solicited completions only: the acks of the others are queued
//! without waking it. With 16 subscribers a blocked publisher used to wake once per ack, about
//! 4 times per 1 MiB message, each wake a context switch on the publisher's thread. When the
//! guess is wrong the publisher wakes with credit still short and asks the next one.

use std::time::{Duration, Instant};

/// The rhythm of one subscriber's acks.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct AckClock {
    last: Option<Instant>,
    /// Moving average of the time between acks.
    interval: Option<Duration>,
}

impl AckClock {
    /// Records an ack received at `now`.
    pub(crate) fn on_ack(&mut self, now: Instant) {
        if let Some(last) = self.last {
            let gap = now.saturating_duration_since(last);
            self.interval = Some(match self.interval {
                Some(avg) => (avg * 3 + gap) / 4,
                None => gap,
            });
        }
        self.last = Some(now);
    }

    /// When the next ack is due, once two acks have shown the rhythm.
    pub(crate) fn next_due(&self) -> Option<Instant> {
        Some(self.last? + self.interval?)
    }
}

/// Of the `laggards` (key, ack clock, acked position), the one probably acking last: one
/// without a rhythm yet (nothing says it is close), else the one due last; on a tie the
/// furthest behind.
pub(crate) fn last_to_ack<'a, K>(laggards: impl IntoIterator<Item = (K, &'a AckClock, u64)>) -> Option<K> {
    laggards
        .into_iter()
        .max_by_key(|(_, clock, acked)| {
            let due = clock.next_due();
            (due.is_none(), due, std::cmp::Reverse(*acked))
        })
        .map(|(key, _, _)| key)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn clock(start: Instant, acks: &[u64]) -> AckClock {
        let mut c = AckClock::default();
        for &us in acks {
            c.on_ack(start + Duration::from_micros(us));
        }
        c
    }

    #[test]
    fn the_rhythm_is_a_moving_average_of_ack_gaps() {
        let t = Instant::now();
        assert_eq!(clock(t, &[]).next_due(), None);
        assert_eq!(clock(t, &[100]).next_due(), None, "one ack shows no rhythm");
        assert_eq!(clock(t, &[0, 400]).next_due(), Some(t + Duration::from_micros(800)));
        // Gaps 400 then 800: the average moves a quarter of the way.
        assert_eq!(clock(t, &[0, 400, 1200]).next_due(), Some(t + Duration::from_micros(1200 + 500)));
    }

    #[test]
    fn the_subscriber_due_last_is_asked() {
        let t = Instant::now();
        let (early, late, unknown) = (clock(t, &[0, 300]), clock(t, &[0, 1000]), clock(t, &[0]));
        assert_eq!(last_to_ack([("early", &early, 10), ("late", &late, 20)]), Some("late"));
        assert_eq!(last_to_ack([("late", &late, 20), ("unknown", &unknown, 30)]), Some("unknown"));
        assert_eq!(last_to_ack([("a", &late, 20), ("b", &late, 10)]), Some("b"), "a tie: the one behind");
        assert_eq!(last_to_ack::<&str>([]), None);
    }
}
