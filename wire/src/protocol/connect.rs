//! What travels in connection-manager private data: the subscriber's request
//! ([`ConnectData`], at most 56 bytes), the publisher's acceptance with everything needed to
//! READ its ring ([`AcceptData`], at most 196 bytes), or its refusal ([`RejectData`], at most
//! 148 bytes).
#![allow(clippy::missing_errors_doc, reason = "every decode error is a ProtocolError naming the message")]

use std::net::IpAddr;

use serde::{Deserialize, Serialize};

use super::auth::Secret;
use super::codec::{self, kind};
use super::credential::{fixed_u64, Admitted, CredentialError, Proof, ReplayGuard, PROOF_TAG_LEN};
use super::error::ProtocolError;
use super::topic::TopicId;
use crate::ring::{Checksum, ReaderConfig, StartPoint};
use rdma_fabric::{RemoteAddr, MAX_ACCEPT_PRIVATE_DATA, MAX_CONNECT_PRIVATE_DATA, MAX_REJECT_PRIVATE_DATA};

/// Where a new subscriber starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub enum StartAt {
    /// Only messages published after the subscription.
    #[default]
    Latest,
    /// Every message the ring still retains.
    Earliest,
}

/// Which slow-subscriber policy a publisher runs: the kind of its policy (rdma-pubsub's
/// `Policy`), without the policy's settings. Subscribers learn it in the accept.
///
/// On the wire (bincode) it is the variant's index: Block 0, DropSlow 1, Overwrite 2.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum PolicyKind {
    /// The publisher waits for the slowest subscriber (no loss).
    Block,
    /// The publisher drops a subscriber that is too slow and tells it why.
    DropSlow,
    /// The publisher never waits; slow subscribers lose (and count) the oldest messages.
    Overwrite,
}

impl PolicyKind {
    fn bit(self) -> u8 {
        match self {
            PolicyKind::Block => 1,
            PolicyKind::DropSlow => 2,
            PolicyKind::Overwrite => 4,
        }
    }
}

/// A set of [`PolicyKind`] values (the policies a subscriber accepts).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(try_from = "u8", into = "u8")]
pub struct PolicySet(u8);

impl PolicySet {
    /// No policy.
    pub const NONE: PolicySet = PolicySet(0);
    /// Every policy.
    pub const ALL: PolicySet = PolicySet(7);

    /// The set holding `policies`.
    pub fn of(policies: &[PolicyKind]) -> PolicySet {
        PolicySet(policies.iter().fold(0, |s, p| s | p.bit()))
    }
    /// Whether `policy` is in the set.
    pub fn contains(self, policy: PolicyKind) -> bool {
        self.0 & policy.bit() != 0
    }
    /// The set with `policy` added.
    pub fn with(self, policy: PolicyKind) -> PolicySet {
        PolicySet(self.0 | policy.bit())
    }
}

impl TryFrom<u8> for PolicySet {
    type Error = String;
    fn try_from(bits: u8) -> Result<Self, String> {
        if bits & !PolicySet::ALL.0 != 0 {
            return Err(format!("unknown policy bits {bits:#04x}"));
        }
        Ok(PolicySet(bits))
    }
}

impl From<PolicySet> for u8 {
    fn from(s: PolicySet) -> u8 {
        s.0
    }
}

/// Options of a subscription request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(try_from = "u8", into = "u8")]
pub struct ConnectFlags(u8);

impl ConnectFlags {
    /// No option.
    pub const NONE: ConnectFlags = ConnectFlags(0);
    /// The subscriber wants doorbell SENDs when new data arrives (instead of only polling).
    pub const WANTS_DOORBELLS: ConnectFlags = ConnectFlags(1);
    /// The subscriber asks for the node's topic listing, not a topic (its `topic` is ignored):
    /// the node answers with a [`ListingAccept`](super::ListingAccept). A node of an older
    /// build refuses the unknown flag as [`RejectCode::Malformed`].
    pub const LISTING: ConnectFlags = ConnectFlags(2);
    /// The subscriber's receives take [`DOORBELL_MSG_MAX`](super::DOORBELL_MSG_MAX) bytes: a
    /// doorbell may bring the new records with it
    /// ([`Control::DoorbellRecords`](super::Control::DoorbellRecords)), sparing a parked
    /// subscriber a READ. A node of an older build refuses the unknown flag as
    /// [`RejectCode::Malformed`].
    pub const DOORBELL_RECORDS: ConnectFlags = ConnectFlags(4);
    const KNOWN: u8 = 7;

    /// Whether every flag of `other` is set.
    pub fn contains(self, other: ConnectFlags) -> bool {
        self.0 & other.0 == other.0
    }
}

impl std::ops::BitOr for ConnectFlags {
    type Output = ConnectFlags;
    fn bitor(self, rhs: ConnectFlags) -> ConnectFlags {
        ConnectFlags(self.0 | rhs.0)
    }
}

impl TryFrom<u8> for ConnectFlags {
    type Error = String;
    fn try_from(bits: u8) -> Result<Self, String> {
        if bits & !ConnectFlags::KNOWN != 0 {
            return Err(format!("unknown connect flags {bits:#04x}"));
        }
        Ok(ConnectFlags(bits))
    }
}

impl From<ConnectFlags> for u8 {
    fn from(f: ConnectFlags) -> u8 {
        f.0
    }
}

/// A subscriber's connect request (connect private data).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConnectData {
    /// The topic subscribed to.
    pub topic: TopicId,
    /// Where to start.
    pub start: StartAt,
    /// The policies the subscriber accepts.
    pub accepts: PolicySet,
    /// The subscriber's node id.
    pub node_id: u64,
    /// Options.
    pub flags: ConnectFlags,
    /// What the subscriber proves, or asks the publisher to prove: the proof that it holds the
    /// topic's credential ([`with_proof`](Self::with_proof)), whose nonce is also its
    /// challenge, or a challenge alone ([`with_challenge`](Self::with_challenge)). A publisher
    /// without a credential ignores the proof; one with a domain secret answers a challenge
    /// with an [`AcceptTags::node`] tag.
    pub auth: ConnectAuth,
}

/// The authentication part of a [`ConnectData`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ConnectAuth {
    /// Nothing: the subscriber checks nothing of the publisher's answer.
    None,
    /// A proof of the topic's credential; its nonce is the challenge the accept answers.
    Proof(Proof),
    /// A fresh random nonce that the accept's tags must cover (a subscriber with a domain secret
    /// and no credential).
    Challenge(#[serde(with = "fixed_u64")] u64),
}

impl ConnectData {
    const WHAT: &'static str = "connect private data";

    /// Encodes (at most [`MAX_CONNECT_PRIVATE_DATA`] bytes). The layout, after the frame's
    /// version and kind bytes (bincode 2 standard: varints are 1 byte below 251, else a marker
    /// byte and the value's little-endian bytes):
    ///
    /// | bytes | field |
    /// |---|---|
    /// | 1 | version ([`PROTOCOL_VERSION`](super::PROTOCOL_VERSION)) |
    /// | 1 | kind (1: connect) |
    /// | 1–9 | topic id (varint) |
    /// | 1 | start (0 latest, 1 earliest) |
    /// | 1 | policies accepted (bits: 1 block, 2 drop-slow, 4 overwrite) |
    /// | 1–9 | subscriber node id (varint) |
    /// | 1 | flags (1: wants doorbells, 2: asks for the topic listing) |
    /// | 1 | authentication: 0 none, 1 proof, 2 challenge; for a proof: |
    /// | 8 | nonce (little-endian), also the challenge |
    /// | 8 | time, ms since the Unix epoch (little-endian) |
    /// | 16 | tag: the first 16 bytes of the HMAC-SHA256 ([`Proof`]) |
    /// | | for a challenge: |
    /// | 8 | nonce (little-endian) |
    ///
    /// At most 2 + 9 + 1 + 1 + 9 + 1 + 1 + 32 = 56 bytes with a proof, 32 with a challenge, 24
    /// without either.
    pub fn encode(&self) -> Result<Vec<u8>, ProtocolError> {
        codec::encode(Self::WHAT, kind::CONNECT, self, MAX_CONNECT_PRIVATE_DATA)
    }

    /// This request with a proof that the subscriber holds `secret`, the topic's credential:
    /// `nonce` must be fresh (random) and `timestamp_ms` the wall clock (ms since the Unix
    /// epoch). Any change to the request afterwards makes the proof fail.
    pub fn with_proof(self, secret: &Secret, nonce: u64, timestamp_ms: u64) -> Result<ConnectData, ProtocolError> {
        let unproven = self.unproven()?;
        Ok(ConnectData { auth: ConnectAuth::Proof(Proof::new(secret, &unproven, nonce, timestamp_ms)), ..self })
    }

    /// This request asking the publisher to answer the fresh random `nonce` (see
    /// [`AcceptData::with_tags`]); a proof, which carries its own nonce, replaces it.
    pub fn with_challenge(self, nonce: u64) -> ConnectData {
        ConnectData { auth: ConnectAuth::Challenge(nonce), ..self }
    }

    /// The proof of the topic's credential, if the request carries one.
    pub fn proof(&self) -> Option<&Proof> {
        match &self.auth {
            ConnectAuth::Proof(p) => Some(p),
            _ => None,
        }
    }

    /// The nonce the publisher's accept tags must cover: the proof's, or the challenge's.
    pub fn challenge(&self) -> Option<u64> {
        match self.auth {
            ConnectAuth::None => None,
            ConnectAuth::Proof(p) => Some(p.nonce),
            ConnectAuth::Challenge(nonce) => Some(nonce),
        }
    }

    /// Checks that the request, sent from `source`, proves the credential `secret`, with a
    /// time within the skew allowance of `now_ms` and a nonce `replay` has not seen; the
    /// caller remembers the nonce ([`ReplayGuard::remember`]) once it accepts the connect.
    ///
    /// # Errors
    /// [`CredentialError::Missing`] without a proof; otherwise as [`ReplayGuard::check`].
    pub fn check_credential(
        &self,
        secret: &Secret,
        replay: &mut ReplayGuard,
        now_ms: u64,
        source: IpAddr,
    ) -> Result<Admitted, CredentialError> {
        let proof = *self.proof().ok_or(CredentialError::Missing)?;
        let unproven = self.unproven().map_err(|_| CredentialError::Invalid)?;
        replay.check(secret, self.topic, &unproven, &proof, now_ms, source)
    }

    /// The encoding of this request without its proof: the bytes a proof MACs.
    fn unproven(&self) -> Result<Vec<u8>, ProtocolError> {
        ConnectData { auth: ConnectAuth::None, ..*self }.encode()
    }

    /// Decodes, accepting trailing zero padding.
    pub fn decode(bytes: &[u8]) -> Result<ConnectData, ProtocolError> {
        codec::decode(Self::WHAT, kind::CONNECT, bytes, MAX_CONNECT_PRIVATE_DATA)
    }
}

/// Serialises a [`RemoteAddr`] as `(addr, rkey)`.
pub(super) mod remote_addr {
    use super::RemoteAddr;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub fn serialize<S: Serializer>(r: &RemoteAddr, s: S) -> Result<S::Ok, S::Error> {
        (r.addr, r.rkey).serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<RemoteAddr, D::Error> {
        let (addr, rkey) = <(u64, u32)>::deserialize(d)?;
        Ok(RemoteAddr { addr, rkey })
    }
}

/// Longest type name a [`MessageTypeTag`] carries, in bytes.
pub const MAX_TYPE_NAME: usize = 48;

/// What a typed publisher's messages are, announced in its accept: a 64-bit fingerprint of
/// the type (of its serde shape, or a schema id its application gave) and its name (for the
/// subscriber's refusal to say which types differ).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct MessageTypeTag {
    /// The fingerprint: equal for the same type, compared by the subscriber.
    pub fingerprint: u64,
    /// The type's name, at most [`MAX_TYPE_NAME`] bytes.
    pub name: String,
}

impl MessageTypeTag {
    /// A tag whose name is truncated (at a character boundary) to fit.
    pub fn new(fingerprint: u64, name: &str) -> MessageTypeTag {
        let mut end = name.len().min(MAX_TYPE_NAME);
        while !name.is_char_boundary(end) {
            end -= 1;
        }
        MessageTypeTag { fingerprint, name: name[..end].to_string() }
    }
}

/// A publisher's acceptance (accept private data): everything the subscriber needs to READ
/// the ring.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AcceptData {
    /// The topic (echoed).
    pub topic: TopicId,
    /// Address and rkey of the ring's memory region (control block first).
    #[serde(with = "remote_addr")]
    pub ring: RemoteAddr,
    /// Length of the region (control block + data).
    pub region_len: u64,
    /// Data-area capacity.
    pub capacity: u64,
    /// Publisher epoch (changes when the publisher restarts).
    pub epoch: u64,
    /// The publisher's node id.
    pub publisher_id: u64,
    /// The policy this subscription runs under.
    pub policy: PolicyKind,
    /// Largest payload of one ring record.
    pub max_record_payload: u32,
    /// Absolute ring position the subscriber starts reading at.
    pub start_position: u64,
    /// Sequence the record at `start_position` carries.
    pub start_seq: u64,
    /// First message sequence the subscriber is owed (`start_seq`, or `start_seq + 1` when
    /// the start is inside a message).
    pub first_seq: u64,
    /// The function the ring's record checksums are computed with.
    pub checksum: Checksum,
    /// What the messages are, for a typed publisher (`None`: raw bytes).
    pub message_type: Option<MessageTypeTag>,
    /// The publisher's answers to the subscriber's challenge ([`with_tags`](Self::with_tags)).
    pub tags: AcceptTags,
}

/// The tags of an [`AcceptData`]: each the first 16 bytes of an HMAC-SHA256, under
/// [`ACCEPT_LABEL`], of the accept data without its tags and of the subscriber's challenge. A
/// tag under the domain secret shows the accepting node is of the domain (not someone who took
/// over an announced address); one under the topic's credential shows the publisher holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct AcceptTags {
    /// Under the publisher node's domain secret.
    pub node: Option<[u8; PROOF_TAG_LEN]>,
    /// Under the topic's credential.
    pub topic: Option<[u8; PROOF_TAG_LEN]>,
}

/// The label of accept tags (MACs are domain-separated by label).
pub const ACCEPT_LABEL: &[u8] = b"rdma-pubsub accept v5";

/// Why a subscriber does not believe a publisher's accept ([`AcceptData::check_tags`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum AcceptAuthError {
    /// The subscriber has a domain secret and the accept carries no tag under it.
    #[error("the accepting node did not prove it holds the domain secret (no tag)")]
    NodeTagMissing,
    /// The tag under the domain secret does not verify.
    #[error("the accepting node's domain tag does not verify: it does not hold the domain secret, or replayed an old accept")]
    NodeTagInvalid,
    /// The subscription has a credential and the accept carries no tag under it.
    #[error("the publisher did not prove it holds the topic's credential (no tag)")]
    TopicTagMissing,
    /// The tag under the topic's credential does not verify.
    #[error("the publisher's credential tag does not verify: it does not hold the topic's credential, or replayed an old accept")]
    TopicTagInvalid,
    /// The accept is from another publisher than the one discovery announced at that address.
    #[error("the accept is from publisher {got:016x}, not {expected:016x} that discovery announced at this address")]
    NotTheAnnouncedPublisher {
        /// The publisher id discovery announced.
        expected: u64,
        /// The publisher id the accept names.
        got: u64,
    },
}

impl AcceptData {
    const WHAT: &'static str = "accept private data";

    /// Encodes (at most [`MAX_ACCEPT_PRIVATE_DATA`] bytes). The layout, in the varints of
    /// [`ConnectData::encode`] (an enum is its variant's index, one byte):
    ///
    /// | bytes | field |
    /// |---|---|
    /// | 1 | version ([`PROTOCOL_VERSION`](super::PROTOCOL_VERSION)) |
    /// | 1 | kind (2: accept) |
    /// | 1–9 | topic id |
    /// | 1–9, 1–5 | ring address, rkey |
    /// | 1–9 | region length |
    /// | 1–9 | data-area capacity |
    /// | 1–9 | publisher epoch |
    /// | 1–9 | publisher id |
    /// | 1 | policy (0 block, 1 drop-slow, 2 overwrite) |
    /// | 1–5 | largest record payload |
    /// | 1–9 | start position |
    /// | 1–9 | sequence at the start position |
    /// | 1–9 | first sequence owed |
    /// | 1 | checksum (0 CRC-32C, 1 XXH64 low 32 bits, 2 XXH3 low 32 bits up to 256-byte records and CRC-32C above) |
    /// | 1 | message type present (0 raw bytes, 1 typed) |
    /// | 1–9 | (typed) type fingerprint |
    /// | 1 + n | (typed) type name: length (at most [`MAX_TYPE_NAME`]), UTF-8 |
    /// | 1 (+16) | domain tag present (0 or 1), then the tag ([`AcceptTags`]) |
    /// | 1 (+16) | credential tag present (0 or 1), then the tag |
    ///
    /// At most 2 + 9 + 14 + 4 × 9 + 1 + 5 + 3 × 9 + 1 + 1 + 9 + 1 + 48 + 2 × 17 = 188 bytes.
    pub fn encode(&self) -> Result<Vec<u8>, ProtocolError> {
        let mut fitted = self.clone();
        fitted.message_type = self.message_type.as_ref().map(|t| MessageTypeTag::new(t.fingerprint, &t.name));
        codec::encode(Self::WHAT, kind::ACCEPT, &fitted, MAX_ACCEPT_PRIVATE_DATA)
    }

    /// Decodes, accepting trailing zero padding.
    pub fn decode(bytes: &[u8]) -> Result<AcceptData, ProtocolError> {
        let a: AcceptData = codec::decode(Self::WHAT, kind::ACCEPT, bytes, MAX_ACCEPT_PRIVATE_DATA)?;
        if let Some(t) = a.message_type.as_ref().filter(|t| t.name.len() > MAX_TYPE_NAME) {
            return Err(ProtocolError::Malformed {
                what: Self::WHAT,
                detail: format!("{}-byte type name", t.name.len()),
            });
        }
        Ok(a)
    }

    /// This acceptance with its tags answering `challenge` (the subscriber's
    /// [`ConnectData::challenge`]): one under the publisher node's domain secret and one under
    /// the topic's credential, for those it has. Without a challenge it carries no tag.
    pub fn with_tags(self, challenge: Option<u64>, domain: Option<&Secret>, credential: Option<&Secret>) -> AcceptData {
        let mut accept = AcceptData { tags: AcceptTags::default(), ..self };
        let Some(challenge) = challenge else { return accept };
        let Ok(bytes) = accept.encode() else { return accept };
        let tag = |secret: &Secret| {
            let full = secret.mac(ACCEPT_LABEL, &[&bytes, &challenge.to_le_bytes()]);
            let mut tag = [0u8; PROOF_TAG_LEN];
            tag.copy_from_slice(&full[..PROOF_TAG_LEN]);
            tag
        };
        accept.tags = AcceptTags { node: domain.map(tag), topic: credential.map(tag) };
        accept
    }

    /// Checks the tags against the subscriber's `challenge` (`None`: it sent none, so no tag
    /// can answer it): under `domain` (the subscriber node's domain secret) and `credential`
    /// (the subscription's), for those it has, and that the accept is from `expected_publisher`
    /// when discovery announced one at that address.
    ///
    /// # Errors
    /// [`AcceptAuthError`]: which tag is missing or does not verify, or which publisher answered.
    pub fn check_tags(
        &self,
        challenge: Option<u64>,
        domain: Option<&Secret>,
        credential: Option<&Secret>,
        expected_publisher: Option<u64>,
    ) -> Result<(), AcceptAuthError> {
        if domain.is_some() || credential.is_some() {
            let untagged = AcceptData { tags: AcceptTags::default(), ..self.clone() };
            let bytes = untagged.encode().map_err(|_| AcceptAuthError::NodeTagInvalid)?;
            let verifies = |secret: &Secret, tag: &[u8; PROOF_TAG_LEN]| {
                challenge.is_some_and(|c| secret.verify(ACCEPT_LABEL, &[&bytes, &c.to_le_bytes()], tag))
            };
            if let Some(secret) = domain {
                let tag = self.tags.node.ok_or(AcceptAuthError::NodeTagMissing)?;
                if !verifies(secret, &tag) {
                    return Err(AcceptAuthError::NodeTagInvalid);
                }
            }
            if let Some(secret) = credential {
                let tag = self.tags.topic.ok_or(AcceptAuthError::TopicTagMissing)?;
                if !verifies(secret, &tag) {
                    return Err(AcceptAuthError::TopicTagInvalid);
                }
            }
        }
        match expected_publisher {
            Some(expected) if expected != self.publisher_id => {
                Err(AcceptAuthError::NotTheAnnouncedPublisher { expected, got: self.publisher_id })
            }
            _ => Ok(()),
        }
    }

    /// The start point carried.
    pub fn start_point(&self) -> StartPoint {
        StartPoint { position: self.start_position, seq: self.start_seq, first_seq: self.first_seq }
    }

    /// The ring reader configuration for this subscription (validated by `RingReader::new`).
    pub fn reader_config(&self, max_message_len: u64) -> ReaderConfig {
        ReaderConfig {
            capacity: usize::try_from(self.capacity).unwrap_or(usize::MAX),
            max_record_payload: self.max_record_payload as usize,
            epoch: self.epoch,
            start: self.start_point(),
            max_message_len,
            checksum: self.checksum,
        }
    }
}

/// Why a publisher refused a subscription.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum RejectCode {
    /// No publisher of that topic on this node.
    UnknownTopic,
    /// The connect data has another protocol version.
    VersionMismatch,
    /// The connect data does not decode.
    Malformed,
    /// The topic's policy is not one the subscriber accepts.
    PolicyNotAccepted,
    /// The publisher has as many subscribers as it serves.
    TooManySubscribers,
    /// The publisher is closing.
    ShuttingDown,
    /// The topic requires a credential and the subscriber did not prove it: no proof, a wrong
    /// one, a stale time or a replayed nonce (the detail says which).
    Unauthorized,
}

/// Longest detail string a [`RejectData`] carries, in bytes.
pub const MAX_REJECT_DETAIL: usize = 140;

/// A publisher's refusal (reject private data).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RejectData {
    /// Why.
    pub reason: RejectCode,
    /// A short human-readable detail (at most [`MAX_REJECT_DETAIL`] bytes).
    pub detail: String,
}

impl RejectData {
    const WHAT: &'static str = "reject private data";

    /// A refusal whose detail is truncated (at a character boundary) to fit.
    pub fn new(reason: RejectCode, detail: &str) -> RejectData {
        let mut end = detail.len().min(MAX_REJECT_DETAIL);
        while !detail.is_char_boundary(end) {
            end -= 1;
        }
        RejectData { reason, detail: detail[..end].to_string() }
    }

    /// Encodes (at most [`MAX_REJECT_PRIVATE_DATA`] bytes; the detail is truncated to fit).
    /// The layout:
    ///
    /// | bytes | field |
    /// |---|---|
    /// | 1 | version ([`PROTOCOL_VERSION`](super::PROTOCOL_VERSION)) |
    /// | 1 | kind (3: reject) |
    /// | 1 | reason ([`RejectCode`] variant index, in declaration order from 0) |
    /// | 1 | detail length (at most [`MAX_REJECT_DETAIL`], so one varint byte) |
    /// | n | detail, UTF-8 |
    ///
    /// At most 2 + 1 + 1 + 140 = 144 bytes.
    pub fn encode(&self) -> Result<Vec<u8>, ProtocolError> {
        let fitted = RejectData::new(self.reason, &self.detail);
        codec::encode(Self::WHAT, kind::REJECT, &fitted, MAX_REJECT_PRIVATE_DATA)
    }

    /// Decodes, accepting trailing zero padding.
    pub fn decode(bytes: &[u8]) -> Result<RejectData, ProtocolError> {
        let r: RejectData = codec::decode(Self::WHAT, kind::REJECT, bytes, MAX_REJECT_PRIVATE_DATA)?;
        if r.detail.len() > MAX_REJECT_DETAIL {
            return Err(ProtocolError::Malformed {
                what: Self::WHAT,
                detail: format!("{}-byte detail", r.detail.len()),
            });
        }
        Ok(r)
    }
}
