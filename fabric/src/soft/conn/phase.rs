//! Where a connection is in its life.

/// Where a connection is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Active side: TCP connecting or waiting for ACCEPT.
    Connecting,
    /// Passive side: waiting for CONNECT_REQ.
    Incoming,
    /// Passive side: the request was delivered, waiting for accept or reject.
    Requested,
    /// A queue pair connected by hand whose stream to the peer is not bound yet: this end has
    /// not dialed, is dialing, or waits for the peer's hello (requests posted in RTS wait).
    Unbound,
    /// Connected.
    Established,
    /// Disconnected, rejected, failed or broken.
    Closed,
}

impl Phase {
    /// How errors name the phase.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Phase::Connecting => "connecting",
            Phase::Incoming | Phase::Requested => "awaiting accept",
            Phase::Unbound => "no stream to the peer yet",
            Phase::Established => "established",
            Phase::Closed => "disconnected",
        }
    }
}
