//! Fault injection (soft provider only; tests).

use std::sync::Arc;

use crate::error::Result;
use crate::soft::SoftFaults;
use crate::types::{ConnId, UdFaults};

/// Injects faults (soft provider only; tests).
#[derive(Clone)]
pub struct FaultInjector {
    faults: Arc<SoftFaults>,
}

impl FaultInjector {
    /// Wraps the fault injector of a soft device.
    pub(super) fn new(faults: Arc<SoftFaults>) -> Self {
        FaultInjector { faults }
    }
    /// Sets the faults applied to datagrams received from now on.
    pub fn set_ud_faults(&self, faults: UdFaults) {
        self.faults.set_ud_faults(faults)
    }
    /// Cuts a connection's transport without a disconnect handshake.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) when `conn` is not an open
    /// connection of this device.
    pub fn cut(&self, conn: ConnId) -> Result<()> {
        self.faults.cut(conn)
    }
}
