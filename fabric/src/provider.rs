//! The traits a provider implements. Callers never see them: they use the handles of
//! [`crate`], which validate arguments once for every provider and then delegate here.
//!
//! Objects keep what they depend on alive through `Arc`s (a queue pair holds its CQs, PD and
//! event channel), so teardown always runs in the reverse order of creation, on error paths too.
#![allow(clippy::missing_errors_doc, reason = "the handles document what each verb returns")]

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::os::fd::BorrowedFd;
use std::sync::Arc;
use std::time::Duration;

use super::bootstrap::{QpEndpoint, QpState, QpTransition};
use super::error::{Error, Result};
use super::memory::RegisteredBuffer;
use super::types::*;

// What the traits build on and take that lives in modules below this one, so that a provider
// finds the whole contract here.
pub use super::as_any::AsAny;
pub use super::cm_event::CmEventOf;
pub use super::region::{MrOps, Sge};
pub use super::types::ConnId;
pub use super::work_request::SendRequest;

/// An opened device: the root of every other object.
pub trait FabricOps: AsAny {
    /// Which provider this is.
    fn kind(&self) -> FabricKind;
    /// Name of the device (`soft0`, `rxe0`, `mlx5_0`, ...).
    fn device_name(&self) -> &str;
    /// Limits of the device.
    fn attributes(&self) -> &DeviceAttributes;
    /// Allocates a protection domain.
    fn alloc_pd(&self) -> Result<Arc<dyn PdOps>>;
    /// Creates a completion queue of `depth` entries with its completion channel.
    fn create_cq(&self, depth: u32) -> Result<Arc<dyn CqOps>>;
    /// Creates a connection-manager event channel.
    fn create_event_channel(&self) -> Result<Arc<dyn CmChannelOps>>;
    /// Creates an unreliable-datagram endpoint for multicast.
    fn create_ud(&self, pd: &Arc<dyn PdOps>, init: &UdInit) -> Result<Box<dyn UdOps>>;
    /// Fault injection, where the provider supports it (soft only).
    fn faults(&self) -> Option<Arc<dyn FaultOps>>;
    /// Creates an RC queue pair without the connection manager, in RESET: the caller moves it
    /// through INIT, RTR and RTS with [`QpOps::modify`] (see `fabric::bootstrap`).
    fn create_qp(&self, init: QpInitAttr) -> Result<Box<dyn QpOps>> {
        let _ = init;
        Err(Error::invalid("create_qp", format!("the {} provider cannot create queue pairs by hand yet", self.kind())))
    }
    /// What the device counted so far.
    fn counters(&self) -> FabricCounters {
        FabricCounters::default()
    }
}

/// A protection domain.
pub trait PdOps: AsAny {
    /// Registers `buffer` with `access`; the region is deregistered when the result drops.
    fn register(&self, buffer: Arc<RegisteredBuffer>, access: Access) -> Result<Box<dyn MrOps>>;
    /// Creates a shared receive queue (fails when the device has none).
    fn create_srq(&self, max_wr: u32, max_sge: u32) -> Result<Arc<dyn SrqOps>>;
}

/// A completion queue with its completion channel.
pub trait CqOps: AsAny {
    /// Moves up to `out.len()` completions into `out`; returns how many.
    fn poll(&self, out: &mut [WorkCompletion]) -> Result<usize>;
    /// Requests a notification for the next completion (`ibv_req_notify_cq`).
    fn arm(&self) -> Result<()>;
    /// Requests a notification for the next receive completion of a SEND posted with
    /// `solicited`, or the next failed completion (`ibv_req_notify_cq` with `solicited_only`).
    /// Other completions are queued without one. Arming for every completion overrides it.
    fn arm_solicited(&self) -> Result<()>;
    /// Waits up to `timeout` for a notification requested by `arm` and acknowledges it.
    /// Returns whether one arrived.
    fn wait(&self, timeout: Duration) -> Result<bool>;
    /// A descriptor that polls readable once a notification requested by `arm` or
    /// `arm_solicited` has arrived and is not taken yet (verbs: the completion channel's fd).
    fn notify_fd(&self) -> Result<BorrowedFd<'_>>;
    /// Takes (and acknowledges) a notification without blocking, so that `notify_fd` polls
    /// readable only for the next one. Returns whether one had arrived.
    fn take_notification(&self) -> Result<bool>;
    /// The depth.
    fn depth(&self) -> u32;
}

/// A shared receive queue.
pub trait SrqOps: AsAny {
    /// Posts a receive.
    fn post_recv(&self, wr_id: u64, sges: &[Sge<'_>]) -> Result<()>;
}

/// A reliable-connected queue pair bound to a connection-manager id.
pub trait QpOps: AsAny {
    /// The queue pair number.
    fn qp_num(&self) -> u32;
    /// The connection id that CM events about this queue pair carry.
    fn conn_id(&self) -> ConnId;
    /// Address of the peer.
    fn peer_addr(&self) -> SocketAddr;
    /// Local address of the connection.
    fn local_addr(&self) -> SocketAddr;
    /// Posts a receive (fails when the queue pair uses a shared receive queue).
    fn post_recv(&self, wr_id: u64, sges: &[Sge<'_>]) -> Result<()>;
    /// Posts a send-queue work request.
    fn post_send(&self, wr: &SendRequest<'_>) -> Result<()>;
    /// Disconnects: outstanding work requests complete with `WorkRequestFlushed`, both sides
    /// get a `Disconnected` event. Idempotent.
    fn disconnect(&self) -> Result<()>;
    /// How this end's RDMA READs and WRITEs reach the peer (fixed once the connection is
    /// established).
    fn data_path(&self) -> DataPath {
        DataPath::Network
    }
    /// The queue pair's state. One the connection manager made is RTS while connected.
    fn state(&self) -> QpState {
        QpState::ReadyToSend
    }
    /// What a peer needs to connect to this queue pair by hand.
    fn local_endpoint(&self) -> Result<QpEndpoint> {
        Err(Error::invalid("local_endpoint", "this queue pair was connected by the connection manager"))
    }
    /// Moves the queue pair (`ibv_modify_qp`); the handle has checked that the move is legal
    /// from [`state`](Self::state) and its attributes in range.
    fn modify(&self, transition: &QpTransition) -> Result<()> {
        let _ = transition;
        Err(Error::invalid("modify_qp", "this queue pair was connected by the connection manager"))
    }
}

/// A connection-manager event channel.
pub trait CmChannelOps: AsAny {
    /// Listens on `addr` (port 0 picks a free port).
    fn listen(&self, addr: SocketAddr, backlog: u32) -> Result<Box<dyn ListenerOps>>;
    /// Resolves `addr`, creates the queue pair and sends a connect request. The outcome
    /// (established, rejected, unreachable) arrives as an event with the queue pair's conn id.
    fn connect(
        &self,
        addr: SocketAddr,
        init: QpInitAttr,
        private_data: &[u8],
        timeout: Duration,
    ) -> Result<Box<dyn QpOps>>;
    /// Waits up to `timeout` for the next event.
    fn get_event(&self, timeout: Duration) -> Result<Option<ProviderCmEvent>>;
}

/// A listening connection-manager id.
pub trait ListenerOps: AsAny {
    /// The bound address (with the port picked).
    fn local_addr(&self) -> SocketAddr;
}

/// An incoming connect request, to accept or reject once.
pub trait ConnRequestOps: AsAny {
    /// The connection id that later events about this connection carry.
    fn conn_id(&self) -> ConnId;
    /// The requester's private data.
    fn private_data(&self) -> &[u8];
    /// The requester's address.
    fn peer_addr(&self) -> SocketAddr;
    /// Creates the queue pair and accepts with `private_data`.
    fn accept(self: Box<Self>, init: QpInitAttr, private_data: &[u8]) -> Result<Box<dyn QpOps>>;
    /// Rejects with `private_data`.
    fn reject(self: Box<Self>, private_data: &[u8]) -> Result<()>;
}

/// The event a provider's channel delivers: its connect request is the provider's own object,
/// which the public handle [`ConnectRequest`](crate::ConnectRequest) wraps.
pub type ProviderCmEvent = CmEventOf<Box<dyn ConnRequestOps>>;

/// An unreliable-datagram endpoint joined to multicast groups.
pub trait UdOps: AsAny {
    /// Joins `group`.
    fn join(&self, group: Ipv4Addr) -> Result<()>;
    /// Leaves `group`.
    fn leave(&self, group: Ipv4Addr) -> Result<()>;
    /// Sends `payload` (at most `mtu()` bytes, already checked) to `group`.
    fn send_to(&self, group: Ipv4Addr, payload: &[u8]) -> Result<()>;
    /// Sends `payload` to one endpoint by unicast (where multicast is unavailable).
    fn send_unicast(&self, to: SocketAddrV4, payload: &[u8]) -> Result<()>;
    /// Waits up to `timeout` for a datagram.
    fn recv(&self, timeout: Duration) -> Result<Option<Datagram>>;
    /// The largest payload.
    fn mtu(&self) -> usize;
    /// The endpoint's own address (where unicast reaches it).
    fn local_addr(&self) -> SocketAddr;
}

/// Faults a provider can inject, for tests.
pub trait FaultOps: Send + Sync {
    /// Sets the faults applied to datagrams received from now on.
    fn set_ud_faults(&self, faults: UdFaults);
    /// Cuts the transport of the connection `conn` as a cable pull would: no disconnect
    /// handshake; outstanding requests fail with `TransportRetryExceeded`.
    fn cut(&self, conn: ConnId) -> Result<()>;
}

/// What a provider needs to create a queue pair (as `ibv_qp_init_attr`): a
/// [`QpInit`](crate::QpInit) checked against the device's limits, with the provider
/// objects it names.
#[derive(Clone)]
pub struct QpInitAttr {
    /// Protection domain.
    pub pd: Arc<dyn PdOps>,
    /// CQ for send-queue completions.
    pub send_cq: Arc<dyn CqOps>,
    /// CQ for receive completions.
    pub recv_cq: Arc<dyn CqOps>,
    /// Shared receive queue, if any.
    pub srq: Option<Arc<dyn SrqOps>>,
    /// Queue capacities.
    pub caps: QpCaps,
    /// RNR retries (7 = infinite).
    pub rnr_retry: u8,
    /// How long the responder asks the requester to wait before an RNR retry.
    pub min_rnr_timer: Duration,
    /// RDMA READs this queue pair may have outstanding (at most the peer's responder
    /// resources, negotiated in the connect).
    pub initiator_depth: u8,
    /// RDMA READs of the peer this queue pair serves at once.
    pub responder_resources: u8,
}
