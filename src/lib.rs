//! rdma-pubsub: an embedded publish/subscribe middleware over RDMA.
//!
//! Layers, bottom up: [`fabric`] (verbs-shaped transport with a soft and a verbs provider),
//! [`ring`] (the publisher's ring: record layout, producer, remote reader), [`protocol`] (what
//! travels in private data, SENDs and discovery datagrams).
#![warn(missing_docs)]

pub mod fabric;
pub mod protocol;
pub mod ring;
