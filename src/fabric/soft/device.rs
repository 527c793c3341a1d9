//! An opened soft device: its NIC thread, region table, protection domains, memory regions,
//! and fault injector.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use parking_lot::{Mutex, RwLock};
use rand::{rngs::StdRng, RngExt, SeedableRng};

use super::cm::{Handshakes, SoftChannel};
use super::conn::{Conn, Seg};
use super::cq::{SoftCq, SoftSrq};
use super::nic::{self, Cmd, ListenerEntry};
use super::shm::{self, HeldSlot};
use super::ud::SoftUd;
use crate::fabric::error::{Error, Result};
use crate::fabric::memory::RegisteredBuffer;
use crate::fabric::provider::*;
use crate::fabric::types::*;
use crate::fabric::FabricConfig;

/// Name of every soft device.
pub(crate) const DEVICE_NAME: &str = "soft0";
/// Largest initiator depth and responder resources of a soft queue pair (Soft-RoCE's value).
const MAX_RD_ATOM: u8 = 128;

/// What the NIC thread and the objects of a device share. It never owns the NIC thread, so
/// the thread holding it does not keep the device open.
pub(crate) struct Shared {
    pub(crate) attrs: DeviceAttributes,
    pub(crate) nic_spin: Duration,
    /// How long an incoming connection may take to send its CONNECT_REQ before it is closed.
    pub(crate) handshake_timeout: Duration,
    pub(crate) registry: mio::Registry,
    pub(crate) waker: mio::Waker,
    pub(crate) cmds: Mutex<Vec<Cmd>>,
    pub(crate) conns: Mutex<HashMap<ConnId, Arc<Conn>>>,
    pub(crate) listeners: Mutex<HashMap<u64, Arc<ListenerEntry>>>,
    regions: RwLock<HashMap<u32, RegionEntry>>,
    next_id: AtomicU64,
    next_qpn: AtomicU32,
    pub(crate) ud_faults: Mutex<Option<FaultGen>>,
    /// Timers pending in the NIC thread (updated by it every turn of its loop).
    pub(crate) timers_pending: AtomicUsize,
    /// The same-host endpoint (`None` with `same_host: off`, or where it could not be opened).
    pub(crate) shm: Option<shm::Endpoint>,
    /// Incoming connections in their connect handshake, by source.
    pub(crate) handshakes: Mutex<Handshakes>,
    /// What the device counted.
    pub(crate) counters: SoftCounters,
}

/// What a soft device counts (see [`FabricCounters`]).
#[derive(Default)]
pub(crate) struct SoftCounters {
    pub(crate) refused_handshakes: AtomicU64,
    pub(crate) handshake_timeouts: AtomicU64,
    pub(crate) read_depth_violations: AtomicU64,
    pub(crate) output_stalls: AtomicU64,
    pub(crate) remote_access_errors: AtomicU64,
}

impl SoftCounters {
    /// Adds one to `counter`.
    pub(crate) fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    fn snapshot(&self) -> FabricCounters {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        FabricCounters {
            refused_handshakes: get(&self.refused_handshakes),
            handshake_timeouts: get(&self.handshake_timeouts),
            read_depth_violations: get(&self.read_depth_violations),
            output_stalls: get(&self.output_stalls),
            remote_access_errors: get(&self.remote_access_errors),
            leaked_regions: 0,
        }
    }
}

struct RegionEntry {
    buf: Arc<RegisteredBuffer>,
    access: Access,
    pd: u32,
    /// Its slot in the same-host key table (regions with remote access), revoked when the
    /// entry is dropped.
    slot: Option<HeldSlot>,
}

/// The seeded generator of UD faults.
pub(crate) struct FaultGen {
    pub(crate) faults: UdFaults,
    pub(crate) rng: StdRng,
}

impl Shared {
    /// A fresh connection or listener id (never 0, the waker's token).
    pub(crate) fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// A fresh queue pair number.
    pub(crate) fn next_qpn(&self) -> u32 {
        self.next_qpn.fetch_add(1, Ordering::Relaxed)
    }

    /// Hands a command to the NIC thread and wakes it.
    pub(crate) fn command(&self, cmd: Cmd) {
        self.cmds.lock().push(cmd);
        if let Err(e) = self.waker.wake() {
            tracing::warn!("soft NIC: waking the NIC thread failed: {e}");
        }
    }

    /// The registered range a remote READ or WRITE addresses, if `rkey` names a live region of
    /// protection domain `pd` that grants `need` and contains `[addr, addr + len)`.
    pub(crate) fn remote_range(&self, rkey: u32, pd: u32, addr: u64, len: u64, need: Access) -> Option<Seg> {
        let regions = self.regions.read();
        let r = regions.get(&rkey)?;
        if r.pd != pd || !r.access.contains(need) {
            return None;
        }
        let off = addr.checked_sub(r.buf.addr())?;
        let end = off.checked_add(len)?;
        if end > r.buf.len() as u64 {
            return None;
        }
        Seg::new(r.buf.clone(), off as usize, len as usize).ok()
    }

    fn add_region(&self, buf: Arc<RegisteredBuffer>, access: Access, pd: u32) -> Result<u32> {
        let mut regions = self.regions.write();
        let mut rng = rand::rng();
        let key = loop {
            let key: u32 = rng.random();
            if key != 0 && !regions.contains_key(&key) {
                break key;
            }
        };
        let remote = access.contains(Access::REMOTE_READ) || access.contains(Access::REMOTE_WRITE);
        let slot = match self.shm.as_ref().filter(|_| remote) {
            Some(ep) => Some(HeldSlot::publish(&ep.keys, key).ok_or(Error::QueueFull {
                queue: "same-host key table (regions with remote access and same-host connections)",
                depth: shm::KEY_SLOTS,
            })?),
            None => None,
        };
        regions.insert(key, RegionEntry { buf, access, pd, slot });
        Ok(key)
    }

    /// Removes a region; its key-table slot is revoked before this returns.
    fn remove_region(&self, key: u32) {
        drop(self.regions.write().remove(&key));
    }
}

impl shm::Owner for Shared {
    fn endpoint(&self) -> &shm::Endpoint {
        self.shm.as_ref().expect("same-host events come only from a device with an endpoint")
    }
    fn conn_open(&self, conn: ConnId) -> bool {
        self.conns.lock().contains_key(&conn)
    }
    /// The region's memory object (read-only unless it grants remote write) and where it is,
    /// if it exists, is in the protection domain of the connection's queue pair and grants
    /// remote access.
    fn grant(&self, conn: ConnId, rkey: u32) -> Option<(std::os::fd::OwnedFd, shm::Answer)> {
        let c = self.conns.lock().get(&conn).cloned()?;
        let (pd, live) = {
            let mut st = c.st.lock();
            let pd = st.qp.as_ref()?.pd;
            (pd, c.responder_slot(&mut st)?)
        };
        let regions = self.regions.read();
        let r = regions.get(&rkey).filter(|r| r.pd == pd)?;
        let slot = r.slot.as_ref()?.slot();
        let fd = if r.access.contains(Access::REMOTE_WRITE) {
            r.buf.memfd().try_clone_to_owned().ok()?
        } else {
            shm::reopen_read_only(r.buf.memfd()).ok()?
        };
        let answer = shm::Answer {
            granted: true,
            access: r.access.bits(),
            slot: slot.index,
            word: slot.word,
            base: r.buf.addr(),
            len: r.buf.len() as u64,
            conn_slot: live.index,
            conn_word: live.word,
        };
        Some((fd, answer))
    }
    fn open_inbox(&self, conn: ConnId) -> Option<([std::os::fd::OwnedFd; 5], shm::Answer)> {
        let c = self.conns.lock().get(&conn).cloned()?;
        let (fds, live) = c.open_inbox()?;
        Some((fds, shm::Answer { granted: true, conn_slot: live.index, conn_word: live.word, ..Default::default() }))
    }
}

/// An opened soft device. Dropping the last handle stops and joins its NIC thread.
pub(crate) struct Device {
    pub(crate) shared: Arc<Shared>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

/// How long an accepted TCP connection may stay silent before its CONNECT_REQ arrives.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

impl Device {
    fn open(config: &FabricConfig, handshake_timeout: Duration) -> Result<Arc<Device>> {
        if let Some(name) = config.device.as_deref().filter(|&n| n != DEVICE_NAME) {
            return Err(Error::NoDevice {
                provider: "soft",
                detail: format!("no soft device is named {name:?}: the soft provider has one device, {DEVICE_NAME}"),
            });
        }
        let o = &config.soft;
        let attrs = DeviceAttributes {
            max_qp_wr: o.max_qp_wr,
            max_sge: 4,
            max_cqe: o.max_cqe,
            max_mr_size: o.max_mr_size,
            max_srq_wr: o.max_srq_wr,
            ud_mtu: o.ud_mtu,
            max_msg_size: 1 << 31,
            max_qp_rd_atom: MAX_RD_ATOM,
            max_qp_init_rd_atom: MAX_RD_ATOM,
            copies_on_host_cpus: true,
        };
        let poll = mio::Poll::new().map_err(|e| Error::os("soft open: epoll_create", None, e))?;
        let registry = poll.registry().try_clone().map_err(|e| Error::os("soft open: epoll dup", None, e))?;
        let waker =
            mio::Waker::new(poll.registry(), nic::WAKER).map_err(|e| Error::os("soft open: eventfd", None, e))?;
        let shm = match o.same_host {
            SameHost::Off => None,
            SameHost::Auto => match shm::Endpoint::open() {
                Ok(ep) => {
                    let fd = ep.listener_fd();
                    registry
                        .register(&mut mio::unix::SourceFd(&fd), shm::LISTENER_TOKEN, mio::Interest::READABLE)
                        .map_err(|e| Error::os("soft open: epoll_ctl (same-host socket)", None, e))?;
                    Some(ep)
                }
                Err(e) => {
                    tracing::info!("soft open: no same-host path ({e}); every connection uses the network path");
                    None
                }
            },
        };
        let shared = Arc::new(Shared {
            attrs,
            nic_spin: o.nic_spin,
            handshake_timeout,
            registry,
            waker,
            cmds: Mutex::new(Vec::new()),
            conns: Mutex::new(HashMap::new()),
            listeners: Mutex::new(HashMap::new()),
            regions: RwLock::new(HashMap::new()),
            next_id: AtomicU64::new(1),
            next_qpn: AtomicU32::new(rand::rng().random_range(0x100..0x10000)),
            ud_faults: Mutex::new(None),
            timers_pending: AtomicUsize::new(0),
            shm,
            handshakes: Mutex::new(Handshakes::default()),
            counters: SoftCounters::default(),
        });
        let nic_shared = shared.clone();
        let thread = std::thread::Builder::new()
            .name("soft0-nic".into())
            .spawn(move || nic::run(nic_shared, poll))
            .map_err(|e| Error::os("soft open: spawn NIC thread", None, e))?;
        Ok(Arc::new(Device { shared, thread: Mutex::new(Some(thread)) }))
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        self.shared.command(Cmd::Stop);
        if let Some(t) = self.thread.lock().take() {
            if t.join().is_err() {
                tracing::error!("soft NIC thread panicked");
            }
        }
    }
}

/// Opens a soft device with its own NIC thread.
pub(crate) fn open(config: &FabricConfig) -> Result<crate::fabric::Fabric> {
    open_with(config, HANDSHAKE_TIMEOUT)
}

/// Opens a soft device whose incoming connections must send CONNECT_REQ within
/// `handshake_timeout` (tests use a short one).
pub(crate) fn open_with(config: &FabricConfig, handshake_timeout: Duration) -> Result<crate::fabric::Fabric> {
    let dev = Device::open(config, handshake_timeout)?;
    let faults = Arc::new(SoftFaults { dev: dev.clone() });
    Ok(crate::fabric::Fabric::from_ops(Arc::new(SoftFabric { dev, faults })))
}

/// Opens a soft device and returns its shared state too, for tests that inspect the NIC.
#[cfg(test)]
pub(crate) fn open_inspected(
    config: &FabricConfig,
    handshake_timeout: Duration,
) -> Result<(crate::fabric::Fabric, Arc<Shared>)> {
    let dev = Device::open(config, handshake_timeout)?;
    let shared = dev.shared.clone();
    let faults = Arc::new(SoftFaults { dev: dev.clone() });
    Ok((crate::fabric::Fabric::from_ops(Arc::new(SoftFabric { dev, faults })), shared))
}

/// The device handle.
struct SoftFabric {
    dev: Arc<Device>,
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
        &self.dev.shared.attrs
    }
    fn alloc_pd(&self) -> Result<Arc<dyn PdOps>> {
        static NEXT_PD: AtomicU32 = AtomicU32::new(1);
        Ok(Arc::new(SoftPd { id: NEXT_PD.fetch_add(1, Ordering::Relaxed), dev: self.dev.clone() }))
    }
    fn create_cq(&self, depth: u32) -> Result<Arc<dyn CqOps>> {
        Ok(Arc::new(SoftCq::new(self.dev.clone(), depth)?))
    }
    fn create_event_channel(&self) -> Result<Arc<dyn CmChannelOps>> {
        Ok(Arc::new(SoftChannel::new(self.dev.clone())))
    }
    fn create_ud(&self, _pd: &Arc<dyn PdOps>, init: &UdInit) -> Result<Box<dyn UdOps>> {
        Ok(Box::new(SoftUd::new(self.dev.clone(), init)?))
    }
    fn faults(&self) -> Option<Arc<dyn FaultOps>> {
        Some(self.faults.clone())
    }
    fn counters(&self) -> FabricCounters {
        self.dev.shared.counters.snapshot()
    }
}

/// A protection domain: a number that regions and queue pairs are matched on.
pub(crate) struct SoftPd {
    pub(crate) id: u32,
    dev: Arc<Device>,
}

impl PdOps for SoftPd {
    fn register(&self, buffer: Arc<RegisteredBuffer>, access: Access) -> Result<Box<dyn MrOps>> {
        let key = self.dev.shared.add_region(buffer, access, self.id)?;
        Ok(Box::new(SoftMr { key, pd: self.id, access, dev: self.dev.clone() }))
    }
    fn create_srq(&self, max_wr: u32, max_sge: u32) -> Result<Arc<dyn SrqOps>> {
        Ok(Arc::new(SoftSrq::new(self.dev.clone(), self.id, max_wr, max_sge)))
    }
}

/// A registered region; dropping it removes its key from the device at once.
pub(crate) struct SoftMr {
    key: u32,
    pub(crate) pd: u32,
    pub(crate) access: Access,
    dev: Arc<Device>,
}

impl MrOps for SoftMr {
    fn lkey(&self) -> u32 {
        self.key
    }
    fn rkey(&self) -> u32 {
        self.key
    }
}

impl Drop for SoftMr {
    fn drop(&mut self) {
        self.dev.shared.remove_region(self.key);
    }
}

/// The fault injector of a device.
struct SoftFaults {
    dev: Arc<Device>,
}

impl FaultOps for SoftFaults {
    fn set_ud_faults(&self, faults: UdFaults) {
        let gen = (faults != UdFaults::default()).then(|| FaultGen { faults, rng: StdRng::seed_from_u64(faults.seed) });
        *self.dev.shared.ud_faults.lock() = gen;
    }
    fn cut(&self, conn: ConnId) -> Result<()> {
        let shared = &self.dev.shared;
        let c = shared.conns.lock().get(&conn).cloned();
        let c = c.ok_or_else(|| Error::invalid("cut", format!("connection {conn} is not open on {DEVICE_NAME}")))?;
        // An abrupt end of the transport: no DISCONNECT frame, the peer sees the stream end.
        let _ = c.sock.shutdown(std::net::Shutdown::Both);
        shared.command(Cmd::Broken(conn, "cut by the fault injector".into()));
        Ok(())
    }
}
