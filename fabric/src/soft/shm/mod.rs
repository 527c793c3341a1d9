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
//!   written by the posting thread into the responder's inbox ([`inbox`]) after claiming one
//!   of its posted receives ([`pool`]), and ring its CQ's [`bell`]; the others take the stream.
//! - **Ordering**: a copy runs when it is posted if nothing is in flight before it, else once
//!   the requests before it have completed (on the NIC thread), as RC executes requests in
//!   order at the responder; the responder places inbox SENDs before anything that could see
//!   what the peer did after them.
//!
//! Failure modes: a peer that never answers a request within [`ANSWER_TIMEOUT`](endpoint::ANSWER_TIMEOUT) fails it with
//! a transport error; a stream that breaks fails later requests the same way; a responder
//! whose queue pair failed or closed is never read again (its connection slot is revoked).
//!
//! # How it works
//!
//! When both ends of a connection run on this host, a READ (or WRITE) is a copy by the posting
//! thread between its registered memory and a mapping of the peer's region: no NIC thread, no
//! socket, no system call once the region is mapped. `SoftOptions::same_host` (`NodeBuilder::same_host`,
//! demo `--same-host`) is `Auto` by default; `Off` keeps every connection on TCP.
//! `QueuePair::data_path()` says which path an end takes, `PublisherInfo::data_path` and the
//! subscription counters `shared_memory_connects` / `network_connects` (in `pubsub-demo stat`) say
//! it for each connection.
//!
//! - Detection, at connection set-up, never from an address. Each device listens on an abstract
//!   Unix socket named by a random 64-bit token and keeps a key table (below). CONNECT_REQ carries,
//!   in header fields CM frames do not otherwise use, the requester's token, a hash of the kernel's
//!   boot id and a random nonce; ACCEPT answers with the acceptor's. An end that sees the same boot
//!   id connects (without blocking) to the other's socket and opens the stream with the nonce it
//!   was given: the owner of the socket binds the stream to the one connection it offered that
//!   nonce for, and the nonce is spent. A Unix connection only succeeds within one kernel (and
//!   network namespace), so a forged boot id gains nothing; a failed attempt leaves that end on TCP.
//!   The acceptor decides when it accepts, the requester when it handles the ACCEPT, before
//!   `Established` is delivered: an end's path is fixed for the life of the connection.
//! - Regions. The first time a requester targets an rkey it asks over its stream (blocking, at most
//!   2 s; a refused rkey is asked for again at its next post). The owner's NIC thread answers only for a live region of the protection domain of that
//!   connection's queue pair that grants remote access, with the region's memfd attached
//!   (`SCM_RIGHTS`): a read-only descriptor (reopened through `/proc/self/fd`) unless the region
//!   grants remote write, plus, the first time, the key table's read-only descriptor. The requester
//!   maps an object only if its seals forbid shrinking and it is as large as claimed, so a mapping
//!   never faults, whatever the owner does later. Up to 256 regions stay mapped per connection;
//!   they are unmapped when the connection closes.
//! - Checks as a NIC makes them: unknown rkey, other PD or missing access are refused by the owner
//!   (`RemoteAccessError`); bounds and access are checked by the requester on every operation
//!   against what the owner granted. Revocation: the key table is one 64-bit word per region with
//!   remote access and per same-host connection (`generation << 32 | key`, 65,536 slots in all); deregistration zeroes the region's
//!   word before it returns. A copy checks the word before it starts and again after it (an acquire
//!   fence between): a deregistration that overlaps the copy makes it fail with `RemoteAccessError`,
//!   and the requester drops its mapping; stale bytes are never reported as a successful READ.
//!   (A WRITE racing the owner's deregistration can still land in the deregistered object; the
//!   requester then reports it failed. Nothing here uses remote WRITE.)
//! - The copy is `rep movsb` in inline assembly on x86-64 (volatile byte copies elsewhere): the
//!   bytes change under it as under a NIC's DMA, and a torn copy is caught by the ring's validation
//!   exactly as on the network path (`tests/torn_reads.rs` runs on both paths).
//! - Ordering, as RC orders requests at the responder. A copy posted with nothing in flight before
//!   it runs at once, on the posting thread. One posted behind requests still on TCP (a SEND not yet
//!   acknowledged) waits in the send queue and runs when they have completed, on the NIC thread
//!   that handles the last acknowledgement: a READ never runs before a SEND posted ahead of it is
//!   placed at the responder (a subscriber parking behind its doorbell request relies on that; run
//!   early, a publish between the READ and the request was missed and the subscriber slept until its
//!   100 ms recheck). Completions come in post order
//!   (`rc_read_behind_a_waiting_send_completes_after_it` checks both, soft and rxe). A SEND posted
//!   behind a waiting copy may be placed before that copy runs (RC would not; nothing in the node
//!   depends on it).
//! - SENDs (`bell.rs`, `inbox.rs`, `pool.rs`). Each end owns an *inbox* for its peer's SENDs: a
//!   single-producer ring of 64 KiB in a sealed memfd, handed to the peer (read-write) the first
//!   time it posts a SEND of at most 8 KiB, with the end's *receive pool* and the *bell* of its receive CQ. A SEND of at most
//!   8 KiB with nothing in flight before it is written into the inbox by the posting thread, after
//!   it claims one of the responder's posted receives large enough (the pool: counts of posted
//!   receives and their smallest size in a page the peer maps read-only, claims in a page every
//!   sender of that receive queue shares, CAS). A claimed SEND is sure to be placed, so it completes
//!   at once, as a SEND the responder acknowledged. Without a claim (no receive, one too small, no
//!   room, a larger SEND, or one behind a request still on TCP) the SEND takes the stream, where the
//!   responder's NIC applies RNR retries and length errors as on the network path; the NIC claims
//!   from the same pool, so it never takes a receive promised to an inbox SEND.
//!   The responder places inbox SENDs into its receives in order: when its receive CQ is polled
//!   (the bell's count of SENDs written tells a poll when to look: with nothing new, three loads),
//!   before its NIC places a SEND of the stream, before its queue pair is flushed (a SEND that
//!   completed at the sender is received even if a disconnect follows:
//!   `sends_completed_before_a_disconnect_are_received`), and before and after a failed copy (a
//!   peer that completed a SEND before tearing down is seen to have sent it before the failure
//!   its teardown causes). `rc_sends_of_every_size_arrive_in_post_order` checks order across the
//!   two ways, on every provider.
//! - Wake-ups. A CQ waiter sleeps on the futex word of its bell, a page of shared memory: whoever
//!   queues a completion rings it (under the CQ's lock: the NIC thread, a posting thread retiring
//!   a request, a poller placing inbox SENDs), a same-host sender after each SEND it writes (count
//!   first, then a look at what the owner is armed for, both SeqCst, against the owner's
//!   arm-then-poll). A ring makes a syscall only while the owner is armed (once per arming: the
//!   ring disarms it), which includes an owner that armed, found a completion on its second look
//!   and did not sleep. An owner waiting in an event loop (`CompletionQueue::notify_fd`) sets a
//!   word of the bell, after which every ring also writes the bell's eventfd: made on first use
//!   (the owner's call, or the first inbox handed out) and passed with the bell (`SCM_RIGHTS`), so
//!   a peer process wakes the owner's event loop itself, with no NIC thread in between. Until the
//!   owner asks, nothing writes it.
//! - Connection liveness. Each end publishes a key-table slot for its queue pair while it answers
//!   requests and revokes it when the queue pair fails or closes (a cut, a disconnect, an error).
//!   Copies check it with the region's word, and SENDs check it before using the inbox: a peer that
//!   dropped the connection is not read any more, as an RDMA responder in the error state answers
//!   nothing (a READ then fails with `TransportRetryExceeded`). Without it a subscriber kept copying
//!   a publisher's ring for a moment after the publisher had cut it and stopped waiting for it, and
//!   saw a lap as a gap (`faults::publisher_side_cuts_mid_ack…`).
//! - Locks: a region or inbox request waits for the peer's NIC thread, so it is made before the
//!   connection's lock is taken, under the client's stream lock alone (`ShmClient`); what requests
//!   mapped sits under a second lock that is never held while waiting. Copies and inbox SENDs,
//!   which the NIC thread runs under the connection's lock, take only that second lock: two
//!   processes asking each other for regions for the first time cannot hold each other's NIC
//!   threads (`a_request_waiting_for_the_peer_holds_up_no_copy_or_send`).
//! - Failure modes. The owner's death: the requester's mappings stay valid (the memory object lives
//!   while mapped); its TCP connection ends, the queue pair fails and later posts are refused
//!   (`rc_errors::read_from_a_peer_process_killed_mid_read`, and `faults::a_publisher_process_killed_mid_write…`
//!   on both paths). A stream that breaks or an answer that does not come within 2 s fails the
//!   READ with `TransportRetryExceeded`. Any local process can connect to a device's socket: a
//!   stream whose first 16 bytes are not a hello with an offered nonce is closed, and at most 64
//!   streams may wait for their hello (the oldest is closed first); a bound stream that sends
//!   anything but well-formed requests, or does not read its answers, is closed.
//!   A peer's inbox writes are never trusted: the responder keeps its own head, checks the tail
//!   and every entry header (flags, length ≤ 8 KiB, inside the ring and the written part) and fails
//!   the queue pair on anything else; a sender keeps its own tail and treats a head that makes no
//!   sense as a full ring. A peer that forges the shared claims or the bell can only delay other
//!   senders of the same receive queue or wake the owner for nothing, as a peer flooding SENDs
//!   could.
//!

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
pub(crate) use pool::Pool;
pub(crate) use proto::Answer;
pub(crate) use serve::{Owner, Streams, LISTENER_TOKEN};
