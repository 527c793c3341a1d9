//! The connect handshakes of incoming connections (and of the data port's streams): how many
//! may be in progress per source and in all on a device, which gives way when there are too
//! many, and how long one may stay silent.
//!
//! Sources are grouped by network prefix (/24 for IPv4, /64 for IPv6), since one host easily
//! holds many addresses of its prefix. When a prefix or the whole table is full, a newcomer
//! whose address (within the prefix) or prefix (in the table) holds fewer handshakes than the
//! heaviest holder is admitted, and the oldest handshake of that holder that has not spoken
//! yet (no connect request or hello arrived or waiting) gives way. A newcomer of the heaviest
//! holder itself is refused: a flood is capped and refused, while a peer that holds few and
//! speaks at once gets through. A newcomer is also refused when every handshake that could
//! give way has spoken (they wait for the application). Under pressure (more than half of the table held) the time a new handshake may
//! stay silent shrinks, down to a tenth of the timeout when the table is full.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::time::Duration;

/// How long an accepted TCP connection may stay silent before its CONNECT_REQ arrives (while
/// at most half of the handshake table is held; less under pressure).
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

/// Incoming connections of one source prefix (a /24 of IPv4, a /64 of IPv6) that may be in
/// their connect handshake at once on a device (from the TCP accept until the application
/// accepts or rejects the request). A newcomer past this takes the place of the prefix's
/// oldest silent handshake (`FabricCounters::evicted_handshakes`), or is closed at once when
/// all of them have spoken (`FabricCounters::refused_handshakes`). A connection that sends no
/// connect request within the handshake timeout (5 s, shorter under pressure) is closed.
pub const MAX_PENDING_HANDSHAKES_PER_SOURCE: usize = 64;
/// Incoming connections of all sources that may be in their connect handshake at once on a
/// device; past this, the oldest silent one gives way to the newcomer.
pub const MAX_PENDING_HANDSHAKES: usize = 1024;

/// What a handshake is: an incoming connection of the connection manager, or a stream of the
/// data port of queue pairs connected by hand. (Their ids come from one counter.)
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Conn,
    Stream,
}

/// The verdict on a newcomer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Admission {
    /// Admitted; it may stay silent for `timeout`; `evict` (if any) lost its slot and must be
    /// closed by the caller.
    Admitted { timeout: Duration, evict: Option<(u64, Kind)> },
    /// Refused: every handshake in its way has spoken.
    Refused,
}

struct Entry {
    id: u64,
    kind: Kind,
    addr: IpAddr,
    prefix: IpAddr,
    spoke: bool,
}

/// Handshakes in progress, in the order they began.
#[derive(Default)]
pub(crate) struct Handshakes {
    /// By admission order.
    entries: BTreeMap<u64, Entry>,
    /// Admission order of each id.
    by_id: HashMap<u64, u64>,
    by_prefix: HashMap<IpAddr, usize>,
    by_addr: HashMap<IpAddr, usize>,
    next: u64,
}

/// The prefix `ip` is counted under: its /24 (IPv4, also mapped into IPv6) or its /64.
pub(crate) fn prefix(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(v4) => {
            let [a, b, c, _] = v4.octets();
            IpAddr::from([a, b, c, 0])
        }
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => prefix(IpAddr::V4(v4)),
            None => IpAddr::V6((u128::from(v6) & !((1u128 << 64) - 1)).into()),
        },
    }
}

impl Handshakes {
    /// Handshakes in progress.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Takes a slot for handshake `id` (of `kind`) from `source`, evicting the oldest silent
    /// handshake in its way if its prefix or the table is full; `base` is the silence timeout
    /// when there is no pressure. `spoken` says whether a handshake not yet marked as spoken
    /// has its request waiting to be read (it is then marked, and not evicted): the NIC may
    /// take in many connections before it reads any.
    pub(crate) fn admit(
        &mut self,
        source: IpAddr,
        id: u64,
        kind: Kind,
        base: Duration,
        mut spoken: impl FnMut(u64, Kind) -> bool,
    ) -> Admission {
        let prefix = prefix(source);
        let in_prefix = self.by_prefix.get(&prefix).copied().unwrap_or(0);
        let evict = if in_prefix >= MAX_PENDING_HANDSHAKES_PER_SOURCE {
            let mine = self.by_addr.get(&source).copied().unwrap_or(0);
            match self.oldest_silent(Some(prefix), mine, &mut spoken) {
                Some(seq) => Some(seq),
                None => return Admission::Refused,
            }
        } else if self.entries.len() >= MAX_PENDING_HANDSHAKES {
            match self.oldest_silent(None, in_prefix, &mut spoken) {
                Some(seq) => Some(seq),
                None => return Admission::Refused,
            }
        } else {
            None
        };
        let evict = evict.and_then(|seq| self.remove_seq(seq));
        let seq = self.next;
        self.next += 1;
        self.entries.insert(seq, Entry { id, kind, addr: source, prefix, spoke: false });
        self.by_id.insert(id, seq);
        *self.by_prefix.entry(prefix).or_insert(0) += 1;
        *self.by_addr.entry(source).or_insert(0) += 1;
        Admission::Admitted { timeout: self.timeout(base), evict }
    }

    /// The silence timeout of a handshake admitted now: `base` while at most half of the table
    /// is held, then shrinking linearly to a tenth of it when the table is full.
    pub(crate) fn timeout(&self, base: Duration) -> Duration {
        let half = MAX_PENDING_HANDSHAKES / 2;
        let held = self.entries.len().min(MAX_PENDING_HANDSHAKES);
        if held <= half {
            return base;
        }
        let left = (MAX_PENDING_HANDSHAKES - held) as u32;
        (base * left / half as u32).max(base / 10)
    }

    /// Handshake `id` has spoken (its connect request or hello arrived): it no longer gives
    /// way to newcomers.
    pub(crate) fn spoke(&mut self, id: u64) {
        if let Some(e) = self.by_id.get(&id).and_then(|seq| self.entries.get_mut(seq)) {
            e.spoke = true;
        }
    }

    /// Gives back the slot of handshake `id` (nothing if it holds none, e.g. it was evicted).
    pub(crate) fn release(&mut self, id: u64) {
        if let Some(&seq) = self.by_id.get(&id) {
            self.remove_seq(seq);
        }
    }

    /// The admission order of the handshake that gives way to a newcomer whose address (within
    /// `prefix`, if given) or prefix (in the whole table) holds `mine`: the oldest silent one
    /// of the address (prefix) holding the most silent ones, if that is more than `mine`;
    /// those found to have spoken on the way are marked. So a newcomer that holds less than
    /// the heaviest holder takes a place of it, and the heaviest holder itself is refused.
    fn oldest_silent(
        &mut self,
        prefix: Option<IpAddr>,
        mine: usize,
        spoken: &mut impl FnMut(u64, Kind) -> bool,
    ) -> Option<u64> {
        let group = |e: &Entry| if prefix.is_some() { e.addr } else { e.prefix };
        let candidate = |e: &Entry| !e.spoke && prefix.is_none_or(|p| e.prefix == p);
        let mut held: HashMap<IpAddr, usize> = HashMap::new();
        for e in self.entries.values().filter(|e| candidate(e)) {
            *held.entry(group(e)).or_insert(0) += 1;
        }
        loop {
            let most = held.values().copied().max().filter(|&n| n > mine)?;
            let (&seq, e) = self.entries.iter_mut().find(|(_, e)| candidate(e) && held[&group(e)] == most)?;
            if !spoken(e.id, e.kind) {
                return Some(seq);
            }
            e.spoke = true;
            *held.get_mut(&group(e)).expect("counted") -= 1;
        }
    }

    fn remove_seq(&mut self, seq: u64) -> Option<(u64, Kind)> {
        let e = self.entries.remove(&seq)?;
        self.by_id.remove(&e.id);
        for (map, key) in [(&mut self.by_prefix, e.prefix), (&mut self.by_addr, e.addr)] {
            if let Some(n) = map.get_mut(&key) {
                *n -= 1;
                if *n == 0 {
                    map.remove(&key);
                }
            }
        }
        Some((e.id, e.kind))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: Duration = HANDSHAKE_TIMEOUT;

    fn admitted(a: Admission) -> Option<(u64, Kind)> {
        match a {
            Admission::Admitted { evict, .. } => evict,
            Admission::Refused => panic!("refused"),
        }
    }

    #[test]
    fn sources_are_grouped_by_prefix() {
        assert_eq!(prefix("10.1.2.3".parse().unwrap()), prefix("10.1.2.200".parse().unwrap()));
        assert_ne!(prefix("10.1.2.3".parse().unwrap()), prefix("10.1.3.3".parse().unwrap()));
        assert_eq!(prefix("::ffff:10.1.2.3".parse().unwrap()), prefix("10.1.2.9".parse().unwrap()));
        assert_eq!(prefix("2001:db8:0:1::5".parse().unwrap()), prefix("2001:db8:0:1:ffff::1".parse().unwrap()));
        assert_ne!(prefix("2001:db8:0:1::5".parse().unwrap()), prefix("2001:db8:0:2::5".parse().unwrap()));
    }

    #[test]
    fn a_full_prefix_evicts_its_oldest_silent_handshake() {
        let mut h = Handshakes::default();
        let per = MAX_PENDING_HANDSHAKES_PER_SOURCE as u64;
        let ip = |last: u8| IpAddr::from([10, 0, 0, last]);
        for id in 0..per {
            assert_eq!(admitted(h.admit(ip(id as u8), id, Kind::Conn, BASE, |_, _| false)), None);
        }
        h.spoke(0);
        // The prefix is full: the oldest silent one (1; 0 spoke) gives way to the newcomer.
        assert_eq!(admitted(h.admit(ip(250), per, Kind::Stream, BASE, |_, _| false)), Some((1, Kind::Conn)));
        assert_eq!(admitted(h.admit(ip(251), per + 1, Kind::Conn, BASE, |_, _| false)), Some((2, Kind::Conn)));
        // One found to have its request waiting (3) is marked and passed over.
        assert_eq!(admitted(h.admit(ip(252), per + 2, Kind::Conn, BASE, |id, _| id == 3)), Some((4, Kind::Conn)));
        // A newcomer whose address holds as many as the heaviest holder is refused: every
        // address holds one here, ip 9 too.
        assert_eq!(h.admit(ip(9), 7000, Kind::Conn, BASE, |_, _| false), Admission::Refused, "ip 9 holds the most");
        // Another prefix is not affected.
        assert_eq!(admitted(h.admit(IpAddr::from([10, 0, 1, 1]), 999, Kind::Conn, BASE, |_, _| false)), None);
        // When all of the prefix has spoken, the newcomer is refused.
        for id in 0..per + 3 {
            h.spoke(id);
        }
        assert_eq!(h.admit(ip(252), 5000, Kind::Conn, BASE, |_, _| false), Admission::Refused);
        h.release(5);
        assert_eq!(admitted(h.admit(ip(252), 5000, Kind::Conn, BASE, |_, _| false)), None, "a released slot is taken");
    }

    #[test]
    fn a_full_table_evicts_the_oldest_silent_handshake_of_the_prefix_holding_most_and_timeouts_shrink() {
        let mut h = Handshakes::default();
        let per = MAX_PENDING_HANDSHAKES_PER_SOURCE;
        let source = |i: usize| IpAddr::from([10, (i >> 8) as u8, i as u8, 1]);
        let mut last_timeout = BASE;
        for i in 0..MAX_PENDING_HANDSHAKES {
            match h.admit(source(i / per), i as u64, Kind::Conn, BASE, |_, _| false) {
                Admission::Admitted { timeout, evict: None } => {
                    assert!(timeout <= last_timeout, "timeouts only shrink as the table fills");
                    last_timeout = timeout;
                }
                other => panic!("handshake {i}: {other:?}"),
            }
        }
        assert!(last_timeout <= BASE / 5, "near full, a handshake gets a fraction of the timeout: {last_timeout:?}");
        assert_eq!(h.timeout(BASE), BASE / 10);
        h.spoke(0);
        h.spoke(per as u64);
        let newcomer = source(MAX_PENDING_HANDSHAKES);
        // The first two prefixes hold one fewer silent handshake than the others: the oldest
        // silent one of the third gives way.
        let third = 2 * per as u64;
        assert_eq!(admitted(h.admit(newcomer, 10_000, Kind::Conn, BASE, |_, _| false)), Some((third, Kind::Conn)));
        // Then the third holds fewer too: the fourth's oldest would go, but it has its request
        // waiting: marked, the fourth holds fewer silent ones too, and the fifth's oldest goes.
        let fourth = 3 * per as u64;
        assert_eq!(
            admitted(h.admit(newcomer, 10_001, Kind::Conn, BASE, |id, _| id == fourth)),
            Some((fourth + per as u64, Kind::Conn))
        );
        assert_eq!(h.len(), MAX_PENDING_HANDSHAKES);
        for i in 0..MAX_PENDING_HANDSHAKES as u64 {
            h.release(i);
        }
        h.release(10_000);
        h.release(10_001);
        assert_eq!((h.len(), h.by_prefix.len(), h.by_id.len()), (0, 0, 0), "released slots leave nothing behind");
        assert_eq!(h.timeout(BASE), BASE);
    }
}
