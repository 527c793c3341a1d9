//! How to open a fabric: the provider, the device, the bind address ([`FabricConfig`]) and the
//! soft provider's limits and tuning ([`SoftOptions`]).

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use super::types::{FabricKind, SameHost};

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
/// use rdma_fabric::{SameHost, SoftOptions};
///
/// let options = SoftOptions::default().same_host(SameHost::Off).nic_spin(Duration::ZERO);
/// assert_ne!(options, SoftOptions::default());
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct SoftOptions {
    pub(super) ud_mtu: usize,
    pub(super) max_qp_wr: u32,
    pub(super) max_cqe: u32,
    pub(super) max_srq_wr: u32,
    pub(super) max_mr_size: u64,
    pub(super) nic_spin: Duration,
    pub(super) same_host: SameHost,
    pub(super) same_host_group: Option<u32>,
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
            same_host_group: None,
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

    /// A group whose processes may open same-host streams to this device besides those of its
    /// own user (default none: only processes of the same effective user id). A process of
    /// any other user is refused (counted in `FabricCounters::refused_same_host_peers`) and
    /// its connections use the network path, where READs and WRITEs are checked by the NIC
    /// thread and never see the device's memory objects.
    pub fn same_host_group(mut self, gid: Option<u32>) -> Self {
        self.same_host_group = gid;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::SameHost;

    #[test]
    fn each_soft_option_setter_sets_its_option() {
        let set = SoftOptions::default()
            .ud_mtu(512)
            .max_qp_wr(3)
            .max_cqe(4)
            .max_srq_wr(0)
            .max_mr_size(1 << 20)
            .nic_spin(Duration::ZERO)
            .same_host(SameHost::Off)
            .same_host_group(Some(7));
        let expected = SoftOptions {
            ud_mtu: 512,
            max_qp_wr: 3,
            max_cqe: 4,
            max_srq_wr: 0,
            max_mr_size: 1 << 20,
            nic_spin: Duration::ZERO,
            same_host: SameHost::Off,
            same_host_group: Some(7),
        };
        assert_eq!(set, expected);
    }
}
