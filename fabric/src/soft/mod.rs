//! The soft provider: verbs semantics in user space over TCP (RC) and UDP multicast (UD).
//!
//! Each opened device runs one NIC thread (`nic`) with a `mio` loop over its listeners and
//! connections. An RC queue pair is one TCP connection carrying the frames of `wire`; the NIC
//! serves remote READs and WRITEs straight from and into registered memory (checked against
//! the region table of the queue pair's protection domain) without the owner's threads, and
//! posting threads write their frames to the socket themselves when nothing is queued.
//!
//! Between devices of one host, READs, WRITEs and small SENDs take the same-host path instead
//! (`shm`): this end's threads copy between its buffers and a mapping of the peer's region
//! (read-only unless the region grants remote write), with the same checks, and write SENDs
//! into the peer's inbox.
//!
//! A queue pair connected by hand (`hand_qp`, no connection manager) gets its connection when
//! it is created, without a stream: its endpoint names the device's data port (a TCP listener
//! made with the first such queue pair). At RTR the end with the larger (GID, LID, queue pair
//! number) dials the peer's data port and sends a hello; the peer's NIC binds the stream to the
//! queue pair whose peer endpoint predicts that hello (`nic/hand_streams.rs`), and from then on
//! it is an RC connection like any other.
//!
//! # Layers
//!
//! Bottom first: a file imports only from its own row (in the order listed) and the rows above
//! it, so no two files import each other, directly or not. The files of `nic/` share the NIC
//! thread's state (`nic/state.rs`) and call down in their listed order.
//!
//! | layer | modules | job |
//! |---|---|---|
//! | leaves | `wire`, `hello`, `hello_streams`, `timers`, `seg`, `events`, `handshakes` | the frame codec; the hello of a stream of a queue pair connected by hand; the data port's streams waiting for theirs; the NIC's timers; a range of registered memory; a CM channel's event queue; the handshake limits |
//! | same host | `shm/` | the same-host path: endpoint, streams, key table, mappings, inboxes, receive pools, bells |
//! | device | `regions`, `device` | the region table and its remote checks; what the NIC thread and the objects share (`DeviceState`, `NicCommand`, counters) and the `Device` that owns the NIC thread |
//! | objects | `mr`, `cq`, `ud`, `recv`, `srq`, `pd` | memory regions, completion queues, UD endpoints, posted receives and the local SGE check (against the region handle, `crate::region`), shared receive queues, protection domains |
//! | connection | `conn/` (`phase`, `out_queue`, `receive`, `qp_state`, `by_hand`, `mod`) | one RC connection: its output queue, the NIC's receive state of it, its queue-pair state, what a queue pair connected by hand adds (state machine, endpoints, who dials); `Conn`, `ConnState` and the CM event `NicCmEvent` it produces |
//! | connection table | `connections` | the open connections and listening sockets of a device, by id; queue pairs connected by hand by number; the data port |
//! | handles | `hand_qp`, `qp`, `cm` | queue pairs connected by hand: creating, endpoint, INIT/RTR/RTS; posting on a queue pair; event channels, listeners, connect, accept, reject |
//! | NIC thread | `nic/` (`state`, `teardown`, `hand_streams`, `cm_frames`, `data_frames`, `reader`, `timeouts`, `same_host`, `event_loop`) | the `mio` loop, the frame parser, the READ responder, SENDs and RNR, timers, teardown, binding the streams of queue pairs connected by hand |
//! | top | `open` | opening a device: the device object (`SoftFabric`) that creates the others, and its fault injector |
//!
//! # How it works
//!
//! Verbs semantics in user space: an RC queue pair is one TCP connection (TCP_NODELAY); UD is UDP
//! multicast. Each opened device runs one NIC thread (`nic/`); it stops and is joined when the
//! last handle of the device drops.
//!
//! Its files, bottom first (each imports only from the rows above it; the table in `soft/mod.rs`
//! says more):
//!
//! | layer | files | job |
//! |---|---|---|
//! | leaves | `wire.rs`, `hello.rs`, `hello_streams.rs`, `timers.rs`, `seg.rs`, `events.rs`, `handshakes.rs` | frame codec, the hello of a queue pair connected by hand and the data port's streams waiting for theirs, the NIC's timers, a range of registered memory, a CM channel's event queue, handshake limits |
//! | same host | `shm/` | the same-host path (below) |
//! | device | `regions.rs`, `device.rs` | the region table and its remote checks; the state the NIC thread and the objects share, and the `Device` that owns the NIC thread |
//! | objects | `mr.rs`, `cq.rs`, `ud.rs`, `recv.rs`, `srq.rs`, `pd.rs` | memory regions, CQs, UD endpoints, posted receives, SRQs, protection domains |
//! | connection | `conn/` | one RC connection: output queue, the NIC's receive state, queue-pair state, what a queue pair connected by hand adds (`by_hand.rs`), its CM events |
//! | | `connections.rs` | the open connections and listeners of a device, by id; queue pairs connected by hand by number; the data port |
//! | handles | `hand_qp.rs`, `qp.rs`, `cm.rs` | queue pairs connected by hand (create, endpoint, INIT/RTR/RTS); posting; event channels, listen, connect, accept, reject |
//! | NIC thread | `nic/` | `event_loop.rs`, `reader.rs` (framing), `data_frames.rs` (the READ responder, WRITEs, SENDs and RNR, completions), `cm_frames.rs`, `hand_streams.rs` (binding the streams of queue pairs connected by hand), `timeouts.rs`, `teardown.rs`, `same_host.rs`, `state.rs` |
//! | top | `open.rs` | opening a device: the device object (`SoftFabric`) that creates the others, and its fault injector |
//!
//! - Wire (`wire.rs`): a 32-byte little-endian header `version | type | status | reserved | psn |
//!   len | rkey | addr | imm | aux` and an optional payload. Frame types: CONNECT_REQ, ACCEPT,
//!   REJECT (payload = private data, limits enforced again on decode), DISCONNECT, SEND, SEND_IMM,
//!   WRITE, READ_REQ, READ_RESP (data or NAK status), ACK (of SEND/WRITE, or NAK: RNR exceeded,
//!   remote access, remote invalid request), HELLO and READY (queue pairs connected by hand, below:
//!   a hello's 24-byte payload, `qp_num | psn | lid | port | 0 | target qp_num | target psn | 0`,
//!   has exactly its length). The decoder rejects anything malformed without
//!   panicking; a connection that sends garbage is closed.
//! - The NIC checks every READ_REQ/WRITE against the region table of the QP's protection domain,
//!   exactly as a NIC does: unknown rkey (forged or deregistered), range outside the region, another
//!   PD, or missing REMOTE_READ/REMOTE_WRITE → NAK → `RemoteAccessError` at the requester and no
//!   byte of memory moves. rkeys are random 32-bit values.
//! - Zero extra copies on the bulk path: a READ response is written to the socket straight from the
//!   registered memory (`sendmsg` of header + raw range) and the requester receives the payload
//!   straight into the destination region, so per byte it costs what a TCP stream costs.
//!   That cost is CPU time, unlike a hardware NIC's DMA: on 2 vCPUs the two NIC threads spend
//!   about 410-450 µs per MiB READ (sender and receiver copies), and the publisher's copy and
//!   checksum and the subscriber's validation compete with them for the same CPUs. This bounds
//!   large-message pub/sub goodput on soft to about two thirds of raw READ goodput there
//!   (`benches/pubsub.rs` prints the split); on verbs the copies are the device's.
//! - Non-blocking sockets with a per-connection output queue and partial-write state; WRITABLE
//!   interest only while something is queued, so two NICs READing each other never deadlock. A
//!   posting thread writes its frame itself when nothing is queued ahead (no wake-up of the NIC).
//! - Limits as on hardware: private data 56/196/148 bytes, UD MTU (default 1024, the Soft-RoCE
//!   value), queue depths, CQ depth (overrun is `Error::CqOverrun`), RNR, READ depths (CONNECT_REQ
//!   and ACCEPT carry rnr_retry, initiator depth and responder resources in `aux`, `wire::CmParams`).
//! - Against peers that do not keep to them (they may write frames themselves): a responder whose
//!   queued READ responses would exceed its responder resources cuts the connection; the memory of
//!   answers queued for a peer is capped at `OUT_CAP` (1 MiB of frames: READ data is sent from
//!   registered memory and not counted; nor are this end's own requests, which the send queue bounds),
//!   over which the NIC stops reading that peer until it has read down to `OUT_RESUME` (256 KiB), and
//!   cuts it after `OUTPUT_STALL_TIMEOUT` (2 s) without a byte written; a refused READ or WRITE puts
//!   the responder's QP in error (on the same-host path the requester sends a copy it refuses to the
//!   responder's NIC as a network request, which judges it the same way); at most 64 incoming
//!   connections per source IP and 1024 in all may be in their connect handshake (until the
//!   application answers), more are closed at once, and a silent one is closed after 5 s. Each is
//!   counted (`Fabric::counters`).
//!
//!
//! ## Queue pairs connected by hand (`hand_qp.rs`, `nic/hand_streams.rs`)
//!
//! `Fabric::create_qp` makes the queue pair's connection at once, without a stream, in RESET. Its
//! endpoint names the device's *data port*, a TCP listener on the device's address made with the
//! first such queue pair: the GID is that address IPv4-mapped (or IPv6), the LID its port, the port
//! 1, the MTU 4096, the PSN random (24 bits). At RTR both ends know both endpoints, and the end with
//! the larger (GID, LID, queue pair number) dials the other's data port and sends a HELLO frame
//! naming both queue pairs by number and PSN (and its same-host offer, as a CONNECT_REQ carries it).
//! The other end's NIC reads exactly that frame, checks it (bounds, then that it is exactly the
//! hello its queue pair's peer endpoint predicts), binds the stream to that queue pair and answers
//! with its own HELLO, checked the same way by the dialer; a hello for a queue pair not yet in RTR
//! waits for it. From then on the stream is an RC connection like one the connection manager made
//! (RNR, flushes, disconnect on drop, the remote checks, the same-host path); RTS sends a READY
//! frame with this end's RNR retries, which the peer applies to its SENDs, and the READ depths are
//! RTR's `max_dest_rd_atomic` and RTS's `max_rd_atomic`, not negotiated (as on verbs). INIT's access
//! flags bound what the peer may do on both paths. Requests posted in RTS before the stream is bound
//! wait in the send queue; if it is not bound within RTS's `timeout` and `retry_count` (4.096 µs ×
//! 2^timeout per try, at most 30 s; `timeout` 0 takes the 30 s) they fail with
//! `TransportRetryExceeded` and the queue pair goes to ERROR, as requests nobody answers do (a wrong
//! remote QPN, a peer gone). A dialer whose stream is refused or lost before it is bound does not
//! dial again, so a peer must reach RTR within the handshake timeout of this end's RTR, as the seed
//! programs' flow does. The data port's streams count as connect handshakes (64 per source, 1,024 in
//! all, 5 s); a malformed or unmatched hello is closed and counted (`rejected_hellos`). As on RDMA,
//! the numbers and PSNs are the only credential: whoever knows both endpoints can open the stream
//! first. A device bound to the unspecified address names it in its GID, which reaches it from its
//! own host only.
//!

mod cm;
mod conn;
mod connections;
mod cq;
mod device;
mod events;
mod hand_qp;
mod handshakes;
mod hello;
mod hello_streams;
mod mr;
mod nic;
mod open;
mod pd;
mod qp;
mod recv;
mod regions;
mod seg;
mod shm;
mod srq;
mod timers;
mod ud;
pub mod wire;

#[cfg(test)]
mod hand_tests;
#[cfg(test)]
mod tests;

// The NIC's limits: how much it queues, how many handshakes it holds and for how long.
pub use conn::{OUT_CAP, OUT_RESUME};
pub use handshakes::{HANDSHAKE_TIMEOUT, MAX_PENDING_HANDSHAKES, MAX_PENDING_HANDSHAKES_PER_SOURCE};
pub use nic::OUTPUT_STALL_TIMEOUT;

// The provider's objects, which the handles of the crate hold as their `Soft` flavor.
pub(crate) use cm::{SoftChannel, SoftConnRequest, SoftListener};
pub(crate) use cq::SoftCq;
pub(crate) use mr::SoftMr;
pub(crate) use open::{open, SoftFabric, SoftFaults};
pub(crate) use pd::SoftPd;
pub(crate) use qp::SoftQp;
pub(crate) use srq::SoftSrq;
pub(crate) use ud::SoftUd;

/// What a soft queue pair is created with: its settings and the soft objects it uses.
pub(crate) type SoftQpInit = crate::provider::QpInitAttr<SoftPd, SoftCq, SoftSrq>;
