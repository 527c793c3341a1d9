//! Deadlines from caller-given timeouts: every `Duration` is a valid timeout, however large.

use std::time::{Duration, Instant};

/// What "no deadline" means: a century from now.
pub const FAR_FUTURE: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// The instant `timeout` from now, saturating far in the future for durations too large to
/// add (such as `Duration::MAX`), where `Instant::now() + timeout` would panic.
pub fn deadline_after(timeout: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(timeout).unwrap_or_else(|| now + FAR_FUTURE)
}

/// Whole milliseconds of `d` for an error message, saturating at `u64::MAX`.
pub fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn huge_timeouts_saturate_and_small_ones_add() {
        let far = deadline_after(Duration::MAX);
        assert!(far > Instant::now() + Duration::from_secs(365 * 24 * 3600));
        let before = Instant::now();
        let soon = deadline_after(Duration::from_millis(5));
        assert!(soon >= before + Duration::from_millis(5) && soon <= Instant::now() + Duration::from_millis(5));
        assert_eq!((millis(Duration::from_micros(2500)), millis(Duration::MAX)), (2, u64::MAX));
    }
}
