//! The subscriber's receive loop of `bench`, shared by the subscriber threads (in one process)
//! and the subscriber processes (`--separate-processes`), and the clock both sides stamp with.
//!
//! The loop is lean so that what it measures is the library's cost: in the throughput run it
//! reads no clock and handles no events per message. It reads the clock only for stamped
//! (latency) messages and, for the idle limit, when `recv_ref` returned nothing; it drains
//! events every [`EVENTS_EVERY`] messages and when idle; it reports progress every
//! [`REPORT_EVERY`] messages, at the last message of the throughput run, for every latency
//! message, and when idle.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use nix::time::{clock_gettime, ClockId};
use rdma_pubsub::{Subscription, SubscriptionEvent};

use crate::{payload, procinfo, Fail};

/// The stamp of the last message of the throughput run. Throughput messages carry 0, latency
/// messages their send time + 1 on [`monotonic_ns`].
pub const THROUGHPUT_END: u64 = u64::MAX;

/// Messages of the throughput run between two progress reports.
pub const REPORT_EVERY: u64 = 1024;

/// Messages between two drains of the subscription's events while messages keep coming.
pub const EVENTS_EVERY: u32 = 4096;

/// A subscriber that receives nothing for this long stops.
const IDLE_LIMIT: Duration = Duration::from_secs(10);

/// The longest wait of one `recv_ref`.
const POLL: Duration = Duration::from_millis(100);

/// `CLOCK_MONOTONIC` now, in nanoseconds: one clock for the whole system, so a send time
/// taken in the publishing process compares with a receipt time taken in a subscriber process.
pub fn monotonic_ns() -> u64 {
    clock_gettime(ClockId::CLOCK_MONOTONIC).map(|t| Duration::from(t).as_nanos() as u64).unwrap_or(0)
}

/// The stamp of a latency message sent now (never 0 nor [`THROUGHPUT_END`]).
pub fn stamp_now() -> u64 {
    monotonic_ns() + 1
}

/// Where a subscriber reports how far it got: an atomic the publishing thread reads (threads)
/// or lines on a pipe to the parent (processes).
pub trait Reporter {
    /// The subscriber has every message up to `seq` (or lost it).
    fn progress(&mut self, seq: u64) -> Result<(), Fail>;
    /// Latency message `seq` arrived `ns` after it was sent (also progress up to `seq`).
    fn latency(&mut self, seq: u64, ns: u64) -> Result<(), Fail>;
    /// The publisher dropped this subscriber: nobody should wait for it any more.
    fn dropped(&mut self) -> Result<(), Fail>;
}

/// What one subscriber counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Totals {
    /// Messages lost (gaps in the sequence).
    pub lost: u64,
    /// Messages whose header is not the expected one.
    pub damaged: u64,
    /// CPU time of the receiving thread during the throughput run: from the receipt of its
    /// first message to the receipt of its last.
    pub throughput_cpu: Duration,
    /// Messages that CPU time was spent on (those after the first, up to the last).
    pub throughput_msgs: u64,
}

/// Where the subscriber is in the point.
enum Phase {
    /// No message yet.
    Waiting,
    /// Receiving the throughput run since a CPU time reading and a delivered count.
    Throughput { cpu0: Duration, delivered0: u64 },
    /// The throughput run is over (its CPU time is in the totals).
    Latency,
}

/// Receives until the stream ends (or the subscriber is idle for 10 s, or `orphaned` is set),
/// checking each message's header and size, reporting progress and latency to `report`.
pub fn receive<R: Reporter>(
    sub: &mut Subscription,
    stream: u32,
    size: usize,
    report: &mut R,
    orphaned: Option<&AtomicBool>,
) -> Result<Totals, Fail> {
    let mut t = Totals::default();
    let mut phase = Phase::Waiting;
    let mut next = 1u64;
    let mut delivered = 0u64;
    let (mut last, mut reported) = (0u64, 0u64);
    let mut dropped = false;
    let mut since_events = 0u32;
    let mut idle_since: Option<Instant> = None;
    loop {
        match sub.recv_ref(POLL) {
            Ok(Some(m)) => {
                let seq = m.seq;
                let stamp = match payload::header(m.data, stream) {
                    Ok(h) if h.seq == seq && m.data.len() == size => h.stamp_ns,
                    _ => {
                        t.damaged += 1;
                        0
                    }
                };
                // A latency sample is taken first, before any other work.
                let now = if stamp != 0 && stamp != THROUGHPUT_END { monotonic_ns() } else { 0 };
                idle_since = None;
                t.lost += seq.saturating_sub(next);
                next = seq + 1;
                last = seq;
                delivered += 1;
                if stamp == 0 {
                    if matches!(phase, Phase::Waiting) {
                        phase = Phase::Throughput { cpu0: procinfo::thread_cpu(), delivered0: delivered };
                    }
                    if seq >= reported + REPORT_EVERY && !dropped {
                        report.progress(seq)?;
                        reported = seq;
                    }
                } else {
                    end_throughput(&mut phase, &mut t, delivered);
                    if dropped {
                        // Nobody waits for this subscriber any more.
                    } else if stamp == THROUGHPUT_END {
                        report.progress(seq)?;
                    } else {
                        report.latency(seq, now.saturating_sub(stamp - 1).max(1))?;
                    }
                    reported = seq;
                }
                since_events += 1;
                if since_events >= EVENTS_EVERY {
                    since_events = 0;
                    drain_events(sub, report, &mut dropped)?;
                }
            }
            Ok(None) => {
                if last != reported && !dropped {
                    report.progress(last)?;
                    reported = last;
                }
                drain_events(sub, report, &mut dropped)?;
                if orphaned.is_some_and(|o| o.load(Ordering::Relaxed)) {
                    return Err(Fail::Usage("bench subscriber: the bench process that started it is gone".into()));
                }
                let now = Instant::now();
                match idle_since {
                    Some(since) if now.duration_since(since) > IDLE_LIMIT => break,
                    Some(_) => {}
                    None => idle_since = Some(now),
                }
            }
            Err(_) => break,
        }
    }
    end_throughput(&mut phase, &mut t, delivered);
    Ok(t)
}

/// Ends the throughput run (when it is still going) after `delivered` messages.
fn end_throughput(phase: &mut Phase, t: &mut Totals, delivered: u64) {
    if let Phase::Throughput { cpu0, delivered0 } = *phase {
        t.throughput_cpu = procinfo::thread_cpu().saturating_sub(cpu0);
        t.throughput_msgs = delivered - delivered0;
    }
    *phase = Phase::Latency;
}

/// Handles the subscription's pending events: a drop is reported once.
fn drain_events<R: Reporter>(sub: &mut Subscription, report: &mut R, dropped: &mut bool) -> Result<(), Fail> {
    while let Some(e) = sub.try_event() {
        if let SubscriptionEvent::Dropped { .. } = e {
            if !*dropped {
                *dropped = true;
                report.dropped()?;
            }
        }
    }
    Ok(())
}
