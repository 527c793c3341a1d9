//! The wire protocol between nodes, independent of the transport: connection-manager private
//! data ([`ConnectData`], [`AcceptData`], [`RejectData`]), control SENDs ([`Control`]) and
//! discovery datagrams ([`Announcement`]).
//!
//! Every message is `[PROTOCOL_VERSION, kind, body]` with a bincode 2 body
//! (`config::standard()`) decoded under a size limit; decoding never panics, and trailing zero
//! padding (as the connection manager adds to private data) is accepted. Topics travel as
//! [`TopicId`], a stable FNV-1a hash of their name. An announcement sealed with a domain
//! secret wraps that frame in a header and a tag ([`Announcement::seal`]).

mod announce;
mod auth;
pub mod codec;
mod connect;
mod control;
mod credential;
mod error;
mod topic;

#[cfg(test)]
mod golden;
#[cfg(test)]
mod tests;

pub use announce::{AnnounceKind, Announcement, OpenError, SEAL_OVERHEAD};
pub use auth::Secret;
pub use connect::{AcceptData, ConnectData, ConnectFlags, PolicyKind, PolicySet, RejectCode, RejectData, StartAt};
pub use control::{Control, DropReason, CONTROL_MSG_MAX};
pub use credential::CredentialError;
pub use credential::{wall_clock_ms, ReplayGuard};
pub use error::ProtocolError;
pub use topic::TopicId;

// What only the tests and the fuzz targets name.
pub use announce::{SealedAnnouncement, ANNOUNCE_MTU, ANNOUNCE_TAG_LEN, MAX_ANNOUNCEMENT, SEALED_HEADER_LEN};
pub use auth::{MAC_LEN, MAX_SECRET_LEN, MIN_SECRET_LEN};
pub use connect::MAX_REJECT_DETAIL;
pub use credential::{Proof, CONNECT_LABEL, MAX_CLOCK_SKEW, MAX_REPLAY_ENTRIES, PROOF_TAG_LEN};

/// Version of this protocol (first byte of every message).
pub const PROTOCOL_VERSION: u8 = 4;
