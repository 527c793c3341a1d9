//! Plain data of the fabric contract: access flags, work requests, completions, events, limits.

use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

/// Largest private data a connect request carries (InfiniBand REQ).
pub const MAX_CONNECT_PRIVATE_DATA: usize = 56;
/// Largest private data an accept carries (InfiniBand REP).
pub const MAX_ACCEPT_PRIVATE_DATA: usize = 196;
/// Largest private data a reject carries (InfiniBand REJ).
pub const MAX_REJECT_PRIVATE_DATA: usize = 148;
/// `rnr_retry` value meaning "retry forever", as in verbs.
pub const RNR_RETRY_INFINITE: u8 = 7;
/// Default initiator depth and responder resources of a queue pair: RDMA READs it may have
/// outstanding, and READs of the peer it serves at once (`max_rd_atomic` and
/// `max_dest_rd_atomic` in verbs; 16 is what ConnectX devices offer).
pub const DEFAULT_RD_ATOMIC: u8 = 16;

/// Identifies a connection in CM events.
pub type ConnId = u64;

/// Which provider implements the fabric.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum FabricKind {
    /// Verbs when an RDMA device is present, otherwise soft.
    #[default]
    Auto,
    /// The user-space provider over TCP and UDP.
    Soft,
    /// libibverbs and librdmacm (cargo feature `verbs`).
    Verbs,
}

impl FabricKind {
    /// The name used on command lines and in logs.
    pub fn name(self) -> &'static str {
        match self {
            FabricKind::Auto => "auto",
            FabricKind::Soft => "soft",
            FabricKind::Verbs => "verbs",
        }
    }
}

impl std::str::FromStr for FabricKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "auto" => Ok(FabricKind::Auto),
            "soft" => Ok(FabricKind::Soft),
            "verbs" => Ok(FabricKind::Verbs),
            other => Err(format!("unknown fabric '{other}': use auto, soft or verbs")),
        }
    }
}

impl std::fmt::Display for FabricKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Access rights of a memory region, as `IBV_ACCESS_*`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Access(u32);

impl Access {
    /// No remote access, no local write by the NIC.
    pub const NONE: Access = Access(0);
    /// The NIC may write the region locally (receive buffers, READ destinations).
    pub const LOCAL_WRITE: Access = Access(1);
    /// Remote peers may RDMA WRITE into the region (implies the need for LOCAL_WRITE, as in verbs).
    pub const REMOTE_WRITE: Access = Access(2);
    /// Remote peers may RDMA READ the region.
    pub const REMOTE_READ: Access = Access(4);

    /// Whether all flags of `other` are set.
    pub fn contains(self, other: Access) -> bool {
        self.0 & other.0 == other.0
    }
    /// The raw bits (the same values as `IBV_ACCESS_*`).
    pub fn bits(self) -> u32 {
        self.0
    }
    /// The flags of `bits` this type knows; other bits are dropped.
    pub(crate) fn from_bits_truncate(bits: u32) -> Access {
        Access(bits & (Access::LOCAL_WRITE.0 | Access::REMOTE_WRITE.0 | Access::REMOTE_READ.0))
    }
}

impl std::ops::BitOr for Access {
    type Output = Access;
    fn bitor(self, rhs: Access) -> Access {
        Access(self.0 | rhs.0)
    }
}

/// Limits of an opened device. The soft provider enforces the same kind of limits as hardware.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceAttributes {
    /// Largest depth of a send or receive queue.
    pub max_qp_wr: u32,
    /// Largest number of scatter/gather entries in one work request.
    pub max_sge: u32,
    /// Largest completion queue.
    pub max_cqe: u32,
    /// Largest memory region in bytes.
    pub max_mr_size: u64,
    /// Largest shared receive queue; 0 when the device has none.
    pub max_srq_wr: u32,
    /// Path MTU of unreliable datagrams: the largest UD payload.
    pub ud_mtu: usize,
    /// Largest RDMA READ or WRITE message in bytes.
    pub max_msg_size: u64,
    /// Most RDMA READs of a peer one queue pair serves at once: the largest responder
    /// resources (`max_qp_rd_atom`).
    pub max_qp_rd_atom: u8,
    /// Most RDMA READs one queue pair may have outstanding: the largest initiator depth
    /// (`max_qp_init_rd_atom`).
    pub max_qp_init_rd_atom: u8,
    /// The device moves data with this host's CPUs (soft: a NIC thread of the process copies
    /// every byte READ or sent), so it competes for them with the threads that produce the
    /// data; a hardware NIC's DMA does not.
    pub copies_on_host_cpus: bool,
}

/// What a device counted since it was opened: defences against misbehaving peers and
/// resources given up. Providers count what applies to them; the others stay 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FabricCounters {
    /// Incoming connections closed at once because their source (or all sources together)
    /// already had as many connect handshakes in progress as allowed (soft).
    pub refused_handshakes: u64,
    /// Incoming connections closed because no connect request arrived in time (soft).
    pub handshake_timeouts: u64,
    /// Connections cut because the peer had more RDMA READs outstanding than the responder
    /// resources it was granted (soft).
    pub read_depth_violations: u64,
    /// Connections cut because the peer left its answers unread for too long (soft).
    pub output_stalls: u64,
    /// READs and WRITEs of peers refused with a remote access error, and same-host requests
    /// for a region the connection may not reach (an rkey of no region of its queue pair's
    /// protection domain), each of which moved the responder's queue pair to the error state
    /// (soft).
    pub remote_access_errors: u64,
    /// Streams to the data port of queue pairs connected by hand closed because their hello was
    /// malformed, ended early, or named no queue pair waiting for that peer (soft).
    pub rejected_hellos: u64,
    /// Connect handshakes in progress closed to make room for a newcomer while the table of
    /// handshakes in progress was full: the oldest gives way (soft).
    pub evicted_handshakes: u64,
    /// Same-host peers cut for writing into shared memory what the protocol forbids: a SEND
    /// in the inbox without a receive credit, or an inbox that breaks its invariants (soft).
    pub shared_page_violations: u64,
    /// Same-host streams refused because the peer process runs as another user (and in no
    /// group the device allows): the connection then uses the network path (soft).
    pub refused_same_host_peers: u64,
    /// UD datagrams dropped because they were larger than the UD MTU (soft).
    pub ud_oversized_datagrams: u64,
    /// UD datagrams the kernel dropped because a socket's receive buffer was full, as
    /// `SO_RXQ_OVFL` reports them (soft).
    pub ud_kernel_drops: u64,
    /// UD datagrams dropped because as many as the receive depth were waiting (soft).
    pub ud_queue_drops: u64,
    /// Memory regions whose deregistration failed: their memory is never freed or reused,
    /// since the device may still access it (verbs).
    pub leaked_regions: u64,
}

/// A memory region's remote address and key, as a peer uses it in READ and WRITE.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RemoteAddr {
    /// Virtual address in the owner's address space.
    pub addr: u64,
    /// The region's rkey.
    pub rkey: u32,
}

/// The operation of a send-queue work request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendOp {
    /// Two-sided SEND into a receive the peer posted.
    Send,
    /// SEND carrying 32 bits of immediate data.
    SendWithImm(u32),
    /// One-sided READ of the peer's memory into the local scatter list.
    RdmaRead(RemoteAddr),
    /// One-sided WRITE of the local gather list into the peer's memory.
    RdmaWrite(RemoteAddr),
}

/// Status of a work completion, as `ibv_wc_status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum WcStatus {
    /// The work request completed.
    #[default]
    Success,
    /// A receive buffer was too small for the incoming message.
    LocalLengthError,
    /// A local memory key or access right was wrong.
    LocalProtectionError,
    /// The responder refused the access: bad rkey, out of bounds, or missing access rights.
    RemoteAccessError,
    /// The responder could not execute the request (e.g. message too long for its receive).
    RemoteInvalidRequest,
    /// The responder failed for another reason.
    RemoteOperationError,
    /// The peer had no receive posted for longer than `rnr_retry` allows.
    RnrRetryExceeded,
    /// The peer stopped answering (connection lost).
    TransportRetryExceeded,
    /// The queue pair went to error or was disconnected before this request executed.
    WorkRequestFlushed,
    /// Any other provider status (the raw value).
    Other(u32),
}

impl WcStatus {
    /// Whether the request completed successfully.
    pub fn is_success(self) -> bool {
        self == WcStatus::Success
    }
}

/// What a completion reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum WcOpcode {
    /// A SEND (with or without immediate) completed.
    #[default]
    Send,
    /// An RDMA READ completed.
    RdmaRead,
    /// An RDMA WRITE completed.
    RdmaWrite,
    /// A receive consumed an incoming SEND.
    Recv,
}

/// One work completion, as `ibv_wc`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WorkCompletion {
    /// The `wr_id` of the work request.
    pub wr_id: u64,
    /// Status.
    pub status: WcStatus,
    /// Operation.
    pub opcode: WcOpcode,
    /// Bytes received (receives) or transferred (READ).
    pub byte_len: u32,
    /// Immediate data of a SEND with immediate, on the receive side.
    pub imm: Option<u32>,
    /// Number of the local queue pair the request was posted on.
    pub qp_num: u32,
}

/// Capacities of a queue pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpCaps {
    /// Send queue depth.
    pub max_send_wr: u32,
    /// Receive queue depth (ignored with a shared receive queue).
    pub max_recv_wr: u32,
    /// Scatter/gather entries per send request.
    pub max_send_sge: u32,
    /// Scatter/gather entries per receive request.
    pub max_recv_sge: u32,
}

impl Default for QpCaps {
    fn default() -> Self {
        QpCaps { max_send_wr: 128, max_recv_wr: 128, max_send_sge: 2, max_recv_sge: 1 }
    }
}

/// Why a connection attempt was rejected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RejectReason {
    /// The peer's application rejected it (with private data).
    Consumer,
    /// Nobody listens at that address and port.
    NoListener,
    /// Another reason (provider status).
    Other(i32),
}

/// A datagram received on an unreliable-datagram endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Datagram {
    /// The sender's address.
    pub from: SocketAddr,
    /// The payload.
    pub data: Vec<u8>,
}

/// How an unreliable-datagram endpoint is set up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UdInit {
    /// Address of the local interface that sends and receives multicast.
    pub interface: Ipv4Addr,
    /// Port of the groups (soft: the UDP port; verbs: folded into the Q_Key).
    pub port: u16,
    /// Soft: the port of the endpoint's own (unicast) address on `interface`, where unicast
    /// datagrams reach it; 0 picks a free one. A fixed port lets peers on other hosts list the
    /// endpoint before it exists (unicast-only discovery); it can be bound by one endpoint at
    /// a time. Verbs addresses an endpoint by its queue pair number and ignores it.
    pub unicast_port: u16,
    /// Receive buffers kept posted.
    pub recv_depth: u32,
}

/// Faults the soft provider injects into unreliable datagrams (tests only).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct UdFaults {
    /// Probability of dropping a datagram, 0..=1.
    pub drop: f64,
    /// Probability of delivering a datagram twice.
    pub duplicate: f64,
    /// Delay added before delivery.
    pub delay: Duration,
    /// Seed of the fault generator (deterministic tests).
    pub seed: u64,
}

/// How one end of a connection moves its RDMA READs and WRITEs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum DataPath {
    /// Through the device: the RDMA hardware, or the soft NIC threads over TCP.
    #[default]
    Network,
    /// Soft provider, both ends on this host: copies by this end's threads between its
    /// buffers and a mapping of the peer's region (see the soft provider's same-host path).
    SharedMemory,
}

/// Whether the soft provider takes the same-host path for connections whose ends share a host.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum SameHost {
    /// Detect same-host peers when connections are set up and use shared memory with them.
    #[default]
    Auto,
    /// Always use the network path.
    Off,
}

impl SameHost {
    /// The name used on command lines (`auto`, `off`).
    pub fn name(self) -> &'static str {
        match self {
            SameHost::Auto => "auto",
            SameHost::Off => "off",
        }
    }
}

impl std::str::FromStr for SameHost {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "auto" => Ok(SameHost::Auto),
            "off" => Ok(SameHost::Off),
            other => Err(format!("unknown same-host setting '{other}': use auto or off")),
        }
    }
}

/// The state of a queue pair (`ibv_qp_state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum QpState {
    /// Created, not configured: nothing can be posted.
    Reset,
    /// Configured with a port and access rights: receives may be posted.
    Init,
    /// Ready to receive (RTR): bound to the remote queue pair; incoming messages are handled.
    ReadyToReceive,
    /// Ready to send (RTS): sends, READs and WRITEs may be posted.
    ReadyToSend,
    /// Failed or moved to error: outstanding work requests are flushed.
    Error,
}

impl std::fmt::Display for QpState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            QpState::Reset => "RESET",
            QpState::Init => "INIT",
            QpState::ReadyToReceive => "RTR",
            QpState::ReadyToSend => "RTS",
            QpState::Error => "ERROR",
        })
    }
}
