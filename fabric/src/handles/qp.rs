//! Reliable-connected queue pairs: how to create one ([`QpInit`], checked against the device)
//! and posting to it.

use std::net::SocketAddr;
use std::time::Duration;

use super::cq::CompletionQueue;
use super::device::Fabric;
use super::device::ProtectionDomain;
use super::srq::SharedReceiveQueue;
use crate::bootstrap::{
    check_rd_atomic, check_rnr_retry, InitAttr, QpEndpoint, QpState, QpTransition, RtrAttr, RtsAttr,
};
use crate::error::{Error, Result};
use crate::provider::{QpInitAttr, QpOps};
use crate::region::{check_sges, Sge};
use crate::types::{ConnId, DataPath, DeviceAttributes, QpCaps, DEFAULT_RD_ATOMIC};
use crate::work_request::SendRequest;

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
    pub(super) fn checked_attr(&self, verb: &'static str) -> Result<QpInitAttr> {
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
        check_rnr_retry(verb, self.rnr_retry)?;
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

/// A reliable-connected queue pair. Dropping it disconnects and destroys it.
pub struct QueuePair {
    pub(super) ops: Box<dyn QpOps>,
    /// The device's limits, for checking state changes.
    attributes: DeviceAttributes,
}

impl std::fmt::Debug for QueuePair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueuePair").field("qp_num", &self.qp_num()).field("peer", &self.peer_addr()).finish()
    }
}

impl QueuePair {
    /// Wraps a provider's queue pair of a device with limits `attributes`.
    pub(super) fn new(ops: Box<dyn QpOps>, attributes: DeviceAttributes) -> QueuePair {
        QueuePair { ops, attributes }
    }
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
    /// domain, a queue pair that uses a shared receive queue, or one still in RESET (made by
    /// [`Fabric::create_qp`]: receives may be posted from INIT); [`Error::QueueFull`] when
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
    /// before the connection is established (a queue pair made by [`Fabric::create_qp`]: before
    /// RTS) and once it is in error or disconnected. Failures of
    /// the operation itself arrive as completions ([`WcStatus`](crate::WcStatus)), not errors.
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

    /// The queue pair's state: RESET, INIT, RTR, RTS or ERROR. One the connection manager
    /// connected is RTS while connected.
    pub fn state(&self) -> QpState {
        self.ops.state()
    }
    /// What a peer needs to connect its queue pair to this one by hand (a queue pair made by
    /// [`Fabric::create_qp`]): send it over the side channel.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a queue pair the connection manager connected;
    /// [`Error::Os`] when the provider cannot query the port (verbs).
    pub fn local_endpoint(&self) -> Result<QpEndpoint> {
        self.ops.local_endpoint()
    }
    /// RESET → INIT: binds the queue pair to a port, with the remote access it allows
    /// (`modify_qp_to_init` of the seed programs).
    ///
    /// # Errors
    /// As [`modify`](Self::modify).
    pub fn modify_to_init(&self, attr: InitAttr) -> Result<()> {
        self.modify(&QpTransition::Init(attr))
    }
    /// INIT → RTR: binds the queue pair to the peer's endpoint; incoming messages are handled
    /// from now on (`modify_qp_to_rtr`).
    ///
    /// # Errors
    /// As [`modify`](Self::modify).
    pub fn modify_to_rtr(&self, attr: RtrAttr) -> Result<()> {
        self.modify(&QpTransition::ReadyToReceive(attr))
    }
    /// RTR → RTS: sends, READs and WRITEs may be posted (`modify_qp_to_rts`).
    ///
    /// # Errors
    /// As [`modify`](Self::modify).
    pub fn modify_to_rts(&self, attr: RtsAttr) -> Result<()> {
        self.modify(&QpTransition::ReadyToSend(attr))
    }
    /// Makes one move of the queue pair's state machine (`ibv_modify_qp`).
    ///
    /// # Errors
    /// [`Error::InvalidTransition`] when the move does not start from the queue pair's state;
    /// [`Error::InvalidArgument`] for an attribute out of range or beyond the device's limits,
    /// a port the device does not have, or a queue pair the connection manager connected;
    /// [`Error::Os`] when the provider fails (verbs: `ibv_modify_qp`).
    pub fn modify(&self, transition: &QpTransition) -> Result<()> {
        transition.check(self.ops.state(), &self.attributes)?;
        self.ops.modify(transition)
    }
}

impl Fabric {
    /// Creates a reliable-connected queue pair without the connection manager, in RESET, to be
    /// connected by hand: exchange [`QueuePair::local_endpoint`]s over a side channel, then
    /// [`modify_to_init`](QueuePair::modify_to_init), [`modify_to_rtr`](QueuePair::modify_to_rtr)
    /// and [`modify_to_rts`](QueuePair::modify_to_rts) (see [`crate::QpEndpoint`]).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for settings beyond the device's limits (as
    /// [`EventChannel::connect`](crate::EventChannel::connect)) or a provider that cannot
    /// yet; [`Error::Os`] when the provider fails (verbs: `ibv_create_qp`).
    pub fn create_qp(&self, init: QpInit<'_>) -> Result<QueuePair> {
        let attr = init.checked_attr("create_qp")?;
        let ops = self.ops.create_qp(attr)?;
        Ok(QueuePair::new(ops, self.attributes().clone()))
    }
}
