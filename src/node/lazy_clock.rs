//! The clock read only when a poll needs the time. A subscription that finds a message in a
//! round of its poll loop needs no time at all, and on these virtual machines a clock read costs
//! about as much as taking a 64-byte message from a ring read in place: reading it every round
//! (and for every receive's deadline) was an eighth of a polling subscriber's CPU.

use std::time::{Duration, Instant};

/// `Instant::now()`, read on first use and then kept: one round of a poll loop's idea of now.
#[derive(Debug, Default)]
pub(crate) struct LazyNow(Option<Instant>);

impl LazyNow {
    /// Nothing read yet.
    pub(crate) fn new() -> LazyNow {
        LazyNow(None)
    }

    /// The time of the first call (the clock is read then).
    pub(crate) fn get(&mut self) -> Instant {
        *self.0.get_or_insert_with(Instant::now)
    }
}

/// When a receive call gives up: after one pass (no timeout), or `timeout` after the first time
/// the call asks, which it does only once it has found nothing to deliver (a call that finds a
/// message at once reads no clock).
#[derive(Debug)]
pub(crate) struct LazyDeadline {
    timeout: Option<Duration>,
    at: Option<Instant>,
}

impl LazyDeadline {
    /// A deadline `timeout` after it is first asked for; `None`: one pass, no deadline.
    pub(crate) fn after(timeout: Option<Duration>) -> LazyDeadline {
        LazyDeadline { timeout, at: None }
    }

    /// Whether the call makes one pass and has no deadline.
    pub(crate) fn is_one_pass(&self) -> bool {
        self.timeout.is_none()
    }

    /// Whether the call is over: one pass, or the deadline passed (the clock is read, and the
    /// deadline fixed now if it was not yet).
    pub(crate) fn passed(&mut self) -> bool {
        if self.is_one_pass() {
            return true;
        }
        let now = Instant::now();
        now >= self.at(now)
    }

    /// The deadline, fixed at the first call, `timeout` after `now` (saturating far in the
    /// future for a timeout too large to add); `now` for one pass, which is over at once.
    pub(crate) fn at(&mut self, now: Instant) -> Instant {
        let Some(timeout) = self.timeout else { return now };
        *self.at.get_or_insert_with(|| now.checked_add(timeout).unwrap_or(now + rdma_fabric::time::FAR_FUTURE))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn now_is_read_once_and_kept() {
        let before = Instant::now();
        let mut now = LazyNow::new();
        let first = now.get();
        assert!(first >= before);
        while Instant::now() == first {
            std::hint::spin_loop();
        }
        assert_eq!(now.get(), first, "the second ask gives the first reading");
    }

    #[test]
    fn a_deadline_is_fixed_when_first_asked_and_saturates() {
        let t0 = Instant::now();
        let mut deadline = LazyDeadline::after(Some(Duration::from_millis(5)));
        assert_eq!(deadline.at(t0 + Duration::from_secs(1)), t0 + Duration::from_millis(1005));
        assert_eq!(deadline.at(t0 + Duration::from_secs(9)), t0 + Duration::from_millis(1005), "fixed");
        assert_eq!(LazyDeadline::after(None).at(t0), t0, "one pass: over at once");
        assert!(LazyDeadline::after(None).passed() && LazyDeadline::after(None).is_one_pass());
        let mut soon = LazyDeadline::after(Some(Duration::ZERO));
        assert!(soon.passed(), "a zero timeout is over when first asked");
        assert!(!LazyDeadline::after(Some(Duration::from_secs(60))).passed());
        let far = LazyDeadline::after(Some(Duration::MAX)).at(t0);
        assert!(far > t0 + Duration::from_secs(365 * 24 * 3600));
    }
}
