//! Opening a soft device (its state, connection table and NIC thread), and the device handle
//! that creates its objects, reports its counters and injects its faults.

use std::sync::Arc;
use std::time::Duration;

use rand::{rngs::StdRng, SeedableRng};

use super::cm::SoftChannel;
use super::connections::Connections;
use super::cq::SoftCq;
use super::device::{Device, FaultGen, NicCommand, DEVICE_NAME};
use super::hand_qp;
use super::handshakes::HANDSHAKE_TIMEOUT;
use super::nic;
use super::pd::SoftPd;
use super::qp::SoftQp;
use super::ud::SoftUd;
use super::SoftQpInit;
use crate::error::{Error, Result};
use crate::types::*;
use crate::FabricConfig;

/// Opens a soft device with its own NIC thread.
pub(crate) fn open(config: &FabricConfig) -> Result<SoftFabric> {
    open_with(config, HANDSHAKE_TIMEOUT)
}

/// Opens a soft device whose incoming connections must send CONNECT_REQ within
/// `handshake_timeout` (tests use a short one), and starts its NIC thread over its connections.
pub(crate) fn open_with(config: &FabricConfig, handshake_timeout: Duration) -> Result<SoftFabric> {
    let conns = Arc::new(Connections::default());
    let nic_conns = conns.clone();
    let dev = Device::open(config, handshake_timeout, move |device, poll| nic::run(device, nic_conns, poll))?;
    let faults = Arc::new(SoftFaults { dev: dev.clone(), conns: conns.clone() });
    Ok(SoftFabric { dev, conns, faults })
}

/// An opened soft device: creates the device's objects, reports its counters and hands out its
/// fault injector.
pub(crate) struct SoftFabric {
    dev: Arc<Device>,
    /// The device's connections and listeners (its channels put them there).
    conns: Arc<Connections>,
    faults: Arc<SoftFaults>,
}

impl SoftFabric {
    /// Name of the device.
    pub(crate) fn device_name(&self) -> &str {
        DEVICE_NAME
    }
    /// Limits of the device.
    pub(crate) fn attributes(&self) -> &DeviceAttributes {
        &self.dev.state.attrs
    }
    /// Allocates a protection domain.
    pub(crate) fn alloc_pd(&self) -> SoftPd {
        SoftPd::new(self.dev.clone())
    }
    /// Creates a completion queue of `depth` entries.
    pub(crate) fn create_cq(&self, depth: u32) -> Result<SoftCq> {
        SoftCq::new(self.dev.clone(), depth)
    }
    /// Creates a connection-manager event channel.
    pub(crate) fn create_event_channel(&self) -> SoftChannel {
        SoftChannel::new(self.dev.clone(), self.conns.clone())
    }
    /// Creates a UD endpoint; `pd` must be of this device.
    pub(crate) fn create_ud(&self, pd: &SoftPd, init: &UdInit) -> Result<SoftUd> {
        if !pd.is_of(&self.dev.state) {
            return Err(Error::DeviceMismatch { verb: "create_ud", object: "protection domain" });
        }
        SoftUd::new(self.dev.clone(), init)
    }
    /// The fault injector.
    pub(crate) fn faults(&self) -> Arc<SoftFaults> {
        self.faults.clone()
    }
    /// Creates a queue pair in RESET, to be connected by hand.
    pub(crate) fn create_qp(&self, init: SoftQpInit) -> Result<SoftQp> {
        let conn = hand_qp::create(&self.dev.state, &self.conns, &init)?;
        Ok(SoftQp::new(conn, init, self.dev.clone(), None))
    }
    /// What the device counted so far.
    pub(crate) fn counters(&self) -> FabricCounters {
        self.dev.state.counters.snapshot()
    }
}

/// The fault injector of a device (a test hook of the soft provider only).
pub(crate) struct SoftFaults {
    dev: Arc<Device>,
    conns: Arc<Connections>,
}

impl SoftFaults {
    /// Sets the faults applied to datagrams received from now on.
    pub(crate) fn set_ud_faults(&self, faults: UdFaults) {
        let gen = (faults != UdFaults::default()).then(|| FaultGen { faults, rng: StdRng::seed_from_u64(faults.seed) });
        *self.dev.state.ud_faults.lock() = gen;
    }
    /// Cuts the transport of connection `conn` as a cable pull would.
    pub(crate) fn cut(&self, conn: ConnId) -> Result<()> {
        let device = &self.dev.state;
        let c = self.conns.open.lock().get(&conn).cloned();
        let c = c.ok_or_else(|| Error::invalid("cut", format!("connection {conn} is not open on {DEVICE_NAME}")))?;
        // An abrupt end of the transport: no DISCONNECT frame, the peer sees the stream end.
        c.shutdown();
        device.command(NicCommand::Broken(conn, "cut by the fault injector".into()));
        Ok(())
    }
}

/// Opening devices as [`Fabric`](crate::Fabric) handles, for tests that inspect the NIC.
#[cfg(test)]
pub(crate) mod for_tests {
    use std::sync::Arc;
    use std::time::Duration;

    use crate::soft::connections::Connections;
    use crate::soft::device::DeviceState;
    use crate::{Fabric, FabricConfig, Result};

    /// Opens a soft device whose incoming connections must send CONNECT_REQ within
    /// `handshake_timeout`.
    pub(crate) fn open_with(config: &FabricConfig, handshake_timeout: Duration) -> Result<Fabric> {
        Ok(Fabric::from_soft(super::open_with(config, handshake_timeout)?))
    }

    /// Opens a soft device and returns its state and connections too.
    pub(crate) fn open_inspected(
        config: &FabricConfig,
        handshake_timeout: Duration,
    ) -> Result<(Fabric, Arc<DeviceState>, Arc<Connections>)> {
        let soft = super::open_with(config, handshake_timeout)?;
        let (device, conns) = (soft.dev.state.clone(), soft.conns.clone());
        Ok((Fabric::from_soft(soft), device, conns))
    }
}
