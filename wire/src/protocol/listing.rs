//! A node's topic listing: the topics of its live publishers, in a small region of its
//! memory that subscribers READ (one-sided, like a ring) over a listing connection, so that a
//! pattern subscription connected to the node's address, without discovery, finds every topic
//! of that node its pattern includes.
//!
//! A subscriber asks for the listing with [`ConnectFlags::LISTING`](super::ConnectFlags) in
//! its connect data; the node answers with a [`ListingAccept`] (where the region is, tagged
//! under the domain secret when it has one, as a publisher's accept is). The region is
//! rewritten in place whenever a local publisher is created or closed, so a READ may race a
//! rewrite: its [`ListingHeader`] carries a generation and a CRC-32C over the header's other
//! fields and the body, and a READ that does not check is torn ([`ListingReadError::Torn`])
//! and READ again. A listing that checks but does not decode, or breaks a bound, is
//! [`ListingReadError::Invalid`]: the node is hostile or of another version.
//!
//! The region's layout (little-endian):
//!
//! | bytes | field |
//! |---|---|
//! | 8 | generation (changes with each rewrite) |
//! | 4 | body length (at most [`MAX_LISTING_BODY`]) |
//! | 4 | CRC-32C of the 12 bytes above and the body |
//! | n | body: `[PROTOCOL_VERSION, 8, bincode]` of node id, epoch, generation (again), truncated (0 or 1), topics (count, then each: name length, UTF-8 name of at most [`MAX_LISTED_NAME`] bytes, instance) |
//!
//! Bounds: at most [`MAX_LISTED_TOPICS`] topics and [`MAX_LISTING_BODY`] bytes; a node with
//! more lists those that fit, sorted by name, and says it is `truncated`.
#![allow(clippy::missing_errors_doc, reason = "every decode error is a ProtocolError naming the message")]

use serde::{Deserialize, Serialize};

use super::auth::Secret;
use super::codec::{self, kind};
use super::connect::{remote_addr, AcceptAuthError};
use super::credential::PROOF_TAG_LEN;
use super::error::ProtocolError;
use crate::ring::Checksum;
use rdma_fabric::{RemoteAddr, MAX_ACCEPT_PRIVATE_DATA};

/// Bytes of the region's header: generation, body length, CRC-32C.
pub const LISTING_HEADER_LEN: usize = 16;
/// Bytes of a listing region: header and the largest body.
pub const LISTING_REGION_LEN: usize = 64 * 1024;
/// The largest body of a listing, in bytes.
pub const MAX_LISTING_BODY: usize = LISTING_REGION_LEN - LISTING_HEADER_LEN;
/// Most topics one listing holds.
pub const MAX_LISTED_TOPICS: usize = 1024;
/// Longest topic name a listing carries, in bytes (a topic's longest, `MAX_TOPIC_LEN`).
pub const MAX_LISTED_NAME: usize = 200;
/// The label of a listing accept's tag.
pub const LISTING_ACCEPT_LABEL: &[u8] = b"rdma-pubsub listing accept v5";

/// One topic of a listing.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ListedTopic {
    /// The topic's name (a subscriber parses it as a topic before use).
    pub name: String,
    /// Which publisher of the topic: another number when the topic's publisher was closed and
    /// another created (so a subscriber connects to the new one).
    pub instance: u64,
}

/// The topics of a node's live publishers, as its listing region holds them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicListing {
    /// The node's id.
    pub node_id: u64,
    /// The node's epoch.
    pub epoch: u64,
    /// The rewrite this is (the header's generation).
    pub generation: u64,
    /// The node has more topics than fit: these are the first by name.
    pub truncated: bool,
    /// The topics.
    pub topics: Vec<ListedTopic>,
}

/// The header of a listing region, as READ (not yet checked).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListingHeader {
    /// The rewrite the region holds.
    pub generation: u64,
    /// The body's length, in bytes.
    pub body_len: u32,
    /// CRC-32C of the generation, the length and the body.
    pub crc: u32,
}

impl ListingHeader {
    /// The header in the first [`LISTING_HEADER_LEN`] bytes of `bytes` (`None`: fewer bytes).
    pub fn read(bytes: &[u8]) -> Option<ListingHeader> {
        let header = bytes.get(..LISTING_HEADER_LEN)?;
        let (generation, rest) = header.split_at(8);
        let (len, crc) = rest.split_at(4);
        Some(ListingHeader {
            generation: u64::from_le_bytes(generation.try_into().ok()?),
            body_len: u32::from_le_bytes(len.try_into().ok()?),
            crc: u32::from_le_bytes(crc.try_into().ok()?),
        })
    }

    /// The bytes a READ of the whole listing takes: header and body, when the body's length
    /// is within [`MAX_LISTING_BODY`] (else the header is torn or the node hostile: `None`).
    pub fn region_bytes(&self) -> Option<usize> {
        let len = self.body_len as usize;
        (len <= MAX_LISTING_BODY).then_some(LISTING_HEADER_LEN + len)
    }
}

/// Why the bytes of a listing READ are not a listing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ListingReadError {
    /// The READ raced a rewrite (the checksum does not match, or the length is out of bounds):
    /// READ again.
    #[error("the listing READ raced its rewrite (torn)")]
    Torn,
    /// The listing checks and is not valid: the node is hostile or of another version.
    #[error("the listing is invalid: {0}")]
    Invalid(ProtocolError),
}

impl TopicListing {
    const WHAT: &'static str = "topic listing";

    /// A listing of `topics` (sorted by name, each name at most [`MAX_LISTED_NAME`] bytes:
    /// longer ones are left out), cut to what fits: at most [`MAX_LISTED_TOPICS`] topics and
    /// [`MAX_LISTING_BODY`] bytes, `truncated` when some were left out.
    pub fn fitted(node_id: u64, epoch: u64, generation: u64, topics: impl IntoIterator<Item = ListedTopic>) -> Self {
        let mut topics: Vec<ListedTopic> = topics.into_iter().collect();
        topics.sort_by(|a, b| a.name.cmp(&b.name));
        let all = topics.len();
        topics.retain(|t| t.name.len() <= MAX_LISTED_NAME);
        let mut truncated = topics.len() < all;
        // The frame, the fixed fields (at most 9 bytes each and the flag) and the count.
        let mut used = codec::FRAME_HEADER_LEN + 3 * 9 + 1 + 9;
        let mut fit = 0;
        for t in topics.iter().take(MAX_LISTED_TOPICS) {
            // Name length and instance, at most 9 bytes each as varints.
            let len = t.name.len() + 18;
            if used + len > MAX_LISTING_BODY {
                break;
            }
            used += len;
            fit += 1;
        }
        truncated |= fit < topics.len();
        topics.truncate(fit);
        TopicListing { node_id, epoch, generation, truncated, topics }
    }

    /// The region's bytes: header, then the body (at most [`LISTING_REGION_LEN`]).
    pub fn encode_region(&self) -> Result<Vec<u8>, ProtocolError> {
        if self.topics.len() > MAX_LISTED_TOPICS {
            return Err(ProtocolError::TooLarge { what: Self::WHAT, len: self.topics.len(), max: MAX_LISTED_TOPICS });
        }
        let body = codec::encode(Self::WHAT, kind::TOPIC_LISTING, self, MAX_LISTING_BODY)?;
        let body_len = u32::try_from(body.len()).map_err(|_| ProtocolError::TooLarge {
            what: Self::WHAT,
            len: body.len(),
            max: MAX_LISTING_BODY,
        })?;
        let mut out = Vec::with_capacity(LISTING_HEADER_LEN + body.len());
        out.extend_from_slice(&self.generation.to_le_bytes());
        out.extend_from_slice(&body_len.to_le_bytes());
        let crc = Checksum::Crc32c.of_pair(&out, &body);
        out.extend_from_slice(&crc.to_le_bytes());
        out.extend_from_slice(&body);
        Ok(out)
    }

    /// Decodes the bytes a READ of a listing region brought (header first; bytes past the
    /// body are ignored): every length and count is bounded before it is used.
    pub fn decode_region(bytes: &[u8]) -> Result<TopicListing, ListingReadError> {
        let header = ListingHeader::read(bytes).ok_or(ListingReadError::Torn)?;
        let end = header.region_bytes().ok_or(ListingReadError::Torn)?;
        let body = bytes.get(LISTING_HEADER_LEN..end).ok_or(ListingReadError::Torn)?;
        if Checksum::Crc32c.of_pair(&bytes[..12], body) != header.crc {
            return Err(ListingReadError::Torn);
        }
        let invalid = |detail: String| ListingReadError::Invalid(ProtocolError::Malformed { what: Self::WHAT, detail });
        let listing: TopicListing = codec::decode(Self::WHAT, kind::TOPIC_LISTING, body, MAX_LISTING_BODY)
            .map_err(ListingReadError::Invalid)?;
        if listing.generation != header.generation {
            return Err(invalid(format!(
                "generation {} in the body, {} in the header",
                listing.generation, header.generation
            )));
        }
        if listing.topics.len() > MAX_LISTED_TOPICS {
            return Err(invalid(format!("{} topics (at most {MAX_LISTED_TOPICS})", listing.topics.len())));
        }
        if let Some(t) = listing.topics.iter().find(|t| t.name.len() > MAX_LISTED_NAME) {
            return Err(invalid(format!("a {}-byte topic name (at most {MAX_LISTED_NAME})", t.name.len())));
        }
        Ok(listing)
    }
}

/// A node's acceptance of a listing connection (accept private data): where its listing
/// region is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListingAccept {
    /// The node's id.
    pub node_id: u64,
    /// The node's epoch.
    pub epoch: u64,
    /// Address and rkey of the listing region.
    #[serde(with = "remote_addr")]
    pub region: RemoteAddr,
    /// Length of the region (at most [`LISTING_REGION_LEN`]).
    pub region_len: u32,
    /// The answer to the subscriber's challenge under the node's domain secret
    /// ([`with_tag`](Self::with_tag)).
    pub tag: Option<[u8; PROOF_TAG_LEN]>,
}

impl ListingAccept {
    const WHAT: &'static str = "listing accept private data";

    /// Encodes (at most [`MAX_ACCEPT_PRIVATE_DATA`] bytes). The layout, in the varints of
    /// [`ConnectData::encode`](super::ConnectData::encode):
    ///
    /// | bytes | field |
    /// |---|---|
    /// | 1 | version ([`PROTOCOL_VERSION`](super::PROTOCOL_VERSION)) |
    /// | 1 | kind (7: listing accept) |
    /// | 1–9 | node id |
    /// | 1–9 | node epoch |
    /// | 1–9, 1–5 | region address, rkey |
    /// | 1–5 | region length |
    /// | 1 (+16) | domain tag present (0 or 1), then the tag |
    ///
    /// At most 2 + 9 + 9 + 14 + 5 + 17 = 56 bytes.
    pub fn encode(&self) -> Result<Vec<u8>, ProtocolError> {
        codec::encode(Self::WHAT, kind::LISTING_ACCEPT, self, MAX_ACCEPT_PRIVATE_DATA)
    }

    /// Decodes, accepting trailing zero padding; a region longer than [`LISTING_REGION_LEN`]
    /// or shorter than its header is malformed.
    pub fn decode(bytes: &[u8]) -> Result<ListingAccept, ProtocolError> {
        let a: ListingAccept = codec::decode(Self::WHAT, kind::LISTING_ACCEPT, bytes, MAX_ACCEPT_PRIVATE_DATA)?;
        if !(LISTING_HEADER_LEN..=LISTING_REGION_LEN).contains(&(a.region_len as usize)) {
            return Err(ProtocolError::Malformed {
                what: Self::WHAT,
                detail: format!("a {}-byte listing region (at most {LISTING_REGION_LEN})", a.region_len),
            });
        }
        Ok(a)
    }

    /// This acceptance with its tag answering `challenge` under `domain`, the node's domain
    /// secret (no tag without either).
    pub fn with_tag(self, challenge: Option<u64>, domain: Option<&Secret>) -> ListingAccept {
        let mut accept = ListingAccept { tag: None, ..self };
        let (Some(challenge), Some(domain)) = (challenge, domain) else { return accept };
        let Ok(bytes) = accept.encode() else { return accept };
        let full = domain.mac(LISTING_ACCEPT_LABEL, &[&bytes, &challenge.to_le_bytes()]);
        let mut tag = [0u8; PROOF_TAG_LEN];
        tag.copy_from_slice(&full[..PROOF_TAG_LEN]);
        accept.tag = Some(tag);
        accept
    }

    /// Checks the tag against the subscriber's `challenge` under `domain`, the subscriber
    /// node's domain secret (nothing to check without one).
    ///
    /// # Errors
    /// [`AcceptAuthError::NodeTagMissing`] or [`AcceptAuthError::NodeTagInvalid`].
    pub fn check_tag(&self, challenge: Option<u64>, domain: Option<&Secret>) -> Result<(), AcceptAuthError> {
        let Some(domain) = domain else { return Ok(()) };
        let tag = self.tag.ok_or(AcceptAuthError::NodeTagMissing)?;
        let bytes =
            ListingAccept { tag: None, ..self.clone() }.encode().map_err(|_| AcceptAuthError::NodeTagInvalid)?;
        match challenge {
            Some(c) if domain.verify(LISTING_ACCEPT_LABEL, &[&bytes, &c.to_le_bytes()], &tag) => Ok(()),
            _ => Err(AcceptAuthError::NodeTagInvalid),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn listed(name: &str, instance: u64) -> ListedTopic {
        ListedTopic { name: name.into(), instance }
    }

    fn sample() -> TopicListing {
        TopicListing::fitted(7, 3, 5, [listed("sensors/b", 2), listed("sensors/a", 1), listed("other", 4)])
    }

    #[test]
    fn a_listing_roundtrips_sorted_by_name() {
        let listing = sample();
        let names: Vec<&str> = listing.topics.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["other", "sensors/a", "sensors/b"]);
        assert!(!listing.truncated);
        let bytes = listing.encode_region().unwrap();
        assert_eq!(ListingHeader::read(&bytes).unwrap().generation, 5);
        assert_eq!(ListingHeader::read(&bytes).unwrap().region_bytes(), Some(bytes.len()));
        // A READ of the whole region brings zeros past the body: ignored.
        let mut read = bytes.clone();
        read.resize(LISTING_REGION_LEN, 0);
        assert_eq!(TopicListing::decode_region(&read).unwrap(), listing);
    }

    #[test]
    fn a_torn_listing_is_told_apart_from_an_invalid_one() {
        let bytes = sample().encode_region().unwrap();
        for i in 0..bytes.len() {
            let mut torn = bytes.clone();
            torn[i] ^= 0x40;
            assert!(TopicListing::decode_region(&torn).is_err(), "a flipped byte {i} is noticed");
        }
        let mut torn = bytes.clone();
        *torn.last_mut().unwrap() ^= 1;
        assert_eq!(TopicListing::decode_region(&torn), Err(ListingReadError::Torn));
        assert_eq!(TopicListing::decode_region(&bytes[..10]), Err(ListingReadError::Torn));
        assert_eq!(TopicListing::decode_region(&bytes[..bytes.len() - 1]), Err(ListingReadError::Torn));
    }

    /// Region bytes whose checksum holds over `body` (what a hostile node can write).
    fn region_of(generation: u64, body: &[u8]) -> Vec<u8> {
        let mut out = generation.to_le_bytes().to_vec();
        out.extend_from_slice(&(body.len() as u32).to_le_bytes());
        let crc = Checksum::Crc32c.of_pair(&out, body);
        out.extend_from_slice(&crc.to_le_bytes());
        out.extend_from_slice(body);
        out
    }

    #[test]
    fn a_malformed_or_oversized_listing_that_checks_is_invalid() {
        let invalid = |bytes: &[u8]| matches!(TopicListing::decode_region(bytes), Err(ListingReadError::Invalid(_)));
        // Garbage under a good checksum.
        assert!(invalid(&region_of(1, b"\x05\x08\xff\xff\xff")));
        // Another version, another kind.
        let good = sample().encode_region().unwrap();
        let mut body = good[LISTING_HEADER_LEN..].to_vec();
        body[0] = 99;
        assert!(matches!(
            TopicListing::decode_region(&region_of(5, &body)),
            Err(ListingReadError::Invalid(ProtocolError::VersionMismatch { got: 99, .. }))
        ));
        // The body's generation is not the header's.
        assert!(invalid(&region_of(6, &good[LISTING_HEADER_LEN..])));
        // Too many topics, a name too long: each bounded, though their bytes fit.
        let many =
            TopicListing { topics: (0..MAX_LISTED_TOPICS as u64 + 1).map(|i| listed("t", i)).collect(), ..sample() };
        let body = codec::encode("test", kind::TOPIC_LISTING, &many, MAX_LISTING_BODY).unwrap();
        assert!(invalid(&region_of(5, &body)));
        assert!(many.encode_region().is_err(), "it is not encoded either");
        let long = TopicListing { topics: vec![listed(&"x".repeat(MAX_LISTED_NAME + 1), 1)], ..sample() };
        let body = codec::encode("test", kind::TOPIC_LISTING, &long, MAX_LISTING_BODY).unwrap();
        assert!(invalid(&region_of(5, &body)));
        // A length over the region: torn (or hostile), never allocated.
        let mut huge = region_of(5, b"");
        huge[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(TopicListing::decode_region(&huge), Err(ListingReadError::Torn));
        // A count claiming far more topics than the bytes hold.
        let mut body = vec![crate::protocol::PROTOCOL_VERSION, kind::TOPIC_LISTING, 7, 3, 5, 0];
        body.extend_from_slice(&[0xfc, 0xff, 0xff, 0xff, 0x7f]);
        assert!(invalid(&region_of(5, &body)));
    }

    #[test]
    fn a_node_with_more_than_fits_lists_the_first_by_name_and_says_so() {
        let many = (0..2000u64).map(|i| listed(&format!("t/{i:05}"), i));
        let listing = TopicListing::fitted(1, 1, 1, many);
        assert!(listing.truncated);
        assert_eq!(listing.topics.len(), MAX_LISTED_TOPICS);
        assert_eq!(listing.topics[0].name, "t/00000");
        let long = (0..2000u64).map(|i| listed(&format!("{i:05}{}", "x".repeat(MAX_LISTED_NAME - 5)), i));
        let listing = TopicListing::fitted(1, 1, 1, long);
        assert!(listing.truncated);
        let bytes = listing.encode_region().unwrap();
        assert!(bytes.len() <= LISTING_REGION_LEN);
        assert_eq!(TopicListing::decode_region(&bytes).unwrap(), listing);
        let too_long = TopicListing::fitted(1, 1, 1, [listed(&"y".repeat(MAX_LISTED_NAME + 1), 1)]);
        assert!(too_long.truncated && too_long.topics.is_empty());
    }

    #[test]
    fn a_listing_accept_roundtrips_and_its_tag_answers_the_challenge() {
        let secret = Secret::new(*b"listing secret of 16+ bytes").unwrap();
        let other = Secret::new(*b"another secret of 16+ bytes").unwrap();
        let accept = ListingAccept {
            node_id: u64::MAX,
            epoch: u64::MAX,
            region: RemoteAddr { addr: u64::MAX, rkey: u32::MAX },
            region_len: LISTING_REGION_LEN as u32,
            tag: None,
        }
        .with_tag(Some(9), Some(&secret));
        let bytes = accept.encode().unwrap();
        assert!(bytes.len() <= 56, "{} bytes", bytes.len());
        let back = ListingAccept::decode(&bytes).unwrap();
        assert_eq!(back, accept);
        assert_eq!(back.check_tag(Some(9), Some(&secret)), Ok(()));
        assert_eq!(back.check_tag(Some(10), Some(&secret)), Err(AcceptAuthError::NodeTagInvalid));
        assert_eq!(back.check_tag(Some(9), Some(&other)), Err(AcceptAuthError::NodeTagInvalid));
        assert_eq!(back.check_tag(Some(9), None), Ok(()));
        let untagged = ListingAccept { tag: None, ..back.clone() };
        assert_eq!(untagged.check_tag(Some(9), Some(&secret)), Err(AcceptAuthError::NodeTagMissing));
        let oversized = ListingAccept { region_len: LISTING_REGION_LEN as u32 + 1, ..untagged };
        assert!(matches!(ListingAccept::decode(&oversized.encode().unwrap()), Err(ProtocolError::Malformed { .. })));
    }

    proptest! {
        #[test]
        fn decoding_arbitrary_bytes_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..2048), framed in any::<bool>()) {
            let _ = ListingAccept::decode(&bytes);
            let _ = TopicListing::decode_region(&bytes);
            // The same bytes as a body under a good checksum, as a hostile node writes it.
            let mut body = bytes;
            if framed && body.len() >= 2 {
                body[0] = crate::protocol::PROTOCOL_VERSION;
                body[1] = kind::TOPIC_LISTING;
            }
            let _ = TopicListing::decode_region(&region_of(1, &body));
        }

        #[test]
        fn a_listing_of_any_topics_roundtrips(names in prop::collection::vec("[a-z/]{1,40}", 0..50)) {
            let listing = TopicListing::fitted(1, 2, 3, names.iter().enumerate().map(|(i, n)| listed(n, i as u64)));
            let bytes = listing.encode_region().unwrap();
            prop_assert_eq!(TopicListing::decode_region(&bytes).unwrap(), listing);
        }
    }
}
