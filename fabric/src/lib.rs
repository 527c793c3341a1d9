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
//! RDMA NICs (or Soft-RoCE) unchanged: see `fabric/examples/rdma_read_pingpong.rs`.
//!
//! # The contract
//!
//! The objects and semantics of verbs and RDMA-CM, shaped so that the libibverbs/librdmacm
//! provider fits without changes to callers. The conformance suite
//! (`fabric/tests/fabric_conformance/`) runs every point below against every provider.
//!
//! - [`open`] opens a device: `Soft`, `Verbs`, or `Auto`. [`ProtectionDomain::register`]
//!   allocates page-aligned zeroed memory and registers it ([`MemoryRegion`]: addr, len, lkey,
//!   rkey). The region owns its memory; dropping it deregisters it (the rkey stops working at
//!   once) and frees the memory once no operation in flight uses it.
//! - [`CompletionQueue`]: batch `poll` (on soft, an empty CQ costs a few atomic loads and no
//!   lock), `arm` + `wait` (completion-channel style), `arm_solicited` (notify only a solicited
//!   SEND's receive or a failed completion, as `ibv_req_notify_cq(cq, 1)`), `poll_wait` (spin
//!   politely, then arm and block) and `poll_wait_solicited`. For event loops,
//!   [`CompletionQueue::notify_fd`] becomes readable once an armed CQ's notification arrives
//!   (verbs: the completion channel's fd; soft: its bell's epoll set, holding an eventfd of
//!   its own and one per same-host sender) and `take_notification` takes it; the protocol is poll, arm, poll, await the fd,
//!   take, poll.
//! - [`QueuePair`] (RC): `post_recv`; `post_send` of SEND, SEND with immediate, RDMA READ and
//!   RDMA WRITE, signaled or not, SENDs solicited or not. Unsignaled requests hold send-queue
//!   slots until a later signaled one completes; a full queue is [`Error::QueueFull`]. A SEND
//!   that finds no receive is retried per `rnr_retry` (7 = forever) every `min_rnr_timer`, then
//!   fails with `RnrRetryExceeded`. After an error completion the queue pair is in error and
//!   later requests flush; a READ or WRITE the responder refuses (`RemoteAccessError`) puts the
//!   responder's queue pair in error too. `disconnect` (or drop) flushes every outstanding
//!   request with `WorkRequestFlushed` and both sides get `Disconnected`. After any completion
//!   of a request, the NIC no longer touches its memory.
//! - READ depths: [`QpInit`]'s `initiator_depth` (`max_rd_atomic`) and `responder_resources`
//!   (`max_dest_rd_atomic`), 16 by default within the device's limits, are exchanged in the
//!   connect as RDMA-CM's are; the effective initiator depth is the smaller of one end's and the
//!   other's responder resources, and READs beyond it wait in the send queue, in order.
//! - [`EventChannel`] (RDMA-CM): `listen`, `connect` with private data of at most 56 bytes;
//!   events [`CmEvent`]: a [`ConnectRequest`] (accept with at most 196 bytes, reject with at
//!   most 148; dropping it rejects), `Established` (with the accept's private data on the
//!   active side), `Rejected` (by the consumer with private data, or no listener),
//!   `Unreachable`, `Disconnected`. Queue pairs can also be connected by hand (the
//!   `bootstrap` types: [`QpEndpoint`], [`QpTransition`]), as the seed programs do.
//! - [`SharedReceiveQueue`] where the device has one (`attributes().max_srq_wr > 0`).
//! - [`UdEndpoint`]: join and leave an IPv4 multicast group, `send_to` the group with a payload
//!   of at most the MTU ([`Error::PayloadTooLarge`] otherwise), `send_unicast`, `recv` with the
//!   sender's address.
//! - [`FaultInjector`] (soft only): drops, duplicates or delays received datagrams with a seeded
//!   generator; `cut` breaks an RC connection like a pulled cable (outstanding requests fail
//!   with `TransportRetryExceeded`).
//! - [`Fabric::counters`]: what the device counted (soft: refused handshakes and hellos,
//!   handshake timeouts, connections cut for their READ depth or unread output, remote access
//!   errors; verbs: regions leaked because `ibv_dereg_mr` failed).
//!
//! Errors are typed ([`Error`]) and carry the verb, the peer and the errno. The handles check
//! arguments once for every provider (private-data sizes, SGE bounds, queue and SGE limits,
//! MTU, queue-pair transitions) and a mixed pair of providers' objects is
//! [`Error::ProviderMismatch`]; each provider refuses objects of another of its devices with
//! [`Error::DeviceMismatch`] (as `ibv_create_qp` refuses objects of another context).
//!
//! # Threads
//!
//! The soft provider runs one NIC thread per opened device (see [`soft`]); the verbs provider
//! one async-event thread per device (CQ overruns) and one SIDR thread per UD endpoint
//! (answers unicast address resolution), both stopped through an eventfd when their owner
//! drops. A waiting call spins before it blocks (waking a thread blocked on the other CPU costs
//! 75–630 µs on the 2-vCPU machines this was measured on), politely: a pause instruction
//! between polls, and the clock read and one `sched_yield` only once every 64 polls, never a
//! yield per poll (that was most of the CPU time of a 64 B run). The soft NIC thread, for
//! `SoftOptions::nic_spin` after it was last busy, polls its sockets the same way, then blocks.
//!
//! # Files and layers
//!
//! Bottom up; no folder imports one listed after it (`scripts/layers.py`).
//!
//! | module | job |
//! |---|---|
//! | `types`, `error`, `time`, `memory` | plain data (access flags, work completions, limits, `ConnId`), typed errors, deadlines, registered memory |
//! | `cm_event`, `config`, `bootstrap` | [`CmEventOf`], the one CM event type, generic over what a connect request is (callers' [`CmEvent`], each provider's own), with `map_request`; [`FabricConfig`], [`SoftOptions`]; the states and attributes of a queue pair connected by hand |
//! | `soft/`, `verbs/` | the providers: their objects with inherent methods, and `open`, which returns the provider's device object |
//! | `region`, `work_request`, `provider` | a registered region ([`MemoryRegion`] over the provider's registration, a range of it [`Sge`], the SGE check that pairs a region with the queue's provider); [`SendRequest`]; `QpInitAttr`, a [`QpInit`] checked against the device with one provider's objects |
//! | `handles/` | one file per object, each with its whole impl and its flavor enum (see the module) |
//! | `read_buffer`, `async_cq` | READ destinations lent as slices ([`ReadBuffer`]); a CQ's notify fd in tokio's reactor (feature `async`) |
//! | `lib` | [`open`] (picks the provider), [`verbs_probe`] |
//!
//! # Unsafe
//!
//! Registered memory may be accessed by the NIC while its owner uses it, so the owner never
//! holds plain references into it (see `memory`). `unsafe` exists only in `memory.rs`,
//! `read_buffer.rs` ([`ReadBuffer::complete`]: the caller promises the completion is that
//! READ's, which nothing in a completion proves on every provider), the soft provider's
//! same-host files (`soft/shm/`: mappings, descriptor passing, copies, eventfd and epoll
//! calls), the verbs provider, and `async_cq.rs` (tokio's `AsyncFd::register`, whose promise
//! is that the CQ's descriptor stays open, which the CQ it holds keeps). Each block carries its
//! `// SAFETY:` note (clippy's `undocumented_unsafe_blocks`, denied in the workspace).

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
mod remote_view;
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
pub use remote_view::RemoteView;
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
