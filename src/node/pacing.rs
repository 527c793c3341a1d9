//! Adaptive READ pacing of a caught-up feed: while its READs come back less than a quarter
//! full, the next one waits a little longer (doubling up to [`MAX_DELAY`]) so that each brings
//! a batch rather than a message or two; a READ at least half full halves the delay, and one
//! that ended inside written data (the feed is behind) removes it at once.
//!
//! Without it a caught-up subscriber READs back to back: every READ is a request the
//! publisher's NIC serves, and a few such subscribers can keep a small machine's CPUs busy
//! polling while the publisher they wait for gets none.

use std::time::{Duration, Instant};

/// The first delay after a mostly empty READ.
pub(crate) const MIN_DELAY: Duration = Duration::from_micros(2);
/// The longest delay between two READs of a caught-up feed.
pub(crate) const MAX_DELAY: Duration = Duration::from_micros(100);

/// When a feed may post its next data READ.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ReadPacer {
    delay: Duration,
    not_before: Option<Instant>,
}

impl ReadPacer {
    /// Learns from a completed data READ that brought `consumed` of its `len` bytes; `behind`
    /// says it ended inside written data.
    pub(crate) fn after_read(&mut self, now: Instant, consumed: usize, len: usize, behind: bool) {
        self.delay = if behind {
            Duration::ZERO
        } else if consumed * 4 < len {
            (self.delay * 2).clamp(MIN_DELAY, MAX_DELAY)
        } else if consumed * 2 < len {
            self.delay
        } else if self.delay / 2 < MIN_DELAY {
            Duration::ZERO
        } else {
            self.delay / 2
        };
        self.not_before = (!self.delay.is_zero()).then(|| now + self.delay);
    }

    /// Data is known to wait (a doorbell rang): READ at once.
    pub(crate) fn reset(&mut self) {
        *self = ReadPacer::default();
    }

    /// Whether a READ may be posted at `now`.
    pub(crate) fn ready(&self, now: Instant) -> bool {
        self.not_before.is_none_or(|t| now >= t)
    }

    /// When the pending delay ends, if one is pending.
    pub(crate) fn deadline(&self) -> Option<Instant> {
        self.not_before
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mostly_empty_reads_back_off_exponentially_up_to_the_cap() {
        let mut p = ReadPacer::default();
        let t = Instant::now();
        assert!(p.ready(t));
        let mut delays = Vec::new();
        for _ in 0..8 {
            p.after_read(t, 100, 4096, false);
            delays.push(p.deadline().expect("a delay is pending") - t);
        }
        let us: Vec<u128> = delays.iter().map(|d| d.as_micros()).collect();
        assert_eq!(us, [2, 4, 8, 16, 32, 64, 100, 100]);
        assert!(!p.ready(t + Duration::from_micros(99)));
        assert!(p.ready(t + MAX_DELAY));
    }

    #[test]
    fn a_full_read_or_a_doorbell_removes_the_delay_and_a_half_full_one_halves_it() {
        let mut p = ReadPacer::default();
        let t = Instant::now();
        for _ in 0..4 {
            p.after_read(t, 0, 4096, false);
        }
        assert_eq!(p.deadline(), Some(t + Duration::from_micros(16)));
        p.after_read(t, 1500, 4096, false);
        assert_eq!(p.deadline(), Some(t + Duration::from_micros(16)), "between a quarter and a half: kept");
        p.after_read(t, 3000, 4096, false);
        assert_eq!(p.deadline(), Some(t + Duration::from_micros(8)));
        p.after_read(t, 4096, 4096, true);
        assert_eq!((p.deadline(), p.ready(t)), (None, true));
        p.after_read(t, 0, 4096, false);
        assert!(!p.ready(t));
        p.reset();
        assert!(p.ready(t));
        // Halving below the first step ends the delay.
        p.after_read(t, 0, 4096, false);
        p.after_read(t, 4000, 4096, false);
        assert_eq!(p.deadline(), None);
    }
}
