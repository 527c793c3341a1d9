//! Typed errors of the fabric layer: which verb failed, against which peer, and why.

use std::net::SocketAddr;

/// Result alias of the fabric layer.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// An error returned by a fabric verb. Completion errors (remote access error, RNR retry exceeded,
/// flush, ...) are not errors of this type: they arrive as [`crate::WcStatus`] in completions.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No device of the requested provider exists on this machine.
    #[error("no RDMA device for the {provider} fabric: {detail}")]
    NoDevice {
        /// The provider that was asked for.
        provider: &'static str,
        /// What was looked for and what was missing.
        detail: String,
    },
    /// The provider was not compiled into this binary.
    #[error("the {provider} fabric is not available in this build: {hint}")]
    ProviderUnavailable {
        /// The provider that was asked for.
        provider: &'static str,
        /// How to get it.
        hint: &'static str,
    },
    /// Private data longer than the connection manager carries.
    #[error("{what} private data is {len} bytes, the limit is {max}")]
    PrivateDataTooLong {
        /// connect, accept or reject.
        what: &'static str,
        /// The length given.
        len: usize,
        /// The limit for this message.
        max: usize,
    },
    /// A work queue is full: the request was not posted.
    #[error("{queue} is full ({depth} outstanding work requests)")]
    QueueFull {
        /// Which queue: "send queue", "receive queue", "shared receive queue".
        queue: &'static str,
        /// Its depth.
        depth: u32,
    },
    /// A UD payload larger than the path MTU.
    #[error("datagram of {len} bytes exceeds the UD MTU of {mtu} bytes")]
    PayloadTooLarge {
        /// The payload length given.
        len: usize,
        /// The MTU of the endpoint.
        mtu: usize,
    },
    /// A scatter/gather entry outside its local memory region.
    #[error("scatter/gather entry [{offset}, +{len}) is outside the {region_len}-byte memory region")]
    LocalBounds {
        /// Offset inside the region.
        offset: usize,
        /// Length of the entry.
        len: usize,
        /// Length of the region.
        region_len: usize,
    },
    /// A request the verb does not accept (bad size, too many SGEs, wrong state...).
    #[error("{verb}: invalid argument: {detail}")]
    InvalidArgument {
        /// The verb.
        verb: &'static str,
        /// What is wrong.
        detail: String,
    },
    /// Objects of two providers were used together (a queue pair created with a completion
    /// queue of the other provider, a work request naming a region of the other provider, ...):
    /// an object only works with objects of its own provider.
    #[error("{verb}: the {object} belongs to another provider")]
    ProviderMismatch {
        /// The verb.
        verb: &'static str,
        /// The object of the other provider: "protection domain", "memory region", ...
        object: &'static str,
    },
    /// Objects of two opened devices of one provider were used together (a queue pair of one
    /// device with the protection domain of another, ...): an object only works with objects of
    /// its own device, as with `ibv_create_qp`.
    #[error("{verb}: the {object} belongs to another device")]
    DeviceMismatch {
        /// The verb.
        verb: &'static str,
        /// The object of the other device: "protection domain", "completion queue", ...
        object: &'static str,
    },
    /// A queue pair state change `ibv_modify_qp` refuses (`EINVAL`): not the next state of the
    /// RESET → INIT → RTR → RTS sequence (ERROR is reachable from any state).
    #[error("modify_qp: {from} → {to} is not a legal transition")]
    InvalidTransition {
        /// The queue pair's state.
        from: crate::types::QpState,
        /// The state asked for.
        to: crate::types::QpState,
    },
    /// The queue pair is not connected (not yet established, or already disconnected or in error).
    #[error("{verb}: queue pair {qp_num} is not connected ({state})")]
    NotConnected {
        /// The verb.
        verb: &'static str,
        /// The queue pair number.
        qp_num: u32,
        /// Its state.
        state: &'static str,
    },
    /// A completion queue received more completions than its depth.
    #[error("completion queue overrun (depth {depth})")]
    CqOverrun {
        /// Depth of the queue.
        depth: u32,
    },
    /// A wait ran out of time.
    #[error("{verb}: timed out after {millis} ms")]
    Timeout {
        /// What was waited for.
        verb: &'static str,
        /// How long.
        millis: u64,
    },
    /// The address is already in use by another listener.
    #[error("{verb}: address {addr} is already in use")]
    AddrInUse {
        /// The verb.
        verb: &'static str,
        /// The address.
        addr: SocketAddr,
    },
    /// Multicast cannot be used on this host or interface.
    #[error("multicast is not available on {interface}: {detail}")]
    MulticastUnavailable {
        /// The interface address.
        interface: String,
        /// What the system said and what to do.
        detail: String,
    },
    /// An operating-system or library call failed.
    #[error(
        "{verb}{}{}: {source}",
        peer.map(|p| format!(" (peer {p})")).unwrap_or_default(),
        local.map(|l| format!(" (local address {l})")).unwrap_or_default()
    )]
    Os {
        /// The verb or system call.
        verb: &'static str,
        /// The peer concerned, if any.
        peer: Option<SocketAddr>,
        /// The local address concerned (binding, listening), if any.
        local: Option<SocketAddr>,
        /// The underlying error (errno).
        #[source]
        source: std::io::Error,
    },
    /// The peer's memory cannot be read in place: it refused the range (rkey, protection
    /// domain, bounds or access, as a READ's `RemoteAccessError`), deregistered it, or the
    /// connection is gone.
    #[error("{verb}: {detail}")]
    RemoteAccess {
        /// The verb.
        verb: &'static str,
        /// What was refused, and why.
        detail: String,
    },
    /// The fabric has been closed.
    #[error("the fabric is closed")]
    Closed,
}

impl Error {
    /// An [`Error::Os`] from the last OS error or an explicit one.
    pub fn os(verb: &'static str, peer: Option<SocketAddr>, source: std::io::Error) -> Self {
        Error::Os { verb, peer, local: None, source }
    }

    /// An [`Error::Os`] about a local address (bind, listen), named as such.
    pub fn os_local(verb: &'static str, local: SocketAddr, source: std::io::Error) -> Self {
        Error::Os { verb, peer: None, local: Some(local), source }
    }

    /// An [`Error::InvalidArgument`].
    pub fn invalid(verb: &'static str, detail: impl Into<String>) -> Self {
        Error::InvalidArgument { verb, detail: detail.into() }
    }

    /// The errno of an OS error, if this is one.
    pub fn raw_os_error(&self) -> Option<i32> {
        match self {
            Error::Os { source, .. } => source.raw_os_error(),
            _ => None,
        }
    }
}
