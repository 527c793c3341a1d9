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
use crate::error::{Error, Result};
use crate::provider::*;
use crate::types::*;
use crate::{Fabric, FabricConfig};

/// Opens a soft device with its own NIC thread.
pub(crate) fn open(config: &FabricConfig) -> Result<crate::Fabric> {
    open_with(config, HANDSHAKE_TIMEOUT)
}

/// Opens a soft device whose incoming connections must send CONNECT_REQ within
/// `handshake_timeout` (tests use a short one).
pub(crate) fn open_with(config: &FabricConfig, handshake_timeout: Duration) -> Result<Fabric> {
    Ok(Fabric::from_ops(Arc::new(start(config, handshake_timeout)?)))
}

/// Opens a soft device and returns its state and connections too, for tests that inspect the
/// NIC.
#[cfg(test)]
pub(crate) fn open_inspected(
    config: &FabricConfig,
    handshake_timeout: Duration,
) -> Result<(Fabric, Arc<super::device::DeviceState>, Arc<Connections>)> {
    let soft = start(config, handshake_timeout)?;
    let (device, conns) = (soft.dev.state.clone(), soft.conns.clone());
    Ok((Fabric::from_ops(Arc::new(soft)), device, conns))
}

/// Opens the device, starts its NIC thread over its connections, and makes its handle.
fn start(config: &FabricConfig, handshake_timeout: Duration) -> Result<SoftFabric> {
    let conns = Arc::new(Connections::default());
    let nic_conns = conns.clone();
    let dev = Device::open(config, handshake_timeout, move |device, poll| nic::run(device, nic_conns, poll))?;
    let faults = Arc::new(SoftFaults { dev: dev.clone(), conns: conns.clone() });
    Ok(SoftFabric { dev, conns, faults })
}

/// The device handle.
struct SoftFabric {
    dev: Arc<Device>,
    /// The device's connections and listeners (its channels put them there).
    conns: Arc<Connections>,
    faults: Arc<SoftFaults>,
}

impl FabricOps for SoftFabric {
    fn kind(&self) -> FabricKind {
        FabricKind::Soft
    }
    fn device_name(&self) -> &str {
        DEVICE_NAME
    }
    fn attributes(&self) -> &DeviceAttributes {
        &self.dev.state.attrs
    }
    fn alloc_pd(&self) -> Result<Arc<dyn PdOps>> {
        Ok(Arc::new(SoftPd::new(self.dev.clone())))
    }
    fn create_cq(&self, depth: u32) -> Result<Arc<dyn CqOps>> {
        Ok(Arc::new(SoftCq::new(self.dev.clone(), depth)?))
    }
    fn create_event_channel(&self) -> Result<Arc<dyn CmChannelOps>> {
        Ok(Arc::new(SoftChannel::new(self.dev.clone(), self.conns.clone())))
    }
    fn create_ud(&self, _pd: &Arc<dyn PdOps>, init: &UdInit) -> Result<Box<dyn UdOps>> {
        Ok(Box::new(SoftUd::new(self.dev.clone(), init)?))
    }
    fn faults(&self) -> Option<Arc<dyn FaultOps>> {
        Some(self.faults.clone())
    }
    fn create_qp(&self, init: QpInitAttr) -> Result<Box<dyn QpOps>> {
        let conn = hand_qp::create(&self.dev.state, &self.conns, &init)?;
        Ok(Box::new(SoftQp::new(conn, init, self.dev.clone(), None)))
    }
    fn counters(&self) -> FabricCounters {
        self.dev.state.counters.snapshot()
    }
}

/// The fault injector of a device.
struct SoftFaults {
    dev: Arc<Device>,
    conns: Arc<Connections>,
}

impl FaultOps for SoftFaults {
    fn set_ud_faults(&self, faults: UdFaults) {
        let gen = (faults != UdFaults::default()).then(|| FaultGen { faults, rng: StdRng::seed_from_u64(faults.seed) });
        *self.dev.state.ud_faults.lock() = gen;
    }
    fn cut(&self, conn: ConnId) -> Result<()> {
        let device = &self.dev.state;
        let c = self.conns.open.lock().get(&conn).cloned();
        let c = c.ok_or_else(|| Error::invalid("cut", format!("connection {conn} is not open on {DEVICE_NAME}")))?;
        // An abrupt end of the transport: no DISCONNECT frame, the peer sees the stream end.
        c.shutdown();
        device.command(NicCommand::Broken(conn, "cut by the fault injector".into()));
        Ok(())
    }
}
