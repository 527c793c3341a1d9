//! What a queue pair connected by hand (without the connection manager) adds to its
//! connection: where it is in the state machine (RESET, INIT, RTR, RTS), its endpoint and its
//! peer's, which end dials the stream between them, and how long a request waits for it.
//!
//! On soft an endpoint names the peer's device as a GID and a LID name a port: the GID is the
//! IPv4-mapped (or IPv6) address of the device's data port, the LID that port's number.

use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use crate::bootstrap::{QpEndpoint, QpState as IbvState, RtsAttr};

/// The longest a request of a queue pair connected by hand waits for its stream to the peer,
/// whatever RTS's `timeout` and `retry_count` say (and with `timeout` 0, which verbs waits
/// forever with).
pub(crate) const MAX_TRANSPORT_WAIT: Duration = Duration::from_secs(30);

/// The by-hand part of a connection.
pub(crate) struct HandState {
    /// RESET, INIT, RTR or RTS (a failed queue pair is the queue-pair state's `error`).
    pub(crate) state: IbvState,
    /// This end's endpoint.
    pub(crate) local: QpEndpoint,
    /// The peer's endpoint (from RTR).
    pub(crate) remote: Option<QpEndpoint>,
    /// How long a request posted before the stream is up waits for it (from RTS).
    pub(crate) transport_wait: Duration,
}

impl HandState {
    /// A queue pair in RESET with endpoint `local`.
    pub(crate) fn new(local: QpEndpoint) -> Self {
        HandState { state: IbvState::Reset, local, remote: None, transport_wait: MAX_TRANSPORT_WAIT }
    }

    /// Whether this end dials the stream to its peer (known from RTR on).
    pub(crate) fn dials(&self) -> bool {
        self.remote.is_some_and(|r| HandState::dials_between(&self.local, &r))
    }

    /// Whether the end of endpoint `local` dials the one of `remote`: the end with the larger
    /// (GID, LID, queue pair number), so that both ends agree without a word.
    pub(crate) fn dials_between(local: &QpEndpoint, remote: &QpEndpoint) -> bool {
        let key = |e: &QpEndpoint| (e.gid, e.lid, e.qp_num);
        key(local) > key(remote)
    }

    /// The state's name in errors.
    pub(crate) fn name(&self) -> &'static str {
        match self.state {
            IbvState::Reset => "RESET",
            IbvState::Init => "INIT",
            IbvState::ReadyToReceive => "RTR",
            IbvState::ReadyToSend => "RTS",
            _ => "ERROR",
        }
    }
}

/// How long a request waits for an answer before it fails with retry exceeded: 4.096 µs ×
/// 2^`timeout` per try, `retry_count` + 1 tries, at most [`MAX_TRANSPORT_WAIT`] (which
/// `timeout` 0, infinite on verbs, gets).
pub(crate) fn transport_wait(rts: &RtsAttr) -> Duration {
    if rts.timeout == 0 {
        return MAX_TRANSPORT_WAIT;
    }
    let per_try = Duration::from_nanos(4096u64 << rts.timeout.min(31));
    per_try.saturating_mul(u32::from(rts.retry_count) + 1).min(MAX_TRANSPORT_WAIT)
}

/// The GID of a device bound to `ip`.
pub(crate) fn gid_of(ip: IpAddr) -> [u8; 16] {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
    }
}

/// The data port an endpoint names (its GID's address, its LID as the port); `None` for LID
/// 0, which names no port.
pub(crate) fn data_port_of(ep: &QpEndpoint) -> Option<SocketAddr> {
    let v6 = Ipv6Addr::from(ep.gid);
    let ip = v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4);
    (ep.lid != 0).then(|| SocketAddr::new(ip, ep.lid))
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use super::*;
    use crate::bootstrap::PathMtu;

    fn endpoint(gid: [u8; 16], lid: u16, qp_num: u32) -> QpEndpoint {
        QpEndpoint { qp_num, psn: 1, port: 1, lid, gid, mtu: PathMtu::Mtu4096 }
    }

    #[test]
    fn exactly_one_end_dials_by_gid_then_lid_then_queue_pair_number() {
        let (lo, hi) = (gid_of(Ipv4Addr::new(10, 0, 0, 1).into()), gid_of(Ipv4Addr::new(10, 0, 0, 2).into()));
        let cases = [
            (endpoint(hi, 1, 1), endpoint(lo, 9, 9)),
            (endpoint(lo, 9, 1), endpoint(lo, 8, 9)),
            (endpoint(lo, 9, 9), endpoint(lo, 9, 8)),
        ];
        for (big, small) in cases {
            let mut a = HandState::new(big);
            let mut b = HandState::new(small);
            assert!(!a.dials() && !b.dials(), "nobody dials before RTR");
            (a.remote, b.remote) = (Some(small), Some(big));
            assert!(a.dials() && !b.dials(), "{big:?} dials {small:?}");
        }
    }

    #[test]
    fn the_transport_wait_follows_timeout_and_retries_within_its_bound() {
        let rts = |timeout, retry_count| RtsAttr { timeout, retry_count, rnr_retry: 7, max_rd_atomic: 1 };
        assert_eq!(transport_wait(&rts(1, 0)), Duration::from_nanos(8192));
        assert_eq!(transport_wait(&rts(14, 7)), Duration::from_nanos(4096 << 14) * 8);
        assert_eq!(transport_wait(&rts(31, 7)), MAX_TRANSPORT_WAIT);
        assert_eq!(transport_wait(&rts(0, 0)), MAX_TRANSPORT_WAIT, "timeout 0 (forever) is bounded");
    }

    #[test]
    fn an_endpoint_names_its_data_port_by_gid_and_lid() {
        let v4 = SocketAddr::from(([127, 0, 0, 1], 4791));
        assert_eq!(data_port_of(&endpoint(gid_of(v4.ip()), 4791, 5)), Some(v4));
        let v6 = SocketAddr::from((Ipv6Addr::LOCALHOST, 18515));
        assert_eq!(data_port_of(&endpoint(gid_of(v6.ip()), 18515, 5)), Some(v6));
        assert_eq!(data_port_of(&endpoint(gid_of(v4.ip()), 0, 5)), None, "LID 0 (RoCE) names no port");
    }
}
