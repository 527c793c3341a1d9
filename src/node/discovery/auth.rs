//! Authenticated announcements: what this node sends ([`Sealer`]) and what a received datagram
//! must pass before the directory sees it ([`Gate`]).
//!
//! With a domain secret every datagram is sealed ([`Announcement::seal`]) with a sequence
//! number (from 1, one more per datagram of this node's epoch) and the sender's wall clock. A
//! receiver accepts a datagram only if its tag verifies (checked before anything else of it is
//! read), its sender's clock is within [`MAX_CLOCK_SKEW`] of its own, and its sequence number
//! was not seen before from that node and epoch: a replay window per sender (the highest
//! sequence number and a bitmap of the 64 below it, as IPsec and DTLS keep). A sender's window
//! is kept after it leaves or expires, until anything it sent is stale, so a captured Hello or
//! Goodbye replayed later is refused too. Without a secret, datagrams are plain and anyone who
//! can send to the discovery port can claim any node: trusted networks only. A node with a
//! secret refuses plain datagrams, and a node without one ignores sealed ones.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::limits::MAX_PEERS;
use crate::node::identity::NodeId;
use rdma_wire::protocol::{Announcement, OpenError, ProtocolError, Secret, TopicId};

/// How far a sealed announcement's sender clock may be from the receiver's, either way: older
/// (or newer) datagrams are refused as stale. Nodes of a domain need clocks synchronised
/// within this (NTP does far better); a replayed datagram is refused by the replay window
/// until it is this old, and by the clock check after.
pub const MAX_CLOCK_SKEW: Duration = Duration::from_secs(60);

/// How far the clock of a sender's first datagram (of a node, or of a new epoch of it, that
/// this gate holds no window for) may be from the receiver's. Much tighter than
/// [`MAX_CLOCK_SKEW`]: a genuine node's first datagram heard is one it has just sent (a hello,
/// or the next heartbeat of a node heard for the first time), while a replay of a node that
/// left is older. Replays of what a node sent since are the window's business.
pub const FIRST_SIGHT_SKEW: Duration = Duration::from_secs(3);

/// Most senders whose replay windows are kept (twice the peers the directory keeps: room for
/// the peers that left recently). Only holders of the secret create windows.
const MAX_WINDOWS: usize = 2 * MAX_PEERS;

/// How long the window of a silent sender is kept: anything it sent is stale by then (its
/// clock may have been ahead by up to the allowance, and ours may be behind by as much).
const WINDOW_MEMORY: Duration = MAX_CLOCK_SKEW.saturating_mul(3);

/// Sequence numbers seen from one sender: the highest, and which of the 64 below it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ReplayWindow {
    highest: u64,
    /// Bit `i` set: `highest - i` was seen (bit 0 is `highest` itself).
    seen: u64,
}

impl ReplayWindow {
    /// Bits of the window: a sequence number this far below the highest is refused.
    pub(crate) const WIDTH: u64 = 64;

    /// A window that has seen `seq` only.
    pub(crate) fn starting_at(seq: u64) -> ReplayWindow {
        ReplayWindow { highest: seq, seen: 1 }
    }

    /// Records `seq` and returns true if it is new: above the highest, or within the window
    /// and not seen yet. A duplicate, or one too old to tell, returns false.
    pub(crate) fn accept(&mut self, seq: u64) -> bool {
        if seq > self.highest {
            let shift = seq - self.highest;
            self.seen = if shift >= Self::WIDTH { 1 } else { (self.seen << shift) | 1 };
            self.highest = seq;
            return true;
        }
        let behind = self.highest - seq;
        if behind >= Self::WIDTH || self.seen & (1 << behind) != 0 {
            return false;
        }
        self.seen |= 1 << behind;
        true
    }
}

/// Seals this node's datagrams: the secret and the next sequence number.
pub(crate) struct Sealer {
    secret: Secret,
    next_seq: u64,
}

impl Sealer {
    pub(crate) fn new(secret: Secret) -> Sealer {
        Sealer { secret, next_seq: 1 }
    }

    /// The datagram of `a`, with the next sequence number and the clock `now_ms`.
    pub(crate) fn seal(&mut self, a: &Announcement, now_ms: u64) -> Result<Vec<u8>, ProtocolError> {
        let bytes = a.seal(&self.secret, self.next_seq, now_ms)?;
        self.next_seq += 1;
        Ok(bytes)
    }
}

/// Why a received datagram was dropped (each is counted).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// This node has a secret and the datagram carries no tag, or one that does not verify.
    Unauthenticated,
    /// This node has no secret and the datagram is sealed: it cannot be checked.
    SealedWithoutSecret,
    /// The tag verifies but the sender's clock is more than [`MAX_CLOCK_SKEW`] away.
    Stale,
    /// The tag verifies but the sequence number was seen (or is too old to tell), or the
    /// epoch is older than one already heard from that node.
    Replayed,
    /// It does not decode, or a topic id does not match its name.
    Undecodable(ProtocolError),
}

/// A sender heard from with a valid tag.
struct Heard {
    epoch: u64,
    window: ReplayWindow,
    last_heard: Instant,
}

/// Decides which received datagrams reach the directory.
pub(crate) struct Gate {
    secret: Option<Secret>,
    senders: HashMap<NodeId, Heard>,
}

impl Gate {
    pub(crate) fn new(secret: Option<Secret>) -> Gate {
        Gate { secret, senders: HashMap::new() }
    }

    /// The announcement in `bytes` if it passes; `now_ms` is this node's wall clock.
    pub(crate) fn admit(&mut self, bytes: &[u8], now_ms: u64, now: Instant) -> Result<Announcement, Refusal> {
        let announcement = match &self.secret {
            None if Announcement::is_sealed(bytes) => return Err(Refusal::SealedWithoutSecret),
            None => Announcement::decode(bytes).map_err(Refusal::Undecodable)?,
            Some(secret) => {
                let sealed = match Announcement::open(bytes, secret) {
                    Ok(sealed) => sealed,
                    Err(OpenError::NotSealed { .. } | OpenError::BadTag { .. }) => {
                        return Err(Refusal::Unauthenticated)
                    }
                    Err(OpenError::Malformed(e)) => return Err(Refusal::Undecodable(e)),
                };
                if now_ms.abs_diff(sealed.sent_ms) > MAX_CLOCK_SKEW.as_millis() as u64 {
                    return Err(Refusal::Stale);
                }
                let a = sealed.announcement;
                let first_sight_fresh = now_ms.abs_diff(sealed.sent_ms) <= FIRST_SIGHT_SKEW.as_millis() as u64;
                self.fresh(a.node_id, a.epoch, sealed.seq, first_sight_fresh, now)?;
                a
            }
        };
        match announcement.topics.iter().find(|(name, id)| TopicId::of(name) != *id) {
            Some((name, id)) => Err(Refusal::Undecodable(ProtocolError::Malformed {
                what: "announcement",
                detail: format!("topic id {id:?} does not match the name {name:?}"),
            })),
            None => Ok(announcement),
        }
    }

    /// Records `seq` of `node`'s `epoch`: [`Refusal::Replayed`] for a replay (or an older
    /// epoch), [`Refusal::Stale`] for the first datagram of a sender (or of its new epoch) sent
    /// longer than [`FIRST_SIGHT_SKEW`] ago (`first_sight_fresh` false).
    fn fresh(
        &mut self,
        node: NodeId,
        epoch: u64,
        seq: u64,
        first_sight_fresh: bool,
        now: Instant,
    ) -> Result<(), Refusal> {
        let known_epoch = self.senders.get(&node).is_some_and(|h| h.epoch == epoch && h.window.seen != 0);
        if !known_epoch && !first_sight_fresh {
            let older = self.senders.get(&node).is_some_and(|h| epoch < h.epoch);
            return Err(if older { Refusal::Replayed } else { Refusal::Stale });
        }
        if !self.senders.contains_key(&node) && self.senders.len() >= MAX_WINDOWS {
            self.forget_least_recent();
        }
        let heard = self.senders.entry(node).or_insert(Heard {
            epoch,
            window: ReplayWindow { highest: 0, seen: 0 },
            last_heard: now,
        });
        if epoch < heard.epoch {
            return Err(Refusal::Replayed);
        }
        if epoch > heard.epoch || heard.window.seen == 0 {
            // A new sender, or a new incarnation of it: its numbering starts again.
            *heard = Heard { epoch, window: ReplayWindow::starting_at(seq), last_heard: now };
            return Ok(());
        }
        if !heard.window.accept(seq) {
            return Err(Refusal::Replayed);
        }
        heard.last_heard = now;
        Ok(())
    }

    /// Forgets the windows of senders silent for longer than anything they sent stays fresh.
    pub(crate) fn forget_silent(&mut self, now: Instant) {
        self.senders.retain(|_, h| now.duration_since(h.last_heard) <= WINDOW_MEMORY);
        if self.senders.capacity() > 4 * self.senders.len() + 64 {
            self.senders.shrink_to_fit();
        }
    }

    /// Makes room for one more sender: the one heard from longest ago goes.
    fn forget_least_recent(&mut self) {
        if let Some(&node) = self.senders.iter().min_by_key(|(_, h)| h.last_heard).map(|(node, _)| node) {
            self.senders.remove(&node);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdma_wire::protocol::AnnounceKind;
    use std::net::SocketAddr;

    #[test]
    fn the_replay_window_takes_each_number_once_within_64() {
        let mut w = ReplayWindow::starting_at(100);
        assert!(!w.accept(100), "duplicate of the first");
        // In order.
        assert!(w.accept(101) && w.accept(102));
        assert!(!w.accept(102), "duplicate of the highest");
        // Out of order within the window: each once.
        assert!(w.accept(110));
        for seq in [105, 103, 109, 104] {
            assert!(w.accept(seq), "{seq} arrived late, first time");
            assert!(!w.accept(seq), "{seq} again");
        }
        assert!(!w.accept(101), "seen before the jump");
        // The oldest number the window still tells apart, and the first it cannot.
        assert!(w.accept(110 - 63));
        assert!(!w.accept(110 - 64), "too old to tell: refused");
        assert!(!w.accept(0));
        // A jump past the whole window forgets everything below it.
        assert!(w.accept(1000));
        assert!(!w.accept(1000 - 64) && w.accept(999) && !w.accept(999));
        assert_eq!(w, ReplayWindow { highest: 1000, seen: 0b11 });
        assert!(w.accept(u64::MAX) && !w.accept(u64::MAX));
    }

    fn secret(fill: u8) -> Secret {
        Secret::new(vec![fill; 32]).unwrap()
    }

    fn announcement(kind: AnnounceKind, node_id: NodeId, epoch: u64) -> Announcement {
        Announcement {
            kind,
            domain: 0,
            node_id,
            epoch,
            connect: SocketAddr::from(([127, 0, 0, 1], 1000)),
            part: 0,
            parts: 1,
            topics: vec![("t".into(), TopicId::of("t"))],
        }
    }

    const NOW_MS: u64 = 1_800_000_000_000;

    #[test]
    fn a_gate_with_a_secret_admits_each_sealed_datagram_once_within_the_clock_allowance() {
        let (mut gate, now) = (Gate::new(Some(secret(1))), Instant::now());
        let hello = announcement(AnnounceKind::Hello, 7, 1);
        let seal = |a: &Announcement, seq, ms| a.seal(&secret(1), seq, ms).unwrap();
        let first = seal(&hello, 1, NOW_MS);
        assert_eq!(gate.admit(&first, NOW_MS, now), Ok(hello.clone()));
        assert_eq!(gate.admit(&first, NOW_MS, now), Err(Refusal::Replayed));
        // Plain, forged and foreign-secret datagrams carry no valid tag.
        assert_eq!(gate.admit(&hello.encode().unwrap(), NOW_MS, now), Err(Refusal::Unauthenticated));
        let mut forged = seal(&hello, 2, NOW_MS);
        forged[30] ^= 1;
        assert_eq!(gate.admit(&forged, NOW_MS, now), Err(Refusal::Unauthenticated));
        let foreign = hello.seal(&secret(2), 3, NOW_MS).unwrap();
        assert_eq!(gate.admit(&foreign, NOW_MS, now), Err(Refusal::Unauthenticated));
        // The clock allowance, both ways; a stale datagram does not use up its number.
        let skew = MAX_CLOCK_SKEW.as_millis() as u64;
        assert_eq!(gate.admit(&seal(&hello, 4, NOW_MS - skew - 1), NOW_MS, now), Err(Refusal::Stale));
        assert_eq!(gate.admit(&seal(&hello, 4, NOW_MS + skew + 1), NOW_MS, now), Err(Refusal::Stale));
        assert!(gate.admit(&seal(&hello, 4, NOW_MS + skew), NOW_MS, now).is_ok());
        assert!(gate.admit(&seal(&hello, 5, NOW_MS - skew), NOW_MS, now).is_ok());
        // A new epoch starts its numbering again; the old epoch is refused from then on.
        let restarted = announcement(AnnounceKind::Hello, 7, 2);
        assert!(gate.admit(&seal(&restarted, 1, NOW_MS), NOW_MS, now).is_ok());
        assert_eq!(gate.admit(&seal(&hello, 6, NOW_MS), NOW_MS, now), Err(Refusal::Replayed));
        // Numbers are per sender.
        assert!(gate.admit(&seal(&announcement(AnnounceKind::Hello, 8, 1), 1, NOW_MS), NOW_MS, now).is_ok());
    }

    #[test]
    fn a_senders_first_datagram_must_be_fresh_within_the_tight_first_sight_window() {
        let (mut gate, now) = (Gate::new(Some(secret(1))), Instant::now());
        let seal = |a: &Announcement, seq, ms| a.seal(&secret(1), seq, ms).unwrap();
        let tight = FIRST_SIGHT_SKEW.as_millis() as u64;
        // A node that left, its announcements replayed 6 s later to a gate that never heard it.
        let gone = announcement(AnnounceKind::Heartbeat, 9, 1);
        assert_eq!(gate.admit(&seal(&gone, 40, NOW_MS - 6_000), NOW_MS, now), Err(Refusal::Stale));
        assert_eq!(gate.admit(&seal(&gone, 41, NOW_MS - tight - 1), NOW_MS, now), Err(Refusal::Stale));
        // Its next datagram sent now is admitted, and from then on the replay window and the
        // wide clock allowance apply to it.
        assert!(gate.admit(&seal(&gone, 42, NOW_MS), NOW_MS, now).is_ok());
        assert!(gate.admit(&seal(&gone, 43, NOW_MS - 6_000), NOW_MS, now).is_ok());
        // A new epoch is a first sight again: it must be fresh too.
        let reborn = announcement(AnnounceKind::Hello, 9, 2);
        assert_eq!(gate.admit(&seal(&reborn, 1, NOW_MS - 6_000), NOW_MS, now), Err(Refusal::Stale));
        assert!(gate.admit(&seal(&reborn, 1, NOW_MS - tight), NOW_MS, now).is_ok());
    }

    #[test]
    fn a_goodbye_replayed_after_a_sender_left_and_came_back_is_refused() {
        let (mut gate, now) = (Gate::new(Some(secret(1))), Instant::now());
        let node = |kind| announcement(kind, 7, 1);
        let seal = |kind, seq| node(kind).seal(&secret(1), seq, NOW_MS).unwrap();
        let goodbye = seal(AnnounceKind::Goodbye, 2);
        for (bytes, expected) in [
            (seal(AnnounceKind::Hello, 1), Ok(node(AnnounceKind::Hello))),
            (goodbye.clone(), Ok(node(AnnounceKind::Goodbye))),
            (seal(AnnounceKind::Hello, 3), Ok(node(AnnounceKind::Hello))),
            (goodbye, Err(Refusal::Replayed)),
        ] {
            assert_eq!(gate.admit(&bytes, NOW_MS, now), expected);
        }
        // The window outlives the sender's silence until what it sent is stale.
        gate.forget_silent(now + MAX_CLOCK_SKEW * 2);
        assert_eq!(gate.admit(&seal(AnnounceKind::Hello, 3), NOW_MS, now), Err(Refusal::Replayed));
        gate.forget_silent(now + WINDOW_MEMORY + Duration::from_secs(1));
        assert!(gate.senders.is_empty());
    }

    #[test]
    fn a_gate_keeps_a_bounded_number_of_windows() {
        let (mut gate, now) = (Gate::new(Some(secret(1))), Instant::now());
        for node in 0..(MAX_WINDOWS as u64 + 10) {
            let bytes = announcement(AnnounceKind::Hello, node, 1).seal(&secret(1), 1, NOW_MS).unwrap();
            assert!(gate.admit(&bytes, NOW_MS, now + Duration::from_millis(node)).is_ok());
        }
        assert_eq!(gate.senders.len(), MAX_WINDOWS);
        assert!(!gate.senders.contains_key(&0) && gate.senders.contains_key(&(MAX_WINDOWS as u64 + 9)));
    }

    #[test]
    fn a_gate_without_a_secret_takes_plain_datagrams_and_ignores_sealed_ones() {
        let (mut gate, now) = (Gate::new(None), Instant::now());
        let hello = announcement(AnnounceKind::Hello, 7, 1);
        assert_eq!(gate.admit(&hello.encode().unwrap(), NOW_MS, now), Ok(hello.clone()));
        let sealed = hello.seal(&secret(1), 1, NOW_MS).unwrap();
        assert_eq!(gate.admit(&sealed, NOW_MS, now), Err(Refusal::SealedWithoutSecret));
        assert!(matches!(gate.admit(&[0xff; 40], NOW_MS, now), Err(Refusal::Undecodable(_))));
        let mut wrong_id = hello;
        wrong_id.topics[0].1 = TopicId(3);
        assert!(matches!(gate.admit(&wrong_id.encode().unwrap(), NOW_MS, now), Err(Refusal::Undecodable(_))));
    }
}
