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
//! provider implements the traits of the internal module `provider`; the handles check
//! arguments (private-data sizes, bounds, MTU) the same way for every provider.

mod as_any;
#[cfg(feature = "async")]
mod async_cq;
mod cm_event;
pub mod error;
mod handles;
internal! { pub mod memory; }
internal! { pub mod provider; }
mod read_buffer;
mod region;
pub mod soft;
pub mod types;
#[cfg(feature = "verbs")]
pub mod verbs;
mod work_request;

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

#[cfg(feature = "async")]
pub use async_cq::AsyncNotifier;
pub use cm_event::CmEventOf;
pub use error::{Error, Result};
pub use handles::*;
pub use memory::RegisteredBuffer;
pub use read_buffer::ReadBuffer;
pub use region::{MemoryRegion, Sge};
pub use types::*;
pub use work_request::SendRequest;

/// How to open a fabric.
#[derive(Debug, Clone)]
pub struct FabricConfig {
    /// Which provider (auto picks verbs when a device exists, else soft).
    pub kind: FabricKind,
    /// A device name (`rxe0`); `None` picks the device behind `bind`.
    pub device: Option<String>,
    /// The local address the node binds to; it also selects the verbs device.
    pub bind: IpAddr,
    /// Settings of the soft provider.
    pub soft: SoftOptions,
}

impl Default for FabricConfig {
    fn default() -> Self {
        FabricConfig {
            kind: FabricKind::Auto,
            device: None,
            bind: IpAddr::V4(Ipv4Addr::LOCALHOST),
            soft: SoftOptions::default(),
        }
    }
}

impl FabricConfig {
    /// A configuration for `kind` with every other setting at its default.
    pub fn new(kind: FabricKind) -> Self {
        FabricConfig { kind, ..Default::default() }
    }
}

/// Limits and tuning of the soft provider: [`default`](Self::default) (which matches
/// Soft-RoCE where it matters), then the setters.
///
/// ```
/// use std::time::Duration;
/// use rdma_pubsub::fabric::{SameHost, SoftOptions};
///
/// let options = SoftOptions::default().same_host(SameHost::Off).nic_spin(Duration::ZERO);
/// assert_ne!(options, SoftOptions::default());
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct SoftOptions {
    ud_mtu: usize,
    max_qp_wr: u32,
    max_cqe: u32,
    max_srq_wr: u32,
    max_mr_size: u64,
    nic_spin: Duration,
    same_host: SameHost,
}

impl Default for SoftOptions {
    fn default() -> Self {
        SoftOptions {
            ud_mtu: 1024,
            max_qp_wr: 16384,
            max_cqe: 1 << 20,
            max_srq_wr: 16384,
            max_mr_size: 1 << 32,
            nic_spin: Duration::from_micros(50),
            same_host: SameHost::Auto,
        }
    }
}

impl SoftOptions {
    /// UD path MTU (default 1024, as Soft-RoCE).
    pub fn ud_mtu(mut self, mtu: usize) -> Self {
        self.ud_mtu = mtu;
        self
    }

    /// Largest queue depth (default 16384).
    pub fn max_qp_wr(mut self, depth: u32) -> Self {
        self.max_qp_wr = depth;
        self
    }

    /// Largest completion queue (default 2^20).
    pub fn max_cqe(mut self, depth: u32) -> Self {
        self.max_cqe = depth;
        self
    }

    /// Largest shared receive queue (default 16384; 0: the device has none).
    pub fn max_srq_wr(mut self, depth: u32) -> Self {
        self.max_srq_wr = depth;
        self
    }

    /// Largest memory region in bytes (default 4 GiB).
    pub fn max_mr_size(mut self, bytes: u64) -> Self {
        self.max_mr_size = bytes;
        self
    }

    /// How long the NIC thread spins for work before it blocks (default 50 µs).
    pub fn nic_spin(mut self, spin: Duration) -> Self {
        self.nic_spin = spin;
        self
    }

    /// Whether connections between processes of this host move READs and WRITEs through
    /// shared memory ([`SameHost::Auto`], the default) or always through the NIC threads and
    /// TCP ([`SameHost::Off`]).
    pub fn same_host(mut self, same_host: SameHost) -> Self {
        self.same_host = same_host;
        self
    }
}

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
        FabricKind::Soft => soft::open(config),
        FabricKind::Verbs => open_verbs(config),
        FabricKind::Auto => match verbs_probe() {
            Ok(devices) => {
                tracing::info!("fabric auto: verbs devices {devices:?} found, using verbs");
                open_verbs(config)
            }
            Err(why) => {
                tracing::info!("fabric auto: using soft ({why})");
                soft::open(config)
            }
        },
    }
}

#[cfg(feature = "verbs")]
fn open_verbs(config: &FabricConfig) -> Result<Fabric> {
    verbs::open(config)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_soft_option_setter_sets_its_option() {
        let set = SoftOptions::default()
            .ud_mtu(512)
            .max_qp_wr(3)
            .max_cqe(4)
            .max_srq_wr(0)
            .max_mr_size(1 << 20)
            .nic_spin(Duration::ZERO)
            .same_host(SameHost::Off);
        let expected = SoftOptions {
            ud_mtu: 512,
            max_qp_wr: 3,
            max_cqe: 4,
            max_srq_wr: 0,
            max_mr_size: 1 << 20,
            nic_spin: Duration::ZERO,
            same_host: SameHost::Off,
        };
        assert_eq!(set, expected);
    }
}
