//! The verbs provider: libibverbs and librdmacm through `rdma-sys`.
//!
//! Dynamically linked (feature `verbs`). A device is opened by name or by the bind address
//! (`rdma_bind_addr` on a temporary CM id); with no device, or no `/dev/infiniband/rdma_cm`,
//! opening fails with `Error::NoDevice` naming the cause. Queue pairs are made with
//! `rdma_create_qp` on CM ids; address and route resolution run synchronously inside `connect`
//! (on a private channel, then `rdma_migrate_id`); timed waits use `poll(2)` on the completion
//! channels' descriptors; UD multicast goes through `rdma_join_multicast`, with the address
//! handle from the join event. It is tested for real on Soft-RoCE inside a qemu guest
//! (`scripts/verbs-vm-tests.sh`: the conformance suite, `verbs_smoke`, the pub/sub and
//! discovery tests, the examples).
//!
//! Every verbs object is a Rust struct whose `Drop` releases it, and each holds `Arc`s of what
//! it depends on (a queue pair holds its CQs, PD, CM event channel and device), so teardown runs
//! in the reverse order of creation on every path: disconnect, destroy the QP, deregister
//! memory, destroy CQs and completion channels, destroy CM ids, destroy event channels, and
//! finally release the device list.
//!
//! Notes on the wire behaviour that callers must know:
//! - Private data received through the CM is padded by the transport (an InfiniBand/RoCE REQ
//!   carries 56 bytes, a REP 196, a REJ 148), so the receiver sees the sender's bytes followed
//!   by zeros: callers encode their own length (the protocol layer does).
//! - `min_rnr_timer` is applied with an RTS→RTS modify once the queue pair is connected (the
//!   kernel CM resets it to 0 = 655 ms during RTR): right after `rdma_accept` on the passive
//!   side and when `ESTABLISHED` is delivered on the active side. Post receives before
//!   connecting to avoid RNR during that window.
//! - A `Disconnected` event answers the peer's disconnect request (DREP) when it is delivered,
//!   so the initiating side sees its own `Disconnected` once the peer's channel was read (or
//!   after the CM's DREQ timeout when nobody reads it).
//! - A queue pair connected by hand (`Fabric::create_qp`) has no CM id: it is created with
//!   `ibv_create_qp` in RESET, reports the endpoint of the port the device was opened on (LID,
//!   the RoCE v2 GID of the device's IPv4 address, the port's active MTU, a random 24-bit PSN)
//!   and is moved with the manual's `ibv_modify_qp` masks (`qp_attr`); nothing tells its peer
//!   when it goes: dropping it moves it to ERR and destroys it (`ibv_destroy_qp`).
//! - Unicast UD: an endpoint's unicast address is the port of an RDMA_PS_UDP CM id listening
//!   for it; senders resolve it once through SIDR (see `sidr`). A received datagram names its
//!   sender by that address when the sender resolved the receiver (unicast senders always
//!   did), otherwise by its IP with port 0.
//!
//! Each file imports only files of lower layers (bottom up; no file imports this one):
//!
//! | layer | files | what |
//! |---|---|---|
//! | 0 | `os`, `addr` | errors from errno, descriptor helpers; C socket addresses |
//! | 1 | `post`, `stoppable`, `cm_id` | SGEs and post return codes; helper threads; CM channels and ids |
//! | 2 | `events`, `sidr` | the async event thread (CQ overruns); UD unicast address resolution |
//! | 3 | `device` | the opened device's context, found through a CM id: what every object holds |
//! | 4 | `cq`, `mr` | completion queues; the raw protection domain and memory regions (which the region handle `crate::region` holds) |
//! | 5 | `pd` | protection domains (registering, creating shared receive queues), shared receive queues |
//! | 6 | `qp`, `ud` | reliable-connected queue pairs on CM ids or connected by hand (`Qp`); UD endpoints |
//! | 7 | `cm` | the provider's event channel: listen, connect, accept, reject, events |
//! | 8 | `mod` | the provider's device object (`VerbsFabric`) and `open` |

mod addr;
mod by_hand;
mod cm;
mod cm_id;
mod cq;
mod device;
mod events;
mod gid;
mod mr;
mod os;
mod pd;
mod post;
mod qp;
mod qp_attr;
mod sidr;
mod stoppable;
mod ud;

use std::sync::Arc;

use device::Device;
use qp::RcQp;

use super::provider::QpInitAttr;
use super::{DeviceAttributes, FabricConfig, FabricCounters, Result, UdInit};

pub use device::probe;
// The provider's objects, which the handles of the crate hold as their `Verbs` flavor.
pub(crate) use cm::{Channel, ConnRequest, Listener};
pub(crate) use cq::Cq;
pub(crate) use mr::Mr;
pub(crate) use pd::{Pd, Srq};
pub(crate) use qp::Qp;
pub(crate) use ud::UdEndpoint;

/// What a verbs queue pair is created with: its settings and the verbs objects it uses.
pub(crate) type VerbsQpInit = QpInitAttr<Pd, Cq, Srq>;

/// Opens the verbs device named by `config.device`, or else the one behind `config.bind`.
///
/// # Errors
/// [`Error::NoDevice`](super::Error::NoDevice) when no device matches;
/// [`Error::Os`](super::Error::Os) when the device cannot be opened or its helpers started.
pub(crate) fn open(config: &FabricConfig) -> Result<VerbsFabric> {
    Ok(VerbsFabric { dev: Arc::new(Device::open(config)?) })
}

/// An opened verbs device: creates the device's objects.
pub(crate) struct VerbsFabric {
    dev: Arc<Device>,
}

impl VerbsFabric {
    /// Name of the device (`rxe0`, `mlx5_0`, ...).
    pub(crate) fn device_name(&self) -> &str {
        self.dev.name()
    }
    /// Limits of the device.
    pub(crate) fn attributes(&self) -> &DeviceAttributes {
        &self.dev.attributes
    }
    /// Allocates a protection domain (`ibv_alloc_pd`).
    pub(crate) fn alloc_pd(&self) -> Result<Pd> {
        Pd::new(&self.dev)
    }
    /// Creates a completion queue of `depth` entries with its completion channel.
    pub(crate) fn create_cq(&self, depth: u32) -> Result<Cq> {
        Cq::new(&self.dev, depth)
    }
    /// Creates a connection-manager event channel.
    pub(crate) fn create_event_channel(&self) -> Result<Channel> {
        Channel::new(&self.dev)
    }
    /// Creates a UD endpoint in `pd`, which must be of this device.
    pub(crate) fn create_ud(&self, pd: &Pd, init: &UdInit) -> Result<UdEndpoint> {
        if !Arc::ptr_eq(pd.inner().dev(), &self.dev) {
            return Err(super::Error::DeviceMismatch { verb: "create_ud", object: "protection domain" });
        }
        UdEndpoint::new(&self.dev, pd.inner().clone(), init)
    }
    /// Creates an RC queue pair in RESET, to be connected by hand (`ibv_create_qp`).
    pub(crate) fn create_qp(&self, init: VerbsQpInit) -> Result<Qp> {
        Ok(Qp::Rc(RcQp::create_by_hand(&self.dev, &init)?))
    }
    /// What the device counted so far (regions whose deregistration failed).
    pub(crate) fn counters(&self) -> FabricCounters {
        FabricCounters { leaked_regions: mr::leaked_regions(), ..FabricCounters::default() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Error, Fabric, FabricKind};
    use std::net::{IpAddr, Ipv4Addr};

    /// Opens the device `config` selects, as a handle.
    fn open(config: &FabricConfig) -> Result<Fabric> {
        super::open(config).map(Fabric::from_verbs)
    }

    fn config() -> FabricConfig {
        let ip = std::env::var("RXE_IP").ok().and_then(|s| s.parse().ok()).unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST));
        FabricConfig { bind: ip, ..FabricConfig::new(FabricKind::Verbs) }
    }

    /// Without a device the open fails with `NoDevice` naming the cause; with one it succeeds.
    #[test]
    fn open_reports_missing_device_or_opens() {
        match probe() {
            Err(why) => {
                assert!(!why.is_empty());
                match open(&config()) {
                    Err(Error::NoDevice { provider, detail }) => {
                        assert_eq!(provider, "verbs");
                        assert!(detail.contains(&why), "detail {detail:?} does not name the cause {why:?}");
                    }
                    other => panic!("expected NoDevice, got {other:?}"),
                }
            }
            Ok(devices) => {
                assert!(!devices.is_empty());
                let fabric = open(&config()).expect("a device exists: open must succeed");
                assert!(devices.iter().any(|d| d == fabric.device_name()));
                assert!(fabric.attributes().max_qp_wr > 0);
                assert!(fabric.faults().is_none());
            }
        }
    }

    /// A device name that does not exist is refused with `NoDevice`, never a panic.
    #[test]
    fn unknown_device_name_is_no_device() {
        let cfg = FabricConfig { device: Some("no-such-dev9".into()), ..config() };
        match open(&cfg) {
            Err(Error::NoDevice { detail, .. }) => assert!(!detail.is_empty()),
            other => panic!("expected NoDevice, got {other:?}"),
        }
    }
}
