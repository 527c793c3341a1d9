//! Errors of the public API: what went wrong, with enough context to act on it.

use std::net::SocketAddr;

use crate::fabric;
use crate::reasons::{DropReason, RejectCode};
use rdma_wire::protocol::{ProtocolError, SecretError};
use rdma_wire::ring::RingError;

/// Result alias of the public API.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// An error of a node, publisher or subscription.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The transport failed.
    #[error("fabric: {0}")]
    Fabric(#[from] fabric::Error),
    /// A peer sent what the protocol does not allow: bytes that do not decode, or a ring
    /// whose records or control block break the layout's rules. The connection to it ends.
    #[error("a peer broke the protocol: {detail}")]
    PeerMisbehaved {
        /// What it sent, and which rule it broke.
        detail: String,
    },
    /// A secret (a domain secret or a topic credential) could not be made or read.
    #[error(transparent)]
    InvalidSecret(#[from] SecretError),
    /// A broken invariant of this library (a bug, to report with the detail): a message of
    /// its own that does not encode, a ring write out of its own bounds.
    #[error("internal error of rdma-pubsub (please report): {detail}")]
    Internal {
        /// What broke.
        detail: String,
    },
    /// A [`Loan`](crate::Loan) of this publisher is outstanding: send or drop it first.
    #[error("a loan of this publisher is outstanding: send or drop it first")]
    LoanOutstanding,
    /// A blocking call ran out of time.
    #[error("{what} timed out after {millis} ms")]
    Timeout {
        /// What was waited for.
        what: &'static str,
        /// How long.
        millis: u64,
    },
    /// The topic name is not usable.
    #[error("invalid topic name {topic:?}: {detail}")]
    InvalidTopic {
        /// The name given.
        topic: String,
        /// Which rule it breaks (see [`Topic`](crate::Topic)).
        detail: String,
    },
    /// A subscription to a pattern has no way to find its publishers: no discovery (the
    /// node's discovery is off, or the subscription's `auto_connect`) and no address to
    /// connect to. Give it the addresses of the publishers' nodes
    /// ([`SubscriberBuilder::connect`](crate::SubscriberBuilder::connect): it reads their topic
    /// listings), list those nodes for discovery
    /// ([`DiscoveryOptions::unicast`](crate::DiscoveryOptions::unicast)), or subscribe to each
    /// topic by name.
    #[error(
        "the pattern {pattern:?} has no way to find publishers: {detail}, and it has no address to connect to: \
         give it the publishers' nodes (SubscriberBuilder::connect), list them with DiscoveryOptions::unicast, \
         or subscribe to each topic by name"
    )]
    PatternNeedsDiscovery {
        /// The pattern, in canonical form.
        pattern: String,
        /// Why there is no discovery.
        detail: &'static str,
    },
    /// This node already publishes the topic.
    #[error(
        "this node already publishes topic {topic:?}: share the Publisher (it is Send + Sync) or use another node"
    )]
    AlreadyPublishing {
        /// The topic.
        topic: String,
    },
    /// An option is out of range.
    #[error("invalid option {option}: {detail}")]
    InvalidOption {
        /// Which option.
        option: &'static str,
        /// Why.
        detail: String,
    },
    /// A publisher refused the subscription, or (with
    /// [`RejectCode::TypeMismatch`]) the subscription refused
    /// the publisher's message type.
    #[error("publisher at {peer} and this subscription do not connect: {reason:?}: {detail}")]
    Rejected {
        /// The publisher's node.
        peer: SocketAddr,
        /// Why.
        reason: RejectCode,
        /// The publisher's explanation.
        detail: String,
    },
    /// A publisher's records are larger than the subscription READs
    /// ([`SubscriberBuilder::max_record_payload`](crate::SubscriberBuilder::max_record_payload)).
    #[error("publisher at {peer} has records of up to {len} bytes, over this subscription's limit of {limit}")]
    RecordTooLarge {
        /// The publisher's node.
        peer: SocketAddr,
        /// The record payload it advertised, in bytes.
        len: u64,
        /// The subscription's limit, in bytes.
        limit: u64,
    },
    /// A message is larger than the limit that applies to it: a [`Loan`](crate::Loan) over one
    /// ring record, or a message a publisher sent over a subscription's
    /// [`max_message_len`](crate::SubscriberBuilder::max_message_len).
    #[error("a message of {len} bytes is over the limit of {limit} bytes")]
    MessageTooLarge {
        /// The message's length in bytes.
        len: u64,
        /// The limit in bytes.
        limit: u64,
    },
    /// A publisher's accept did not prove what this subscription requires of it: a tag under
    /// the domain secret (the node is of the domain, not one that took over an announced
    /// address) or under the topic's credential, answering this connect's fresh challenge; or
    /// it came from another publisher than discovery announced at that address.
    #[error("the node at {peer} did not authenticate its accept: {detail}")]
    Unauthenticated {
        /// The publisher's node.
        peer: SocketAddr,
        /// What was missing or wrong.
        detail: String,
    },
    /// No node answered at that address: nothing listens there, or nothing answered in time.
    #[error("{peer} is unreachable: {detail}")]
    Unreachable {
        /// The address tried.
        peer: SocketAddr,
        /// What the fabric said.
        detail: String,
    },
    /// A subscription has no publisher to receive from now: none is connected or being
    /// connected. Without discovery (which would find them) this ends the subscription's
    /// messages (`iter` and the stream end once it was connected); with discovery only
    /// [`try_recv`](crate::Subscription::try_recv) says so, while `recv` waits for one.
    #[error(
        "the subscription to {topic:?} has no publisher to receive from now{}",
        not_connected_hint(.discovery)
    )]
    NotConnected {
        /// The subscription's topic.
        topic: String,
        /// Whether discovery is on for the subscription (a publisher may still be announced).
        discovery: bool,
    },
    /// The publisher at `peer` dropped the subscription, saying why (too slow under
    /// [`Policy::DropSlow`](crate::Policy::DropSlow), idle, a protocol violation): returned by
    /// the receive calls once no other publisher serves the subscription.
    #[error("publisher {publisher:016x} at {peer} dropped the subscription: {reason:?}")]
    Dropped {
        /// The publisher's node.
        peer: SocketAddr,
        /// The publisher's id ([`PublisherInfo::id`](crate::PublisherInfo::id)).
        publisher: u64,
        /// Why.
        reason: DropReason,
    },
    /// The publisher at `peer` sent a message longer than the subscription accepts
    /// ([`SubscriberBuilder::max_message_len`](crate::SubscriberBuilder::max_message_len)): the
    /// subscription stops reading that publisher, since its stream cannot go on without it.
    #[error(
        "publisher {publisher:016x} at {peer} sent a message of {len} bytes, over this subscription's max_message_len of {limit}"
    )]
    MessageOverLimit {
        /// The publisher's node.
        peer: SocketAddr,
        /// The publisher's id ([`PublisherInfo::id`](crate::PublisherInfo::id)).
        publisher: u64,
        /// The message's length in bytes.
        len: u64,
        /// The subscription's limit in bytes.
        limit: u64,
    },
    /// A value could not be serialized into a message.
    #[error("serializing a message failed: {detail}")]
    Encode {
        /// What the codec said.
        detail: String,
    },
    /// A message could not be deserialized into the subscription's type; the next receive
    /// goes on with the next message.
    #[error("message {seq} of publisher {publisher:016x} does not decode: {detail}")]
    Decode {
        /// The id of the publisher that sent it ([`PublisherInfo::id`](crate::PublisherInfo::id)).
        publisher: u64,
        /// Its sequence number.
        seq: u64,
        /// What the codec said.
        detail: String,
    },
    /// The subscription was closed: its own node was dropped, or
    /// [`Subscription::close`](crate::Subscription::close) was called. Every call of the
    /// subscription returns it at once from then on. Nothing else is `Closed`: publishers that
    /// end, leave or refuse are events, and [`Error::NotConnected`], [`Error::Rejected`],
    /// [`Error::Dropped`] at the receive call.
    #[error("closed: {0}")]
    Closed(&'static str),
}

/// What a subscription without a publisher may do about it.
fn not_connected_hint(discovery: &bool) -> &'static str {
    if *discovery {
        " (discovery connects one when it is announced)"
    } else {
        ": discovery is off, so connect one (Subscription::connect) or build the node with discovery"
    }
}

impl Error {
    /// The API's error for what the ring layer says: a configuration it refuses is an option
    /// out of range, a record or control block that breaks the layout is the peer's doing.
    pub(crate) fn from_ring(e: RingError) -> Error {
        match e {
            RingError::InvalidConfig(detail) => {
                Error::InvalidOption { option: "ring_capacity/max_record_payload", detail }
            }
            RingError::MessageTooLarge { len, max } => Error::MessageTooLarge { len, limit: max },
            RingError::ClaimOutstanding => Error::LoanOutstanding,
            RingError::Memory(e) => Error::Fabric(e),
            e @ (RingError::RecordTooLarge { .. } | RingError::BadControl(_) | RingError::Corrupt { .. }) => {
                Error::PeerMisbehaved { detail: e.to_string() }
            }
            e => Error::Internal { detail: e.to_string() },
        }
    }

    /// The API's error for what the ring layer says of the ring of the publisher at `peer`: a
    /// record larger than the subscription reads is [`Error::RecordTooLarge`] naming it.
    pub(crate) fn from_peer_ring(e: RingError, peer: SocketAddr) -> Error {
        match e {
            RingError::RecordTooLarge { len, max, .. } => Error::RecordTooLarge { peer, len, limit: max },
            e => Error::from_ring(e),
        }
    }

    /// The API's error for bytes from a peer that do not decode.
    pub(crate) fn from_peer_bytes(e: ProtocolError) -> Error {
        Error::PeerMisbehaved { detail: e.to_string() }
    }

    /// The API's error for a message of this node's own that does not encode (a bug).
    pub(crate) fn from_own_encoding(e: ProtocolError) -> Error {
        Error::Internal { detail: e.to_string() }
    }

    /// Whether this error is about one message the subscription could not deliver (it does
    /// not decode, or it is over the subscription's limit): the next receive may go on.
    pub(crate) fn is_undeliverable_message(&self) -> bool {
        matches!(self, Error::Decode { .. } | Error::MessageOverLimit { .. })
    }
}
