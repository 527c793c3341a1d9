//! rdma-pubsub: an embedded publish/subscribe middleware over RDMA.
//!
//! A process creates a [`Node`], publishes on topics with a [`Publisher`] and subscribes with a
//! [`Subscription`]. Publishers write messages into a ring in a registered memory region;
//! subscribers pull it with one-sided RDMA READs and acknowledge with SENDs, which are the
//! publisher's flow-control credits. Nodes discover each other's publishers over UD multicast
//! (or unicast to listed peers) and subscriptions connect to them by themselves
//! ([`DiscoveryOptions`]).
//!
//! Layers, bottom up, each a crate: [`fabric`] (the crate `rdma-fabric`: a verbs-shaped
//! transport with a soft and a verbs provider) → `rdma-wire` (ring layout, producer, remote
//! reader; private data, control messages, announcements) → this crate (the node, its
//! publishers, subscriptions, discovery and stats) → the API re-exported here.
//!
//! ```no_run
//! use rdma_pubsub::{Node, Start};
//! # fn main() -> rdma_pubsub::Result<()> {
//! let node = Node::builder().build()?;
//! let publisher = node.publisher("prices").create()?;
//! let mut sub = node.subscriber("prices").start(Start::Earliest).create()?;
//! sub.connect_wait(node.local_addr(), std::time::Duration::from_secs(5))?;
//! publisher.publish(b"hello")?;
//! let message = sub.recv()?;
//! assert_eq!(message.data, b"hello");
//! # Ok(()) }
//! ```
#![warn(missing_docs)]
#![warn(clippy::missing_errors_doc)]

pub mod counters;
pub mod error;
pub mod node;
mod reasons;
pub mod stats;

/// The fabric this crate runs on (the crate `rdma-fabric`): its configuration types are part
/// of this API ([`fabric::FabricConfig`], [`fabric::SoftOptions`], [`fabric::SameHost`]).
pub use rdma_fabric as fabric;

pub use error::{Error, Result};
pub use fabric::FabricKind;
#[cfg(feature = "async")]
pub use node::MessageStream;
pub use node::{
    DiscoveryCounters, DiscoveryOptions, IntoTopic, Loan, LostReason, Message, MessageRef, MessageType, Node,
    NodeBuilder, NodeCounters, PeerInfo, Policy, Publisher, PublisherBuilder, PublisherCounters, PublisherInfo, Start,
    SubscriberBuilder, Subscription, SubscriptionCounters, SubscriptionEvent,
};
pub use rdma_wire::protocol::{Secret, SecretError};
pub use rdma_wire::ring::{Checksum, RingError};
pub use rdma_wire::{KeyExpr, KeyExprError, Topic, TopicError, MAX_KEY_EXPR_LEN, MAX_TOPIC_LEN};
pub use reasons::{DropReason, PolicyKind, RejectCode};

/// The README's usage example, compiled and run as a doc test so that it stays true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeUsage;

#[cfg(test)]
mod manifest_tests {
    /// The `[dependencies]` table of this package's manifest, one line per entry.
    fn normal_dependencies() -> Vec<&'static str> {
        let manifest = include_str!("../Cargo.toml");
        let table = manifest.split("\n[dependencies]\n").nth(1).expect("a [dependencies] table");
        let table = table.split("\n[").next().unwrap_or(table);
        table.lines().filter(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#')).collect()
    }

    #[test]
    fn the_library_does_not_depend_on_the_demos_crates() {
        let deps = normal_dependencies();
        assert!(deps.iter().any(|l| l.starts_with("thiserror")), "the table was found: {deps:?}");
        for tool_only in ["clap", "hdrhistogram", "tracing-subscriber", "nix", "serde_json"] {
            assert!(
                !deps.iter().any(|l| l.split([' ', '=']).next() == Some(tool_only)),
                "{tool_only} is a dependency of the library, which does not use it"
            );
        }
    }
}
