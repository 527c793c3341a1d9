//! Whether a subscriber is still taking part: one that holds the publisher back without a word,
//! or that takes none of the publisher's control SENDs (it posts no receives: the SENDs wait
//! on RNR forever), is idle. Sampled at service ticks, never per message: the hot path only
//! bumps two counters.

use std::time::{Duration, Instant};

/// How long a subscriber may hold credit back without a word before the publisher probes it
/// with a `CreditWanted`: a live one takes the SEND (and acks once it has consumed), a queue
/// pair in the error state (it made a remote access error) fails it, and is removed.
pub(super) const PROBE_AFTER: Duration = Duration::from_millis(250);
/// Control send slots of one subscriber (bits of [`Liveness::free_sends`]).
pub(super) const SENDS_PER_SUBSCRIBER: u32 = 4;
const ALL_SENDS_FREE: u8 = (1 << SENDS_PER_SUBSCRIBER) - 1;

/// What the publisher knows of one subscriber's activity.
#[derive(Debug)]
pub(super) struct Liveness {
    /// Control messages received from it (bumped per message, no clock read).
    heard: u64,
    /// `heard` at the last tick.
    heard_at_tick: u64,
    /// Since when it has held credit back without a word (first tick that saw it so).
    silent_holder_since: Option<Instant>,
    /// Its own control send slots that are free (one bit each).
    free_sends: u8,
    /// Control SENDs to it that completed.
    sends_done: u64,
    /// `sends_done` at the last tick.
    sends_done_at_tick: u64,
    /// Since when a SEND to it has been outstanding without any completing.
    stuck_since: Option<Instant>,
    /// It was probed in its current silence.
    probed: bool,
}

impl Default for Liveness {
    fn default() -> Self {
        Liveness {
            heard: 0,
            heard_at_tick: 0,
            silent_holder_since: None,
            free_sends: ALL_SENDS_FREE,
            sends_done: 0,
            sends_done_at_tick: 0,
            stuck_since: None,
            probed: false,
        }
    }
}

impl Liveness {
    /// A control message arrived from it.
    pub(super) fn heard(&mut self) {
        self.heard = self.heard.wrapping_add(1);
    }

    /// Takes one of its free send slots (`0..SENDS_PER_SUBSCRIBER`), if any.
    pub(super) fn take_send(&mut self) -> Option<u32> {
        let bit = self.free_sends.trailing_zeros();
        (bit < SENDS_PER_SUBSCRIBER).then(|| {
            self.free_sends &= !(1 << bit);
            bit
        })
    }

    /// Gives a send slot back: its SEND completed (`completed`) or was never posted.
    pub(super) fn give_send(&mut self, slot: u32, completed: bool) {
        self.free_sends |= 1 << (slot % SENDS_PER_SUBSCRIBER);
        if completed {
            self.sends_done = self.sends_done.wrapping_add(1);
        }
    }

    /// Whether `slot` is free.
    pub(super) fn send_free(&self, slot: u32) -> bool {
        self.free_sends & (1 << (slot % SENDS_PER_SUBSCRIBER)) != 0
    }

    /// A service tick at `now`: `holds_credit` says whether it holds the publisher back (its
    /// acks are behind the tail and the policy waits for acks). Returns for how long it has
    /// been idle: silent while holding credit, or with a SEND outstanding that never
    /// completes.
    pub(super) fn tick(&mut self, now: Instant, holds_credit: bool) -> Duration {
        let spoke = self.heard != self.heard_at_tick;
        self.heard_at_tick = self.heard;
        self.silent_holder_since = match (holds_credit && !spoke, self.silent_holder_since) {
            (true, since) => Some(since.unwrap_or(now)),
            (false, _) => None,
        };
        if self.silent_holder_since.is_none() {
            self.probed = false;
        }
        let progressed = self.sends_done != self.sends_done_at_tick;
        self.sends_done_at_tick = self.sends_done;
        let outstanding = self.free_sends != ALL_SENDS_FREE;
        self.stuck_since = match (outstanding && !progressed, self.stuck_since) {
            (true, since) => Some(since.unwrap_or(now)),
            (false, _) => None,
        };
        let idle = |since: Option<Instant>| since.map_or(Duration::ZERO, |t| now.duration_since(t));
        idle(self.silent_holder_since).max(idle(self.stuck_since))
    }

    /// Whether to probe it now, after a tick that found it `idle`: once per silence of at least
    /// [`PROBE_AFTER`].
    pub(super) fn wants_probe(&mut self, idle: Duration) -> bool {
        let probe = idle >= PROBE_AFTER && !self.probed;
        self.probed |= probe;
        probe
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn a_holder_is_idle_only_while_silent() {
        let t0 = Instant::now();
        let mut l = Liveness::default();
        assert_eq!(l.tick(t0, true), Duration::ZERO, "the first tick starts the count");
        assert_eq!(l.tick(t0 + 10 * MS, true), 10 * MS);
        l.heard();
        assert_eq!(l.tick(t0 + 20 * MS, true), Duration::ZERO, "an ack resets it");
        assert_eq!(l.tick(t0 + 30 * MS, true), Duration::ZERO);
        assert_eq!(l.tick(t0 + 50 * MS, true), 20 * MS);
        assert_eq!(l.tick(t0 + 60 * MS, false), Duration::ZERO, "caught up: silence is fine");
        assert_eq!(l.tick(t0 + 500 * MS, false), Duration::ZERO);
        assert_eq!(l.tick(t0 + 510 * MS, true), Duration::ZERO, "holding again starts a new count");
    }

    #[test]
    fn a_silent_holder_is_probed_once_per_silence() {
        let t0 = Instant::now();
        let mut l = Liveness::default();
        let idle = l.tick(t0, true);
        assert!(!l.wants_probe(idle));
        let idle = l.tick(t0 + PROBE_AFTER, true);
        assert!(l.wants_probe(idle), "silent for PROBE_AFTER");
        let idle = l.tick(t0 + 2 * PROBE_AFTER, true);
        assert!(!l.wants_probe(idle), "once per silence");
        l.heard();
        let idle = l.tick(t0 + 3 * PROBE_AFTER, true);
        assert!(!l.wants_probe(idle), "it spoke");
        let idle = l.tick(t0 + 4 * PROBE_AFTER, true);
        assert!(!l.wants_probe(idle), "a new silence starts");
        let idle = l.tick(t0 + 5 * PROBE_AFTER, true);
        assert!(l.wants_probe(idle), "a new silence is probed again");
    }

    #[test]
    fn a_send_that_never_completes_makes_it_idle_and_completions_reset_it() {
        let t0 = Instant::now();
        let mut l = Liveness::default();
        let slots: Vec<u32> = std::iter::from_fn(|| l.take_send()).collect();
        assert_eq!(slots, [0, 1, 2, 3], "four slots, then none");
        assert!(!l.send_free(2));
        assert_eq!(l.tick(t0, false), Duration::ZERO);
        assert_eq!(l.tick(t0 + 40 * MS, false), 40 * MS, "stuck, whatever the credit");
        l.give_send(2, true);
        assert!(l.send_free(2));
        assert_eq!(l.tick(t0 + 50 * MS, false), Duration::ZERO, "one completed: it takes SENDs");
        assert_eq!(l.tick(t0 + 60 * MS, false), Duration::ZERO);
        assert_eq!(l.tick(t0 + 90 * MS, false), 30 * MS);
        for s in [0, 1, 3] {
            l.give_send(s, false);
        }
        assert_eq!(l.tick(t0 + 100 * MS, false), Duration::ZERO, "nothing outstanding");
        assert_eq!(l.take_send(), Some(0));
    }
}
