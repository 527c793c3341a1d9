//! rdma-pubsub: an embedded publish/subscribe middleware over RDMA.
//!
//! Layers, bottom up: [`fabric`] (verbs-shaped transport with a soft and a verbs provider).
#![warn(missing_docs)]

pub mod fabric;
