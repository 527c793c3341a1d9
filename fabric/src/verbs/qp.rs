//! Reliable-connected queue pairs, on CM ids or connected by hand (no CM id: created with
//! `ibv_create_qp`, moved through INIT, RTR and RTS by `by_hand`, destroyed with
//! `ibv_destroy_qp`), and the posting of work requests, the same for both.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use rdma_sys::*;

use super::addr::unspecified_like;
use super::by_hand::{HandLink, PortInfo};
use super::cm_id::{next_conn_id, CmId, ConnState, IdCtx};
use super::cq::Cq;
use super::device::Device;
use super::mr::PdInner;
use super::os::errno;
use super::pd::{Pd, Srq};
use super::post::{post_error, with_sges};
use super::VerbsQpInit;
use crate::provider::{ConnId, SendRequest, Sge};
use crate::{Error, QpCaps, QpEndpoint, QpState, QpTransition, Result, SendOp};

/// Sets `min_rnr_timer` (IB encoding) on a queue pair in RTR or RTS.
pub(super) fn set_min_rnr_timer(qp: *mut ibv_qp, code: u8) -> Result<()> {
    // SAFETY: ibv_qp_attr is plain old data; zero is a valid value.
    let mut attr: ibv_qp_attr = unsafe { std::mem::zeroed() };
    attr.min_rnr_timer = code;
    // SAFETY: the caller passes a live QP; only the masked attribute is read.
    let rc = unsafe { ibv_modify_qp(qp, &mut attr, ibv_qp_attr_mask::IBV_QP_MIN_RNR_TIMER.0 as i32) };
    if rc != 0 {
        return Err(errno("ibv_modify_qp(min_rnr_timer)", rc));
    }
    Ok(())
}

/// The capacities of a live queue pair, as the device reports them.
pub(super) fn query_caps(qp: *mut ibv_qp) -> Result<ibv_qp_cap> {
    // SAFETY: plain old data filled by the call.
    let mut attr: ibv_qp_attr = unsafe { std::mem::zeroed() };
    // SAFETY: plain old data filled by the call.
    let mut init: ibv_qp_init_attr = unsafe { std::mem::zeroed() };
    // SAFETY: the caller passes a live QP; both out-pointers are valid.
    let rc = unsafe { ibv_query_qp(qp, &mut attr, ibv_qp_attr_mask::IBV_QP_CAP.0 as i32, &mut init) };
    if rc != 0 {
        return Err(errno("ibv_query_qp", rc));
    }
    Ok(attr.cap)
}

/// What binds a queue pair to its peer.
enum Binding {
    /// A CM id: the connection manager connects it (and disconnects it).
    Cm(CmId),
    /// Nothing but what the owner set: it was connected by hand.
    Hand(HandLink),
}

impl Binding {
    /// The context posting checks (a CM id's, or the hand-made link's own).
    fn ctx(&self) -> &IdCtx {
        match self {
            Binding::Cm(id) => id.ctx(),
            Binding::Hand(link) => link.ctx(),
        }
    }
}

/// A queue pair of the verbs provider: a real one, or the stand-in of a connect that failed
/// before it had one.
pub(crate) enum Qp {
    /// A queue pair on a CM id or connected by hand.
    Rc(RcQp),
    /// The queue pair of a connect whose address or route resolution failed.
    Unreachable(DeadQp),
}

/// Evaluates `$body` with `$qp` bound to the queue pair inside `$flavor` (a [`Qp`]).
macro_rules! each_qp {
    ($flavor:expr, $qp:ident => $body:expr) => {
        match $flavor {
            Qp::Rc($qp) => $body,
            Qp::Unreachable($qp) => $body,
        }
    };
}

impl Qp {
    /// The queue pair number.
    pub(crate) fn qp_num(&self) -> u32 {
        each_qp!(self, qp => qp.qp_num())
    }
    /// The connection id that CM events about this queue pair carry.
    pub(crate) fn conn_id(&self) -> ConnId {
        each_qp!(self, qp => qp.conn_id())
    }
    /// Address of the peer.
    pub(crate) fn peer_addr(&self) -> SocketAddr {
        each_qp!(self, qp => qp.peer_addr())
    }
    /// Local address of the connection.
    pub(crate) fn local_addr(&self) -> SocketAddr {
        each_qp!(self, qp => qp.local_addr())
    }
    /// Posts a receive (fails when the queue pair uses a shared receive queue).
    pub(crate) fn post_recv(&self, wr_id: u64, sges: &[Sge<'_>]) -> Result<()> {
        each_qp!(self, qp => qp.post_recv(wr_id, sges))
    }
    /// Posts a send-queue work request.
    pub(crate) fn post_send(&self, wr: &SendRequest<'_>) -> Result<()> {
        each_qp!(self, qp => qp.post_send(wr))
    }
    /// Disconnects: outstanding work requests complete flushed. Idempotent.
    pub(crate) fn disconnect(&self) -> Result<()> {
        each_qp!(self, qp => qp.disconnect())
    }
    /// The queue pair's state (RTS for one the connection manager made, while connected).
    pub(crate) fn state(&self) -> QpState {
        match self {
            Qp::Rc(qp) => qp.state(),
            Qp::Unreachable(_) => QpState::ReadyToSend,
        }
    }
    /// What a peer needs to connect to this queue pair by hand.
    pub(crate) fn local_endpoint(&self) -> Result<QpEndpoint> {
        match self {
            Qp::Rc(qp) => qp.local_endpoint(),
            Qp::Unreachable(_) => Err(made_by_cm("local_endpoint")),
        }
    }
    /// Moves a queue pair connected by hand (`ibv_modify_qp`).
    pub(crate) fn modify(&self, transition: &QpTransition) -> Result<()> {
        match self {
            Qp::Rc(qp) => qp.modify(transition),
            Qp::Unreachable(_) => Err(made_by_cm("modify_qp")),
        }
    }
}

/// A reliable-connected queue pair, on a CM id or connected by hand.
pub(crate) struct RcQp {
    qp: *mut ibv_qp,
    qp_num: u32,
    caps: QpCaps,
    peer: SocketAddr,
    local: SocketAddr,
    // Dropped in this order after the QP is destroyed in `Drop::drop`: the binding (a CM id),
    // then what the QP used.
    binding: Binding,
    _srq: Option<Arc<Srq>>,
    _send_cq: Arc<Cq>,
    _recv_cq: Arc<Cq>,
    _pd: Arc<Pd>,
}

// SAFETY: libibverbs QPs are thread-safe (posting is locked by the provider); the CM id is
// Send + Sync; the raw QP pointer is only used through verbs calls while the QP lives.
unsafe impl Send for RcQp {}
// SAFETY: see Send.
unsafe impl Sync for RcQp {}

/// The error of a by-hand verb on a queue pair the connection manager connected.
fn made_by_cm(verb: &'static str) -> Error {
    Error::invalid(verb, "this queue pair was connected by the connection manager")
}

impl RcQp {
    /// Creates the RC queue pair of `id` (bound to `dev`) with `init`, for `verb` (connect or
    /// accept).
    pub(super) fn create(id: CmId, dev: &Arc<Device>, init: &VerbsQpInit, verb: &'static str) -> Result<RcQp> {
        let (pd, mut attr) = qp_init_attr(dev, init, verb)?;
        // SAFETY: the id is live and bound to the PD's context; attr is valid for the call.
        if unsafe { rdma_create_qp(id.raw(), pd.raw(), &mut attr) } != 0 {
            return Err(super::os::last_os("rdma_create_qp"));
        }
        // SAFETY: rdma_create_qp succeeded, so the id's qp is live.
        let qp = unsafe { (*id.raw()).qp };
        let peer = id.peer_addr().unwrap_or_else(|| unspecified_like([0, 0, 0, 0].into()));
        let local = id.local_addr().unwrap_or_else(|| unspecified_like(peer.ip()));
        Ok(RcQp::assemble(qp, &attr, init, Binding::Cm(id), peer, local))
    }

    /// Creates an RC queue pair on `dev` without a CM id, in RESET, to be connected by hand
    /// (`ibv_create_qp`; its endpoint is of the port `dev` was opened on).
    pub(super) fn create_by_hand(dev: &Arc<Device>, init: &VerbsQpInit) -> Result<RcQp> {
        let (pd, mut attr) = qp_init_attr(dev, init, "create_qp")?;
        let port = PortInfo::query(dev)?;
        // SAFETY: the PD is live and of `dev`'s context, as are the CQs and SRQ attr names;
        // attr is valid for the call.
        let qp = unsafe { ibv_create_qp(pd.raw(), &mut attr) };
        if qp.is_null() {
            return Err(super::os::last_os("ibv_create_qp"));
        }
        // SAFETY: ibv_create_qp succeeded: the QP is live.
        let qp_num = unsafe { (*qp).qp_num };
        let link = HandLink::new(next_conn_id(), qp_num, port);
        let local = link.local_addr();
        Ok(RcQp::assemble(qp, &attr, init, Binding::Hand(link), unspecified_like(local.ip()), local))
    }

    /// The queue pair `qp` just created from `attr` (asked for by `init`), bound by `binding`.
    fn assemble(
        qp: *mut ibv_qp,
        attr: &ibv_qp_init_attr,
        init: &VerbsQpInit,
        binding: Binding,
        peer: SocketAddr,
        local: SocketAddr,
    ) -> RcQp {
        let c = init.caps;
        let shared = init.srq.is_some();
        // What the device allocated (rxe rounds depths up to a power of two minus one): a full
        // queue reports that depth. Not every device writes it back on create: ask it.
        let actual = query_caps(qp).unwrap_or(attr.cap);
        let caps = QpCaps {
            max_send_wr: actual.max_send_wr.max(c.max_send_wr),
            max_recv_wr: if shared { 0 } else { actual.max_recv_wr.max(c.max_recv_wr) },
            max_send_sge: actual.max_send_sge.max(c.max_send_sge),
            max_recv_sge: actual.max_recv_sge.max(c.max_recv_sge),
        };
        *binding.ctx().qp_alive.lock() = true;
        RcQp {
            qp,
            // SAFETY: the caller passes a live QP.
            qp_num: unsafe { (*qp).qp_num },
            caps,
            peer,
            local,
            binding,
            _srq: init.srq.clone(),
            _send_cq: init.send_cq.clone(),
            _recv_cq: init.recv_cq.clone(),
            _pd: init.pd.clone(),
        }
    }

    /// The context posting checks (its CM id's, or its own when connected by hand).
    pub(super) fn ctx(&self) -> &IdCtx {
        self.binding.ctx()
    }
    /// The raw QP.
    pub(super) fn raw_qp(&self) -> *mut ibv_qp {
        self.qp
    }

    fn not_connected(&self, verb: &'static str, state: ConnState) -> Error {
        Error::NotConnected { verb, qp_num: self.qp_num, state: state.name() }
    }

    /// Moves the QP to the error state (flushing what is outstanding).
    fn to_error(&self) -> Result<()> {
        // SAFETY: plain old data.
        let mut attr: ibv_qp_attr = unsafe { std::mem::zeroed() };
        attr.qp_state = ibv_qp_state::IBV_QPS_ERR;
        // SAFETY: the QP is live; only the state is read.
        let rc = unsafe { ibv_modify_qp(self.qp, &mut attr, ibv_qp_attr_mask::IBV_QP_STATE.0 as i32) };
        if rc != 0 {
            return Err(errno("ibv_modify_qp(ERR)", rc));
        }
        Ok(())
    }
}

/// Checks that the objects of `init` belong to `dev` (`verb` names the call in the error): the
/// kernel refuses objects of another device context.
pub(super) fn check_device(dev: &Arc<Device>, init: &VerbsQpInit, verb: &'static str) -> Result<()> {
    let mismatch = |object| Err(Error::DeviceMismatch { verb, object });
    if !Arc::ptr_eq(init.pd.inner().dev(), dev) {
        return mismatch("protection domain");
    }
    if !Arc::ptr_eq(init.send_cq.dev(), dev) || !Arc::ptr_eq(init.recv_cq.dev(), dev) {
        return mismatch("completion queue");
    }
    if init.srq.as_ref().is_some_and(|srq| !Arc::ptr_eq(srq.dev(), dev)) {
        return mismatch("shared receive queue");
    }
    Ok(())
}

/// The `ibv_qp_init_attr` of an RC queue pair of `init` on `dev`, and its protection domain.
/// Objects of another device are refused (`verb` names the call), as the kernel would refuse
/// them.
fn qp_init_attr(dev: &Arc<Device>, init: &VerbsQpInit, verb: &'static str) -> Result<(Arc<PdInner>, ibv_qp_init_attr)> {
    check_device(dev, init, verb)?;
    let pd = init.pd.inner().clone();
    let srq = init.srq.as_ref().map_or(std::ptr::null_mut(), |srq| srq.raw());
    let c = init.caps;
    let attr = ibv_qp_init_attr {
        qp_context: std::ptr::null_mut(),
        send_cq: init.send_cq.raw(),
        recv_cq: init.recv_cq.raw(),
        srq,
        cap: ibv_qp_cap {
            max_send_wr: c.max_send_wr,
            max_recv_wr: if srq.is_null() { c.max_recv_wr } else { 0 },
            max_send_sge: c.max_send_sge,
            max_recv_sge: if srq.is_null() { c.max_recv_sge } else { 0 },
            max_inline_data: 0,
        },
        qp_type: ibv_qp_type::IBV_QPT_RC,
        sq_sig_all: 0,
    };
    Ok((pd, attr))
}

impl Drop for RcQp {
    fn drop(&mut self) {
        if let Err(e) = self.disconnect() {
            tracing::debug!("verbs: disconnect on drop: {e}");
        }
        let mut alive = self.ctx().qp_alive.lock();
        *alive = false;
        match &self.binding {
            // SAFETY: the QP was created on this id and is destroyed once; events that might
            // touch it check `qp_alive` under the same lock.
            Binding::Cm(id) => unsafe { rdma_destroy_qp(id.raw()) },
            Binding::Hand(_) => {
                // SAFETY: the QP was created by ibv_create_qp and is destroyed once; no CM id
                // or event refers to it.
                let rc = unsafe { ibv_destroy_qp(self.qp) };
                if rc != 0 {
                    tracing::warn!("verbs: ibv_destroy_qp: {}", std::io::Error::from_raw_os_error(rc.abs()));
                }
            }
        }
    }
}

impl RcQp {
    /// The queue pair number.
    pub(crate) fn qp_num(&self) -> u32 {
        self.qp_num
    }
    /// The connection id that CM events about this queue pair carry.
    pub(crate) fn conn_id(&self) -> ConnId {
        self.ctx().conn
    }
    /// Address of the peer.
    pub(crate) fn peer_addr(&self) -> SocketAddr {
        match &self.binding {
            Binding::Hand(link) => link.peer_addr().unwrap_or(self.peer),
            Binding::Cm(_) => self.peer,
        }
    }
    /// Local address of the connection.
    pub(crate) fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// Posts a receive (fails when the queue pair uses a shared receive queue).
    pub(crate) fn post_recv(&self, wr_id: u64, sges: &[Sge<'_>]) -> Result<()> {
        if self._srq.is_some() {
            return Err(Error::invalid("post_recv", "the queue pair uses a shared receive queue"));
        }
        // Receives may be posted before the connection is up (they must be, against RNR), not
        // after it is gone: a queue pair in the error state would keep them without a flush.
        let state = self.ctx().state.read();
        if *state == ConnState::Closed {
            return Err(self.not_connected("post_recv", *state));
        }
        let rc = with_sges(sges, |sg_list, num_sge| {
            let mut wr = ibv_recv_wr { wr_id, next: std::ptr::null_mut(), sg_list, num_sge };
            let mut bad: *mut ibv_recv_wr = std::ptr::null_mut();
            // SAFETY: the QP is live; wr and its SGE list are valid for the call.
            unsafe { ibv_post_recv(self.qp, &mut wr, &mut bad) }
        });
        post_error(rc, "ibv_post_recv", "receive queue", self.caps.max_recv_wr)
    }

    /// Posts a send-queue work request.
    pub(crate) fn post_send(&self, req: &SendRequest<'_>) -> Result<()> {
        // Only an established connection takes sends: a device may keep a request posted to a
        // queue pair that is not ready (while refusing the post) and flush it later.
        let state = self.ctx().state.read();
        if *state != ConnState::Established {
            return Err(self.not_connected("post_send", *state));
        }
        let rc = with_sges(req.sges, |sg_list, num_sge| {
            // SAFETY: ibv_send_wr is plain old data (pointers, integers, unions of those).
            let mut wr: ibv_send_wr = unsafe { std::mem::zeroed() };
            wr.wr_id = req.wr_id;
            wr.sg_list = sg_list;
            wr.num_sge = num_sge;
            wr.send_flags = if req.signaled { ibv_send_flags::IBV_SEND_SIGNALED.0 } else { 0 };
            if req.solicited && matches!(req.op, SendOp::Send | SendOp::SendWithImm(_)) {
                wr.send_flags |= ibv_send_flags::IBV_SEND_SOLICITED.0;
            }
            match req.op {
                SendOp::Send => wr.opcode = ibv_wr_opcode::IBV_WR_SEND,
                SendOp::SendWithImm(imm) => {
                    wr.opcode = ibv_wr_opcode::IBV_WR_SEND_WITH_IMM;
                    wr.imm_data_invalidated_rkey_union.imm_data = imm.to_be();
                }
                SendOp::RdmaRead(remote) => {
                    wr.opcode = ibv_wr_opcode::IBV_WR_RDMA_READ;
                    wr.wr.rdma = rdma_t { remote_addr: remote.addr, rkey: remote.rkey };
                }
                SendOp::RdmaWrite(remote) => {
                    wr.opcode = ibv_wr_opcode::IBV_WR_RDMA_WRITE;
                    wr.wr.rdma = rdma_t { remote_addr: remote.addr, rkey: remote.rkey };
                }
            }
            let mut bad: *mut ibv_send_wr = std::ptr::null_mut();
            // SAFETY: the QP is live; wr and its SGE list are valid for the call.
            unsafe { ibv_post_send(self.qp, &mut wr, &mut bad) }
        });
        post_error(rc, "ibv_post_send", "send queue", self.caps.max_send_wr)
    }

    /// Disconnects: outstanding work requests complete with `WorkRequestFlushed`, both sides
    /// get a `Disconnected` event. Idempotent.
    pub(crate) fn disconnect(&self) -> Result<()> {
        let ctx = self.ctx();
        let _alive = ctx.qp_alive.lock();
        *ctx.state.write() = ConnState::Closed;
        if ctx.disconnected.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        match &self.binding {
            Binding::Cm(id) => {
                // SAFETY: the id is live. librdmacm moves the QP to ERR and sends a DREQ (or a
                // DREP when the peer disconnected first).
                if unsafe { rdma_disconnect(id.raw()) } != 0 {
                    // Not connected (yet, or any more): still flush what is outstanding.
                    tracing::debug!("verbs: rdma_disconnect: {}", std::io::Error::last_os_error());
                    self.to_error()?;
                }
            }
            // Nothing tells the peer: its requests fail (retry exceeded) and flush.
            Binding::Hand(link) => {
                self.to_error()?;
                link.set_error();
            }
        }
        Ok(())
    }

    /// The queue pair's state. One the connection manager made is RTS while connected.
    pub(crate) fn state(&self) -> QpState {
        match &self.binding {
            Binding::Hand(link) => link.state(self.qp),
            Binding::Cm(_) => QpState::ReadyToSend,
        }
    }

    /// What a peer needs to connect to this queue pair by hand.
    pub(crate) fn local_endpoint(&self) -> Result<QpEndpoint> {
        match &self.binding {
            Binding::Hand(link) => Ok(link.endpoint()),
            Binding::Cm(_) => Err(made_by_cm("local_endpoint")),
        }
    }

    /// Moves the queue pair (`ibv_modify_qp`); the handle has checked that the move is legal
    /// from [`state`](Self::state) and its attributes in range.
    pub(crate) fn modify(&self, transition: &QpTransition) -> Result<()> {
        match (&self.binding, transition) {
            (Binding::Hand(_), QpTransition::Error) => self.disconnect(),
            (Binding::Hand(link), _) => link.modify(self.qp, transition),
            (Binding::Cm(_), _) => Err(made_by_cm("modify_qp")),
        }
    }
}

/// The queue pair of a connect whose address or route resolution failed: the failure is
/// reported as an `Unreachable` event; every post is refused.
pub(crate) struct DeadQp {
    conn: ConnId,
    peer: SocketAddr,
    local: SocketAddr,
}

impl DeadQp {
    /// A dead queue pair for connection `conn`.
    pub(super) fn new(conn: ConnId, peer: SocketAddr, local: SocketAddr) -> Self {
        DeadQp { conn, peer, local }
    }
    fn refuse(&self, verb: &'static str) -> Result<()> {
        Err(Error::NotConnected { verb, qp_num: 0, state: "unreachable" })
    }
}

impl DeadQp {
    /// The queue pair number.
    pub(crate) fn qp_num(&self) -> u32 {
        0
    }
    /// The connection id that CM events about this queue pair carry.
    pub(crate) fn conn_id(&self) -> ConnId {
        self.conn
    }
    /// Address of the peer.
    pub(crate) fn peer_addr(&self) -> SocketAddr {
        self.peer
    }
    /// Local address of the connection.
    pub(crate) fn local_addr(&self) -> SocketAddr {
        self.local
    }
    /// Posts a receive (fails when the queue pair uses a shared receive queue).
    pub(crate) fn post_recv(&self, _wr_id: u64, _sges: &[Sge<'_>]) -> Result<()> {
        self.refuse("post_recv")
    }
    /// Posts a send-queue work request.
    pub(crate) fn post_send(&self, _wr: &SendRequest<'_>) -> Result<()> {
        self.refuse("post_send")
    }
    /// Disconnects: outstanding work requests complete with `WorkRequestFlushed`, both sides
    /// get a `Disconnected` event. Idempotent.
    pub(crate) fn disconnect(&self) -> Result<()> {
        Ok(())
    }
}
