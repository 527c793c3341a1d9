//! The fabric: a verbs-shaped transport (devices, protection domains, memory regions,
//! completion queues, reliable-connected queue pairs, a connection manager with private data,
//! and unreliable-datagram multicast) behind one contract with two providers:
//!
//! - [`soft`]: verbs semantics in user space over TCP and UDP, with a NIC thread per opened
//!   device that serves remote READs and WRITEs from registered memory (between processes of
//!   one host: copies by the requester's threads from a mapping of the peer's region, and
//!   SENDs through shared-memory inboxes);
//! - `verbs` (cargo feature `verbs`): libibverbs and librdmacm.
//!
//! Callers use the handles re-exported here ([`Fabric`], [`ProtectionDomain`], ...). Each
//! handle holds its provider's object in a closed enum (one variant per provider) and matches
//! on it, so calls reach the provider statically; the handles check arguments (private-data
//! sizes, bounds, MTU, objects of one provider) the same way for every provider. A program
//! written against this contract runs on the soft provider without any RDMA hardware and on
//! RDMA NICs (or Soft-RoCE) unchanged: see `examples/rdma_read_pingpong.rs`.
//!
//! # The contract
//!
//! The objects and semantics of verbs and RDMA-CM, shaped so that the libibverbs/librdmacm provider
//! fits without changes to callers:
//!
//! - `fabric::open(&FabricConfig)` opens a device: `Soft`, `Verbs`, or `Auto` (verbs when the
//!   feature is built and a device exists, else soft, with a log line saying why).
//! - `ProtectionDomain::register(len, Access)` allocates page-aligned zeroed memory and registers it
//!   (`MemoryRegion`: addr, len, lkey, rkey). The region owns its memory; dropping it deregisters it
//!   (the rkey stops working at once) and frees the memory once no in-flight operation uses it.
//! - `CompletionQueue`: batch `poll` (on soft, an empty CQ costs a few atomic loads: the bell's
//!   SEND count against the last one seen, the overrun flag and the completion count; no lock the
//!   NIC thread pushes under, no yield), `arm` + `wait(timeout)` (completion-channel style),
//!   `arm_solicited` (notify only the receive of a solicited SEND or a failed completion:
//!   `ibv_req_notify_cq(cq, 1)`), `poll_wait(out, spin, timeout)` and
//!   `poll_wait_solicited(out, timeout)`. Completions carry wr_id, status, opcode, byte_len, imm,
//!   qp_num. For event loops, `notify_fd()` polls readable once an armed CQ's notification arrives
//!   (verbs: the completion channel's fd; soft: the bell's eventfd, below) and
//!   `take_notification()` takes it without blocking; the protocol is poll, arm, poll, await the
//!   fd, take, poll (conformance `cq_notify::*`, a peer process's SEND included).
//! - `QueuePair` (RC): `post_recv`, `post_send` of SEND, SEND with immediate, RDMA READ, RDMA WRITE,
//!   signaled or not, SENDs solicited or not (`IBV_SEND_SOLICITED`; on soft, a flag in the frame). Unsignaled requests hold send-queue slots until a later signaled one completes;
//!   a full queue is `Error::QueueFull`. A SEND that finds no receive is retried per `rnr_retry`
//!   (7 = forever) every `min_rnr_timer`, then fails with `RnrRetryExceeded`. After an error
//!   completion the QP is in error and later requests flush; a READ or WRITE the responder refuses
//!   (`RemoteAccessError`) puts the responder's QP in error too (its receives flush). `disconnect`
//!   (or drop) flushes every
//!   outstanding request with `WorkRequestFlushed` and both sides get `Disconnected`. After any
//!   completion of a request, the NIC no longer touches its memory. `QpInit::initiator_depth` (READs
//!   the QP may have outstanding, `max_rd_atomic`) and `responder_resources` (READs of the peer it
//!   serves at once, `max_dest_rd_atomic`), 16 by default, within the device's
//!   `max_qp_init_rd_atom`/`max_qp_rd_atom`, are exchanged in the connect (as RDMA-CM's); the
//!   effective initiator depth is the smaller of one end's and the other's responder resources, and
//!   READs beyond it wait in the send queue, in order.
//! - `Fabric::counters()`: what the device counted (soft: refused handshakes, handshake timeouts,
//!   connections cut for their READ depth or for unread output, remote access errors, refused
//!   hellos of queue pairs connected by hand; verbs: regions
//!   leaked because `ibv_dereg_mr` failed, whose memory is then never freed).
//! - `EventChannel` (RDMA-CM): `listen`, `connect(addr, qp_init, private_data ≤ 56 B)`; events
//!   `ConnectRequest` (accept with ≤ 196 B, reject with ≤ 148 B; dropping it rejects),
//!   `Established` (with the accept's private data on the active side), `Rejected` (reason:
//!   consumer with private data, or no listener), `Unreachable`, `Disconnected`.
//! - `SharedReceiveQueue` where the device has one (`attributes().max_srq_wr > 0`).
//! - `UdEndpoint`: join/leave an IPv4 multicast group, `send_to(group)` with payload ≤ MTU
//!   (`PayloadTooLarge` otherwise), `send_unicast`, `recv(timeout)` with the sender's address.
//! - `FaultInjector` (soft only): drop/duplicate/delay received datagrams with a seeded generator;
//!   `cut(conn)` breaks an RC connection like a pulled cable (outstanding sends fail with
//!   `TransportRetryExceeded`).
//!
//! The public handles (`handles/`) check arguments once for every provider (private-data sizes,
//! SGE bounds, queue and SGE limits, MTU) and delegate to the provider. There is no provider trait:
//! each handle holds a closed enum of the providers' objects (its flavor: `QpFlavor { Soft(..),
//! Verbs(..) }`, the `verbs` variant only with the feature) and matches on it, so every call (posts
//! and polls included) reaches the provider's own type statically, without a vtable or a downcast.
//! Where two objects meet (a QP and its PD, CQs and SRQ; a UD endpoint and its PD; an SGE and its
//! region) the handle matches on the pair: objects of one provider proceed, a mixed pair is
//! `Error::ProviderMismatch`; each provider refuses objects of another of its devices with
//! `Error::DeviceMismatch` (as `ibv_create_qp` refuses objects of another context). A provider
//! object keeps what it depends on alive through `Arc`s (a QP holds its CQs, PD and event channel),
//! so teardown runs in reverse order of creation on every path. Errors are typed (`fabric::Error`)
//! and carry the verb, the peer and the errno.
//!
//! The files, bottom up; no folder imports one listed after it (`scripts/layers.py`):
//!
//! | module | job |
//! |---|---|
//! | `types.rs`, `error.rs`, `memory.rs` | plain data (access flags, work completions, limits, `ConnId`), typed errors, registered memory |
//! | `cm_event.rs`, `config.rs` | `CmEventOf<R>`, the one CM event type, generic over what a connect request is (callers' `CmEvent` = `CmEventOf<ConnectRequest>`, each provider's own, the soft NIC's `NicCmEvent`), with `map_request`; `FabricConfig`, `SoftOptions` |
//! | `soft/`, `verbs/` | the providers: their objects (`SoftFabric`, `SoftQp`, ...; `VerbsFabric`, `Qp`, ...) with inherent methods, and `open`, which returns the provider's device object (`lib.rs` wraps it in a `Fabric`) |
//! | `region.rs`, `work_request.rs` | a registered region (the handle `MemoryRegion` over the provider's registration `MrFlavor`, a range of it `Sge`, and the SGE check that pairs a region with the queue's provider) and `SendRequest`: what a work request names |
//! | `provider.rs` | `QpInitAttr<Pd, Cq, Srq>` (a `QpInit` checked against the device, with one provider's objects); imports no handle |
//! | `handles/` | one file per object, each with its whole impl and its flavor enum: `device.rs` (`Fabric`, with every verb that creates an object, and `ProtectionDomain`, with `register` and `create_srq`), `cq.rs`, `srq.rs`, `faults.rs`, `ud.rs`, `qp.rs` (`QpInit` and the pairing of its objects, `QueuePair`), `cm.rs` (`EventChannel`, `Listener`, `ConnectRequest`, `CmEvent`) |
//! | `read_buffer.rs`, `async_cq.rs` | READ destinations lent as slices; a CQ's notify fd in tokio's reactor |
//! | `lib.rs` | `open` (picks the provider), `verbs_probe` |
//!
//! Registered memory (`memory.rs`) may be accessed by the NIC while its owner uses it, so the owner
//! never holds plain references into it: copies use relaxed atomic word accesses, control words are
//! atomics, and providers hand raw ranges to the kernel (soft: `sendmsg`/`recvmsg`) or to the device
//! (verbs). Every `RegisteredBuffer` is its own memory object: a memfd sealed against shrinking and
//! growing (`F_SEAL_SHRINK | F_SEAL_GROW`) and mapped once, so that the soft provider can hand exactly
//! that object, and nothing else of the process, to a peer on the same host. `ReadBuffer` (`read_buffer.rs`) is the one place that lends a plain slice: a READ
//! destination whose typestate (`&mut self` to post, the READ's completion to release) guarantees nothing
//! writes it while the slice lives; releasing (`unsafe fn complete`) is the caller's promise that the
//! completion is that READ's, which nothing in a completion proves on every provider (the node makes it
//! in `node/subscription/feed.rs`, one READ outstanding per feed). `unsafe` exists only in `memory.rs`, `read_buffer.rs`, the soft
//! provider's shared-memory files (`soft/shm/map.rs`, `fds.rs`, `client.rs` (copies),
//! `bell.rs` (futex and eventfd calls), `inbox.rs` (copies out of the ring), and their tests), the verbs provider, and
//! `async_cq.rs` (feature `async`: tokio's `AsyncFd::register`, whose promise is that the CQ's descriptor stays open, which
//! the CQ it holds keeps; tokio's safe constructor is deprecated as unsound), each block with a `// SAFETY:` comment.
//!
//!
//! ## The two ways to connect
//!
//! A reliable-connected queue pair is connected in one of two ways:
//!
//! - **By the connection manager** (RDMA-CM): `EventChannel::connect` creates the queue pair and
//!   sends a connect request with private data; `ConnectRequest::accept` creates the other and
//!   answers. Both are in RTS once `Established` arrives, `disconnect` tells the peer, and CM events
//!   report the connection's life. The node connects this way (the credential rides in the private
//!   data).
//! - **By hand** (`fabric/bootstrap.rs`), as the seed programs do: `Fabric::create_qp` creates a
//!   queue pair in RESET. Its `local_endpoint()` (QP number, PSN, port, LID, GID, MTU: a
//!   serde-serializable `QpEndpoint`) travels to the peer over the application's own side channel.
//!   Each side then moves its own queue pair: `modify_to_init` (port, remote access),
//!   `modify_to_rtr` (the peer's endpoint, path MTU, `max_dest_rd_atomic`, `min_rnr_timer`) and
//!   `modify_to_rts` (timeout, retry counts, `max_rd_atomic`). The handle checks each move before
//!   the provider sees it (`QpTransition::check`): a move out of order is
//!   `Error::InvalidTransition`, an attribute out of range (a peer's QP number or PSN beyond 24
//!   bits included) `Error::InvalidArgument`, as `ibv_modify_qp`'s `EINVAL`. No CM event
//!   concerns such a queue pair. Moving it to ERROR (or dropping it) flushes what it has
//!   outstanding; its peer learns of it only through failed requests.
//!
//! `examples/rc_ops.rs` and `examples/rdma_write.rs` take `--bootstrap cm|tcp`. `tcp` follows the
//! seed flow step by step (`examples/common/bootstrap.rs`): a TCP socket (`sock_connect`); each
//! side creates its queue pair unconnected and sends a fixed 48-byte `ConData` (endpoint plus
//! buffer address, rkey and length, like the manual's `cm_con_data_t`, decoded with length and
//! range checks since the peer is not trusted); INIT, RTR, RTS; and a one-byte `sock_sync_data`
//! before the operations and after them, so that neither side tears down early.
//!

#![warn(missing_docs)]
#![warn(clippy::missing_errors_doc)]

#[cfg(feature = "async")]
mod async_cq;
mod bootstrap;
mod cm_event;
mod config;
pub mod error;
mod handles;
mod memory;
mod provider;
mod read_buffer;
mod region;
pub mod soft;
pub mod time;
pub mod types;
#[cfg(feature = "verbs")]
pub mod verbs;
mod work_request;

#[cfg(feature = "async")]
pub use async_cq::AsyncNotifier;
pub use bootstrap::{
    InitAttr, PathMtu, QpEndpoint, QpState, QpTransition, RtrAttr, RtsAttr, MAX_24_BIT_FIELD, MAX_MIN_RNR_TIMER,
};
pub use cm_event::{CmEventOf, ConnectionEvent};
pub use config::{FabricConfig, SoftOptions};
pub use error::{Error, Result};
pub use handles::*;
pub use memory::{RegisteredBuffer, BUFFER_ALIGN};
pub use read_buffer::ReadBuffer;
pub use region::{MemoryRegion, Sge};
pub use types::*;
pub use work_request::SendRequest;

/// Opens a device of the configured provider. `Auto` picks verbs when the feature is built
/// and a device exists, otherwise soft, and logs why.
///
/// # Errors
/// [`Error::ProviderUnavailable`] for verbs in a build without the feature `verbs`;
/// [`Error::NoDevice`] when the named device (or one behind `bind`) does not exist;
/// [`Error::Os`] when the provider cannot start (soft: its NIC thread, epoll; verbs: the
/// device context).
pub fn open(config: &FabricConfig) -> Result<Fabric> {
    match config.kind {
        FabricKind::Soft => open_soft(config),
        FabricKind::Verbs => open_verbs(config),
        FabricKind::Auto => match verbs_probe() {
            Ok(devices) => {
                tracing::info!("fabric auto: verbs devices {devices:?} found, using verbs");
                open_verbs(config)
            }
            Err(why) => {
                tracing::info!("fabric auto: using soft ({why})");
                open_soft(config)
            }
        },
    }
}

fn open_soft(config: &FabricConfig) -> Result<Fabric> {
    soft::open(config).map(Fabric::from_soft)
}

#[cfg(feature = "verbs")]
fn open_verbs(config: &FabricConfig) -> Result<Fabric> {
    verbs::open(config).map(Fabric::from_verbs)
}

#[cfg(not(feature = "verbs"))]
fn open_verbs(_config: &FabricConfig) -> Result<Fabric> {
    Err(Error::ProviderUnavailable {
        provider: "verbs",
        hint: "rebuild with `--features verbs` (needs libibverbs-dev librdmacm-dev libclang-dev pkg-config)",
    })
}

/// The verbs devices present, or why there are none.
///
/// # Errors
/// Why there is no verbs device, in words: no feature `verbs` in this build, no device, or
/// no RDMA-CM device file.
pub fn verbs_probe() -> std::result::Result<Vec<String>, String> {
    #[cfg(feature = "verbs")]
    {
        verbs::probe()
    }
    #[cfg(not(feature = "verbs"))]
    {
        Err("this build has no verbs provider (cargo feature `verbs`)".into())
    }
}
