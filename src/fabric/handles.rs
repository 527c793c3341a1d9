//! The handles callers use: thin owners of provider objects that check arguments once, the
//! same way for every provider, before delegating to it.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::os::fd::BorrowedFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::cm_event::CmEventOf;
use super::error::{Error, Result};
use super::memory::RegisteredBuffer;
use super::provider::*;
use super::region::{check_sges, MemoryRegion};
use super::types::*;

/// An opened device: creates every other object. Cheap to clone.
#[derive(Clone)]
pub struct Fabric {
    ops: Arc<dyn FabricOps>,
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
    /// Creates a completion queue of `depth` entries (with its completion channel).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `depth` is 0 or above the device's `max_cqe`;
    /// [`Error::Os`] when the device or the system refuses it (completion channel, eventfd).
    pub fn create_cq(&self, depth: u32) -> Result<CompletionQueue> {
        let max = self.attributes().max_cqe;
        if depth == 0 || depth > max {
            return Err(Error::invalid("create_cq", format!("depth {depth} is not in 1..={max}")));
        }
        Ok(CompletionQueue { ops: self.ops.create_cq(depth)? })
    }
    /// Creates a connection-manager event channel.
    ///
    /// # Errors
    /// [`Error::Os`] when the system refuses one (verbs: `rdma_create_event_channel`).
    pub fn create_event_channel(&self) -> Result<EventChannel> {
        Ok(EventChannel { ops: self.ops.create_event_channel()? })
    }
    /// Creates an unreliable-datagram endpoint for multicast.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `recv_depth` is 0 or above the device's `max_qp_wr`, or
    /// `pd` is of another provider; [`Error::MulticastUnavailable`] when the interface cannot
    /// carry multicast; [`Error::Os`] (with the local address, [`Error::os_local`]) when the
    /// sockets or queue pairs cannot be created or bound.
    pub fn create_ud(&self, pd: &ProtectionDomain, init: &UdInit) -> Result<UdEndpoint> {
        if init.recv_depth == 0 || init.recv_depth > self.attributes().max_qp_wr {
            return Err(Error::invalid("create_ud", format!("recv_depth {} is out of range", init.recv_depth)));
        }
        Ok(UdEndpoint { ops: self.ops.create_ud(&pd.ops, init)? })
    }
    /// The fault injector, on providers that have one (soft).
    pub fn faults(&self) -> Option<FaultInjector> {
        self.ops.faults().map(|ops| FaultInjector { ops })
    }
    /// What the device counted so far (refused peers, cut connections, leaked regions).
    pub fn counters(&self) -> FabricCounters {
        self.ops.counters()
    }
}

/// A protection domain: memory regions and queue pairs of one domain work together.
#[derive(Clone)]
pub struct ProtectionDomain {
    ops: Arc<dyn PdOps>,
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
        let ops = self.ops.register(buffer.clone(), access)?;
        Ok(MemoryRegion::new(ops, buffer, access))
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
        Ok(SharedReceiveQueue { ops: self.ops.create_srq(max_wr, max_sge)? })
    }
    /// The provider object (for providers).
    pub(crate) fn ops(&self) -> &Arc<dyn PdOps> {
        &self.ops
    }
}

/// Polls between two clock reads (and yields) while [`CompletionQueue::poll_wait`] spins (a few µs).
const SPIN_POLLS_PER_CLOCK_READ: u32 = 64;

/// A completion queue. Cheap to clone.
#[derive(Clone)]
pub struct CompletionQueue {
    ops: Arc<dyn CqOps>,
}

impl CompletionQueue {
    /// Moves up to `out.len()` completions into `out`; returns how many (0 when empty).
    ///
    /// # Errors
    /// [`Error::CqOverrun`] once more completions arrived than the queue holds (sticky: the
    /// queue is unusable after it).
    pub fn poll(&self, out: &mut [WorkCompletion]) -> Result<usize> {
        self.ops.poll(out)
    }
    /// Polls into `batch` until the queue is empty, handing each batch to `each`, without
    /// waiting.
    ///
    /// # Errors
    /// What [`poll`](Self::poll) returns: [`Error::CqOverrun`].
    pub fn drain(&self, batch: &mut [WorkCompletion], mut each: impl FnMut(&[WorkCompletion])) -> Result<()> {
        loop {
            let n = self.poll(batch)?;
            each(&batch[..n]);
            if n < batch.len() {
                return Ok(());
            }
        }
    }
    /// Requests a notification for the next completion (`ibv_req_notify_cq`).
    ///
    /// # Errors
    /// [`Error::Os`] when the device refuses the request (verbs: `ibv_req_notify_cq`).
    pub fn arm(&self) -> Result<()> {
        self.ops.arm()
    }
    /// Requests a notification for the next receive completion of a solicited SEND (or the
    /// next failed completion) only (`ibv_req_notify_cq` with `solicited_only`).
    ///
    /// # Errors
    /// [`Error::Os`] when the device refuses the request (verbs: `ibv_req_notify_cq`).
    pub fn arm_solicited(&self) -> Result<()> {
        self.ops.arm_solicited()
    }
    /// Waits up to `timeout` for the notification requested by [`arm`](Self::arm).
    ///
    /// # Errors
    /// [`Error::Os`] when waiting on the completion channel fails (verbs: `poll`,
    /// `ibv_get_cq_event`). A timeout is `Ok(false)`, not an error.
    pub fn wait(&self, timeout: Duration) -> Result<bool> {
        self.ops.wait(timeout)
    }
    /// A descriptor for an event loop (`poll(2)`, `epoll`, tokio's `AsyncFd`): it polls
    /// readable once a notification requested by [`arm`](Self::arm) or
    /// [`arm_solicited`](Self::arm_solicited) has arrived, that is for every completion that
    /// would end a [`wait`](Self::wait), whoever queued it (on soft, a peer process on this
    /// host writing a SEND into this CQ's inbox too), and stays readable until
    /// [`take_notification`](Self::take_notification). It never blocks a read: take
    /// notifications with `take_notification`, not by reading it.
    ///
    /// The protocol, which loses no wake-up (a completion that arrives while the caller is
    /// between its steps is either found by the poll or makes the descriptor readable):
    ///
    /// 1. [`poll`](Self::poll); if it found completions, handle them and start again;
    /// 2. `arm` (or `arm_solicited`);
    /// 3. `poll` again: a completion queued before the arm raises no notification;
    /// 4. if still empty, wait for the descriptor to poll readable;
    /// 5. `take_notification`, then start again at 1.
    ///
    /// A readable descriptor may find the CQ empty (a completion polled in step 3 may also
    /// have raised the notification): callers poll, they do not count notifications.
    ///
    /// # Errors
    /// The provider could not set the descriptor up (soft: creating its eventfd failed).
    pub fn notify_fd(&self) -> Result<BorrowedFd<'_>> {
        self.ops.notify_fd()
    }
    /// Takes a notification without blocking (verbs: `ibv_get_cq_event` and
    /// `ibv_ack_cq_events`; soft: clears the eventfd), so that [`notify_fd`](Self::notify_fd)
    /// polls readable only for the next one, after the next arm. Returns whether one had
    /// arrived. See `notify_fd` for the protocol.
    ///
    /// # Errors
    /// The provider failed to read its completion channel.
    pub fn take_notification(&self) -> Result<bool> {
        self.ops.take_notification()
    }
    /// The depth.
    pub fn depth(&self) -> u32 {
        self.ops.depth()
    }
    /// Polls; when empty, spins for up to `spin` (a pause instruction between polls; the clock
    /// read and one yield per 64 polls, so a thread sharing this CPU gets a turn every few
    /// µs), then arms and blocks on the completion channel until a completion arrives or
    /// `timeout` (counted from the call) passes. Returns the number of completions moved into
    /// `out` (0 on timeout).
    ///
    /// # Errors
    /// What [`poll`](Self::poll), [`arm`](Self::arm) and [`wait`](Self::wait) return:
    /// [`Error::CqOverrun`], [`Error::Os`]. A timeout is `Ok(0)`.
    pub fn poll_wait(&self, out: &mut [WorkCompletion], spin: Duration, timeout: Duration) -> Result<usize> {
        let n = self.poll(out)?;
        if n > 0 {
            return Ok(n);
        }
        let start = Instant::now();
        loop {
            let elapsed = start.elapsed();
            if elapsed >= timeout {
                return Ok(0);
            }
            if elapsed < spin {
                for _ in 0..SPIN_POLLS_PER_CLOCK_READ {
                    std::hint::spin_loop();
                    let n = self.poll(out)?;
                    if n > 0 {
                        return Ok(n);
                    }
                }
                std::thread::yield_now();
                continue;
            }
            self.arm()?;
            let n = self.poll(out)?;
            if n > 0 {
                return Ok(n);
            }
            self.wait(timeout - elapsed)?;
            let n = self.poll(out)?;
            if n > 0 {
                return Ok(n);
            }
        }
    }
    /// Polls; when empty, arms for a solicited completion and blocks until one arrives (or a
    /// completion fails) or `timeout` passes, then polls again. Completions that raise no
    /// notification are queued meanwhile and returned by this poll. Returns the number moved
    /// into `out` (0 when none).
    ///
    /// # Errors
    /// What [`poll`](Self::poll), [`arm_solicited`](Self::arm_solicited) and
    /// [`wait`](Self::wait) return: [`Error::CqOverrun`], [`Error::Os`]. A timeout is `Ok(0)`.
    pub fn poll_wait_solicited(&self, out: &mut [WorkCompletion], timeout: Duration) -> Result<usize> {
        let n = self.poll(out)?;
        if n > 0 {
            return Ok(n);
        }
        self.arm_solicited()?;
        let n = self.poll(out)?;
        if n > 0 {
            return Ok(n);
        }
        self.wait(timeout)?;
        self.poll(out)
    }
    /// The provider object (for providers).
    pub(crate) fn ops(&self) -> &Arc<dyn CqOps> {
        &self.ops
    }
}

/// A receive queue shared by many queue pairs. Cheap to clone.
#[derive(Clone)]
pub struct SharedReceiveQueue {
    ops: Arc<dyn SrqOps>,
}

impl SharedReceiveQueue {
    /// Posts a receive into `sges`.
    ///
    /// # Errors
    /// [`Error::LocalBounds`] when an SGE is outside its region; [`Error::InvalidArgument`]
    /// for more SGEs than the queue's `max_sge` or a region not writable locally or of another
    /// protection domain; [`Error::QueueFull`] when `max_wr` receives are posted already.
    pub fn post_recv(&self, wr_id: u64, sges: &[Sge<'_>]) -> Result<()> {
        check_sges(sges)?;
        self.ops.post_recv(wr_id, sges)
    }
}

/// How to create a queue pair.
#[derive(Clone)]
pub struct QpInit<'a> {
    /// Protection domain of the memory it uses.
    pub pd: &'a ProtectionDomain,
    /// CQ of send-queue completions.
    pub send_cq: &'a CompletionQueue,
    /// CQ of receive completions.
    pub recv_cq: &'a CompletionQueue,
    /// A shared receive queue instead of its own.
    pub srq: Option<&'a SharedReceiveQueue>,
    /// Queue capacities.
    pub caps: QpCaps,
    /// RNR retries before a SEND fails (7 = infinite).
    pub rnr_retry: u8,
    /// Wait between RNR retries.
    pub min_rnr_timer: Duration,
    /// RDMA READs the queue pair may have outstanding (`max_rd_atomic`), 1 to the device's
    /// `max_qp_init_rd_atom`. The connect lowers it to the peer's responder resources; READs
    /// posted beyond it wait in the send queue, in order, with everything posted after them.
    pub initiator_depth: u8,
    /// RDMA READs of the peer the queue pair serves at once (`max_dest_rd_atomic`), 1 to the
    /// device's `max_qp_rd_atom`. A peer that has more outstanding breaks the protocol: the
    /// soft provider then fails the queue pair and cuts the connection.
    pub responder_resources: u8,
}

impl<'a> QpInit<'a> {
    /// Defaults: one CQ for both queues, default capacities, 6 RNR retries 640 µs apart,
    /// [`DEFAULT_RD_ATOMIC`] READs outstanding each way.
    pub fn new(pd: &'a ProtectionDomain, cq: &'a CompletionQueue) -> Self {
        let attrs = pd.fabric().attributes();
        QpInit {
            pd,
            send_cq: cq,
            recv_cq: cq,
            srq: None,
            caps: QpCaps::default(),
            rnr_retry: 6,
            min_rnr_timer: Duration::from_micros(640),
            initiator_depth: DEFAULT_RD_ATOMIC.min(attrs.max_qp_init_rd_atom),
            responder_resources: DEFAULT_RD_ATOMIC.min(attrs.max_qp_rd_atom),
        }
    }

    /// What the provider gets: these settings, checked against the device's limits.
    fn checked_attr(&self, verb: &'static str) -> Result<QpInitAttr> {
        let attrs = self.pd.fabric().attributes();
        let c = &self.caps;
        if c.max_send_wr == 0 || c.max_send_wr > attrs.max_qp_wr || c.max_recv_wr > attrs.max_qp_wr {
            return Err(Error::invalid(
                verb,
                format!("queue depths {}/{} exceed the device limit {}", c.max_send_wr, c.max_recv_wr, attrs.max_qp_wr),
            ));
        }
        if c.max_send_sge == 0 || c.max_send_sge > attrs.max_sge || c.max_recv_sge > attrs.max_sge {
            return Err(Error::invalid(
                verb,
                format!("SGE counts {}/{} exceed the device limit {}", c.max_send_sge, c.max_recv_sge, attrs.max_sge),
            ));
        }
        if self.rnr_retry > RNR_RETRY_INFINITE {
            return Err(Error::invalid(verb, format!("rnr_retry {} is not in 0..=7", self.rnr_retry)));
        }
        check_rd_atomic(verb, "initiator_depth", self.initiator_depth, attrs.max_qp_init_rd_atom)?;
        check_rd_atomic(verb, "responder_resources", self.responder_resources, attrs.max_qp_rd_atom)?;
        Ok(QpInitAttr {
            pd: self.pd.ops().clone(),
            send_cq: self.send_cq.ops().clone(),
            recv_cq: self.recv_cq.ops().clone(),
            srq: self.srq.map(|s| s.ops.clone()),
            caps: self.caps,
            rnr_retry: self.rnr_retry,
            min_rnr_timer: self.min_rnr_timer,
            initiator_depth: self.initiator_depth,
            responder_resources: self.responder_resources,
        })
    }
}

/// Checks a READ depth of a queue pair against the device's limit (and that READs can flow).
fn check_rd_atomic(verb: &'static str, what: &str, value: u8, max: u8) -> Result<()> {
    if value == 0 || value > max {
        return Err(Error::invalid(verb, format!("{what} {value} is not in 1..={max} (the device's limit)")));
    }
    Ok(())
}

/// A reliable-connected queue pair. Dropping it disconnects and destroys it.
pub struct QueuePair {
    ops: Box<dyn QpOps>,
}

impl std::fmt::Debug for QueuePair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueuePair").field("qp_num", &self.qp_num()).field("peer", &self.peer_addr()).finish()
    }
}

impl QueuePair {
    /// The queue pair number (completions carry it).
    pub fn qp_num(&self) -> u32 {
        self.ops.qp_num()
    }
    /// The id CM events about this connection carry.
    pub fn conn_id(&self) -> ConnId {
        self.ops.conn_id()
    }
    /// The peer's address.
    pub fn peer_addr(&self) -> SocketAddr {
        self.ops.peer_addr()
    }
    /// The local address.
    pub fn local_addr(&self) -> SocketAddr {
        self.ops.local_addr()
    }
    /// How this end's READs and WRITEs reach the peer: the network, or (soft provider, both ends
    /// on this host) shared memory. Known once the connection is established.
    pub fn data_path(&self) -> DataPath {
        self.ops.data_path()
    }
    /// Posts a receive into `sges`.
    ///
    /// # Errors
    /// [`Error::LocalBounds`] when an SGE is outside its region; [`Error::InvalidArgument`]
    /// for more SGEs than `max_recv_sge`, a region not writable locally or of another protection
    /// domain, or a queue pair that uses a shared receive queue; [`Error::QueueFull`] when
    /// `max_recv_wr` receives are posted already; [`Error::NotConnected`] once the queue pair is
    /// in error or disconnected.
    pub fn post_recv(&self, wr_id: u64, sges: &[Sge<'_>]) -> Result<()> {
        check_sges(sges)?;
        self.ops.post_recv(wr_id, sges)
    }
    /// Posts a send-queue work request.
    ///
    /// # Errors
    /// [`Error::LocalBounds`] when an SGE is outside its region; [`Error::InvalidArgument`]
    /// for more SGEs than `max_send_sge`, a message above the device's limit, a region of another
    /// protection domain, or an operation the queue pair cannot post; [`Error::QueueFull`] when
    /// `max_send_wr` requests are outstanding (unsignaled ones included); [`Error::NotConnected`]
    /// before the connection is established and once it is in error or disconnected. Failures of
    /// the operation itself arrive as completions ([`WcStatus`]), not errors.
    pub fn post_send(&self, wr: &SendRequest<'_>) -> Result<()> {
        check_sges(wr.sges)?;
        self.ops.post_send(wr)
    }
    /// Disconnects; outstanding work requests are flushed. Idempotent.
    ///
    /// # Errors
    /// [`Error::Os`] when the provider cannot send the disconnect (verbs: `rdma_disconnect`);
    /// the queue pair is in error and flushed all the same.
    pub fn disconnect(&self) -> Result<()> {
        self.ops.disconnect()
    }
}

/// A connection-manager event channel. Cheap to clone.
#[derive(Clone)]
pub struct EventChannel {
    ops: Arc<dyn CmChannelOps>,
}

impl EventChannel {
    /// Listens on `addr` (port 0 picks one); connect requests arrive on this channel.
    ///
    /// # Errors
    /// [`Error::AddrInUse`] when another listener has `addr`; [`Error::Os`] naming the local
    /// address ([`Error::os_local`]) when it cannot be bound or listened on (not an address of
    /// this host, no permission).
    pub fn listen(&self, addr: SocketAddr, backlog: u32) -> Result<Listener> {
        Ok(Listener { ops: self.ops.listen(addr, backlog)? })
    }
    /// Starts connecting to `addr` with `private_data` (at most 56 bytes). The queue pair is
    /// returned at once; `Established`, `Rejected` or `Unreachable` follows on this channel.
    ///
    /// # Errors
    /// [`Error::PrivateDataTooLong`] over 56 bytes; [`Error::InvalidArgument`] for queue
    /// capacities, SGE counts, `rnr_retry` or READ depths outside the device's limits, or objects
    /// of another provider; [`Error::Os`] naming the peer when the connection cannot be started.
    /// An unreachable peer or a refusal arrives later as an event ([`CmEvent::Unreachable`],
    /// [`CmEvent::Rejected`]).
    pub fn connect(
        &self,
        addr: SocketAddr,
        init: &QpInit<'_>,
        private_data: &[u8],
        timeout: Duration,
    ) -> Result<QueuePair> {
        if private_data.len() > MAX_CONNECT_PRIVATE_DATA {
            return Err(Error::PrivateDataTooLong {
                what: "connect",
                len: private_data.len(),
                max: MAX_CONNECT_PRIVATE_DATA,
            });
        }
        let init = init.checked_attr("connect")?;
        Ok(QueuePair { ops: self.ops.connect(addr, init, private_data, timeout)? })
    }
    /// Waits up to `timeout` for the next event.
    ///
    /// # Errors
    /// [`Error::Os`] when reading the event channel fails (verbs: `rdma_get_cm_event`). A
    /// timeout is `Ok(None)`.
    pub fn get_event(&self, timeout: Duration) -> Result<Option<CmEvent>> {
        let event = self.ops.get_event(timeout)?;
        Ok(event.map(|e| e.map_request(|ops| ConnectRequest { ops: Some(ops) })))
    }
}

/// A listening id; dropping it stops listening.
pub struct Listener {
    ops: Box<dyn ListenerOps>,
}

impl Listener {
    /// The bound address.
    pub fn local_addr(&self) -> SocketAddr {
        self.ops.local_addr()
    }
}

/// A connection-manager event, as [`EventChannel::get_event`] delivers it.
pub type CmEvent = CmEventOf<ConnectRequest>;

/// An incoming connect request. Dropping it unanswered rejects it.
pub struct ConnectRequest {
    ops: Option<Box<dyn ConnRequestOps>>,
}

impl std::fmt::Debug for ConnectRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnectRequest").field("conn", &self.conn_id()).field("peer", &self.peer_addr()).finish()
    }
}

impl ConnectRequest {
    fn inner(&self) -> &dyn ConnRequestOps {
        self.ops.as_deref().expect("a ConnectRequest is answered only by consuming it")
    }
    /// The id later events about this connection carry.
    pub fn conn_id(&self) -> ConnId {
        self.inner().conn_id()
    }
    /// The requester's private data.
    pub fn private_data(&self) -> &[u8] {
        self.inner().private_data()
    }
    /// The requester's address.
    pub fn peer_addr(&self) -> SocketAddr {
        self.inner().peer_addr()
    }
    /// Creates the queue pair and accepts with `private_data` (at most 196 bytes).
    ///
    /// # Errors
    /// [`Error::PrivateDataTooLong`] over 196 bytes; [`Error::InvalidArgument`] for a `init`
    /// outside the device's limits or of another provider; [`Error::NotConnected`] when the
    /// requester went away meanwhile; [`Error::Os`] naming the peer when the accept cannot be sent.
    pub fn accept(mut self, init: &QpInit<'_>, private_data: &[u8]) -> Result<QueuePair> {
        if private_data.len() > MAX_ACCEPT_PRIVATE_DATA {
            return Err(Error::PrivateDataTooLong {
                what: "accept",
                len: private_data.len(),
                max: MAX_ACCEPT_PRIVATE_DATA,
            });
        }
        let init = init.checked_attr("accept")?;
        let ops = self.ops.take().expect("unanswered");
        Ok(QueuePair { ops: ops.accept(init, private_data)? })
    }
    /// Rejects with `private_data` (at most 148 bytes).
    ///
    /// # Errors
    /// [`Error::PrivateDataTooLong`] over 148 bytes; [`Error::Os`] naming the peer when the
    /// reject cannot be sent.
    pub fn reject(mut self, private_data: &[u8]) -> Result<()> {
        if private_data.len() > MAX_REJECT_PRIVATE_DATA {
            return Err(Error::PrivateDataTooLong {
                what: "reject",
                len: private_data.len(),
                max: MAX_REJECT_PRIVATE_DATA,
            });
        }
        self.ops.take().expect("unanswered").reject(private_data)
    }
}

impl Drop for ConnectRequest {
    fn drop(&mut self) {
        if let Some(ops) = self.ops.take() {
            if let Err(e) = ops.reject(&[]) {
                tracing::debug!("rejecting a dropped connect request failed: {e}");
            }
        }
    }
}

/// An unreliable-datagram endpoint for multicast announcements.
pub struct UdEndpoint {
    ops: Box<dyn UdOps>,
}

impl UdEndpoint {
    /// Joins a multicast group.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `group` is not a multicast address;
    /// [`Error::MulticastUnavailable`] when the interface cannot join it; [`Error::Os`] for other
    /// failures of the system.
    pub fn join(&self, group: Ipv4Addr) -> Result<()> {
        if !group.is_multicast() {
            return Err(Error::invalid("join multicast", format!("{group} is not a multicast address")));
        }
        self.ops.join(group)
    }
    /// Leaves a multicast group.
    ///
    /// # Errors
    /// [`Error::Os`] when the endpoint is not a member of `group` (`EADDRNOTAVAIL`) or the
    /// system refuses.
    pub fn leave(&self, group: Ipv4Addr) -> Result<()> {
        self.ops.leave(group)
    }
    /// Sends `payload` to a group; larger than the MTU is an error.
    ///
    /// # Errors
    /// [`Error::PayloadTooLarge`] above the [`mtu`](Self::mtu); [`Error::InvalidArgument`]
    /// (verbs) before the group is joined; [`Error::Os`] or [`Error::Timeout`] (verbs) when the
    /// datagram cannot be sent.
    pub fn send_to(&self, group: Ipv4Addr, payload: &[u8]) -> Result<()> {
        self.check_mtu(payload)?;
        self.ops.send_to(group, payload)
    }
    /// Sends `payload` to one endpoint by unicast; larger than the MTU is an error.
    ///
    /// # Errors
    /// [`Error::PayloadTooLarge`] above the [`mtu`](Self::mtu); [`Error::Os`] when the
    /// datagram cannot be sent, or (verbs) the peer's address not resolved; [`Error::Timeout`]
    /// (verbs) when resolving or sending takes too long.
    pub fn send_unicast(&self, to: SocketAddrV4, payload: &[u8]) -> Result<()> {
        self.check_mtu(payload)?;
        self.ops.send_unicast(to, payload)
    }
    /// Waits up to `timeout` for a datagram.
    ///
    /// # Errors
    /// [`Error::Os`] when receiving fails; [`Error::Closed`] (verbs) when the endpoint is being
    /// destroyed. A timeout is `Ok(None)`.
    pub fn recv(&self, timeout: Duration) -> Result<Option<Datagram>> {
        self.ops.recv(timeout)
    }
    /// The largest payload.
    pub fn mtu(&self) -> usize {
        self.ops.mtu()
    }
    /// Where unicast reaches this endpoint.
    pub fn local_addr(&self) -> SocketAddr {
        self.ops.local_addr()
    }
    fn check_mtu(&self, payload: &[u8]) -> Result<()> {
        if payload.len() > self.mtu() {
            return Err(Error::PayloadTooLarge { len: payload.len(), mtu: self.mtu() });
        }
        Ok(())
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
    /// [`Error::InvalidArgument`] when `conn` is not an open connection of this device.
    pub fn cut(&self, conn: ConnId) -> Result<()> {
        self.ops.cut(conn)
    }
}
