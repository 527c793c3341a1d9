//! The device ([`Fabric`]) and its protection domains: the bottom of the handles. The verbs
//! that create each other object live with that object (`Fabric::create_cq` in `cq.rs`, ...).

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::memory::RegisteredBuffer;
use crate::provider::{FabricOps, PdOps};
use crate::region::MemoryRegion;
use crate::types::{Access, DeviceAttributes, FabricCounters, FabricKind};

/// An opened device: creates every other object. Cheap to clone.
#[derive(Clone)]
pub struct Fabric {
    pub(super) ops: Arc<dyn FabricOps>,
}

impl std::fmt::Debug for Fabric {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fabric").field("kind", &self.kind()).field("device", &self.device_name()).finish()
    }
}

impl Fabric {
    /// Wraps a provider's device (used by the providers' `open`).
    pub(crate) fn from_ops(ops: Arc<dyn FabricOps>) -> Self {
        Fabric { ops }
    }
    /// Which provider this is.
    pub fn kind(&self) -> FabricKind {
        self.ops.kind()
    }
    /// Name of the device.
    pub fn device_name(&self) -> &str {
        self.ops.device_name()
    }
    /// Limits of the device.
    pub fn attributes(&self) -> &DeviceAttributes {
        self.ops.attributes()
    }
    /// Allocates a protection domain.
    ///
    /// # Errors
    /// [`Error::Os`] when the device refuses one (verbs: `ibv_alloc_pd`).
    pub fn alloc_pd(&self) -> Result<ProtectionDomain> {
        Ok(ProtectionDomain { ops: self.ops.alloc_pd()?, fabric: self.clone() })
    }
    /// What the device counted so far (refused peers, cut connections, leaked regions).
    pub fn counters(&self) -> FabricCounters {
        self.ops.counters()
    }
}

/// A protection domain: memory regions and queue pairs of one domain work together.
#[derive(Clone)]
pub struct ProtectionDomain {
    pub(super) ops: Arc<dyn PdOps>,
    pub(super) fabric: Fabric,
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
        let ops = self.ops.register(buffer.clone(), access)?;
        Ok(MemoryRegion::new(ops, buffer, access))
    }
    /// The provider object (for providers).
    pub(crate) fn ops(&self) -> &Arc<dyn PdOps> {
        &self.ops
    }
}
