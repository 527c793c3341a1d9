//! The same-host path of the soft provider: when both ends of a connection run on this host,
//! RDMA READs and WRITEs become copies by the requester's threads between its registered
//! memory and a mapping of the responder's region, and small SENDs are written into the
//! responder's inbox, with no NIC thread and no socket.
//!
//! - **Detection** happens when a connection is set up, never from an address: each device
//!   with the path on listens on an abstract Unix socket named by a random token. A connect
//!   request offers the requester's token, boot identity and a nonce; an accept answers with
//!   the acceptor's. Each end that finds the same boot identity connects to the other's socket
//!   and opens the stream with the nonce it was given, which binds the stream to that one
//!   connection at the other end. A Unix connection only succeeds within one kernel.
//! - **Regions**: every registered buffer is its own sealed memory object
//!   ([`crate::memory`]). The first time a requester targets an rkey it asks over its
//!   stream; the owner's NIC thread checks the rkey, the connection's protection domain and the
//!   access flags, and answers with the object's descriptor (a read-only one unless the region
//!   grants remote write) and the region's slot in the owner's key table ([`keys`]).
//! - **Checks**: bounds and access on every operation, and the key-table word before and after
//!   every copy: deregistration revokes access at once (a remote access error, never stale
//!   bytes). Mappings are checked to be sealed and large enough, so the owner's exit or
//!   deregistration never faults the requester.
//! - **SENDs** of at most [`inbox::MAX_INLINE`] bytes with nothing in flight before them are
//!   written by the posting thread into the responder's inbox ([`inbox`]) with one of the
//!   receive credits the responder granted to this sender alone ([`pool`]), and ring its CQ's
//!   [`bell`]; the others take the stream.
//! - **Ordering**: a copy runs when it is posted if nothing is in flight before it, else once
//!   the requests before it have completed (on the NIC thread), as RC executes requests in
//!   order at the responder; the responder places inbox SENDs before anything that could see
//!   what the peer did after them.
//!
//! Failure modes: a peer that never answers a request within [`ANSWER_TIMEOUT`](endpoint::ANSWER_TIMEOUT) fails it with
//! a transport error; a stream that breaks fails later requests the same way; a responder
//! whose queue pair failed or closed is never read again (its connection slot is revoked).

mod bell;
mod client;
mod endpoint;
mod fds;
mod inbox;
mod keys;
mod map;
mod pool;
mod proto;
mod serve;
#[cfg(test)]
mod tests;

pub(crate) use bell::Bell;
pub(crate) use client::ShmClient;
pub(crate) use endpoint::{Endpoint, Offer};
pub(crate) use inbox::{Corrupt, Inbox, MAX_INLINE};
pub(crate) use keys::{HeldSlot, KeySlot, SLOTS as KEY_SLOTS};
pub(crate) use map::reopen_read_only;
pub(crate) use pool::{Credits, NoCredit};
pub(crate) use proto::Answer;
pub(crate) use serve::{Owner, Streams, LISTENER_TOKEN};
