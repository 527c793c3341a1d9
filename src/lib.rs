//! rdma-pubsub: an embedded publish/subscribe middleware over RDMA.
//!
//! A process creates a [`Node`], publishes on topics with a [`Publisher`] and subscribes with a
//! [`Subscription`]. Publishers write messages into a ring in a registered memory region;
//! subscribers pull it with one-sided RDMA READs and acknowledge with SENDs, which are the
//! publisher's flow-control credits. Nodes discover each other's publishers over UD multicast
//! (or unicast to listed peers) and subscriptions connect to them by themselves
//! ([`DiscoveryOptions`]).
//!
//! Layers, bottom up: [`fabric`] (verbs-shaped transport with a soft and a verbs provider) →
//! [`ring`] (record layout, producer, remote reader) → [`protocol`] (private data, control
//! messages, announcements) → [`node`] (the embedded broker) → the API re-exported here.
//!
//! ```no_run
//! use rdma_pubsub::{Node, Start, SubscriptionOptions};
//! # fn main() -> rdma_pubsub::Result<()> {
//! let node = Node::builder().build()?;
//! let publisher = node.publisher("prices")?;
//! let mut sub = node.subscribe_with("prices", SubscriptionOptions { start: Start::Earliest, ..Default::default() })?;
//! sub.connect_wait(node.local_addr(), std::time::Duration::from_secs(5))?;
//! publisher.publish(b"hello")?;
//! let message = sub.recv()?;
//! assert_eq!(message.data, b"hello");
//! # Ok(()) }
//! ```
#![warn(missing_docs)]

pub mod error;
pub mod fabric;
pub mod node;
pub mod protocol;
pub mod ring;
pub mod stats;
mod time;

pub use error::{Error, Result};
pub use fabric::FabricKind;
pub use node::{
    Claim, DiscoveryCounters, DiscoveryOptions, LostReason, Message, MessageRef, Node, NodeBuilder, NodeCounters,
    PeerInfo, Policy, Publisher, PublisherCounters, PublisherInfo, PublisherOptions, Start, Subscription,
    SubscriptionCounters, SubscriptionEvent, SubscriptionOptions,
};
pub use protocol::Secret;
pub use ring::Checksum;

/// The README's usage example, compiled and run as a doc test so that it stays true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeUsage;
