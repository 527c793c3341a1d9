//! The wire of rdma-pubsub: every byte layout that crosses a process or a network.
//!
//! - [`ring`]: the ring a publisher writes into registered memory and subscribers read with
//!   one-sided RDMA READs: its control block, its records, the producer that appends and the
//!   reader that parses what a READ brought back (which may race a write).
//! - [`protocol`]: the messages around the ring: the connect, accept and reject private data
//!   of RDMA-CM, the control SENDs (credits, acks, goodbyes) and the discovery announcements.
//! - [`key_expr`] and [`topic`]: the names streams go by: key expressions (Zenoh's, with `*`,
//!   `**` and `$*` wildcards) that subscriptions match, and topics, the wildcard-free key
//!   expressions publishers publish under, with the id they carry on the wire.
//!
//! Every decoder here takes bytes from a peer that may be hostile: each length, count and id is
//! bounded before it is used, and errors are typed ([`ring::RingError`],
//! [`protocol::ProtocolError`]). The fuzz targets (`fuzz/`) depend on this crate directly.

#![warn(missing_docs)]
#![warn(clippy::missing_errors_doc)]

pub mod key_expr;
pub mod protocol;
pub mod ring;
pub mod topic;

pub use key_expr::{KeyExpr, KeyExprError, MAX_KEY_EXPR_LEN};
pub use topic::{Topic, TopicError, MAX_TOPIC_LEN};
