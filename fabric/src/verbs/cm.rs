//! The connection manager: the provider's event channel, listening, connecting, accepting and
//! rejecting, and the mapping of librdmacm events onto the fabric's events.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use rdma_sys::*;

use super::addr::{unspecified_like, CSockAddr};
use super::cm_id::{conn_param, describe, event_name, next_conn_id, CmId, ConnState, IdCtx, RawChannel};
use super::device::Device;
use super::qp::{check_device, DeadQp, Qp, RcQp};
use super::qp_attr::rnr_timer_code;
use super::VerbsQpInit;
use crate::cm_event::CmEventOf;
use crate::provider::ConnId;
use crate::{DeviceAttributes, Error, RejectReason, Result};

/// IB CM reject reason: no listener for the service id.
const IB_CM_REJ_INVALID_SERVICE_ID: i32 = 8;
/// IB CM reject reason: consumer-defined (rdma_reject, or rdma_cm finding no matching id).
const IB_CM_REJ_CONSUMER_DEFINED: i32 = 28;

/// An event of a channel: its connect requests are the provider's own.
pub(crate) type ChannelEvent = CmEventOf<ConnRequest>;

/// A connection-manager event channel.
pub(crate) struct Channel {
    dev: Arc<Device>,
    raw: Arc<RawChannel>,
    /// Events of connects that failed before reaching librdmacm's channel (resolution).
    synthetic: Mutex<VecDeque<ChannelEvent>>,
}

impl Channel {
    /// Creates a channel on `dev`.
    pub(super) fn new(dev: &Arc<Device>) -> Result<Channel> {
        Ok(Channel { dev: dev.clone(), raw: Arc::new(RawChannel::new()?), synthetic: Mutex::new(VecDeque::new()) })
    }

    /// Resolves address and route of `id` synchronously on its (private) channel.
    fn resolve(&self, id: &CmId, private: &RawChannel, addr: SocketAddr, deadline: Instant) -> Result<(), String> {
        let mut dst = CSockAddr::new(addr);
        let mut src = self.dev.bind.map(|ip| CSockAddr::new(SocketAddr::new(ip, 0)));
        let src_ptr = src.as_mut().map_or(std::ptr::null_mut(), |s| s.as_mut_ptr());
        let ms =
            |deadline: Instant| deadline.saturating_duration_since(Instant::now()).as_millis().clamp(1, 60_000) as i32;
        // SAFETY: the id is live; both addresses are valid for the call.
        if unsafe { rdma_resolve_addr(id.raw(), src_ptr, dst.as_mut_ptr(), ms(deadline)) } != 0 {
            return Err(format!("rdma_resolve_addr: {}", std::io::Error::last_os_error()));
        }
        expect_event(private, deadline, rdma_cm_event_type::RDMA_CM_EVENT_ADDR_RESOLVED)?;
        // SAFETY: the id is live and its address resolved.
        if unsafe { rdma_resolve_route(id.raw(), ms(deadline)) } != 0 {
            return Err(format!("rdma_resolve_route: {}", std::io::Error::last_os_error()));
        }
        expect_event(private, deadline, rdma_cm_event_type::RDMA_CM_EVENT_ROUTE_RESOLVED)?;
        if id.verbs() != self.dev.ctx() {
            return Err(format!("{addr} is reached through another device than {}", self.dev.name()));
        }
        Ok(())
    }

    /// Maps one librdmacm event (not yet acknowledged) to the fabric's event.
    fn map_event(&self, ev: &rdma_cm_event) -> Option<ChannelEvent> {
        use rdma_cm_event_type::*;
        if ev.event == RDMA_CM_EVENT_CONNECT_REQUEST {
            return self.connect_request(ev);
        }
        // SAFETY: every id on this channel carries an IdCtx owned by its CmId, which cannot
        // be destroyed before this event is acknowledged.
        let ctx = unsafe { &*((*ev.id).context as *const IdCtx) };
        let conn = ctx.conn;
        match ev.event {
            RDMA_CM_EVENT_ESTABLISHED => {
                let private_data = if ctx.active {
                    // The active side's QP came to RTS while librdmacm processed the REP.
                    set_min_rnr_timer_from_event(ev, ctx);
                    let mut state = ctx.state.write();
                    if *state == ConnState::Connecting {
                        *state = ConnState::Established;
                    }
                    drop(state);
                    conn_private_data(ev)
                } else {
                    Vec::new()
                };
                Some(ChannelEvent::Established { conn, private_data })
            }
            RDMA_CM_EVENT_REJECTED => {
                let reason = match ev.status {
                    IB_CM_REJ_INVALID_SERVICE_ID => RejectReason::NoListener,
                    IB_CM_REJ_CONSUMER_DEFINED => RejectReason::Consumer,
                    other => RejectReason::Other(other),
                };
                *ctx.state.write() = ConnState::Closed;
                Some(ChannelEvent::Rejected { conn, reason, private_data: conn_private_data(ev) })
            }
            RDMA_CM_EVENT_ADDR_ERROR
            | RDMA_CM_EVENT_ROUTE_ERROR
            | RDMA_CM_EVENT_UNREACHABLE
            | RDMA_CM_EVENT_CONNECT_ERROR => {
                *ctx.state.write() = ConnState::Closed;
                Some(ChannelEvent::Unreachable { conn, detail: describe(ev) })
            }
            RDMA_CM_EVENT_DISCONNECTED => {
                answer_disconnect(ev, ctx);
                Some(ChannelEvent::Disconnected { conn })
            }
            RDMA_CM_EVENT_DEVICE_REMOVAL => {
                *ctx.state.write() = ConnState::Closed;
                Some(ChannelEvent::Disconnected { conn })
            }
            _ => {
                tracing::debug!("verbs: ignoring CM event {}", describe(ev));
                None
            }
        }
    }

    fn connect_request(&self, ev: &rdma_cm_event) -> Option<ChannelEvent> {
        let conn = next_conn_id();
        // SAFETY: a CONNECT_REQUEST's id is a new id on this channel that nobody owns yet;
        // the context of the listening id is replaced by the new connection's.
        let id = unsafe { CmId::adopt(ev.id, &self.raw, IdCtx::new(conn, false, 0)) };
        // SAFETY: the conn member of the parameter union is the valid one for this event.
        let param = unsafe { ev.param.conn };
        let peer = id.peer_addr().unwrap_or_else(|| unspecified_like(self.dev.bind.unwrap_or([0, 0, 0, 0].into())));
        Some(ChannelEvent::ConnectRequest(ConnRequest {
            id: Some(id),
            dev: self.dev.clone(),
            private_data: conn_private_data(ev),
            peer,
            peer_initiator_depth: param.initiator_depth,
            peer_responder_resources: param.responder_resources,
        }))
    }
}

impl Channel {
    /// Listens on `addr` (port 0 picks a free port).
    pub(crate) fn listen(&self, addr: SocketAddr, backlog: u32) -> Result<Listener> {
        let id = CmId::new(&self.raw, rdma_port_space::RDMA_PS_TCP, IdCtx::new(next_conn_id(), false, 0))?;
        let mut sa = CSockAddr::new(addr);
        // SAFETY: the id is live; sa is valid for the call.
        if unsafe { rdma_bind_addr(id.raw(), sa.as_mut_ptr()) } != 0 {
            let err = std::io::Error::last_os_error();
            if err.raw_os_error() == Some(libc::EADDRINUSE) {
                return Err(Error::AddrInUse { verb: "listen", addr });
            }
            return Err(Error::os_local("rdma_bind_addr", addr, err));
        }
        // SAFETY: the id is live and bound.
        if unsafe { rdma_listen(id.raw(), backlog.min(i32::MAX as u32) as i32) } != 0 {
            return Err(Error::os_local("rdma_listen", addr, std::io::Error::last_os_error()));
        }
        let local = id.local_addr().unwrap_or(addr);
        Ok(Listener { _id: id, local })
    }

    /// Resolves `addr`, creates the queue pair and sends a connect request. The outcome
    /// (established, rejected, unreachable) arrives as an event with the queue pair's conn id.
    pub(crate) fn connect(
        &self,
        addr: SocketAddr,
        init: VerbsQpInit,
        private_data: &[u8],
        timeout: Duration,
    ) -> Result<Qp> {
        // Before anything is resolved or sent.
        check_device(&self.dev, &init, "connect")?;
        let deadline = crate::time::deadline_after(timeout);
        let conn = next_conn_id();
        let private = Arc::new(RawChannel::new()?);
        let mut id = CmId::new(
            &private,
            rdma_port_space::RDMA_PS_TCP,
            IdCtx::new(conn, true, rnr_timer_code(init.min_rnr_timer)),
        )?;
        if let Err(detail) = self.resolve(&id, &private, addr, deadline) {
            // The outcome of a connect arrives as an event, resolution failures included.
            let local = id.local_addr().unwrap_or_else(|| unspecified_like(addr.ip()));
            self.synthetic.lock().push_back(ChannelEvent::Unreachable { conn, detail });
            return Ok(Qp::Unreachable(DeadQp::new(conn, addr, local)));
        }
        id.migrate(&self.raw)?;
        drop(private);
        let raw_id = id.raw();
        let qp = RcQp::create(id, &self.dev, &init, "connect")?;
        let (resp, init_depth) = rd_atomic(&init, &self.dev.attributes);
        let mut param = conn_param(private_data, resp, init_depth, init.rnr_retry, init.srq.is_some());
        // SAFETY: `raw_id` is the id `qp` owns, live with its QP; param and its private data
        // outlive the call.
        if unsafe { rdma_connect(raw_id, &mut param) } != 0 {
            return Err(Error::os("rdma_connect", Some(addr), std::io::Error::last_os_error()));
        }
        Ok(Qp::Rc(qp))
    }

    /// Waits up to `timeout` for the next event.
    pub(crate) fn get_event(&self, timeout: Duration) -> Result<Option<ChannelEvent>> {
        let deadline = crate::time::deadline_after(timeout);
        loop {
            if let Some(ev) = self.synthetic.lock().pop_front() {
                return Ok(Some(ev));
            }
            match self.raw.next_event(deadline, |ev| self.map_event(ev))? {
                None => return Ok(None),
                Some(Some(ev)) => return Ok(Some(ev)),
                Some(None) if Instant::now() >= deadline => return Ok(None),
                Some(None) => {}
            }
        }
    }
}

/// Waits for `want` on a private channel; any other event is the failure it describes.
fn expect_event(channel: &RawChannel, deadline: Instant, want: rdma_cm_event_type::Type) -> Result<(), String> {
    match channel.next_event(deadline, |ev| (ev.event, describe(ev))) {
        Ok(Some((got, _))) if got == want => Ok(()),
        Ok(Some((_, what))) => Err(what),
        Ok(None) => Err(format!("timed out waiting for {}", event_name(want))),
        Err(e) => Err(e.to_string()),
    }
}

/// The private data of a connection event, copied before the event is acknowledged.
fn conn_private_data(ev: &rdma_cm_event) -> Vec<u8> {
    // SAFETY: for connection events the conn member of the union is valid.
    let p = unsafe { ev.param.conn };
    if p.private_data.is_null() || p.private_data_len == 0 {
        return Vec::new();
    }
    // SAFETY: librdmacm guarantees private_data_len readable bytes until the ack.
    unsafe { std::slice::from_raw_parts(p.private_data as *const u8, usize::from(p.private_data_len)) }.to_vec()
}

/// The responder resources and initiator depth a queue pair asks for in its connect or
/// accept: its own settings, within what the device allows.
fn rd_atomic(init: &VerbsQpInit, attrs: &DeviceAttributes) -> (u8, u8) {
    clamp_rd_atomic((init.responder_resources, init.initiator_depth), attrs)
}

/// `(responder resources, initiator depth)` within the device's limits.
fn clamp_rd_atomic((responder, initiator): (u8, u8), attrs: &DeviceAttributes) -> (u8, u8) {
    (responder.min(attrs.max_qp_rd_atom), initiator.min(attrs.max_qp_init_rd_atom))
}

/// Applies the context's `min_rnr_timer` to the event's QP (active side, on ESTABLISHED).
fn set_min_rnr_timer_from_event(ev: &rdma_cm_event, ctx: &IdCtx) {
    let alive = ctx.qp_alive.lock();
    // SAFETY: the id is live until the event is acknowledged; its QP is live while
    // `qp_alive` is true and the lock is held (RcQp's Drop takes it before destroying).
    let qp = unsafe { (*ev.id).qp };
    if *alive && !qp.is_null() {
        if let Err(e) = super::qp::set_min_rnr_timer(qp, ctx.min_rnr_timer.load(Ordering::Relaxed)) {
            tracing::warn!("verbs: setting min_rnr_timer on an established QP failed: {e}");
        }
    }
}

/// Answers the peer's disconnect request (DREP) at once, so that the peer's `Disconnected`
/// does not wait for the owner of this side to disconnect or drop its queue pair.
fn answer_disconnect(ev: &rdma_cm_event, ctx: &IdCtx) {
    let _alive = ctx.qp_alive.lock();
    *ctx.state.write() = ConnState::Closed;
    if !ctx.disconnected.swap(true, Ordering::AcqRel) {
        // SAFETY: the id is live until the event is acknowledged; librdmacm touches its QP
        // only while it exists, and RcQp's Drop destroys the QP under the same lock.
        if unsafe { rdma_disconnect(ev.id) } != 0 {
            tracing::debug!("verbs: answering a disconnect: {}", std::io::Error::last_os_error());
        }
    }
}

/// A listening id.
pub(crate) struct Listener {
    _id: CmId,
    local: SocketAddr,
}

impl Listener {
    /// The bound address (with the port picked).
    pub(crate) fn local_addr(&self) -> SocketAddr {
        self.local
    }
}

/// An incoming connect request.
pub(crate) struct ConnRequest {
    id: Option<CmId>,
    dev: Arc<Device>,
    private_data: Vec<u8>,
    peer: SocketAddr,
    peer_initiator_depth: u8,
    peer_responder_resources: u8,
}

impl ConnRequest {
    fn id(&self) -> &CmId {
        self.id.as_ref().expect("a connect request owns its id until answered")
    }
}

impl ConnRequest {
    /// The connection id that later events about this connection carry.
    pub(crate) fn conn_id(&self) -> ConnId {
        self.id().ctx().conn
    }
    /// The requester's private data.
    pub(crate) fn private_data(&self) -> &[u8] {
        &self.private_data
    }
    /// The requester's address.
    pub(crate) fn peer_addr(&self) -> SocketAddr {
        self.peer
    }
    /// Creates the queue pair and accepts with `private_data`.
    pub(crate) fn accept(mut self, init: VerbsQpInit, private_data: &[u8]) -> Result<Qp> {
        let id = self.id.take().expect("answered once");
        if id.verbs() != self.dev.ctx() {
            return Err(Error::invalid(
                "accept",
                format!("the request arrived on another device than {}", self.dev.name()),
            ));
        }
        id.ctx().min_rnr_timer.store(rnr_timer_code(init.min_rnr_timer), Ordering::Relaxed);
        let raw_id = id.raw();
        let qp = RcQp::create(id, &self.dev, &init, "accept")?;
        let (resp, init_depth) = rd_atomic(&init, &self.dev.attributes);
        let mut param = conn_param(
            private_data,
            resp.min(self.peer_initiator_depth),
            init_depth.min(self.peer_responder_resources),
            init.rnr_retry,
            init.srq.is_some(),
        );
        // SAFETY: `raw_id` is the id `qp` owns, live with its QP; param and its private data
        // outlive the call.
        if unsafe { rdma_accept(raw_id, &mut param) } != 0 {
            return Err(Error::os("rdma_accept", Some(self.peer), std::io::Error::last_os_error()));
        }
        // rdma_accept moved the QP to RTS with the CM's min_rnr_timer (0 = 655 ms): fix it.
        super::qp::set_min_rnr_timer(qp.raw_qp(), qp.ctx().min_rnr_timer.load(Ordering::Relaxed))?;
        // In RTS: sends may be posted (they reach the peer once it is in RTR, which it is).
        let mut state = qp.ctx().state.write();
        if *state == ConnState::Connecting {
            *state = ConnState::Established;
        }
        drop(state);
        Ok(Qp::Rc(qp))
    }
    /// Rejects with `private_data`.
    pub(crate) fn reject(mut self, private_data: &[u8]) -> Result<()> {
        let id = self.id.take().expect("answered once");
        let ptr = if private_data.is_empty() { std::ptr::null() } else { private_data.as_ptr().cast() };
        // SAFETY: the id is live; the private data outlives the call.
        if unsafe { rdma_reject(id.raw(), ptr, private_data.len().min(255) as u8) } != 0 {
            return Err(Error::os("rdma_reject", Some(self.peer), std::io::Error::last_os_error()));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rd_atomic_depths_are_the_queue_pairs_within_the_device_limits() {
        let attrs = DeviceAttributes {
            max_qp_wr: 1,
            max_sge: 1,
            max_cqe: 1,
            max_mr_size: 1,
            max_srq_wr: 0,
            ud_mtu: 1024,
            max_msg_size: 1,
            max_qp_rd_atom: 128,
            max_qp_init_rd_atom: 8,
            copies_on_host_cpus: false,
        };
        assert_eq!(clamp_rd_atomic((16, 4), &attrs), (16, 4));
        assert_eq!(clamp_rd_atomic((200, 16), &attrs), (128, 8));
    }
}
