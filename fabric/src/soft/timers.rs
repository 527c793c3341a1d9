//! The NIC thread's connection timers: at most one pending deadline per connection and kind,
//! cancelled as soon as it no longer matters (the handshake completed, the connection was
//! removed). What it holds is therefore bounded by the connections alive in a timed phase, not
//! by the number of connections made within the longest timeout (a heap with lazy deletion
//! keeps every timer until its deadline: at thousands of connections per second and 5 s
//! timeouts, tens of thousands of dead entries).

use std::collections::{BTreeSet, HashMap};
use std::time::Instant;

use crate::provider::ConnId;

/// What a timer does when it fires.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum TimerKind {
    /// The connect did not complete in time.
    ConnectTimeout,
    /// An incoming connection sent no CONNECT_REQ in time.
    HandshakeTimeout,
    /// Retry placing a SEND that found no receive.
    Rnr,
    /// Drop a closing connection.
    Close,
    /// Check that a connection whose reading is paused (its peer leaves its answers unread)
    /// wrote something since the pause began.
    OutputStall,
    /// A queue pair connected by hand has had requests waiting for its stream to the peer for
    /// as long as RTS's timeout and retry count allow.
    TransportTimeout,
    /// A stream of the data port has sent no hello, or found no queue pair, in time (the id is
    /// the stream's).
    HelloTimeout,
    /// A same-host region request of the connection was refused: its queue pair fails unless
    /// the request was judged by the NIC meanwhile.
    RefusedRegion,
}

impl TimerKind {
    /// Every kind.
    const ALL: [TimerKind; 8] = [
        TimerKind::ConnectTimeout,
        TimerKind::HandshakeTimeout,
        TimerKind::Rnr,
        TimerKind::Close,
        TimerKind::OutputStall,
        TimerKind::TransportTimeout,
        TimerKind::HelloTimeout,
        TimerKind::RefusedRegion,
    ];
}

/// Pending timers, by deadline and by connection.
#[derive(Default)]
pub(crate) struct Timers {
    /// By deadline (ties broken by connection and kind).
    queue: BTreeSet<(Instant, ConnId, TimerKind)>,
    /// The deadline of each pending timer.
    pending: HashMap<(ConnId, TimerKind), Instant>,
}

impl Timers {
    /// Schedules `kind` for `conn` at `at`. If one of that kind is pending already, the
    /// earlier deadline stays.
    pub(crate) fn schedule(&mut self, at: Instant, conn: ConnId, kind: TimerKind) {
        match self.pending.get(&(conn, kind)) {
            Some(&old) if old <= at => {}
            Some(&old) => {
                self.queue.remove(&(old, conn, kind));
                self.queue.insert((at, conn, kind));
                self.pending.insert((conn, kind), at);
            }
            None => {
                self.queue.insert((at, conn, kind));
                self.pending.insert((conn, kind), at);
            }
        }
    }

    /// Cancels `conn`'s timer of `kind`, if pending.
    pub(crate) fn cancel(&mut self, conn: ConnId, kind: TimerKind) {
        if let Some(at) = self.pending.remove(&(conn, kind)) {
            self.queue.remove(&(at, conn, kind));
            self.shrink();
        }
    }

    /// Cancels every timer of `conn` (it was removed).
    pub(crate) fn cancel_conn(&mut self, conn: ConnId) {
        for kind in TimerKind::ALL {
            self.cancel(conn, kind);
        }
    }

    /// The earliest deadline.
    pub(crate) fn next(&self) -> Option<Instant> {
        self.queue.first().map(|&(at, _, _)| at)
    }

    /// Removes and returns a timer due at `now`, earliest first.
    pub(crate) fn pop_due(&mut self, now: Instant) -> Option<(ConnId, TimerKind)> {
        let &(at, conn, kind) = self.queue.first().filter(|(at, _, _)| *at <= now)?;
        self.queue.remove(&(at, conn, kind));
        self.pending.remove(&(conn, kind));
        self.shrink();
        Some((conn, kind))
    }

    /// Pending timers.
    pub(crate) fn len(&self) -> usize {
        self.pending.len()
    }

    /// Gives memory back after a burst (the B-tree frees its nodes by itself).
    fn shrink(&mut self) {
        if self.pending.capacity() > 1024 && self.pending.len() < self.pending.capacity() / 8 {
            self.pending.shrink_to(self.pending.len() * 2);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn timers_fire_in_deadline_order_and_only_when_due() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut t = Timers::default();
        t.schedule(t0 + ms(30), 1, TimerKind::Close);
        t.schedule(t0 + ms(10), 2, TimerKind::HandshakeTimeout);
        t.schedule(t0 + ms(20), 1, TimerKind::Rnr);
        assert_eq!(t.next(), Some(t0 + ms(10)));
        assert_eq!(t.pop_due(t0 + ms(5)), None);
        assert_eq!(t.pop_due(t0 + ms(25)), Some((2, TimerKind::HandshakeTimeout)));
        assert_eq!(t.pop_due(t0 + ms(25)), Some((1, TimerKind::Rnr)));
        assert_eq!(t.pop_due(t0 + ms(25)), None);
        assert_eq!(t.len(), 1);
        assert_eq!(t.pop_due(t0 + ms(30)), Some((1, TimerKind::Close)));
        assert_eq!((t.len(), t.next()), (0, None));
    }

    #[test]
    fn a_timer_of_the_same_kind_keeps_the_earlier_deadline() {
        let t0 = Instant::now();
        let mut t = Timers::default();
        t.schedule(t0 + Duration::from_secs(2), 7, TimerKind::Close);
        t.schedule(t0 + Duration::from_secs(5), 7, TimerKind::Close);
        assert_eq!((t.len(), t.next()), (1, Some(t0 + Duration::from_secs(2))));
        t.schedule(t0, 7, TimerKind::Close);
        assert_eq!((t.len(), t.next()), (1, Some(t0)));
        assert_eq!(t.pop_due(t0), Some((7, TimerKind::Close)));
        assert_eq!(t.pop_due(t0 + Duration::from_secs(10)), None);
    }

    #[test]
    fn cancelled_timers_are_gone_at_once_and_never_fire() {
        let t0 = Instant::now();
        let mut t = Timers::default();
        for conn in 0..10_000 {
            t.schedule(t0 + Duration::from_secs(5), conn, TimerKind::HandshakeTimeout);
            t.schedule(t0 + Duration::from_secs(5), conn, TimerKind::ConnectTimeout);
            t.schedule(t0 + Duration::from_secs(2), conn, TimerKind::Close);
            if conn % 2 == 0 {
                t.cancel(conn, TimerKind::HandshakeTimeout);
                t.cancel_conn(conn);
            } else {
                t.cancel(conn, TimerKind::ConnectTimeout);
            }
        }
        // The odd connections keep their handshake and close timers.
        assert_eq!(t.len(), 10_000);
        for conn in (1..10_000).step_by(2) {
            t.cancel_conn(conn);
        }
        assert_eq!((t.len(), t.next()), (0, None));
        assert_eq!(t.pop_due(t0 + Duration::from_secs(60)), None);
        assert!(t.pending.capacity() <= 2048, "kept capacity {}", t.pending.capacity());
    }
}
