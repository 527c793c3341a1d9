//! An opened soft device: what its NIC thread and its objects share (attributes, the poll
//! registry and the NIC thread's command queue, the region table, counters, the same-host
//! endpoint), and the handle that owns the NIC thread.

use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use mio::Token;
use parking_lot::Mutex;
use rand::{rngs::StdRng, RngExt};

use super::handshakes::Handshakes;
use super::regions::RegionTable;
use super::shm;
use super::timers::TimerKind;
use crate::error::{Error, Result};
use crate::provider::ConnId;
use crate::types::*;
use crate::FabricConfig;

/// Name of every soft device.
pub(crate) const DEVICE_NAME: &str = "soft0";
/// Largest initiator depth and responder resources of a soft queue pair (Soft-RoCE's value).
const MAX_RD_ATOM: u8 = 128;
/// Token of the waker.
pub(crate) const WAKER: Token = Token(0);
/// Tokens of listeners have this bit set; connections use their id.
pub(crate) const LISTENER_BIT: usize = 1 << 62;

/// A request from a user thread to the NIC thread.
pub(crate) enum NicCommand {
    /// Stop the thread (the device is closing).
    Stop,
    /// Run a timer of a connection.
    Timer(Instant, ConnId, TimerKind),
    /// The connection's transport failed.
    Broken(ConnId, String),
    /// A user thread's write ended a pause of reading the connection.
    Resume(ConnId),
    /// The queue pair connected by hand of this connection reached RTR: a stream of the data
    /// port waiting for it may be bound now.
    ReadyToReceive(ConnId),
}

/// What the NIC thread and the objects of a device share. It never owns the NIC thread, so
/// the thread holding it does not keep the device open.
pub(crate) struct DeviceState {
    pub(crate) attrs: DeviceAttributes,
    /// The address the device is bound to (`FabricConfig::bind`): its data port's.
    pub(crate) addr: std::net::IpAddr,
    pub(crate) nic_spin: Duration,
    /// How long an incoming connection may take to send its CONNECT_REQ before it is closed.
    pub(crate) handshake_timeout: Duration,
    pub(crate) registry: mio::Registry,
    pub(crate) waker: mio::Waker,
    pub(crate) commands: Mutex<Vec<NicCommand>>,
    /// The registered regions, by key.
    pub(crate) regions: RegionTable,
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
    /// Turns of the NIC thread's loop that paused and yielded before reading again a
    /// connection whose receive state a polling thread held.
    #[cfg(test)]
    pub(crate) yields_for_held: AtomicU64,
}

/// What a soft device counts (see [`FabricCounters`]).
#[derive(Default)]
pub(crate) struct SoftCounters {
    pub(crate) refused_handshakes: AtomicU64,
    pub(crate) handshake_timeouts: AtomicU64,
    pub(crate) read_depth_violations: AtomicU64,
    pub(crate) output_stalls: AtomicU64,
    pub(crate) remote_access_errors: AtomicU64,
    pub(crate) rejected_hellos: AtomicU64,
    pub(crate) evicted_handshakes: AtomicU64,
    pub(crate) shared_page_violations: AtomicU64,
    pub(crate) refused_same_host_peers: AtomicU64,
    pub(crate) ud_oversized_datagrams: AtomicU64,
    pub(crate) ud_kernel_drops: AtomicU64,
    pub(crate) ud_queue_drops: AtomicU64,
}

impl SoftCounters {
    /// Adds one to `counter`.
    pub(crate) fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// The counts now.
    pub(crate) fn snapshot(&self) -> FabricCounters {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        FabricCounters {
            refused_handshakes: get(&self.refused_handshakes),
            handshake_timeouts: get(&self.handshake_timeouts),
            read_depth_violations: get(&self.read_depth_violations),
            output_stalls: get(&self.output_stalls),
            remote_access_errors: get(&self.remote_access_errors),
            rejected_hellos: get(&self.rejected_hellos),
            evicted_handshakes: get(&self.evicted_handshakes),
            shared_page_violations: get(&self.shared_page_violations),
            refused_same_host_peers: get(&self.refused_same_host_peers),
            ud_oversized_datagrams: get(&self.ud_oversized_datagrams),
            ud_kernel_drops: get(&self.ud_kernel_drops),
            ud_queue_drops: get(&self.ud_queue_drops),
            leaked_regions: 0,
        }
    }
}

/// The seeded generator of UD faults.
pub(crate) struct FaultGen {
    pub(crate) faults: UdFaults,
    pub(crate) rng: StdRng,
}

impl DeviceState {
    /// A fresh connection or listener id (never 0, the waker's token).
    pub(crate) fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// A fresh queue pair number (24 bits, as on InfiniBand).
    pub(crate) fn next_qpn(&self) -> u32 {
        self.next_qpn.fetch_add(1, Ordering::Relaxed) & crate::bootstrap::MAX_24_BIT_FIELD
    }

    /// Hands a command to the NIC thread and wakes it.
    pub(crate) fn command(&self, cmd: NicCommand) {
        self.commands.lock().push(cmd);
        if let Err(e) = self.waker.wake() {
            tracing::warn!("soft NIC: waking the NIC thread failed: {e}");
        }
    }
}

/// An opened soft device. Dropping the last handle stops and joins its NIC thread.
pub(crate) struct Device {
    pub(crate) state: Arc<DeviceState>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Device {
    /// Opens a device whose incoming connections must send CONNECT_REQ within
    /// `handshake_timeout`, and starts its NIC thread, which runs `nic` with the device's state
    /// and the poll instance of its sockets.
    pub(crate) fn open(
        config: &FabricConfig,
        handshake_timeout: Duration,
        nic: impl FnOnce(Arc<DeviceState>, mio::Poll) + Send + 'static,
    ) -> Result<Arc<Device>> {
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
        let waker = mio::Waker::new(poll.registry(), WAKER).map_err(|e| Error::os("soft open: eventfd", None, e))?;
        let shm = match o.same_host {
            SameHost::Off => None,
            SameHost::Auto => match shm::Endpoint::open(o.same_host_group) {
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
        let state = Arc::new(DeviceState {
            attrs,
            addr: config.bind,
            nic_spin: o.nic_spin,
            handshake_timeout,
            registry,
            waker,
            commands: Mutex::new(Vec::new()),
            regions: RegionTable::default(),
            next_id: AtomicU64::new(1),
            next_qpn: AtomicU32::new(rand::rng().random_range(0x100..0x10000)),
            ud_faults: Mutex::new(None),
            timers_pending: AtomicUsize::new(0),
            shm,
            handshakes: Mutex::new(Handshakes::default()),
            counters: SoftCounters::default(),
            #[cfg(test)]
            yields_for_held: AtomicU64::new(0),
        });
        let nic_state = state.clone();
        let thread = std::thread::Builder::new()
            .name("soft0-nic".into())
            .spawn(move || nic(nic_state, poll))
            .map_err(|e| Error::os("soft open: spawn NIC thread", None, e))?;
        Ok(Arc::new(Device { state, thread: Mutex::new(Some(thread)) }))
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        self.state.command(NicCommand::Stop);
        if let Some(t) = self.thread.lock().take() {
            if t.join().is_err() {
                tracing::error!("soft NIC thread panicked");
            }
        }
    }
}
