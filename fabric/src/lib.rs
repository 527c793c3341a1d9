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
