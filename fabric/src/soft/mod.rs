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
//! # Frames and checks
//!
//! The frames (`wire`): a 32-byte little-endian header and an optional payload; CONNECT_REQ,
//! ACCEPT, REJECT (private data, its limits enforced again on decode), DISCONNECT, SEND,
//! SEND_IMM, WRITE, READ_REQ, READ_RESP (data or a NAK status), ACK (of a SEND or WRITE, or a
//! NAK: RNR exceeded, remote access, remote invalid request), and HELLO and READY for queue
//! pairs connected by hand. The decoder rejects anything malformed without panicking; a
//! connection that sends garbage is closed.
//!
//! The NIC checks every READ_REQ and WRITE against the region table of the queue pair's
//! protection domain, as a NIC does (`regions`): an unknown rkey (forged or deregistered), a
//! range outside the region, another PD, or missing REMOTE_READ/REMOTE_WRITE is a NAK, a
//! `RemoteAccessError` at the requester, and no byte moves. rkeys are random 32-bit values.
//!
//! # Cost
//!
//! No extra copy on the bulk path: a READ response is written to the socket straight from the
//! registered memory (`sendmsg` of header and raw range) and the requester receives the payload
//! straight into the destination region, so per byte it costs what a TCP stream costs. That is
//! CPU time, unlike a hardware NIC's DMA: on 2 vCPUs the two NIC threads spend about 410–450 µs
//! per MiB READ, competing with the publisher's copy and checksum and the subscriber's
//! validation, which bounds large-message pub/sub goodput on soft to about two thirds of raw
//! READ goodput there (`benches/pubsub.rs` prints the split). Sockets are non-blocking with a
//! per-connection output queue; WRITABLE interest only while something is queued, so two NICs
//! READing each other never deadlock. A posting thread writes its frame itself when nothing is
//! queued ahead (no wake-up of the NIC thread). A thread polling an empty CQ while one of its
//! READs is on the wire reads a small READ response (up to 16 KiB) from the socket itself, into
//! the READ's destination (`conn/responses.rs`): the requester's NIC thread is not a hop of a
//! small READ; large ones it receives while the poller works on the READ before.
//!
//! # Limits
//!
//! As on hardware: private data 56/196/148 bytes, the UD MTU (default 1024, the Soft-RoCE
//! value), queue and CQ depths (an overrun is `Error::CqOverrun`), RNR, READ depths
//! (CONNECT_REQ and ACCEPT carry the RNR retries, initiator depth and responder resources in
//! `aux`). Against peers that do not keep to them (they may write frames themselves), each
//! counted in `Fabric::counters`:
//!
//! - a responder whose queued READ responses would exceed its responder resources cuts the
//!   connection;
//! - the answers queued for a peer are capped at [`OUT_CAP`] (1 MiB of frames; READ data is
//!   sent from registered memory and not counted, nor are this end's own requests, which the
//!   send queue bounds): over it the NIC stops reading that peer until it has read down to
//!   [`OUT_RESUME`] (256 KiB), and cuts it after [`OUTPUT_STALL_TIMEOUT`] (2 s) without a byte
//!   written;
//! - a refused READ or WRITE puts the responder's queue pair in error (on the same-host path
//!   the requester sends a copy it refuses to the responder's NIC as a network request, which
//!   judges it the same way);
//! - at most [`MAX_PENDING_HANDSHAKES_PER_SOURCE`] (64) incoming connections per source IP and
//!   [`MAX_PENDING_HANDSHAKES`] (1,024) in all may be in their connect handshake (until the
//!   application answers), more are closed at once, and a silent one is closed after
//!   [`HANDSHAKE_TIMEOUT`] (5 s). The data port's streams of queue pairs connected by hand count
//!   the same; a malformed or unmatched hello is closed and counted (`rejected_hellos`).
//!
//! What only this provider promises (its choice where the contract allows several outcomes,
//! framing, timers and limits, UD port sharing) is tested in `soft/tests.rs`; queue pairs
//! connected by hand from the wire in `soft/hand_tests.rs`; the contract itself by the
//! conformance suite.
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
//! | connection | `conn/` (`phase`, `out_queue`, `receive`, `qp_state`, `by_hand`, `mod`, `responses`) | one RC connection: its output queue, the NIC's receive state of it, its queue-pair state, the answers to its requests (ACKs, READ responses: the NIC's, or a polling thread's), what a queue pair connected by hand adds (state machine, endpoints, who dials); `Conn`, `ConnState` and the CM event `NicCmEvent` it produces |
//! | connection table | `connections` | the open connections and listening sockets of a device, by id; queue pairs connected by hand by number; the data port |
//! | handles | `hand_qp`, `qp`, `cm` | queue pairs connected by hand: creating, endpoint, INIT/RTR/RTS; posting on a queue pair; event channels, listeners, connect, accept, reject |
//! | NIC thread | `nic/` (`state`, `teardown`, `hand_streams`, `cm_frames`, `data_frames`, `reader`, `timeouts`, `same_host`, `event_loop`) | the `mio` loop, the frame parser, the READ responder, SENDs and RNR, timers, teardown, binding the streams of queue pairs connected by hand |
//! | top | `open` | opening a device: the device object (`SoftFabric`) that creates the others, and its fault injector |

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
pub(crate) use shm::{ShmView, ViewRefused};
pub(crate) use srq::SoftSrq;
pub(crate) use ud::SoftUd;

/// What a soft queue pair is created with: its settings and the soft objects it uses.
pub(crate) type SoftQpInit = crate::provider::QpInitAttr<SoftPd, SoftCq, SoftSrq>;
