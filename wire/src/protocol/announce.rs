//! Discovery announcements sent by UD multicast: which node publishes which topics, and
//! where to connect. A topic list longer than one datagram is split into numbered parts.
//!
//! Nodes that share a domain secret send their announcements *sealed*
//! ([`Announcement::seal`]): with a sequence number, the sender's clock and a MAC tag over the
//! whole datagram, so that only holders of the secret can announce a node, and a receiver can
//! refuse replays ([`Announcement::open`]). Without a secret they are sent plain
//! ([`Announcement::encode`]), which suits trusted networks only.
#![allow(clippy::missing_errors_doc, reason = "every decode error is a ProtocolError naming the message")]

use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

use super::auth::Secret;
use super::codec::{self, kind};
use super::error::ProtocolError;
use super::topic::TopicId;
use super::PROTOCOL_VERSION;

/// Default largest announcement datagram.
pub const ANNOUNCE_MTU: usize = 1024;
/// Largest announcement any decoder accepts.
pub const MAX_ANNOUNCEMENT: usize = 65_507;
/// Bytes of a sealed datagram before the announcement: version, kind, sequence, time.
pub const SEALED_HEADER_LEN: usize = 18;
/// Bytes of the tag that ends a sealed datagram (HMAC-SHA256, truncated).
pub const ANNOUNCE_TAG_LEN: usize = 16;
/// Bytes sealing adds to an encoded announcement.
pub const SEAL_OVERHEAD: usize = SEALED_HEADER_LEN + ANNOUNCE_TAG_LEN;
/// The label of announcement tags: a tag made for another purpose never verifies here.
const ANNOUNCE_LABEL: &[u8] = b"rdma-pubsub announce v4";

/// What an announcement says about its node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum AnnounceKind {
    /// A node started (or its topics changed): peers should learn it now.
    Hello,
    /// Periodic refresh.
    Heartbeat,
    /// The node is leaving: forget it.
    Goodbye,
}

/// One datagram of a node's announcement.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Announcement {
    /// Hello, heartbeat or goodbye.
    pub kind: AnnounceKind,
    /// The discovery domain of the announcing node: nodes hear only their own domain.
    pub domain: u16,
    /// The announcing node.
    pub node_id: u64,
    /// Its epoch (a restarted node has a new one).
    pub epoch: u64,
    /// Where subscribers connect (IP and port; an IPv6 flow label and scope id are not carried).
    pub connect: SocketAddr,
    /// Index of this part, `0..parts`.
    pub part: u16,
    /// Number of parts of this announcement.
    pub parts: u16,
    /// Topics in this part: name and id.
    pub topics: Vec<(String, TopicId)>,
}

/// A sealed announcement whose tag verified, with the sender's sequence number and clock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SealedAnnouncement {
    /// The announcement.
    pub announcement: Announcement,
    /// The sender's sequence number (from 1, one more per datagram of the sender's epoch).
    pub seq: u64,
    /// The sender's wall clock when it sealed the datagram, in ms since the Unix epoch.
    pub sent_ms: u64,
}

/// Why a datagram is not an authentic sealed announcement.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OpenError {
    /// No tag to check: a plain announcement, another protocol version, or garbage.
    #[error("not a sealed announcement ({len} bytes)")]
    NotSealed {
        /// Bytes received.
        len: usize,
    },
    /// The tag does not verify under this secret: forged, altered, or sealed with another one.
    #[error("sealed announcement of {len} bytes: the tag does not verify")]
    BadTag {
        /// Bytes received.
        len: usize,
    },
    /// The tag verifies but the announcement inside does not decode.
    #[error(transparent)]
    Malformed(#[from] ProtocolError),
}

impl Announcement {
    const WHAT: &'static str = "announcement";

    /// Seals this announcement with `secret`, the sender's sequence number `seq` and its wall
    /// clock `sent_ms` (ms since the Unix epoch). The datagram, all integers little-endian:
    ///
    /// ```text
    /// offset  bytes  field
    /// 0       1      PROTOCOL_VERSION
    /// 1       1      kind: SEALED_ANNOUNCEMENT (6)
    /// 2       8      seq: u64
    /// 10      8      sent_ms: u64
    /// 18      n      the announcement as `encode` makes it: [PROTOCOL_VERSION, ANNOUNCEMENT, body]
    /// 18 + n  16     tag: the first 16 bytes of HMAC-SHA256(secret) over the label
    ///                "rdma-pubsub announce v4" and bytes 0..18 + n (see `Secret::mac`)
    /// ```
    ///
    /// So a datagram is [`SEAL_OVERHEAD`] bytes longer than the plain announcement.
    pub fn seal(&self, secret: &Secret, seq: u64, sent_ms: u64) -> Result<Vec<u8>, ProtocolError> {
        let inner = codec::encode(Self::WHAT, kind::ANNOUNCEMENT, self, MAX_ANNOUNCEMENT - SEAL_OVERHEAD)?;
        let mut out = Vec::with_capacity(inner.len() + SEAL_OVERHEAD);
        out.extend_from_slice(&[PROTOCOL_VERSION, kind::SEALED_ANNOUNCEMENT]);
        out.extend_from_slice(&seq.to_le_bytes());
        out.extend_from_slice(&sent_ms.to_le_bytes());
        out.extend_from_slice(&inner);
        let tag = secret.mac(ANNOUNCE_LABEL, &[&out]);
        out.extend_from_slice(&tag[..ANNOUNCE_TAG_LEN]);
        Ok(out)
    }

    /// Whether `bytes` claim to be a sealed announcement of this protocol version (its tag is
    /// not checked: see [`open`](Self::open)).
    pub fn is_sealed(bytes: &[u8]) -> bool {
        (SEAL_OVERHEAD..=MAX_ANNOUNCEMENT).contains(&bytes.len())
            && bytes[..2] == [PROTOCOL_VERSION, kind::SEALED_ANNOUNCEMENT]
    }

    /// Opens a datagram made by [`seal`](Self::seal): checks its tag under `secret` before
    /// anything else of it is read or decoded.
    pub fn open(bytes: &[u8], secret: &Secret) -> Result<SealedAnnouncement, OpenError> {
        if !Self::is_sealed(bytes) {
            return Err(OpenError::NotSealed { len: bytes.len() });
        }
        let (sealed, tag) = bytes.split_at(bytes.len() - ANNOUNCE_TAG_LEN);
        if !secret.verify(ANNOUNCE_LABEL, &[sealed], tag) {
            return Err(OpenError::BadTag { len: bytes.len() });
        }
        let word = |at: usize| u64::from_le_bytes(sealed[at..at + 8].try_into().expect("8 bytes"));
        let (seq, sent_ms) = (word(2), word(10));
        let announcement = Self::decode(&sealed[SEALED_HEADER_LEN..])?;
        Ok(SealedAnnouncement { announcement, seq, sent_ms })
    }

    /// Encodes (at most [`MAX_ANNOUNCEMENT`] bytes; [`Announcement::split`] keeps parts within
    /// an MTU). The layout, integers as the varints of
    /// [`ConnectData::encode`](super::ConnectData::encode):
    ///
    /// | bytes | field |
    /// |---|---|
    /// | 1 | version ([`PROTOCOL_VERSION`]) |
    /// | 1 | kind (5: announcement) |
    /// | 1 | kind of announcement (0 hello, 1 heartbeat, 2 goodbye) |
    /// | 1–3 | domain |
    /// | 1–9 | node id |
    /// | 1–9 | epoch |
    /// | 1 | address family (0 IPv4, 1 IPv6) |
    /// | 4 or 16 | IP address, network order |
    /// | 1–3 | port |
    /// | 1–3, 1–3 | part, parts |
    /// | 1–9 | number of topics; then for each: |
    /// | 1–9, n | name length, name (UTF-8) |
    /// | 1–9 | topic id |
    pub fn encode(&self) -> Result<Vec<u8>, ProtocolError> {
        codec::encode(Self::WHAT, kind::ANNOUNCEMENT, self, MAX_ANNOUNCEMENT)
    }

    /// Decodes one datagram, checking the part numbering.
    pub fn decode(bytes: &[u8]) -> Result<Announcement, ProtocolError> {
        let a: Announcement = codec::decode(Self::WHAT, kind::ANNOUNCEMENT, bytes, MAX_ANNOUNCEMENT)?;
        if a.part >= a.parts {
            return Err(ProtocolError::Malformed {
                what: Self::WHAT,
                detail: format!("part {} of {}", a.part, a.parts),
            });
        }
        Ok(a)
    }

    /// Packs `topics` into as few announcements as possible, each encoding to at most `mtu`
    /// bytes (an empty list gives one part). A topic too long for one datagram is an error.
    pub fn split(
        kind: AnnounceKind,
        domain: u16,
        node_id: u64,
        epoch: u64,
        connect: SocketAddr,
        topics: &[(String, TopicId)],
        mtu: usize,
    ) -> Result<Vec<Announcement>, ProtocolError> {
        let empty =
            Announcement { kind, domain, node_id, epoch, connect, part: u16::MAX, parts: u16::MAX, topics: Vec::new() };
        // The list length is a varint: 1 byte for an empty list, at most 3 below 65536 entries.
        let base = empty.encode()?.len() + 2;
        let entry_len = |t: &(String, TopicId)| {
            bincode::serde::encode_to_vec(t, bincode::config::standard())
                .map(|v| v.len())
                .map_err(|e| ProtocolError::Malformed { what: Self::WHAT, detail: e.to_string() })
        };
        let mut parts: Vec<Vec<(String, TopicId)>> = vec![Vec::new()];
        let mut size = base;
        for t in topics {
            let n = entry_len(t)?;
            if base + n > mtu {
                return Err(ProtocolError::TooLarge { what: "announced topic", len: base + n, max: mtu });
            }
            if size + n > mtu {
                parts.push(Vec::new());
                size = base;
            }
            parts.last_mut().expect("one part").push(t.clone());
            size += n;
        }
        let count = u16::try_from(parts.len()).map_err(|_| ProtocolError::TooLarge {
            what: "announcement parts",
            len: parts.len(),
            max: u16::MAX as usize,
        })?;
        let out: Vec<Announcement> = parts
            .into_iter()
            .enumerate()
            .map(|(i, topics)| Announcement {
                kind,
                domain,
                node_id,
                epoch,
                connect,
                part: i as u16,
                parts: count,
                topics,
            })
            .collect();
        for a in &out {
            let len = a.encode()?.len();
            if len > mtu {
                return Err(ProtocolError::TooLarge { what: Self::WHAT, len, max: mtu });
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn secret(fill: u8) -> Secret {
        Secret::new(vec![fill; 32]).unwrap()
    }

    fn hello() -> Announcement {
        let topics = ["prices", "orders/eu"].iter().map(|t| (t.to_string(), TopicId::of(t))).collect();
        Announcement {
            kind: AnnounceKind::Hello,
            domain: 3,
            node_id: 0x1234_5678_9abc_def0,
            epoch: 1_700_000_000_000_000,
            connect: SocketAddr::from(([127, 0, 0, 1], 4791)),
            part: 0,
            parts: 1,
            topics,
        }
    }

    #[test]
    fn a_sealed_announcement_opens_with_its_secret_and_layout() {
        let a = hello();
        let sealed = a.seal(&secret(1), 77, 1_700_000_123_456).unwrap();
        let plain = a.encode().unwrap();
        assert_eq!(sealed.len(), plain.len() + SEAL_OVERHEAD);
        assert_eq!(sealed[..2], [PROTOCOL_VERSION, kind::SEALED_ANNOUNCEMENT]);
        assert_eq!(sealed[2..10], 77u64.to_le_bytes());
        assert_eq!(sealed[10..18], 1_700_000_123_456u64.to_le_bytes());
        assert_eq!(sealed[SEALED_HEADER_LEN..sealed.len() - ANNOUNCE_TAG_LEN], plain[..]);
        assert!(Announcement::is_sealed(&sealed) && !Announcement::is_sealed(&plain));
        let opened = Announcement::open(&sealed, &secret(1)).unwrap();
        assert_eq!(opened, SealedAnnouncement { announcement: a, seq: 77, sent_ms: 1_700_000_123_456 });
    }

    #[test]
    fn any_altered_byte_another_secret_or_a_plain_datagram_is_refused() {
        let sealed = hello().seal(&secret(1), 1, 2).unwrap();
        for i in 0..sealed.len() {
            let mut bad = sealed.clone();
            bad[i] ^= 0x01;
            match Announcement::open(&bad, &secret(1)) {
                Err(OpenError::NotSealed { .. }) => assert!(i < 2, "byte {i}"),
                Err(OpenError::BadTag { len }) => assert_eq!(len, sealed.len()),
                other => panic!("byte {i} altered: {other:?}"),
            }
        }
        assert_eq!(Announcement::open(&sealed, &secret(2)), Err(OpenError::BadTag { len: sealed.len() }));
        let plain = hello().encode().unwrap();
        assert_eq!(Announcement::open(&plain, &secret(1)), Err(OpenError::NotSealed { len: plain.len() }));
        assert!(matches!(
            Announcement::open(&sealed[..SEAL_OVERHEAD - 1], &secret(1)),
            Err(OpenError::NotSealed { .. })
        ));
        assert!(matches!(Announcement::open(&sealed[..sealed.len() - 1], &secret(1)), Err(OpenError::BadTag { .. })));
        // A plain decoder refuses a sealed datagram as another kind of message.
        assert!(matches!(Announcement::decode(&sealed), Err(ProtocolError::WrongKind { .. })));
    }

    #[test]
    fn a_tag_over_bytes_that_do_not_decode_is_malformed() {
        let mut body = vec![PROTOCOL_VERSION, kind::SEALED_ANNOUNCEMENT];
        body.extend_from_slice(&[0; 16]);
        body.extend_from_slice(&[PROTOCOL_VERSION, kind::ANNOUNCEMENT, 0xff, 0xff]);
        let tag = secret(1).mac(ANNOUNCE_LABEL, &[&body]);
        body.extend_from_slice(&tag[..ANNOUNCE_TAG_LEN]);
        assert!(matches!(Announcement::open(&body, &secret(1)), Err(OpenError::Malformed(_))));
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_open(bytes in prop::collection::vec(any::<u8>(), 0..400), header in any::<bool>()) {
            let mut bytes = bytes;
            if header && bytes.len() >= 2 {
                bytes[..2].copy_from_slice(&[PROTOCOL_VERSION, kind::SEALED_ANNOUNCEMENT]);
            }
            prop_assert!(Announcement::open(&bytes, &secret(1)).is_err());
        }
    }
}
