//! When a credit-blocked publisher should wake: each subscriber's acks keep a rhythm (one per
//! quarter ring consumed), so the publisher can predict when the last subscriber holding it
//! back will have acked, and sleep until then instead of waking for every ack in between.
//!
//! With 16 subscribers a blocked publisher used to wake once per ack, about 4 times per 1 MiB
//! message, and each wake costs a context switch on the publisher's thread. The prediction is
//! only a first sleep: a publisher that wakes still short of credit falls back to waking on
//! each ack (the completion queue armed), and a single subscriber holding it back is always
//! waited for that way, its one ack being what the publisher needs.

use std::time::{Duration, Instant};

/// Sleeps shorter than this are not worth a timer: the publisher arms and waits for the ack.
const MIN_SLEEP: Duration = Duration::from_micros(20);

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

/// When a publisher held back by `laggards` (the clocks of the subscribers whose acks it
/// needs) should wake at `now`: when the last of them is due, at most `cap` from now. `None`
/// to arm and wake on each ack instead: a single laggard, one without a rhythm yet, or all
/// due (overdue) within [`MIN_SLEEP`].
pub(crate) fn coalesced_wake<'a>(
    laggards: impl IntoIterator<Item = &'a AckClock>,
    now: Instant,
    cap: Duration,
) -> Option<Instant> {
    let mut count = 0;
    let mut latest = now;
    for clock in laggards {
        count += 1;
        latest = latest.max(clock.next_due()?);
    }
    (count >= 2 && latest >= now + MIN_SLEEP).then(|| latest.min(now + cap))
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
    fn a_blocked_publisher_sleeps_until_the_last_laggard_is_due() {
        let t = Instant::now();
        let cap = Duration::from_millis(10);
        let early = clock(t, &[0, 300]);
        let late = clock(t, &[0, 1000]);
        assert_eq!(
            coalesced_wake([&early, &late], t + Duration::from_micros(1000), cap),
            Some(t + Duration::from_micros(2000))
        );
        assert_eq!(
            coalesced_wake([&early, &late], t, Duration::from_micros(500)),
            Some(t + Duration::from_micros(500)),
            "capped"
        );
    }

    #[test]
    fn otherwise_it_waits_for_each_ack() {
        let t = Instant::now();
        let cap = Duration::from_millis(10);
        let steady = clock(t, &[0, 1000]);
        assert_eq!(coalesced_wake([&steady], t, cap), None, "one laggard: its ack is the one needed");
        assert_eq!(coalesced_wake([&steady, &clock(t, &[0])], t, cap), None, "no rhythm yet");
        assert_eq!(coalesced_wake([&steady, &steady], t + Duration::from_micros(1995), cap), None, "overdue");
        assert_eq!(coalesced_wake(std::iter::empty(), t, cap), None);
    }
}
