//! The wire protocol between nodes, independent of the transport: connection-manager private
//! data ([`ConnectData`], [`AcceptData`], [`RejectData`]), control SENDs ([`Control`]) and
//! discovery datagrams ([`Announcement`]).
//!
//! Every message is `[PROTOCOL_VERSION, kind, body]` with a bincode 2 body
//! (`config::standard()`: little-endian varints) decoded under a size limit; decoding never
//! panics, trailing zero padding (as the connection manager adds to private data) is accepted,
//! and another version is [`ProtocolError::VersionMismatch`]. Field order is the wire format,
//! so each encoder documents its byte layout (`ConnectData::encode`, `AcceptData::encode`,
//! `RejectData::encode`, `Control::encode`, `Announcement::encode` and `::seal`), and golden
//! bytes pin every message kind to this `PROTOCOL_VERSION`. Topics travel as [`TopicId`], a
//! stable FNV-1a hash of their name.
//!
//! | message | carrier | fields |
//! |---|---|---|
//! | [`ConnectData`] (at most 56 bytes) | connect private data | topic id, start (latest, earliest), policies accepted, subscriber node id, flags, optional credential proof (nonce, time in ms, 16-byte HMAC-SHA256 tag) or challenge (a nonce) |
//! | [`AcceptData`] (at most 196 bytes) | accept private data | topic id, ring address and rkey, region length, capacity, publisher epoch and id, policy, max record payload, start position, start and first sequence, checksum function, message type (fingerprint and name), optional tags answering the challenge under the domain secret and the topic credential ([`AcceptTags`]) |
//! | [`RejectData`] (at most 148 bytes) | reject private data | reason ([`RejectCode`]), detail (at most 140 bytes) |
//! | [`ListingAccept`] (at most 56 bytes) | accept private data of a listing connection (connect flag [`ConnectFlags::LISTING`]) | node id and epoch, listing region address, rkey and length, optional tag answering the challenge under the domain secret |
//! | [`TopicListing`] (at most 64 KiB) | a region of the node's memory, READ by the subscriber | generation, body length, CRC-32C; node id, epoch, truncated, topics (name, instance) |
//! | [`Control`] (at most 64 bytes) | SEND | subscriber to publisher: ack, doorbell request, bye; publisher to subscriber: doorbell, dropped (with its reason), end of stream, credit wanted |
//! | [`Announcement`] (at most the datagram MTU) | UD multicast or unicast | kind (hello, heartbeat, goodbye), domain, node id, epoch, connect address, part of parts, topics; with a domain secret sealed: sequence, time, the announcement, a 16-byte HMAC-SHA256 tag |
//!
//! A topic credential ([`Secret`]) proves a subscriber's right to connect: an HMAC over the
//! rest of the connect data, a random nonce and the subscriber's clock, checked by
//! [`ReplayGuard`] against the clock skew allowance and the nonces seen. The accept answers the
//! subscriber's nonce (the proof's, or a challenge) with tags under the publisher node's domain
//! secret and the topic's credential ([`AcceptData::check_tags`]): an address taken over by
//! someone without them, or an old accept replayed, is not believed.
//!
//! A pattern subscription connected to a node's address, without discovery, asks for the
//! node's [`TopicListing`] ([`ConnectFlags::LISTING`]): the node accepts with a
//! [`ListingAccept`] saying where the listing region is, and the subscriber READs it, as it
//! READs a ring: bounded, checked, READ again when torn (`listing.rs`). Old nodes refuse the
//! flag as malformed; the format is new, so `PROTOCOL_VERSION` stays.

mod announce;
mod auth;
pub mod codec;
mod connect;
mod control;
mod credential;
mod error;
mod listing;
mod topic;

#[cfg(test)]
mod golden;
#[cfg(test)]
mod tests;

pub use announce::{AnnounceKind, Announcement, OpenError, SEAL_OVERHEAD};
pub use auth::{Secret, SecretError};
pub use connect::{
    AcceptAuthError, AcceptData, AcceptTags, ConnectAuth, ConnectData, ConnectFlags, MessageTypeTag, PolicyKind,
    PolicySet, RejectCode, RejectData, StartAt, MAX_TYPE_NAME,
};
pub use control::{Control, DropReason, CONTROL_MSG_MAX, DOORBELL_MSG_MAX, DOORBELL_RECORDS_MAX};
pub use credential::CredentialError;
pub use credential::{source_network, wall_clock_ms, Admitted, ReplayGuard, MAX_REPLAY_ENTRIES_PER_SOURCE};
pub use error::ProtocolError;
pub use listing::{
    ListedTopic, ListingAccept, ListingHeader, ListingReadError, TopicListing, LISTING_HEADER_LEN, LISTING_REGION_LEN,
    MAX_LISTED_NAME, MAX_LISTED_TOPICS, MAX_LISTING_BODY,
};
pub use topic::TopicId;

// What only the tests and the fuzz targets name.
pub use announce::{SealedAnnouncement, ANNOUNCE_MTU, ANNOUNCE_TAG_LEN, MAX_ANNOUNCEMENT, SEALED_HEADER_LEN};
pub use auth::{MAC_LEN, MAX_SECRET_LEN, MIN_SECRET_LEN};
pub use connect::{ACCEPT_LABEL, MAX_REJECT_DETAIL};
pub use credential::{Proof, CONNECT_LABEL, MAX_CLOCK_SKEW, MAX_REPLAY_ENTRIES, PROOF_TAG_LEN};
pub use listing::LISTING_ACCEPT_LABEL;

/// Version of this protocol (first byte of every message).
pub const PROTOCOL_VERSION: u8 = 5;
