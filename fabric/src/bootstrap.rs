//! Connecting a queue pair by hand, without the connection manager, as the seed programs do
//! (the RC example of the RDMA Aware Networks Programming manual, `ib_rdma_bw`): each side
//! creates its queue pair unconnected ([`QpState::Reset`]), sends its [`QpEndpoint`] to the
//! other over a side channel of its own (a TCP socket, MPI, a job launcher), and moves its queue
//! pair through INIT ([`InitAttr`]), RTR ([`RtrAttr`], with the peer's endpoint) and RTS
//! ([`RtsAttr`]). The handles check every transition and attribute before a provider sees it,
//! so an illegal one is the same typed error on every provider, as `ibv_modify_qp` returns
//! `EINVAL`.
//!
//! No CM event concerns such a queue pair: moving it to ERROR (or dropping it) flushes what it
//! has outstanding, and its peer learns of it only through failed requests. The examples
//! `fabric/examples/rc_ops.rs` and `rdma_write.rs` take `--bootstrap cm|tcp`; `tcp` follows the
//! seed flow step by step (`fabric/examples/common/bootstrap.rs`: a TCP socket, a fixed-size
//! `ConData` with the endpoint and the buffer's address, rkey and length, decoded with length
//! and range checks since the peer is not trusted, INIT, RTR, RTS, and a one-byte sync before
//! and after the operations).

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::error::{Error, Result};
pub use super::types::QpState;
use super::types::{Access, DeviceAttributes, RNR_RETRY_INFINITE};

/// A path MTU (`ibv_mtu`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum PathMtu {
    /// 256 bytes.
    Mtu256,
    /// 512 bytes.
    Mtu512,
    /// 1024 bytes.
    Mtu1024,
    /// 2048 bytes.
    Mtu2048,
    /// 4096 bytes.
    Mtu4096,
}

impl PathMtu {
    /// The MTU in bytes.
    pub fn bytes(self) -> usize {
        match self {
            PathMtu::Mtu256 => 256,
            PathMtu::Mtu512 => 512,
            PathMtu::Mtu1024 => 1024,
            PathMtu::Mtu2048 => 2048,
            PathMtu::Mtu4096 => 4096,
        }
    }
}

/// What a peer needs to connect its queue pair to this one by hand: sent over the side
/// channel (it is `serde`-serializable), given to the peer's [`RtrAttr::remote`].
///
/// On verbs these are the port's LID (0 on RoCE), the GID of the chosen index (RoCE v2: the
/// IPv4-mapped address) and the port's active MTU. On soft the GID is the IPv4-mapped (or IPv6)
/// address of the device's data port and the LID is that port's number, so an endpoint names
/// the remote NIC as a GID and a LID do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct QpEndpoint {
    /// The queue pair number (24 bits).
    pub qp_num: u32,
    /// The first packet sequence number this end sends (24 bits).
    pub psn: u32,
    /// The device port (from 1).
    pub port: u8,
    /// The port's local identifier.
    pub lid: u16,
    /// The port's global identifier.
    pub gid: [u8; 16],
    /// The port's active MTU.
    pub mtu: PathMtu,
}

/// The attributes of the move to INIT.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InitAttr {
    /// The device port (from 1).
    pub port: u8,
    /// What the remote peer may do to this end's memory through the queue pair
    /// ([`Access::REMOTE_READ`], [`Access::REMOTE_WRITE`]); the regions grant their own rights
    /// too.
    pub access: Access,
}

/// The attributes of the move to RTR (ready to receive).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RtrAttr {
    /// The peer's endpoint, as it sent it.
    pub remote: QpEndpoint,
    /// The path MTU: at most this end's and the peer's port MTU.
    pub path_mtu: PathMtu,
    /// RDMA READs of the peer this end serves at once, 1 to the device's `max_qp_rd_atom`.
    pub max_dest_rd_atomic: u8,
    /// How long the peer waits before it retries a SEND this end had no receive for (RNR),
    /// at most 491.52 ms (`ibv`'s largest code).
    pub min_rnr_timer: Duration,
}

/// The attributes of the move to RTS (ready to send).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RtsAttr {
    /// How long this end waits for an acknowledgement before it retransmits
    /// (`4.096 µs × 2^timeout`; 0 waits forever), `timeout` in 0..=31. (Soft: how long requests
    /// wait for the stream to the peer, `timeout` × (`retry_count` + 1), at most 30 s in all.)
    pub timeout: u8,
    /// Retransmissions after a timeout before the send fails with retry exceeded, 0..=7.
    pub retry_count: u8,
    /// Retries after a receiver-not-ready NAK, 0..=7 (7: forever).
    pub rnr_retry: u8,
    /// RDMA READs this end may have outstanding, 1 to the device's `max_qp_init_rd_atom`.
    pub max_rd_atomic: u8,
}

/// One move of a queue pair's state machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QpTransition {
    /// RESET → INIT.
    Init(InitAttr),
    /// INIT → RTR.
    ReadyToReceive(RtrAttr),
    /// RTR → RTS.
    ReadyToSend(RtsAttr),
    /// Any state → ERROR: outstanding work requests are flushed.
    Error,
}

impl QpTransition {
    /// The state the move leads to.
    pub fn target(&self) -> QpState {
        match self {
            QpTransition::Init(_) => QpState::Init,
            QpTransition::ReadyToReceive(_) => QpState::ReadyToReceive,
            QpTransition::ReadyToSend(_) => QpState::ReadyToSend,
            QpTransition::Error => QpState::Error,
        }
    }

    /// Checks that the move is legal from `from` and that its attributes are within the
    /// device's limits (`attrs`) and the ranges verbs accepts.
    ///
    /// # Errors
    /// [`Error::InvalidTransition`] when the move does not start from `from`;
    /// [`Error::InvalidArgument`] for an attribute out of range.
    pub(crate) fn check(&self, from: QpState, attrs: &DeviceAttributes) -> Result<()> {
        self.check_within(from, attrs.max_qp_rd_atom, attrs.max_qp_init_rd_atom)
    }

    /// [`check`](Self::check) against READ depth limits `max_qp_rd_atom` (served) and
    /// `max_qp_init_rd_atom` (outstanding).
    fn check_within(&self, from: QpState, max_qp_rd_atom: u8, max_qp_init_rd_atom: u8) -> Result<()> {
        const VERB: &str = "modify_qp";
        let legal = match self {
            QpTransition::Init(_) => from == QpState::Reset,
            QpTransition::ReadyToReceive(_) => from == QpState::Init,
            QpTransition::ReadyToSend(_) => from == QpState::ReadyToReceive,
            QpTransition::Error => true,
        };
        if !legal {
            return Err(Error::InvalidTransition { from, to: self.target() });
        }
        match self {
            QpTransition::Init(a) => check_range(VERB, "port", a.port.into(), 1, u8::MAX.into(), ""),
            QpTransition::ReadyToReceive(a) => {
                // The peer's endpoint came over a side channel: its numbers are 24-bit fields.
                check_range(VERB, "remote qp_num", a.remote.qp_num.into(), 0, MAX_24_BIT_FIELD.into(), "")?;
                check_range(VERB, "remote psn", a.remote.psn.into(), 0, MAX_24_BIT_FIELD.into(), "")?;
                check_rd_atomic(VERB, "max_dest_rd_atomic", a.max_dest_rd_atomic, max_qp_rd_atom)?;
                let micros = u64::try_from(a.min_rnr_timer.as_micros()).unwrap_or(u64::MAX);
                check_range(VERB, "min_rnr_timer (µs)", micros, 0, MAX_MIN_RNR_TIMER.as_micros() as u64, "")?;
                if a.path_mtu > a.remote.mtu {
                    return Err(Error::invalid(
                        VERB,
                        format!("path MTU {} exceeds the peer port's MTU {}", a.path_mtu.bytes(), a.remote.mtu.bytes()),
                    ));
                }
                Ok(())
            }
            QpTransition::ReadyToSend(a) => {
                check_range(VERB, "timeout", a.timeout.into(), 0, 31, "")?;
                check_range(VERB, "retry_count", a.retry_count.into(), 0, 7, "")?;
                check_rnr_retry(VERB, a.rnr_retry)?;
                check_rd_atomic(VERB, "max_rd_atomic", a.max_rd_atomic, max_qp_init_rd_atom)
            }
            QpTransition::Error => Ok(()),
        }
    }
}

/// `Ok` when `value` is in `min..=max`; else [`Error::InvalidArgument`] of `verb` naming
/// `what`, the value and the range, followed by `why` (what the maximum is).
fn check_range(verb: &'static str, what: &str, value: u64, min: u64, max: u64, why: &str) -> Result<()> {
    if (min..=max).contains(&value) {
        return Ok(());
    }
    Err(Error::invalid(verb, format!("{what} {value} is not in {min}..={max}{why}")))
}

/// Checks a READ depth of a queue pair (`max_rd_atomic` or `max_dest_rd_atomic`, the CM's
/// initiator depth or responder resources) against the device's limit `max`: 1..=max, so
/// READs can flow.
pub(crate) fn check_rd_atomic(verb: &'static str, what: &str, value: u8, max: u8) -> Result<()> {
    check_range(verb, what, value.into(), 1, max.into(), " (the device's limit)")
}

/// Checks an RNR retry count: 0..=7, 7 retrying forever.
pub(crate) fn check_rnr_retry(verb: &'static str, value: u8) -> Result<()> {
    check_range(verb, "rnr_retry", value.into(), 0, RNR_RETRY_INFINITE.into(), "")
}

/// The largest queue pair number and packet sequence number: both are 24-bit fields, as on
/// InfiniBand and RoCE.
pub const MAX_24_BIT_FIELD: u32 = 0xff_ffff;

/// The longest `min_rnr_timer` verbs can express.
pub const MAX_MIN_RNR_TIMER: Duration = Duration::from_micros(491_520);

#[cfg(test)]
mod tests {
    use super::*;

    /// Checks `t` from `from` against READ depth limits of 16 each way.
    fn check(t: &QpTransition, from: QpState) -> Result<()> {
        t.check_within(from, 16, 16)
    }

    fn endpoint() -> QpEndpoint {
        QpEndpoint { qp_num: 7, psn: 1, port: 1, lid: 0, gid: [0; 16], mtu: PathMtu::Mtu1024 }
    }

    fn rtr() -> QpTransition {
        QpTransition::ReadyToReceive(RtrAttr {
            remote: endpoint(),
            path_mtu: PathMtu::Mtu1024,
            max_dest_rd_atomic: 4,
            min_rnr_timer: Duration::from_micros(640),
        })
    }

    fn rts() -> QpTransition {
        QpTransition::ReadyToSend(RtsAttr { timeout: 14, retry_count: 7, rnr_retry: 7, max_rd_atomic: 4 })
    }

    #[test]
    fn only_reset_init_rtr_rts_in_order_and_error_from_anywhere_are_legal() {
        let init = QpTransition::Init(InitAttr { port: 1, access: Access::REMOTE_READ });
        let states = [QpState::Reset, QpState::Init, QpState::ReadyToReceive, QpState::ReadyToSend, QpState::Error];
        for (i, t) in [init, rtr(), rts()].iter().enumerate() {
            for (j, &from) in states.iter().enumerate() {
                let r = check(t, from);
                if i == j {
                    assert!(r.is_ok(), "{from} → {}: {r:?}", t.target());
                } else {
                    assert!(
                        matches!(r, Err(Error::InvalidTransition { from: f, to }) if f == from && to == t.target()),
                        "{from} → {}: {r:?}",
                        t.target()
                    );
                }
            }
        }
        assert!(states.iter().all(|&s| check(&QpTransition::Error, s).is_ok()));
    }

    #[test]
    fn attributes_out_of_range_are_invalid_arguments() {
        let bad = [
            QpTransition::Init(InitAttr { port: 0, access: Access::NONE }),
            QpTransition::ReadyToReceive(RtrAttr { path_mtu: PathMtu::Mtu4096, ..rtr_attr() }),
            QpTransition::ReadyToReceive(RtrAttr { max_dest_rd_atomic: 0, ..rtr_attr() }),
            QpTransition::ReadyToReceive(RtrAttr { max_dest_rd_atomic: 17, ..rtr_attr() }),
            QpTransition::ReadyToReceive(RtrAttr { min_rnr_timer: Duration::from_secs(1), ..rtr_attr() }),
            QpTransition::ReadyToReceive(RtrAttr {
                remote: QpEndpoint { qp_num: 1 << 24, ..endpoint() },
                ..rtr_attr()
            }),
            QpTransition::ReadyToReceive(RtrAttr { remote: QpEndpoint { psn: 1 << 24, ..endpoint() }, ..rtr_attr() }),
            QpTransition::ReadyToSend(RtsAttr { timeout: 32, ..rts_attr() }),
            QpTransition::ReadyToSend(RtsAttr { retry_count: 8, ..rts_attr() }),
            QpTransition::ReadyToSend(RtsAttr { rnr_retry: 8, ..rts_attr() }),
            QpTransition::ReadyToSend(RtsAttr { max_rd_atomic: 0, ..rts_attr() }),
        ];
        let from = |t: &QpTransition| match t {
            QpTransition::Init(_) => QpState::Reset,
            QpTransition::ReadyToReceive(_) => QpState::Init,
            _ => QpState::ReadyToReceive,
        };
        for t in bad {
            let r = check(&t, from(&t));
            assert!(matches!(r, Err(Error::InvalidArgument { verb: "modify_qp", .. })), "{t:?}: {r:?}");
        }
    }

    fn rtr_attr() -> RtrAttr {
        match rtr() {
            QpTransition::ReadyToReceive(a) => a,
            _ => unreachable!(),
        }
    }

    fn rts_attr() -> RtsAttr {
        match rts() {
            QpTransition::ReadyToSend(a) => a,
            _ => unreachable!(),
        }
    }
}
