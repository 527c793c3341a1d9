//! Errors of the public API: what went wrong, with enough context to act on it.

use std::net::SocketAddr;

use crate::fabric;
use rdma_wire::protocol::{ProtocolError, RejectCode};
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
    /// Bytes from a peer did not decode.
    #[error("protocol: {0}")]
    Protocol(#[from] ProtocolError),
    /// A ring record or control block broke the layout rules, or an option does not fit it.
    #[error("ring: {0}")]
    Ring(#[from] RingError),
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
    /// A publisher refused the subscription.
    #[error("publisher at {peer} rejected the subscription: {reason:?} {detail}")]
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
    /// No node answered at that address: nothing listens there, or nothing answered in time.
    #[error("{peer} is unreachable: {detail}")]
    Unreachable {
        /// The address tried.
        peer: SocketAddr,
        /// What the fabric said.
        detail: String,
    },
    /// A subscription has nothing to receive from: no publisher is connected or being
    /// connected, and discovery (which would find them) is off, so waiting could never end.
    #[error(
        "the subscription to {topic:?} has no publisher to receive from and discovery is off: connect one (Subscription::connect) or build the node with discovery"
    )]
    NotConnected {
        /// The subscription's topic.
        topic: String,
    },
    /// A message could not be serialized.
    #[error("serializing a message failed: {0}")]
    Encode(String),
    /// A message could not be deserialized into the requested type.
    #[error("deserializing a message failed: {0}")]
    Decode(String),
    /// The subscription has no publisher left and nothing more to deliver, or the node is closed.
    #[error("closed: {0}")]
    Closed(&'static str),
}

impl Error {
    /// Whether this error is about one message the subscription could not deliver (it does
    /// not decode, or it is over the subscription's limit): the next receive goes on.
    pub(crate) fn is_undeliverable_message(&self) -> bool {
        matches!(self, Error::Decode(_) | Error::MessageTooLarge { .. })
    }
}
