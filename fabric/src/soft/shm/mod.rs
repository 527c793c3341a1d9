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
//! - **Views** ([`view`]): the layer above may ask, once a connection is established, for a
//!   read-only view of a range of the responder's region, checked as a READ of it is (a
//!   refused one fails the queue pair as the READ's completion would); it reads the ring in
//!   place with acquire loads and copies, the key-table words checked around each copy.
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
//!
//! # Details
//!
//! - **Enabling.** `SoftOptions::same_host` (`NodeBuilder::same_host`, demo `--same-host`) is
//!   `Auto` by default; `Off` keeps every connection on TCP. An end's path is fixed before
//!   `Established` is delivered (the acceptor decides when it accepts, the requester when it
//!   handles the ACCEPT) and holds for the life of the connection; `QueuePair::data_path` says
//!   which it took (and the node's `PublisherInfo::data_path` and subscription counters
//!   `shared_memory_connects` / `network_connects`). A forged boot identity gains nothing: a
//!   Unix connection only succeeds within one kernel and network namespace, and a failed
//!   attempt leaves that end on TCP.
//! - **Regions.** A region request blocks for at most [`ANSWER_TIMEOUT`](endpoint::ANSWER_TIMEOUT)
//!   (2 s); a refused rkey is asked for again at its next post. The owner answers only for a
//!   live region of that connection's protection domain that grants remote access, and the
//!   first time adds its key table's read-only descriptor. Up to 256 regions stay mapped per
//!   connection, unmapped when it closes. The key table has 65,536 slots
//!   (`generation << 32 | key`); a WRITE racing the owner's deregistration can still land in
//!   the deregistered object and is then reported failed (nothing here uses remote WRITE).
//! - **Ordering.** A copy posted behind requests still on TCP (a SEND not yet acknowledged)
//!   waits in the send queue and runs on the NIC thread that handles the last
//!   acknowledgement, so a READ never runs before a SEND posted ahead of it is placed (a
//!   subscriber parking behind its doorbell request relies on that); completions come in post
//!   order (conformance `rc_read_behind_a_waiting_send_completes_after_it`). A SEND posted
//!   behind a waiting copy may be placed before that copy runs (RC would not; nothing in the
//!   node depends on it). The responder places inbox SENDs when its receive CQ is polled,
//!   before its NIC places a SEND of the stream, before its queue pair is flushed
//!   (`sends_completed_before_a_disconnect_are_received`) and around a failed copy;
//!   `rc_sends_of_every_size_arrive_in_post_order` checks order across the two ways.
//! - **Wake-ups** go through the receive CQ's [`bell`]: whoever queues a completion rings it
//!   (the NIC thread, a posting thread, a poller placing inbox SENDs, a same-host sender after
//!   each SEND, through an eventfd of its own), with a system call only while the owner is
//!   armed; the owner waits on an epoll set of those eventfds, which is also the descriptor
//!   for owners in an event loop.
//! - **Connection liveness.** Each end keeps a key-table slot for its queue pair while it
//!   answers requests and revokes it when the queue pair fails or closes; copies and inbox
//!   SENDs check it, so a peer that dropped the connection is not read any more (a READ then
//!   fails with `TransportRetryExceeded`, as against a responder in the error state). Without
//!   it a subscriber kept copying a publisher's ring for a moment after the publisher had cut
//!   it, and saw a lap as a gap (`faults::publisher_side_cuts_mid_ack_surface_to_every_subscriber_and_publishing_goes_on`).
//! - **Locks.** A region or inbox request waits for the peer's NIC thread, so it is made under
//!   the client's stream lock alone, before the connection's lock; what requests mapped sits
//!   under a second lock never held while waiting, the only one copies and inbox SENDs take:
//!   two processes asking each other for regions cannot hold each other's NIC threads
//!   (`tests::a_request_waiting_for_the_peer_holds_up_no_copy_or_send`).
//! - **Failure modes.** The owner's death leaves the requester's mappings valid (the memory
//!   object lives while mapped); its TCP connection ends and the queue pair fails
//!   (conformance `rc_errors::read_from_a_peer_process_killed_mid_read`). Any local process can
//!   connect to a device's socket: a stream whose first 16 bytes are not a hello with an
//!   offered nonce is closed, at most 64 streams may wait for their hello (the oldest is closed
//!   first), and a bound stream that sends anything but well-formed requests, or does not read
//!   its answers, is closed. Inbox writes, credits and bells of a peer are never trusted, and
//!   no peer can delay another's SENDs or wake-ups (see [`inbox`], [`pool`], [`bell`]).
//!
//! The path's own tests are in `tests.rs`; the whole conformance suite runs on both paths
//! (`soft::*` with it, `soft_network::*` without), and `scripts/test.sh` runs the end-to-end
//! suites again with `RDMA_PUBSUB_TEST_SAME_HOST=off`.

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
pub(super) mod tests;
mod view;

pub(crate) use bell::{Bell, SenderFds};
pub(crate) use client::ShmClient;
pub(crate) use endpoint::{Endpoint, Offer};
pub(crate) use inbox::{Corrupt, Inbox, MAX_INLINE};
pub(crate) use keys::{HeldSlot, KeySlot, SLOTS as KEY_SLOTS};
pub(crate) use map::reopen_read_only;
pub(crate) use pool::{Credits, NoCredit};
pub(crate) use proto::Answer;
pub(crate) use serve::{Owner, Streams, LISTENER_TOKEN};
pub(crate) use view::{ShmView, ViewRefused};
