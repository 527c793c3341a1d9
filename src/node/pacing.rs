//! Adaptive READ pacing of a caught-up feed that receives a trickle: while consecutive READs
//! each bring something but less than a quarter of their length, the next one waits a little
//! longer (doubling up to [`MAX_DELAY`]) so that each brings a batch rather than a message or
//! two. A READ at least half full, or one that brought nothing, halves the delay (sporadic
//! traffic, one message at a time, keeps its latency); one that ended inside written data (the
//! feed is behind) or a doorbell removes it at once.
//!
//! A READ held back at least [`ONE_AT_A_TIME`] that still brought a single message removes the
//! delay too: waiting gathered no batch, so the publisher sends one message at a time (it
//! waits for this one, as a request/response exchange does, or its rate is below one per
//! delay) and a delay would only add to every message's latency (it cost a 64 B message sent
//! in reply to the previous one half of `MAX_DELAY` on average, p50 70 µs instead of 20 µs
//! over TCP loopback). Such a feed READs about once per message, as a push transport sends a
//! datagram per message at that rate, plus the empty READs of sporadic traffic between
//! messages (`pubsub-demo pub --rate 20000`: about 50,000 READs a second instead of 35,000).
//!
//! Without pacing a caught-up subscriber READs back to back: every READ is a request the
//! publisher's NIC serves, and a few such subscribers can keep a small machine's CPUs busy
//! polling while the publisher they wait for gets none. Same-host and busy-polling feeds get
//! an [`unpaced`](ReadPacer::unpaced) one: a same-host READ is the subscriber's own copy.

use std::time::{Duration, Instant};

/// The first delay after a mostly empty READ.
pub(crate) const MIN_DELAY: Duration = Duration::from_micros(2);
/// The longest delay between two READs of a caught-up feed.
pub(crate) const MAX_DELAY: Duration = Duration::from_micros(50);
/// A READ held back at least this long that brought a single message ends the delay: waiting
/// gathered no batch.
pub(crate) const ONE_AT_A_TIME: Duration = Duration::from_micros(4);

/// When a feed may post its next data READ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ReadPacer {
    delay: Duration,
    not_before: Option<Instant>,
    /// The last READ brought something, but less than a quarter of its length.
    trickle: bool,
    /// Off: every READ may go at once.
    enabled: bool,
}

impl Default for ReadPacer {
    fn default() -> ReadPacer {
        ReadPacer { delay: Duration::ZERO, not_before: None, trickle: false, enabled: true }
    }
}

impl ReadPacer {
    /// A pacer that never delays a READ.
    pub(crate) fn unpaced() -> ReadPacer {
        ReadPacer { enabled: false, ..ReadPacer::default() }
    }

    /// Learns from a completed data READ that brought `consumed` of its `len` bytes, holding
    /// `messages` whole messages; `behind` says it ended inside written data. `now` is called
    /// only when a delay starts: a disabled pacer (the same-host path, busy polling) and a READ
    /// that ends the delay read no clock.
    pub(crate) fn after_read(
        &mut self,
        now: impl FnOnce() -> Instant,
        consumed: usize,
        len: usize,
        messages: usize,
        behind: bool,
    ) {
        if !self.enabled {
            return;
        }
        let small = consumed > 0 && consumed * 4 < len;
        // The delay this READ waited (set by the READ before it) gathered nothing but one message.
        let one_at_a_time = messages == 1 && self.delay >= ONE_AT_A_TIME;
        self.delay = if behind || one_at_a_time {
            Duration::ZERO
        } else if small && self.trickle {
            (self.delay * 2).clamp(MIN_DELAY, MAX_DELAY)
        } else if small || (consumed > 0 && consumed * 2 < len) {
            self.delay
        } else if self.delay / 2 < MIN_DELAY {
            Duration::ZERO
        } else {
            self.delay / 2
        };
        self.trickle = small && !one_at_a_time;
        self.not_before = (!self.delay.is_zero()).then(|| now() + self.delay);
    }

    /// Data is known to wait (a doorbell rang): READ at once.
    pub(crate) fn reset(&mut self) {
        *self = ReadPacer { enabled: self.enabled, ..ReadPacer::default() };
    }

    /// Whether a READ may be posted at `now` (called only while a delay is pending: no delay,
    /// no clock read).
    pub(crate) fn ready(&self, now: impl FnOnce() -> Instant) -> bool {
        self.not_before.is_none_or(|t| now() >= t)
    }

    /// When the pending delay ends, if one is pending.
    #[cfg(test)]
    fn deadline(&self) -> Option<Instant> {
        self.not_before
    }

    /// How long the next READ must still wait at `now`, if at all.
    pub(crate) fn left(&self, now: Instant) -> Option<Duration> {
        self.not_before.filter(|&t| t > now).map(|t| t - now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An unpaced pacer (same host, busy polling) lets every READ go at once, trickle or not,
    /// and stays unpaced after a doorbell's reset.
    #[test]
    fn an_unpaced_pacer_never_delays_a_read() {
        let mut p = ReadPacer::unpaced();
        let t = Instant::now();
        for _ in 0..9 {
            p.after_read(|| t, 100, 4096, 2, false);
            assert!(p.ready(|| t));
            assert_eq!(p.left(t), None);
        }
        p.reset();
        p.after_read(|| t, 100, 4096, 2, false);
        p.after_read(|| t, 100, 4096, 2, false);
        assert!(p.ready(|| t), "a reset keeps it unpaced");
    }

    #[test]
    fn a_trickle_of_small_reads_backs_off_exponentially_up_to_the_cap() {
        let mut p = ReadPacer::default();
        let t = Instant::now();
        assert!(p.ready(|| t));
        let mut delays = Vec::new();
        for _ in 0..9 {
            p.after_read(|| t, 100, 4096, 2, false);
            delays.push(p.left(t).map_or(0, |d| d.as_micros()));
        }
        // The first small READ only marks the trickle; each one after it doubles the delay.
        assert_eq!(delays, [0, 2, 4, 8, 16, 32, 50, 50, 50]);
        assert!(!p.ready(|| t + Duration::from_micros(49)));
        assert_eq!(p.left(t + Duration::from_micros(49)), Some(Duration::from_micros(1)));
        assert!(p.ready(|| t + MAX_DELAY));
        assert_eq!(p.left(t + MAX_DELAY), None, "a delay that ended is not waited for again");
    }

    /// Messages sent one at a time (each in reply to the last, or slower than one per delay):
    /// every READ brings a single message, however long it waited, so once a READ held back
    /// for `ONE_AT_A_TIME` brings one, the delay goes; READs that bring two keep building it.
    #[test]
    fn a_read_that_waited_and_still_brought_one_message_drops_the_delay() {
        let t = Instant::now();
        let mut p = ReadPacer::default();
        let mut delays = Vec::new();
        for _ in 0..9 {
            p.after_read(|| t, 100, 4096, 1, false);
            delays.push(p.left(t).map_or(0, |d| d.as_micros()));
        }
        // Marked, 2 µs, 4 µs; the READ after 4 µs still brings one: no delay, and again.
        assert_eq!(delays, [0, 2, 4, 0, 0, 2, 4, 0, 0]);
        assert!(p.ready(|| t));
        // Two messages per READ: a batch forms, the delay grows to the cap as before.
        let mut p = ReadPacer::default();
        for _ in 0..9 {
            p.after_read(|| t, 100, 4096, 2, false);
        }
        assert_eq!(p.deadline(), Some(t + MAX_DELAY));
        // One message after a wait shorter than ONE_AT_A_TIME counts as a trickle still.
        let mut p = ReadPacer::default();
        p.after_read(|| t, 100, 4096, 1, false);
        p.after_read(|| t, 100, 4096, 1, false);
        assert_eq!(p.deadline(), Some(t + MIN_DELAY));
        p.after_read(|| t, 100, 4096, 1, false);
        assert_eq!(p.deadline(), Some(t + 2 * MIN_DELAY));
    }

    #[test]
    fn empty_or_full_reads_shrink_the_delay_and_behind_or_a_doorbell_removes_it() {
        let t = Instant::now();
        let trickled = || {
            let mut p = ReadPacer::default();
            for _ in 0..5 {
                p.after_read(|| t, 100, 4096, 2, false);
            }
            assert_eq!(p.deadline(), Some(t + Duration::from_micros(16)));
            p
        };
        let mut p = trickled();
        p.after_read(|| t, 1500, 4096, 20, false);
        assert_eq!(p.deadline(), Some(t + Duration::from_micros(16)), "between a quarter and a half: kept");
        p.after_read(|| t, 3000, 4096, 40, false);
        assert_eq!(p.deadline(), Some(t + Duration::from_micros(8)), "at least half full: halved");
        p.after_read(|| t, 0, 4096, 0, false);
        assert_eq!(p.deadline(), Some(t + Duration::from_micros(4)), "empty: halved");
        p.after_read(|| t, 100, 4096, 2, false);
        assert_eq!(p.deadline(), Some(t + Duration::from_micros(4)), "a small READ after an empty one: kept");
        p.after_read(|| t, 4096, 4096, 60, true);
        assert_eq!((p.deadline(), p.ready(|| t)), (None, true), "behind: no delay");
        let mut p = trickled();
        p.reset();
        assert!(p.ready(|| t), "a doorbell: no delay");
        // Sporadic traffic (a message, then nothing) never builds a delay.
        let mut p = ReadPacer::default();
        for _ in 0..10 {
            p.after_read(|| t, 100, 4096, 1, false);
            p.after_read(|| t, 0, 4096, 0, false);
        }
        assert!(p.ready(|| t));
    }

    #[test]
    fn an_unpaced_reader_and_a_read_that_needs_no_delay_read_no_clock() {
        let never = || -> Instant { panic!("the clock was read") };
        let mut unpaced = ReadPacer::unpaced();
        for _ in 0..4 {
            unpaced.after_read(never, 100, 4096, 2, false);
        }
        let mut paced = ReadPacer::default();
        paced.after_read(never, 4096, 4096, 60, true);
        paced.after_read(never, 4096, 4096, 60, false);
    }
}
