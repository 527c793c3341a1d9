//! The connect handshakes of incoming connections: how many may be in progress per source and
//! in all on a device, and how long one may stay silent.

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::Duration;

/// How long an accepted TCP connection may stay silent before its CONNECT_REQ arrives.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

/// Incoming connections of one source address (IP) that may be in their connect handshake at
/// once on a device (from the TCP accept until the application accepts or rejects the
/// request); more are closed at once and counted (`FabricCounters::refused_handshakes`). A
/// connection that sends no connect request within the handshake timeout (5 s) is closed.
pub const MAX_PENDING_HANDSHAKES_PER_SOURCE: usize = 64;
/// Incoming connections of all sources that may be in their connect handshake at once on a
/// device; more are closed at once and counted.
pub const MAX_PENDING_HANDSHAKES: usize = 1024;

/// Incoming connections in their connect handshake, by source address.
#[derive(Default)]
pub(crate) struct Handshakes {
    by_source: HashMap<IpAddr, usize>,
    total: usize,
}

impl Handshakes {
    /// Takes a slot for a handshake from `source`, unless it or all sources have as many as
    /// allowed.
    pub(crate) fn admit(&mut self, source: IpAddr) -> bool {
        let mine = self.by_source.get(&source).copied().unwrap_or(0);
        if mine >= MAX_PENDING_HANDSHAKES_PER_SOURCE || self.total >= MAX_PENDING_HANDSHAKES {
            return false;
        }
        self.by_source.insert(source, mine + 1);
        self.total += 1;
        true
    }

    /// Gives back a slot `source` took.
    pub(crate) fn release(&mut self, source: IpAddr) {
        if let Some(n) = self.by_source.get_mut(&source) {
            *n -= 1;
            self.total -= 1;
            if *n == 0 {
                self.by_source.remove(&source);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handshakes_are_limited_per_source_and_in_total_and_slots_come_back() {
        let source = |i: usize| IpAddr::from([10, (i >> 16) as u8, (i >> 8) as u8, i as u8]);
        let mut h = Handshakes::default();
        for _ in 0..MAX_PENDING_HANDSHAKES_PER_SOURCE {
            assert!(h.admit(source(0)));
        }
        assert!(!h.admit(source(0)), "one source over its limit");
        assert!(h.admit(source(1)), "another source is not held up");
        h.release(source(0));
        assert!(h.admit(source(0)), "a slot given back is taken again");

        let mut h = Handshakes::default();
        let per = MAX_PENDING_HANDSHAKES_PER_SOURCE;
        for i in 0..MAX_PENDING_HANDSHAKES {
            assert!(h.admit(source(i / per)), "handshake {i}");
        }
        assert!(!h.admit(source(MAX_PENDING_HANDSHAKES)), "a new source over the total limit");
        h.release(source(3));
        assert!(h.admit(source(MAX_PENDING_HANDSHAKES)));
        for i in 0..MAX_PENDING_HANDSHAKES {
            h.release(source(i / per));
        }
        assert_eq!((h.total, h.by_source.len()), (1, 1), "released slots leave nothing behind");
    }
}
