//! The device ([`Fabric`]), which creates every other object, and its protection domains
//! ([`ProtectionDomain`]), which register memory and create shared receive queues.

use std::sync::Arc;

use super::cm::EventChannel;
use super::cq::CompletionQueue;
use super::faults::FaultInjector;
use super::qp::{QpInit, QpInitFlavor, QueuePair};
use super::srq::SharedReceiveQueue;
use super::ud::UdEndpoint;
use crate::error::{Error, Result};
use crate::memory::RegisteredBuffer;
use crate::region::{MemoryRegion, MrFlavor};
use crate::soft::{SoftFabric, SoftPd};
use crate::types::{Access, DeviceAttributes, FabricCounters, FabricKind, UdInit};
#[cfg(feature = "verbs")]
use crate::verbs;

/// A provider's opened device.
#[derive(Clone)]
enum FabricFlavor {
    /// A soft device.
    Soft(Arc<SoftFabric>),
    /// A verbs device.
    #[cfg(feature = "verbs")]
    Verbs(Arc<verbs::VerbsFabric>),
}

/// An opened device: creates every other object. Cheap to clone.
#[derive(Clone)]
pub struct Fabric {
    flavor: FabricFlavor,
}

impl std::fmt::Debug for Fabric {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fabric").field("kind", &self.kind()).field("device", &self.device_name()).finish()
    }
}

/// The error of `verb` given an object of another provider, named `object`.
#[cfg(feature = "verbs")]
fn mismatch(verb: &'static str, object: &'static str) -> Error {
    Error::ProviderMismatch { verb, object }
}

impl Fabric {
    /// Wraps an opened soft device.
    pub(crate) fn from_soft(device: SoftFabric) -> Self {
        Fabric { flavor: FabricFlavor::Soft(Arc::new(device)) }
    }
    /// Wraps an opened verbs device.
    #[cfg(feature = "verbs")]
    pub(crate) fn from_verbs(device: verbs::VerbsFabric) -> Self {
        Fabric { flavor: FabricFlavor::Verbs(Arc::new(device)) }
    }
    /// Which provider this is.
    pub fn kind(&self) -> FabricKind {
        match self.flavor {
            FabricFlavor::Soft(_) => FabricKind::Soft,
            #[cfg(feature = "verbs")]
            FabricFlavor::Verbs(_) => FabricKind::Verbs,
        }
    }
    /// Name of the device.
    pub fn device_name(&self) -> &str {
        dispatch!(FabricFlavor, &self.flavor, device => device.device_name())
    }
    /// Limits of the device.
    pub fn attributes(&self) -> &DeviceAttributes {
        dispatch!(FabricFlavor, &self.flavor, device => device.attributes())
    }
    /// What the device counted so far (refused peers, cut connections, leaked regions).
    pub fn counters(&self) -> FabricCounters {
        dispatch!(FabricFlavor, &self.flavor, device => device.counters())
    }
    /// Allocates a protection domain.
    ///
    /// # Errors
    /// [`Error::Os`] when the device refuses one (verbs: `ibv_alloc_pd`).
    pub fn alloc_pd(&self) -> Result<ProtectionDomain> {
        let flavor = match &self.flavor {
            FabricFlavor::Soft(device) => PdFlavor::Soft(Arc::new(device.alloc_pd())),
            #[cfg(feature = "verbs")]
            FabricFlavor::Verbs(device) => PdFlavor::Verbs(Arc::new(device.alloc_pd()?)),
        };
        Ok(ProtectionDomain { flavor, fabric: self.clone() })
    }
    /// Creates a completion queue of `depth` entries (with its completion channel).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `depth` is 0 or above the device's `max_cqe`;
    /// [`Error::Os`] when the device or the system refuses it (verbs: the completion channel;
    /// soft: the bell's epoll set, eventfd or pages).
    pub fn create_cq(&self, depth: u32) -> Result<CompletionQueue> {
        let max = self.attributes().max_cqe;
        if depth == 0 || depth > max {
            return Err(Error::invalid("create_cq", format!("depth {depth} is not in 1..={max}")));
        }
        Ok(match &self.flavor {
            FabricFlavor::Soft(device) => CompletionQueue::from_soft(device.create_cq(depth)?),
            #[cfg(feature = "verbs")]
            FabricFlavor::Verbs(device) => CompletionQueue::from_verbs(device.create_cq(depth)?),
        })
    }
    /// Creates a connection-manager event channel.
    ///
    /// # Errors
    /// [`Error::Os`] when the system refuses one (verbs: `rdma_create_event_channel`).
    pub fn create_event_channel(&self) -> Result<EventChannel> {
        Ok(match &self.flavor {
            FabricFlavor::Soft(device) => EventChannel::from_soft(device.create_event_channel()),
            #[cfg(feature = "verbs")]
            FabricFlavor::Verbs(device) => EventChannel::from_verbs(device.create_event_channel()?),
        })
    }
    /// Creates an unreliable-datagram endpoint for multicast.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `recv_depth` is 0 or above the device's `max_qp_wr`;
    /// [`Error::ProviderMismatch`] or [`Error::DeviceMismatch`] when `pd` is of another provider
    /// or device; [`Error::MulticastUnavailable`] when the interface cannot carry multicast;
    /// [`Error::Os`] (with the local address, [`Error::os_local`]) when the sockets or queue
    /// pairs cannot be created or bound.
    pub fn create_ud(&self, pd: &ProtectionDomain, init: &UdInit) -> Result<UdEndpoint> {
        if init.recv_depth == 0 || init.recv_depth > self.attributes().max_qp_wr {
            return Err(Error::invalid("create_ud", format!("recv_depth {} is out of range", init.recv_depth)));
        }
        match (&self.flavor, &pd.flavor) {
            (FabricFlavor::Soft(device), PdFlavor::Soft(pd)) => Ok(UdEndpoint::from_soft(device.create_ud(pd, init)?)),
            #[cfg(feature = "verbs")]
            (FabricFlavor::Verbs(device), PdFlavor::Verbs(pd)) => {
                Ok(UdEndpoint::from_verbs(device.create_ud(pd, init)?))
            }
            #[cfg(feature = "verbs")]
            _ => Err(mismatch("create_ud", "protection domain")),
        }
    }
    /// Creates a reliable-connected queue pair without the connection manager, in RESET, to be
    /// connected by hand: exchange [`QueuePair::local_endpoint`]s over a side channel, then
    /// [`modify_to_init`](QueuePair::modify_to_init), [`modify_to_rtr`](QueuePair::modify_to_rtr)
    /// and [`modify_to_rts`](QueuePair::modify_to_rts) (see [`crate::QpEndpoint`]).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for settings beyond the device's limits (as
    /// [`EventChannel::connect`]); [`Error::ProviderMismatch`] or [`Error::DeviceMismatch`]
    /// when an object of `init` is of another provider or device; [`Error::Os`] when the
    /// provider fails (verbs: `ibv_create_qp`).
    pub fn create_qp(&self, init: QpInit<'_>) -> Result<QueuePair> {
        let verb = "create_qp";
        let attributes = self.attributes().clone();
        match (&self.flavor, init.checked_attr(verb)?) {
            (FabricFlavor::Soft(device), QpInitFlavor::Soft(init)) => {
                Ok(QueuePair::from_soft(device.create_qp(init)?, attributes))
            }
            #[cfg(feature = "verbs")]
            (FabricFlavor::Verbs(device), QpInitFlavor::Verbs(init)) => {
                Ok(QueuePair::from_verbs(device.create_qp(init)?, attributes))
            }
            #[cfg(feature = "verbs")]
            _ => Err(mismatch(verb, "protection domain")),
        }
    }
    /// The fault injector, on providers that have one (soft).
    pub fn faults(&self) -> Option<FaultInjector> {
        match &self.flavor {
            FabricFlavor::Soft(device) => Some(FaultInjector::new(device.faults())),
            #[cfg(feature = "verbs")]
            FabricFlavor::Verbs(_) => None,
        }
    }
}

/// A provider's protection domain.
#[derive(Clone)]
pub(crate) enum PdFlavor {
    /// A soft protection domain.
    Soft(Arc<SoftPd>),
    /// A verbs protection domain.
    #[cfg(feature = "verbs")]
    Verbs(Arc<verbs::Pd>),
}

/// A protection domain: memory regions and queue pairs of one domain work together.
#[derive(Clone)]
pub struct ProtectionDomain {
    flavor: PdFlavor,
    fabric: Fabric,
}

impl ProtectionDomain {
    /// The device this domain belongs to.
    pub fn fabric(&self) -> &Fabric {
        &self.fabric
    }
    /// Allocates `len` zeroed bytes and registers them with `access`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `len` exceeds the device's `max_mr_size`, or
    /// `REMOTE_WRITE` comes without `LOCAL_WRITE`; [`Error::Os`] when the memory cannot be
    /// allocated or registered (`memfd_create`, `mmap`, `ibv_reg_mr`); [`Error::QueueFull`] when
    /// the same-host key table of the soft device is full.
    pub fn register(&self, len: usize, access: Access) -> Result<MemoryRegion> {
        let max = self.fabric.attributes().max_mr_size;
        if len as u64 > max {
            return Err(Error::invalid("register memory", format!("{len} bytes exceeds the device limit of {max}")));
        }
        if access.contains(Access::REMOTE_WRITE) && !access.contains(Access::LOCAL_WRITE) {
            return Err(Error::invalid("register memory", "REMOTE_WRITE requires LOCAL_WRITE"));
        }
        let buffer = Arc::new(RegisteredBuffer::new(len)?);
        let flavor = match &self.flavor {
            PdFlavor::Soft(pd) => MrFlavor::Soft(pd.register(buffer.clone(), access)?),
            #[cfg(feature = "verbs")]
            PdFlavor::Verbs(pd) => MrFlavor::Verbs(pd.register(buffer.clone(), access)?),
        };
        Ok(MemoryRegion::new(flavor, buffer, access))
    }
    /// Creates a shared receive queue of `max_wr` receives.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when the device has no shared receive queue or `max_wr` or
    /// `max_sge` is 0 or above its limits; [`Error::Os`] when the device refuses it (verbs).
    pub fn create_srq(&self, max_wr: u32, max_sge: u32) -> Result<SharedReceiveQueue> {
        let attrs = self.fabric.attributes();
        if attrs.max_srq_wr == 0 {
            return Err(Error::invalid(
                "create_srq",
                format!("device {} has no shared receive queue", self.fabric.device_name()),
            ));
        }
        if max_wr == 0 || max_wr > attrs.max_srq_wr || max_sge == 0 || max_sge > attrs.max_sge {
            return Err(Error::invalid("create_srq", format!("max_wr {max_wr} / max_sge {max_sge} out of range")));
        }
        Ok(match &self.flavor {
            PdFlavor::Soft(pd) => SharedReceiveQueue::from_soft(pd.create_srq(max_wr, max_sge)),
            #[cfg(feature = "verbs")]
            PdFlavor::Verbs(pd) => SharedReceiveQueue::from_verbs(pd.create_srq(max_wr, max_sge)?),
        })
    }
    /// The provider's protection domain (for the handles that pair it with other objects).
    pub(super) fn flavor(&self) -> &PdFlavor {
        &self.flavor
    }
}
