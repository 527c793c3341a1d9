//! Topic credentials: a subscriber proves that it holds a topic's secret in its connect
//! private data, without revealing the secret, and the publisher's node checks the proof before
//! anything about the ring (its address, its rkey) leaves it.
//!
//! The proof ([`Proof`]) is a fresh random nonce, the subscriber's wall-clock time in
//! milliseconds and the first [`PROOF_TAG_LEN`] bytes of an HMAC-SHA256, under the topic's
//! [`Secret`] and the label [`CONNECT_LABEL`], of the rest of the connect data (topic id, start,
//! policies, subscriber node id, flags, as encoded), the nonce and the time. The publisher's
//! node refuses a connect whose proof is missing or does not verify, whose time is more than
//! [`MAX_CLOCK_SKEW`] from its own clock (so the two hosts' clocks must agree within that), or
//! whose nonce it has seen within that window ([`ReplayGuard`]: a bounded set; when it is
//! full of unexpired nonces, further connects are refused until some expire, never stored).

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::auth::Secret;
use super::topic::TopicId;

/// The label MACed before a connect proof's parts (no tag made for another purpose verifies).
pub const CONNECT_LABEL: &[u8] = b"rdma-pubsub connect v4";
/// Bytes of a proof's tag (the start of the HMAC-SHA256).
pub const PROOF_TAG_LEN: usize = 16;
/// Largest difference between a proof's time and the publisher's clock (either way).
pub const MAX_CLOCK_SKEW: Duration = Duration::from_secs(30);
/// Most nonces a node remembers at once (each for [`MAX_CLOCK_SKEW`] past its time): past
/// that many credentialed connects within the window, connects are refused until some expire.
pub const MAX_REPLAY_ENTRIES: usize = 4096;

/// A subscriber's proof that it holds the topic's secret (see the module documentation).
/// Encoded as 32 fixed bytes: nonce and time little-endian, then the tag.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Proof {
    /// Random, fresh for every connect request.
    #[serde(with = "fixed_u64")]
    pub nonce: u64,
    /// The subscriber's wall-clock time, milliseconds since the Unix epoch.
    #[serde(with = "fixed_u64")]
    pub timestamp_ms: u64,
    /// The first [`PROOF_TAG_LEN`] bytes of the HMAC-SHA256.
    pub tag: [u8; PROOF_TAG_LEN],
}

impl Proof {
    /// The proof for the connect data encoded (without proof) as `unproven`.
    pub fn new(secret: &Secret, unproven: &[u8], nonce: u64, timestamp_ms: u64) -> Proof {
        let full = secret.mac(CONNECT_LABEL, &[unproven, &nonce.to_le_bytes(), &timestamp_ms.to_le_bytes()]);
        let mut tag = [0u8; PROOF_TAG_LEN];
        tag.copy_from_slice(&full[..PROOF_TAG_LEN]);
        Proof { nonce, timestamp_ms, tag }
    }

    /// Whether the tag is the MAC of `unproven`, the nonce and the time under `secret`
    /// (constant time).
    pub fn verifies(&self, secret: &Secret, unproven: &[u8]) -> bool {
        let (nonce, time) = (self.nonce.to_le_bytes(), self.timestamp_ms.to_le_bytes());
        secret.verify(CONNECT_LABEL, &[unproven, &nonce, &time], &self.tag)
    }

    /// How far the proof's time is from `now_ms`, in milliseconds (positive: in the future).
    fn offset_ms(&self, now_ms: u64) -> i64 {
        let offset = i128::from(self.timestamp_ms) - i128::from(now_ms);
        offset.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
    }
}

/// Why a publisher refused a subscriber's credential.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CredentialError {
    /// The topic requires a credential and the connect data carries no proof.
    #[error("this topic requires a credential: the connect request carries no proof")]
    Missing,
    /// The proof does not verify: another secret, or connect data altered after it was made.
    #[error("the credential proof does not verify (wrong secret or altered connect data)")]
    Invalid,
    /// The proof's time is too far from the publisher's clock.
    #[error("the proof's time is {offset_ms} ms off this node's clock (at most {max_ms} ms allowed)")]
    ClockSkew {
        /// The proof's time minus the publisher's clock, in milliseconds.
        offset_ms: i64,
        /// The allowance ([`MAX_CLOCK_SKEW`]).
        max_ms: u64,
    },
    /// The proof's nonce was seen within the window: a replayed connect request.
    #[error("the proof's nonce was used before: a replayed connect request")]
    Replayed,
    /// The node remembers as many unexpired nonces as it may: refused until some expire.
    #[error("{capacity} credentialed connects within {window_s} s already: try again later")]
    ReplayWindowFull {
        /// The bound ([`MAX_REPLAY_ENTRIES`]).
        capacity: usize,
        /// The window, in seconds.
        window_s: u64,
    },
}

/// The nonces of the proofs a publisher accepted within [`MAX_CLOCK_SKEW`], so that none is
/// accepted twice. One guard serves one publisher (one credential), so the holder of another
/// topic's credential cannot fill it. A proof is checked first ([`check`](Self::check)); its
/// nonce is remembered only when the caller accepts the connect ([`remember`](Self::remember)),
/// so refused connects store nothing. Holds at most its capacity in all and
/// [`MAX_REPLAY_ENTRIES_PER_SOURCE`] per source network (IPv4 /24, IPv6 /64): a nonce is
/// forgotten once its proof's time is more than the skew allowance in the past (a replay of it
/// would be refused as stale), and when the set (or the source's share) is full of unexpired
/// nonces a new one is refused, not stored.
#[derive(Debug)]
pub struct ReplayGuard {
    /// Nonce (with its topic) → the time of its proof and the network it came from.
    seen: HashMap<(TopicId, u64), (u64, IpAddr)>,
    /// Nonces remembered per source network.
    per_source: HashMap<IpAddr, usize>,
    capacity: usize,
    per_source_capacity: usize,
}

/// A proof that passed [`ReplayGuard::check`]: give it to [`ReplayGuard::remember`] once the
/// connect it came with is accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use = "an admitted nonce is replayable until it is remembered"]
pub struct Admitted {
    key: (TopicId, u64),
    time_ms: u64,
    source: IpAddr,
}

/// Most nonces a guard remembers from one source network (IPv4 /24, IPv6 /64).
pub const MAX_REPLAY_ENTRIES_PER_SOURCE: usize = 256;

/// The network of `addr` that per-source bounds count: its /24 (IPv4) or /64 (IPv6).
pub fn source_network(addr: IpAddr) -> IpAddr {
    match addr {
        IpAddr::V4(v4) => IpAddr::V4(Ipv4Addr::from(u32::from(v4) & 0xffff_ff00)),
        IpAddr::V6(v6) => IpAddr::V6(Ipv6Addr::from(u128::from(v6) & !((1u128 << 64) - 1))),
    }
}

impl Default for ReplayGuard {
    fn default() -> Self {
        ReplayGuard::with_capacity(MAX_REPLAY_ENTRIES)
    }
}

impl ReplayGuard {
    /// A guard remembering at most `capacity` nonces (and at most
    /// [`MAX_REPLAY_ENTRIES_PER_SOURCE`], or `capacity` if smaller, per source network).
    pub fn with_capacity(capacity: usize) -> ReplayGuard {
        ReplayGuard {
            seen: HashMap::new(),
            per_source: HashMap::new(),
            capacity,
            per_source_capacity: MAX_REPLAY_ENTRIES_PER_SOURCE.min(capacity),
        }
    }

    /// Nonces remembered now.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.seen.len()
    }

    /// Checks `proof` (for the connect data encoded without it as `unproven`), sent from
    /// `source`, against `secret`, the clock and the nonces remembered; stores nothing.
    ///
    /// # Errors
    /// [`CredentialError::Invalid`] for a proof that does not verify,
    /// [`CredentialError::ClockSkew`] for one too far from `now_ms`,
    /// [`CredentialError::Replayed`] for a nonce remembered and
    /// [`CredentialError::ReplayWindowFull`] when the guard, or the source network's share of
    /// it, holds its capacity of unexpired nonces.
    pub fn check(
        &mut self,
        secret: &Secret,
        topic: TopicId,
        unproven: &[u8],
        proof: &Proof,
        now_ms: u64,
        source: IpAddr,
    ) -> Result<Admitted, CredentialError> {
        if !proof.verifies(secret, unproven) {
            return Err(CredentialError::Invalid);
        }
        let max_ms = MAX_CLOCK_SKEW.as_millis() as u64;
        let offset_ms = proof.offset_ms(now_ms);
        if offset_ms.unsigned_abs() > max_ms {
            return Err(CredentialError::ClockSkew { offset_ms, max_ms });
        }
        let key = (topic, proof.nonce);
        if self.seen.contains_key(&key) {
            return Err(CredentialError::Replayed);
        }
        let source = source_network(source);
        let from_source = |guard: &ReplayGuard| guard.per_source.get(&source).copied().unwrap_or(0);
        if self.seen.len() >= self.capacity || from_source(self) >= self.per_source_capacity {
            self.forget_expired(now_ms, max_ms);
            let full = if self.seen.len() >= self.capacity {
                Some(self.capacity)
            } else {
                (from_source(self) >= self.per_source_capacity).then_some(self.per_source_capacity)
            };
            if let Some(capacity) = full {
                return Err(CredentialError::ReplayWindowFull { capacity, window_s: MAX_CLOCK_SKEW.as_secs() });
            }
        }
        Ok(Admitted { key, time_ms: proof.timestamp_ms, source })
    }

    /// Remembers an admitted nonce: its connect was accepted. A nonce already remembered, or
    /// one past the bounds (a `check` whose room another connect took since), is not stored
    /// twice nor over the bound.
    pub fn remember(&mut self, admitted: Admitted) {
        let from_source = self.per_source.get(&admitted.source).copied().unwrap_or(0);
        if self.seen.contains_key(&admitted.key)
            || self.seen.len() >= self.capacity
            || from_source >= self.per_source_capacity
        {
            return;
        }
        self.seen.insert(admitted.key, (admitted.time_ms, admitted.source));
        *self.per_source.entry(admitted.source).or_default() += 1;
    }

    /// Forgets the nonces whose proofs are too old to be accepted again anyway.
    fn forget_expired(&mut self, now_ms: u64, max_ms: u64) {
        let per_source = &mut self.per_source;
        self.seen.retain(|_, &mut (time, source)| {
            let keep = time.saturating_add(max_ms) >= now_ms;
            if !keep {
                if let Some(n) = per_source.get_mut(&source) {
                    *n -= 1;
                    if *n == 0 {
                        per_source.remove(&source);
                    }
                }
            }
            keep
        });
    }
}

/// The wall clock in milliseconds since the Unix epoch (what proofs carry; 0 before 1970).
pub fn wall_clock_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// Serialises a `u64` as 8 little-endian bytes (bincode's varint would take 9 for most nonces
/// and times, and the connect data has 56 bytes in all).
pub(super) mod fixed_u64 {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    /// Writes `v` as 8 little-endian bytes.
    pub fn serialize<S: Serializer>(v: &u64, s: S) -> Result<S::Ok, S::Error> {
        v.to_le_bytes().serialize(s)
    }

    /// Reads 8 little-endian bytes.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
        <[u8; 8]>::deserialize(d).map(u64::from_le_bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::ConnectAuth;

    /// Where the tests' connects come from.
    const SRC: IpAddr = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 7));

    /// Checks `data`'s proof from [`SRC`] and, when it passes, remembers its nonce (the
    /// publisher accepted the connect).
    fn accept(data: &ConnectData, secret: &Secret, guard: &mut ReplayGuard, now: u64) -> Result<(), CredentialError> {
        let admitted = data.check_credential(secret, guard, now, SRC)?;
        guard.remember(admitted);
        Ok(())
    }
    use crate::protocol::{ConnectData, ConnectFlags, PolicySet, StartAt};

    const NOW: u64 = 1_767_225_600_000;
    const SKEW_MS: u64 = MAX_CLOCK_SKEW.as_millis() as u64;

    fn secret(fill: u8) -> Secret {
        Secret::new(vec![fill; 32]).unwrap()
    }

    fn request(topic: &str) -> ConnectData {
        ConnectData {
            topic: TopicId::of(topic),
            start: StartAt::Latest,
            accepts: PolicySet::ALL,
            node_id: 0x1234_5678_9abc_def0,
            flags: ConnectFlags::WANTS_DOORBELLS,
            auth: ConnectAuth::None,
        }
    }

    fn proven(topic: &str, nonce: u64, time: u64) -> ConnectData {
        request(topic).with_proof(&secret(1), nonce, time).unwrap()
    }

    /// Checks `data` against secret 1 at `now` with a fresh guard.
    fn check(data: &ConnectData, now: u64) -> Result<(), CredentialError> {
        accept(data, &secret(1), &mut ReplayGuard::default(), now)
    }

    #[test]
    fn a_proof_travels_in_the_connect_data_and_verifies_only_with_its_secret_and_request() {
        let data = proven("prices", 7, NOW);
        let decoded = ConnectData::decode(&data.encode().unwrap()).unwrap();
        assert_eq!(decoded, data);
        assert_eq!(check(&decoded, NOW), Ok(()));
        let mut guard = ReplayGuard::default();
        assert_eq!(accept(&decoded, &secret(2), &mut guard, NOW), Err(CredentialError::Invalid));
        assert_eq!(guard.len(), 0, "a refused proof leaves nothing behind");
        assert_eq!(check(&request("prices"), NOW), Err(CredentialError::Missing));
        // Any field changed after the proof was made: another topic, subscriber, start, flags,
        // nonce, time or tag.
        let proof = *data.proof().unwrap();
        let altered = [
            ConnectData { topic: TopicId::of("orders"), ..data },
            ConnectData { node_id: 1, ..data },
            ConnectData { start: StartAt::Earliest, ..data },
            ConnectData { flags: ConnectFlags::NONE, ..data },
            ConnectData { auth: ConnectAuth::Proof(Proof { nonce: 8, ..proof }), ..data },
            ConnectData { auth: ConnectAuth::Proof(Proof { timestamp_ms: NOW + 1, ..proof }), ..data },
            ConnectData { auth: ConnectAuth::Proof(Proof { tag: [0; PROOF_TAG_LEN], ..proof }), ..data },
        ];
        for a in altered {
            assert_eq!(check(&a, NOW), Err(CredentialError::Invalid), "{a:?}");
        }
        // The secret itself never travels: its bytes are nowhere in the encoding.
        let bytes = data.encode().unwrap();
        assert!(!bytes.windows(8).any(|w| w == [1u8; 8]), "{bytes:?}");
    }

    #[test]
    fn a_proof_outside_the_clock_skew_is_refused_either_way() {
        for (time, ok) in
            [(NOW - SKEW_MS, true), (NOW + SKEW_MS, true), (NOW - SKEW_MS - 1, false), (NOW + SKEW_MS + 1, false)]
        {
            let got = check(&proven("prices", 1, time), NOW);
            let offset_ms = time as i64 - NOW as i64;
            let expected = if ok { Ok(()) } else { Err(CredentialError::ClockSkew { offset_ms, max_ms: SKEW_MS }) };
            assert_eq!(got, expected, "time {offset_ms} ms off");
        }
        // Times at the ends of the range do not overflow.
        for time in [0, u64::MAX] {
            assert!(matches!(check(&proven("prices", 1, time), NOW), Err(CredentialError::ClockSkew { .. })));
        }
    }

    #[test]
    fn a_nonce_is_accepted_once_per_topic_within_the_window() {
        let mut guard = ReplayGuard::default();
        let data = proven("prices", 42, NOW);
        assert_eq!(accept(&data, &secret(1), &mut guard, NOW), Ok(()));
        assert_eq!(accept(&data, &secret(1), &mut guard, NOW + 1), Err(CredentialError::Replayed));
        assert_eq!(accept(&data, &secret(1), &mut guard, NOW + SKEW_MS), Err(CredentialError::Replayed));
        // Once the proof is too old for the window, it is refused as such.
        let late = NOW + SKEW_MS + 1;
        assert!(matches!(accept(&data, &secret(1), &mut guard, late), Err(CredentialError::ClockSkew { .. })));
        // The same nonce for another topic is another proof.
        assert_eq!(accept(&proven("orders", 42, NOW), &secret(1), &mut guard, NOW), Ok(()));
        assert_eq!(guard.len(), 2);
    }

    #[test]
    fn the_replay_set_is_bounded_forgets_expired_nonces_and_refuses_when_full() {
        let capacity = 8;
        let mut guard = ReplayGuard::with_capacity(capacity);
        let admit = |guard: &mut ReplayGuard, nonce: u64, time: u64, now: u64| {
            accept(&proven("prices", nonce, time), &secret(1), guard, now)
        };
        for nonce in 0..capacity as u64 {
            assert_eq!(admit(&mut guard, nonce, NOW, NOW), Ok(()));
        }
        // Full of nonces that could still be replayed: a new one is refused, not stored.
        let full = Err(CredentialError::ReplayWindowFull { capacity, window_s: MAX_CLOCK_SKEW.as_secs() });
        assert_eq!(admit(&mut guard, 100, NOW, NOW + SKEW_MS), full);
        assert_eq!(guard.len(), capacity);
        // Replays are still recognised as such while full.
        assert_eq!(admit(&mut guard, 3, NOW, NOW + SKEW_MS), Err(CredentialError::Replayed));
        // Once their proofs are too old to be accepted, the nonces are forgotten to make room.
        let later = NOW + SKEW_MS + 1;
        assert_eq!(admit(&mut guard, 100, later, later), Ok(()));
        assert_eq!(guard.len(), 1);
        assert!(matches!(admit(&mut guard, 3, NOW, later), Err(CredentialError::ClockSkew { .. })));
        // A flood of proofs keeps it at its bound.
        for nonce in 1000..1000 + 4 * capacity as u64 {
            let _ = admit(&mut guard, nonce, later, later);
            assert!(guard.len() <= capacity);
        }
        assert_eq!(guard.len(), capacity);
    }

    #[test]
    fn a_nonce_is_stored_only_for_an_accepted_connect_and_each_source_network_has_its_share() {
        let mut guard = ReplayGuard::with_capacity(1024);
        // Checked but not accepted (refused for another reason): nothing stored, and the same
        // proof passes again.
        let data = proven("prices", 7, NOW);
        assert!(data.check_credential(&secret(1), &mut guard, NOW, SRC).is_ok());
        assert_eq!(guard.len(), 0);
        assert_eq!(accept(&data, &secret(1), &mut guard, NOW), Ok(()));
        assert_eq!(accept(&data, &secret(1), &mut guard, NOW), Err(CredentialError::Replayed));
        // One /24 fills its share; another network is still admitted.
        for nonce in 100..100 + MAX_REPLAY_ENTRIES_PER_SOURCE as u64 {
            let _ = accept(&proven("prices", nonce, NOW), &secret(1), &mut guard, NOW);
        }
        assert_eq!(guard.len(), MAX_REPLAY_ENTRIES_PER_SOURCE);
        let neighbour = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 200));
        let refused = proven("prices", 5000, NOW).check_credential(&secret(1), &mut guard, NOW, neighbour);
        let full = CredentialError::ReplayWindowFull {
            capacity: MAX_REPLAY_ENTRIES_PER_SOURCE,
            window_s: MAX_CLOCK_SKEW.as_secs(),
        };
        assert_eq!(refused, Err(full), "the same /24 shares one bound");
        let elsewhere = IpAddr::V4(Ipv4Addr::new(198, 51, 100, 1));
        assert!(proven("prices", 5000, NOW).check_credential(&secret(1), &mut guard, NOW, elsewhere).is_ok());
        assert_eq!(source_network("2001:db8::1:2:3:4".parse().unwrap()), "2001:db8::".parse::<IpAddr>().unwrap());
    }
}
