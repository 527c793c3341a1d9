//! The wire of rdma-pubsub: every byte layout that crosses a process or a network.
//!
//! - [`ring`]: the ring a publisher writes into registered memory and subscribers read with
//!   one-sided RDMA READs: its control block, its records, the producer that appends and the
//!   reader that parses what a READ brought back (which may race a write).
//! - [`protocol`]: the messages around the ring: the connect, accept and reject private data
//!   of RDMA-CM, the control SENDs (credits, acks, goodbyes) and the discovery announcements.
//!
//! Every decoder here takes bytes from a peer that may be hostile: each length, count and id is
//! bounded before it is used, and errors are typed ([`ring::RingError`],
//! [`protocol::ProtocolError`]). The fuzz targets (`fuzz/`) depend on this crate directly.

#![warn(missing_docs)]
#![warn(clippy::missing_errors_doc)]

pub mod protocol;
pub mod ring;
