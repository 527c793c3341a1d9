//! Reliable-connected queue pairs: how to create one ([`QpInit`], checked against the device)
//! and posting to it.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use super::cq::{CompletionQueue, CqFlavor};
use super::device::{PdFlavor, ProtectionDomain};
use super::srq::{SharedReceiveQueue, SrqFlavor};
use crate::bootstrap::{
    check_rd_atomic, check_rnr_retry, InitAttr, QpEndpoint, QpState, QpTransition, RtrAttr, RtsAttr,
};
use crate::error::{Error, Result};
use crate::provider::QpInitAttr;
use crate::region::{check_sges, Sge};
use crate::soft::{SoftQp, SoftQpInit};
use crate::types::{ConnId, DataPath, DeviceAttributes, FabricKind, QpCaps, RemoteAddr, DEFAULT_RD_ATOMIC};
#[cfg(feature = "verbs")]
use crate::verbs;
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

    /// What the provider gets: these settings, checked against the device's limits, with the
    /// objects of the PD's provider.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for settings beyond the device's limits;
    /// [`Error::ProviderMismatch`] when a CQ or the SRQ is of another provider than the PD.
    pub(super) fn checked_attr(&self, verb: &'static str) -> Result<QpInitFlavor> {
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
        // The provider's own object in `flavor` (an `$enum::$provider`), or the mismatch of the
        // pair (PD, `$object`).
        macro_rules! of_provider {
            ($flavor:expr, $enum:ident::$provider:ident, $object:literal) => {
                match $flavor {
                    $enum::$provider(object) => Ok(object.clone()),
                    #[cfg(feature = "verbs")]
                    _ => Err(Error::ProviderMismatch { verb, object: $object }),
                }
            };
        }
        Ok(match self.pd.flavor() {
            PdFlavor::Soft(pd) => QpInitFlavor::Soft(self.attr(
                pd.clone(),
                of_provider!(self.send_cq.flavor(), CqFlavor::Soft, "send completion queue")?,
                of_provider!(self.recv_cq.flavor(), CqFlavor::Soft, "receive completion queue")?,
                self.srq.map(|srq| of_provider!(srq.flavor(), SrqFlavor::Soft, "shared receive queue")).transpose()?,
            )),
            #[cfg(feature = "verbs")]
            PdFlavor::Verbs(pd) => QpInitFlavor::Verbs(self.attr(
                pd.clone(),
                of_provider!(self.send_cq.flavor(), CqFlavor::Verbs, "send completion queue")?,
                of_provider!(self.recv_cq.flavor(), CqFlavor::Verbs, "receive completion queue")?,
                self.srq.map(|srq| of_provider!(srq.flavor(), SrqFlavor::Verbs, "shared receive queue")).transpose()?,
            )),
        })
    }

    /// These settings with one provider's objects.
    fn attr<Pd, Cq, Srq>(
        &self,
        pd: Arc<Pd>,
        send_cq: Arc<Cq>,
        recv_cq: Arc<Cq>,
        srq: Option<Arc<Srq>>,
    ) -> QpInitAttr<Pd, Cq, Srq> {
        QpInitAttr {
            pd,
            send_cq,
            recv_cq,
            srq,
            caps: self.caps,
            rnr_retry: self.rnr_retry,
            min_rnr_timer: self.min_rnr_timer,
            initiator_depth: self.initiator_depth,
            responder_resources: self.responder_resources,
        }
    }
}

/// A [`QpInit`] checked against the device, with the objects of one provider.
pub(crate) enum QpInitFlavor {
    /// Soft objects.
    Soft(SoftQpInit),
    /// Verbs objects.
    #[cfg(feature = "verbs")]
    Verbs(verbs::VerbsQpInit),
}

/// A provider's queue pair (boxed: the handle stays small, and posting reads it through one
/// pointer, as before).
enum QpFlavor {
    /// A soft queue pair.
    Soft(Box<SoftQp>),
    /// A verbs queue pair.
    #[cfg(feature = "verbs")]
    Verbs(Box<verbs::Qp>),
}

/// A reliable-connected queue pair. Dropping it disconnects and destroys it.
pub struct QueuePair {
    flavor: QpFlavor,
    /// The device's limits, for checking state changes.
    attributes: DeviceAttributes,
}

impl std::fmt::Debug for QueuePair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueuePair").field("qp_num", &self.qp_num()).field("peer", &self.peer_addr()).finish()
    }
}

impl QueuePair {
    /// Wraps a soft queue pair of a device with limits `attributes`.
    pub(super) fn from_soft(qp: SoftQp, attributes: DeviceAttributes) -> QueuePair {
        QueuePair { flavor: QpFlavor::Soft(Box::new(qp)), attributes }
    }
    /// Wraps a verbs queue pair of a device with limits `attributes`.
    #[cfg(feature = "verbs")]
    pub(super) fn from_verbs(qp: verbs::Qp, attributes: DeviceAttributes) -> QueuePair {
        QueuePair { flavor: QpFlavor::Verbs(Box::new(qp)), attributes }
    }
    /// The queue pair number (completions carry it).
    pub fn qp_num(&self) -> u32 {
        dispatch!(QpFlavor, &self.flavor, qp => qp.qp_num())
    }
    /// The id CM events about this connection carry.
    pub fn conn_id(&self) -> ConnId {
        dispatch!(QpFlavor, &self.flavor, qp => qp.conn_id())
    }
    /// The peer's address.
    pub fn peer_addr(&self) -> SocketAddr {
        dispatch!(QpFlavor, &self.flavor, qp => qp.peer_addr())
    }
    /// The local address.
    pub fn local_addr(&self) -> SocketAddr {
        dispatch!(QpFlavor, &self.flavor, qp => qp.local_addr())
    }
    /// How this end's READs and WRITEs reach the peer: the network, or (soft provider, both ends
    /// on this host) shared memory. Known once the connection is established.
    pub fn data_path(&self) -> DataPath {
        match &self.flavor {
            QpFlavor::Soft(qp) => qp.data_path(),
            #[cfg(feature = "verbs")]
            QpFlavor::Verbs(_) => DataPath::Network,
        }
    }
    /// A read-only view of `len` bytes at `remote` of the peer's memory, read in place (see
    /// [`RemoteView`](crate::RemoteView)): `None` unless the data path is shared memory (the
    /// soft provider with both ends on this host; never verbs or the network path). Make it
    /// once the connection is established. It is checked as a READ of that range is checked,
    /// and a refusal fails the queue pair as the READ's completion would.
    ///
    /// # Errors
    /// [`Error::NotConnected`] before the connection is established or once it is in error;
    /// [`Error::RemoteAccess`] when the peer refuses the range (rkey, protection domain, bounds,
    /// access) or the connection is gone: the queue pair is then in error.
    pub fn remote_view(&self, remote: RemoteAddr, len: usize) -> Result<Option<crate::RemoteView>> {
        match &self.flavor {
            QpFlavor::Soft(qp) => Ok(qp.remote_view(remote, len)?.map(crate::RemoteView::from_soft)),
            #[cfg(feature = "verbs")]
            QpFlavor::Verbs(_) => Ok(None),
        }
    }
    /// Posts a receive into `sges`.
    ///
    /// # Errors
    /// [`Error::LocalBounds`] when an SGE is outside its region; [`Error::ProviderMismatch`] when
    /// it names a region of another provider; [`Error::InvalidArgument`] for more SGEs than
    /// `max_recv_sge`, a region not writable locally or of another protection domain, a queue
    /// pair that uses a shared receive queue, or one still in RESET (made by
    /// [`Fabric::create_qp`](crate::Fabric::create_qp): receives may be posted from INIT);
    /// [`Error::QueueFull`] when `max_recv_wr` receives are posted already;
    /// [`Error::NotConnected`] once the queue pair is in error or disconnected.
    pub fn post_recv(&self, wr_id: u64, sges: &[Sge<'_>]) -> Result<()> {
        const VERB: &str = "post_recv";
        match &self.flavor {
            QpFlavor::Soft(qp) => {
                check_sges(sges, FabricKind::Soft, VERB)?;
                qp.post_recv(wr_id, sges)
            }
            #[cfg(feature = "verbs")]
            QpFlavor::Verbs(qp) => {
                check_sges(sges, FabricKind::Verbs, VERB)?;
                qp.post_recv(wr_id, sges)
            }
        }
    }
    /// Posts a send-queue work request.
    ///
    /// # Errors
    /// [`Error::LocalBounds`] when an SGE is outside its region; [`Error::ProviderMismatch`] when
    /// it names a region of another provider; [`Error::InvalidArgument`] for more SGEs than
    /// `max_send_sge`, a message above the device's limit, a region of another protection
    /// domain, or an operation the queue pair cannot post; [`Error::QueueFull`] when
    /// `max_send_wr` requests are outstanding (unsignaled ones included); [`Error::NotConnected`]
    /// before the connection is established (a queue pair made by
    /// [`Fabric::create_qp`](crate::Fabric::create_qp): before RTS) and once it is in error or
    /// disconnected. Failures of the operation itself arrive as completions
    /// ([`WcStatus`](crate::WcStatus)), not errors.
    pub fn post_send(&self, wr: &SendRequest<'_>) -> Result<()> {
        const VERB: &str = "post_send";
        match &self.flavor {
            QpFlavor::Soft(qp) => {
                check_sges(wr.sges, FabricKind::Soft, VERB)?;
                qp.post_send(wr)
            }
            #[cfg(feature = "verbs")]
            QpFlavor::Verbs(qp) => {
                check_sges(wr.sges, FabricKind::Verbs, VERB)?;
                qp.post_send(wr)
            }
        }
    }
    /// Disconnects; outstanding work requests are flushed. Idempotent.
    ///
    /// # Errors
    /// [`Error::Os`] when the provider cannot send the disconnect (verbs: `rdma_disconnect`);
    /// the queue pair is in error and flushed all the same.
    pub fn disconnect(&self) -> Result<()> {
        dispatch!(QpFlavor, &self.flavor, qp => qp.disconnect())
    }

    /// The queue pair's state: RESET, INIT, RTR, RTS or ERROR. One the connection manager
    /// connected is RTS while connected.
    pub fn state(&self) -> QpState {
        dispatch!(QpFlavor, &self.flavor, qp => qp.state())
    }
    /// What a peer needs to connect its queue pair to this one by hand (a queue pair made by
    /// [`Fabric::create_qp`](crate::Fabric::create_qp)): send it over the side channel.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a queue pair the connection manager connected;
    /// [`Error::Os`] when the provider cannot query the port (verbs).
    pub fn local_endpoint(&self) -> Result<QpEndpoint> {
        dispatch!(QpFlavor, &self.flavor, qp => qp.local_endpoint())
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
        transition.check(self.state(), &self.attributes)?;
        dispatch!(QpFlavor, &self.flavor, qp => qp.modify(transition))
    }
}
