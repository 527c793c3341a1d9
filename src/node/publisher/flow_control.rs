//! The publisher's flow-control rules as pure functions of positions and times, in the manner
//! of Aeron's `FlowControl`: which subscribers the DropSlow policy drops while the publisher
//! waits for credit, and what a blocked publisher asks the laggard to ack. No lock, clock or
//! fabric here: `PublisherShared` (`shared.rs`) applies them under the state lock, off the
//! per-message path.

use std::time::{Duration, Instant};

/// What the DropSlow policy does about one subscriber while the publisher waits to write up to
/// a position.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum SlowVerdict {
    /// It does not hold the publisher back (its slow time is reset).
    NotHoldingBack,
    /// It holds the publisher back, within its grace until `until`.
    Waiting { until: Instant },
    /// It has held the publisher back for its whole grace: drop it.
    Drop,
}

/// Judges a subscriber that acked up to `acked` of a ring of `capacity` bytes while the
/// producer needs the limit `needed_limit`: holding back means a whole ring behind it.
/// `slow_since` (when it started holding back) is set or reset; `grace` is the policy's.
pub(super) fn judge_slow(
    acked: u64,
    capacity: u64,
    needed_limit: u64,
    slow_since: &mut Option<Instant>,
    grace: Duration,
    now: Instant,
) -> SlowVerdict {
    if acked + capacity >= needed_limit {
        *slow_since = None;
        return SlowVerdict::NotHoldingBack;
    }
    let since = *slow_since.get_or_insert(now);
    if now.duration_since(since) >= grace {
        SlowVerdict::Drop
    } else {
        // Any grace is accepted: one past the clock's range waits as long as the clock goes.
        SlowVerdict::Waiting { until: since.checked_add(grace).unwrap_or(since + rdma_fabric::time::FAR_FUTURE) }
    }
}

/// The position a blocked publisher asks the subscriber that will probably ack last to ack
/// (`Control::CreditWanted`): `floor`, or a quarter ring (of `capacity` bytes) past its last
/// ack `acked` if that is further, never past the `tail`.
pub(super) fn credit_wanted(acked: u64, floor: u64, capacity: u64, tail: u64) -> u64 {
    (acked + capacity / 4).max(floor).min(tail)
}

#[cfg(test)]
mod tests {
    use super::*;

    const RING: u64 = 1 << 16;

    #[test]
    fn a_subscriber_within_a_ring_of_the_needed_limit_does_not_hold_back_and_its_slow_time_resets() {
        let now = Instant::now();
        let mut since = Some(now);
        let verdict = judge_slow(1000, RING, 1000 + RING, &mut since, Duration::from_millis(5), now);
        assert_eq!((verdict, since), (SlowVerdict::NotHoldingBack, None));
    }

    #[test]
    fn any_grace_is_accepted_even_past_the_clocks_range() {
        let start = Instant::now();
        let mut since = None;
        let verdict = judge_slow(0, RING, RING + 1, &mut since, Duration::MAX, start);
        assert!(matches!(verdict, SlowVerdict::Waiting { until } if until > start), "{verdict:?}");
    }

    #[test]
    fn a_subscriber_a_ring_behind_waits_out_its_grace_then_is_dropped() {
        let (start, grace) = (Instant::now(), Duration::from_millis(50));
        let mut since = None;
        let behind = |since: &mut Option<Instant>, at| judge_slow(0, RING, RING + 1, since, grace, at);
        assert_eq!(behind(&mut since, start), SlowVerdict::Waiting { until: start + grace });
        assert_eq!(since, Some(start), "held back since the first look");
        let later = start + grace - Duration::from_millis(1);
        assert_eq!(
            behind(&mut since, later),
            SlowVerdict::Waiting { until: start + grace },
            "grace counts from the first look"
        );
        assert_eq!(behind(&mut since, start + grace), SlowVerdict::Drop, "dropped when the grace is up");
    }

    #[test]
    fn the_credit_asked_for_is_a_quarter_ring_past_the_last_ack_at_least_the_floor_at_most_the_tail() {
        assert_eq!(credit_wanted(1000, 0, RING, u64::MAX), 1000 + RING / 4, "a quarter ring past its ack");
        assert_eq!(credit_wanted(1000, 1000 + RING, RING, u64::MAX), 1000 + RING, "the floor when further");
        assert_eq!(credit_wanted(1000, 1000 + RING, RING, 1500), 1500, "never past the tail");
    }
}
