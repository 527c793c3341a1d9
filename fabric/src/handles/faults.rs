//! Fault injection (soft provider only; tests).

use std::sync::Arc;

use super::device::Fabric;
use crate::error::Result;
use crate::provider::FaultOps;
use crate::types::{ConnId, UdFaults};

impl Fabric {
    /// The fault injector, on providers that have one (soft).
    pub fn faults(&self) -> Option<FaultInjector> {
        self.ops.faults().map(|ops| FaultInjector { ops })
    }
}

/// Injects faults (soft provider only; tests).
#[derive(Clone)]
pub struct FaultInjector {
    ops: Arc<dyn FaultOps>,
}

impl FaultInjector {
    /// Sets the faults applied to datagrams received from now on.
    pub fn set_ud_faults(&self, faults: UdFaults) {
        self.ops.set_ud_faults(faults)
    }
    /// Cuts a connection's transport without a disconnect handshake.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) when `conn` is not an open
    /// connection of this device.
    pub fn cut(&self, conn: ConnId) -> Result<()> {
        self.ops.cut(conn)
    }
}
