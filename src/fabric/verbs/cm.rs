//! The connection manager: event channels, CM ids, listening, connecting, and the mapping of
//! librdmacm events onto the fabric's events.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Mutex, RwLock};
use rdma_sys::*;

use super::addr::{from_c, unspecified_like, CSockAddr};
use super::device::Device;
use super::qp::{DeadQp, RcQp};
use super::{last_os, poll_fd};
use crate::fabric::provider::*;
use crate::fabric::{DeviceAttributes, Error, RejectReason, Result};

/// IB CM reject reason: no listener for the service id.
const IB_CM_REJ_INVALID_SERVICE_ID: i32 = 8;
/// IB CM reject reason: consumer-defined (rdma_reject, or rdma_cm finding no matching id).
const IB_CM_REJ_CONSUMER_DEFINED: i32 = 28;
/// IB CM retries of a request without an answer (the CM's maximum).
const CM_RETRY_COUNT: u8 = 7;

/// A librdmacm event channel.
pub(super) struct RawChannel(*mut rdma_event_channel);

// SAFETY: librdmacm event channels may be used from any thread (rdma_get_cm_event reads a
// file descriptor; the library locks its own state).
unsafe impl Send for RawChannel {}
// SAFETY: see Send.
unsafe impl Sync for RawChannel {}

impl RawChannel {
    /// Creates a channel whose descriptor is non-blocking (waits use poll(2)).
    pub(super) fn new() -> Result<Self> {
        // SAFETY: no arguments; NULL is checked.
        let ch = unsafe { rdma_create_event_channel() };
        if ch.is_null() {
            let err = std::io::Error::last_os_error();
            return Err(Error::os("rdma_create_event_channel", None, err));
        }
        let channel = RawChannel(ch);
        // SAFETY: ch is a live channel; its fd is a valid descriptor it owns.
        super::set_nonblocking(unsafe { (*ch).fd }, "rdma_create_event_channel")?;
        Ok(channel)
    }
    fn raw(&self) -> *mut rdma_event_channel {
        self.0
    }
    /// Its descriptor (non-blocking).
    pub(super) fn fd(&self) -> i32 {
        // SAFETY: the channel is live while self is.
        unsafe { (*self.0).fd }
    }

    /// Waits up to `deadline` for one event and hands it to `f` before acknowledging it.
    /// `None` when the deadline passes first.
    pub(super) fn next_event<R>(&self, deadline: Instant, f: impl FnOnce(&rdma_cm_event) -> R) -> Result<Option<R>> {
        loop {
            let mut event: *mut rdma_cm_event = std::ptr::null_mut();
            // SAFETY: the channel is live; `event` is a valid out-pointer.
            if unsafe { rdma_get_cm_event(self.0, &mut event) } == 0 {
                // SAFETY: a successful call returns a valid event, valid until acknowledged.
                let out = f(unsafe { &*event });
                // SAFETY: acknowledged exactly once, after its last use (`f` copied out what
                // it needs).
                unsafe { rdma_ack_cm_event(event) };
                return Ok(Some(out));
            }
            let err = std::io::Error::last_os_error();
            if err.kind() != std::io::ErrorKind::WouldBlock {
                return Err(Error::os("rdma_get_cm_event", None, err));
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(None);
            }
            poll_fd(self.fd(), deadline - now, "poll rdma_cm channel")?;
        }
    }
}

impl Drop for RawChannel {
    fn drop(&mut self) {
        // SAFETY: every id on the channel holds an Arc of it, so none is left; destroyed once.
        unsafe { rdma_destroy_event_channel(self.0) };
    }
}

/// What a CM id's `context` points to: the connection id events carry and what the
/// provider needs when the connection's events are delivered.
pub(super) struct IdCtx {
    /// The connection id.
    pub(super) conn: ConnId,
    /// Whether this is the active (connecting) side.
    active: bool,
    /// `min_rnr_timer` (IB encoding) to apply once connected.
    pub(super) min_rnr_timer: AtomicU8,
    /// Whether the id's queue pair is alive; held while modifying it from an event.
    pub(super) qp_alive: Mutex<bool>,
    /// Whether `rdma_disconnect` was called (by the owner, or in answer to the peer's).
    pub(super) disconnected: AtomicBool,
    /// Whether posting is allowed; posts hold it shared, state changes exclusively, so no
    /// request slips into a queue pair after it was moved to the error state.
    pub(super) state: RwLock<ConnState>,
}

/// Where a connection is, as far as posting is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ConnState {
    /// Not yet established: receives may be posted, sends are refused (a device may keep a
    /// send posted to a queue pair that is not ready and flush it later).
    Connecting,
    /// Established: everything may be posted.
    Established,
    /// Rejected, unreachable, disconnected: every post is refused.
    Closed,
}

impl ConnState {
    /// The name `Error::NotConnected` carries.
    pub(super) fn name(self) -> &'static str {
        match self {
            ConnState::Connecting => "connecting",
            ConnState::Established => "established",
            ConnState::Closed => "disconnected",
        }
    }
}

impl IdCtx {
    /// A context for connection `conn`.
    pub(super) fn new(conn: ConnId, active: bool, min_rnr_timer: u8) -> Box<IdCtx> {
        Box::new(IdCtx {
            conn,
            active,
            min_rnr_timer: AtomicU8::new(min_rnr_timer),
            qp_alive: Mutex::new(false),
            disconnected: AtomicBool::new(false),
            state: RwLock::new(ConnState::Connecting),
        })
    }
}

/// A fresh connection id.
fn next_conn_id() -> ConnId {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// A CM id; destroyed (after its queue pair, which its owner destroys first) on drop.
pub(super) struct CmId {
    id: *mut rdma_cm_id,
    ctx: Box<IdCtx>,
    channel: Arc<RawChannel>,
}

// SAFETY: librdmacm ids may be used from any thread; the context box is only read through
// shared references and atomics/mutexes.
unsafe impl Send for CmId {}
// SAFETY: see Send.
unsafe impl Sync for CmId {}

impl CmId {
    /// Creates an id on `channel` in port space `ps`.
    pub(super) fn new(channel: &Arc<RawChannel>, ps: rdma_port_space::Type, ctx: Box<IdCtx>) -> Result<CmId> {
        let mut id: *mut rdma_cm_id = std::ptr::null_mut();
        let ctx_ptr = &*ctx as *const IdCtx as *mut std::ffi::c_void;
        // SAFETY: the channel is live; `id` is a valid out-pointer; the context box outlives
        // the id (it is dropped after rdma_destroy_id).
        if unsafe { rdma_create_id(channel.raw(), &mut id, ctx_ptr, ps) } != 0 {
            return Err(last_os("rdma_create_id"));
        }
        Ok(CmId { id, ctx, channel: channel.clone() })
    }

    /// Takes ownership of an id librdmacm created for a connect request, giving it `ctx`.
    ///
    /// # Safety
    /// `id` must be a live id of `channel` that nothing else owns.
    unsafe fn adopt(id: *mut rdma_cm_id, channel: &Arc<RawChannel>, ctx: Box<IdCtx>) -> CmId {
        // SAFETY: the caller guarantees the id is live and ours.
        unsafe { (*id).context = &*ctx as *const IdCtx as *mut std::ffi::c_void };
        CmId { id, ctx, channel: channel.clone() }
    }

    /// The channel its events arrive on.
    pub(super) fn channel(&self) -> &RawChannel {
        &self.channel
    }
    /// The raw id.
    pub(super) fn raw(&self) -> *mut rdma_cm_id {
        self.id
    }
    /// Its context.
    pub(super) fn ctx(&self) -> &IdCtx {
        &self.ctx
    }
    /// The local address (after bind or resolution).
    pub(super) fn local_addr(&self) -> Option<SocketAddr> {
        // SAFETY: the id is live; the address union is filled by librdmacm.
        unsafe { from_c(&(*self.id).route.addr.src_addr_union.src_addr) }
    }
    /// The peer address (after resolution or a connect request).
    pub(super) fn peer_addr(&self) -> Option<SocketAddr> {
        // SAFETY: as local_addr.
        unsafe { from_c(&(*self.id).route.addr.dst_addr_union.dst_addr) }
    }
    /// The device context the id is bound to (NULL before binding).
    pub(super) fn verbs(&self) -> *mut ibv_context {
        // SAFETY: the id is live.
        unsafe { (*self.id).verbs }
    }
    /// Moves the id onto `channel`: its later events arrive there.
    fn migrate(&mut self, channel: &Arc<RawChannel>) -> Result<()> {
        // SAFETY: both live; all events of the id on its old channel are acknowledged.
        if unsafe { rdma_migrate_id(self.id, channel.raw()) } != 0 {
            return Err(last_os("rdma_migrate_id"));
        }
        self.channel = channel.clone();
        Ok(())
    }
}

impl Drop for CmId {
    fn drop(&mut self) {
        // SAFETY: the owner destroyed the id's queue pair first; every event of the id was
        // acknowledged right after it was read, so this does not block. Destroyed once.
        unsafe { rdma_destroy_id(self.id) };
    }
}

/// A connection-manager event channel: the provider's [`CmChannelOps`].
pub(super) struct Channel {
    dev: Arc<Device>,
    raw: Arc<RawChannel>,
    /// Events of connects that failed before reaching librdmacm's channel (resolution).
    synthetic: Mutex<VecDeque<ProviderCmEvent>>,
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
    fn map_event(&self, ev: &rdma_cm_event) -> Option<ProviderCmEvent> {
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
                Some(ProviderCmEvent::Established { conn, private_data })
            }
            RDMA_CM_EVENT_REJECTED => {
                let reason = match ev.status {
                    IB_CM_REJ_INVALID_SERVICE_ID => RejectReason::NoListener,
                    IB_CM_REJ_CONSUMER_DEFINED => RejectReason::Consumer,
                    other => RejectReason::Other(other),
                };
                *ctx.state.write() = ConnState::Closed;
                Some(ProviderCmEvent::Rejected { conn, reason, private_data: conn_private_data(ev) })
            }
            RDMA_CM_EVENT_ADDR_ERROR
            | RDMA_CM_EVENT_ROUTE_ERROR
            | RDMA_CM_EVENT_UNREACHABLE
            | RDMA_CM_EVENT_CONNECT_ERROR => {
                *ctx.state.write() = ConnState::Closed;
                Some(ProviderCmEvent::Unreachable { conn, detail: describe(ev) })
            }
            RDMA_CM_EVENT_DISCONNECTED => {
                answer_disconnect(ev, ctx);
                Some(ProviderCmEvent::Disconnected { conn })
            }
            RDMA_CM_EVENT_DEVICE_REMOVAL => {
                *ctx.state.write() = ConnState::Closed;
                Some(ProviderCmEvent::Disconnected { conn })
            }
            _ => {
                tracing::debug!("verbs: ignoring CM event {}", describe(ev));
                None
            }
        }
    }

    fn connect_request(&self, ev: &rdma_cm_event) -> Option<ProviderCmEvent> {
        let conn = next_conn_id();
        // SAFETY: a CONNECT_REQUEST's id is a new id on this channel that nobody owns yet;
        // the context of the listening id is replaced by the new connection's.
        let id = unsafe { CmId::adopt(ev.id, &self.raw, IdCtx::new(conn, false, 0)) };
        // SAFETY: the conn member of the parameter union is the valid one for this event.
        let param = unsafe { ev.param.conn };
        let peer = id.peer_addr().unwrap_or_else(|| unspecified_like(self.dev.bind.unwrap_or([0, 0, 0, 0].into())));
        Some(ProviderCmEvent::ConnectRequest(Box::new(ConnRequest {
            id: Some(id),
            dev: self.dev.clone(),
            private_data: conn_private_data(ev),
            peer,
            peer_initiator_depth: param.initiator_depth,
            peer_responder_resources: param.responder_resources,
        })))
    }
}

impl CmChannelOps for Channel {
    fn listen(&self, addr: SocketAddr, backlog: u32) -> Result<Box<dyn ListenerOps>> {
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
        Ok(Box::new(Listener { _id: id, local }))
    }

    fn connect(
        &self,
        addr: SocketAddr,
        init: QpInitAttr,
        private_data: &[u8],
        timeout: Duration,
    ) -> Result<Box<dyn QpOps>> {
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
            self.synthetic.lock().push_back(ProviderCmEvent::Unreachable { conn, detail });
            return Ok(Box::new(DeadQp::new(conn, addr, local)));
        }
        id.migrate(&self.raw)?;
        drop(private);
        let qp = RcQp::create(id, &self.dev, &init)?;
        let (resp, init_depth) = rd_atomic(&init, &self.dev.attributes);
        let mut param = conn_param(private_data, resp, init_depth, init.rnr_retry, init.srq.is_some());
        // SAFETY: the id is live with its QP; param and its private data outlive the call.
        if unsafe { rdma_connect(qp.id().raw(), &mut param) } != 0 {
            return Err(Error::os("rdma_connect", Some(addr), std::io::Error::last_os_error()));
        }
        Ok(Box::new(qp))
    }

    fn get_event(&self, timeout: Duration) -> Result<Option<ProviderCmEvent>> {
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

/// `event (status N)`.
pub(super) fn describe(ev: &rdma_cm_event) -> String {
    format!("{} (status {})", event_name(ev.event), ev.status)
}

fn event_name(event: rdma_cm_event_type::Type) -> String {
    // SAFETY: rdma_event_str returns a static string for any value.
    unsafe { std::ffi::CStr::from_ptr(rdma_event_str(event)) }.to_string_lossy().into_owned()
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
fn rd_atomic(init: &QpInitAttr, attrs: &DeviceAttributes) -> (u8, u8) {
    clamp_rd_atomic((init.responder_resources, init.initiator_depth), attrs)
}

/// `(responder resources, initiator depth)` within the device's limits.
fn clamp_rd_atomic((responder, initiator): (u8, u8), attrs: &DeviceAttributes) -> (u8, u8) {
    (responder.min(attrs.max_qp_rd_atom), initiator.min(attrs.max_qp_init_rd_atom))
}

/// Connection parameters for connect and accept.
pub(super) fn conn_param(
    private_data: &[u8],
    responder: u8,
    initiator: u8,
    rnr_retry: u8,
    srq: bool,
) -> rdma_conn_param {
    rdma_conn_param {
        private_data: if private_data.is_empty() { std::ptr::null() } else { private_data.as_ptr().cast() },
        private_data_len: private_data.len().min(255) as u8,
        responder_resources: responder,
        initiator_depth: initiator,
        flow_control: 1,
        retry_count: CM_RETRY_COUNT,
        rnr_retry_count: rnr_retry.min(7),
        srq: u8::from(srq),
        qp_num: 0,
    }
}

/// The IB encoding of an RNR NAK timer: the smallest code whose delay is at least `d`.
pub(super) fn rnr_timer_code(d: Duration) -> u8 {
    // Delays in microseconds of codes 1..=31 (code 0 means 655.36 ms, the largest).
    const US: [u32; 32] = [
        655_360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1_280, 1_920, 2_560, 3_840, 5_120, 7_680,
        10_240, 15_360, 20_480, 30_720, 40_960, 61_440, 81_920, 122_880, 163_840, 245_760, 327_680, 491_520,
    ];
    let us = d.as_micros();
    (1..32u8).find(|&c| u128::from(US[usize::from(c)]) >= us).unwrap_or(0)
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

/// A listening id: the provider's [`ListenerOps`].
struct Listener {
    _id: CmId,
    local: SocketAddr,
}

impl ListenerOps for Listener {
    fn local_addr(&self) -> SocketAddr {
        self.local
    }
}

/// An incoming connect request: the provider's [`ConnRequestOps`].
struct ConnRequest {
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

impl ConnRequestOps for ConnRequest {
    fn conn_id(&self) -> ConnId {
        self.id().ctx().conn
    }
    fn private_data(&self) -> &[u8] {
        &self.private_data
    }
    fn peer_addr(&self) -> SocketAddr {
        self.peer
    }
    fn accept(mut self: Box<Self>, init: QpInitAttr, private_data: &[u8]) -> Result<Box<dyn QpOps>> {
        let id = self.id.take().expect("answered once");
        if id.verbs() != self.dev.ctx() {
            return Err(Error::invalid(
                "accept",
                format!("the request arrived on another device than {}", self.dev.name()),
            ));
        }
        id.ctx().min_rnr_timer.store(rnr_timer_code(init.min_rnr_timer), Ordering::Relaxed);
        let qp = RcQp::create(id, &self.dev, &init)?;
        let (resp, init_depth) = rd_atomic(&init, &self.dev.attributes);
        let mut param = conn_param(
            private_data,
            resp.min(self.peer_initiator_depth),
            init_depth.min(self.peer_responder_resources),
            init.rnr_retry,
            init.srq.is_some(),
        );
        // SAFETY: the id is live with its QP; param and its private data outlive the call.
        if unsafe { rdma_accept(qp.id().raw(), &mut param) } != 0 {
            return Err(Error::os("rdma_accept", Some(self.peer), std::io::Error::last_os_error()));
        }
        // rdma_accept moved the QP to RTS with the CM's min_rnr_timer (0 = 655 ms): fix it.
        super::qp::set_min_rnr_timer(qp.raw_qp(), qp.id().ctx().min_rnr_timer.load(Ordering::Relaxed))?;
        // In RTS: sends may be posted (they reach the peer once it is in RTR, which it is).
        let mut state = qp.id().ctx().state.write();
        if *state == ConnState::Connecting {
            *state = ConnState::Established;
        }
        drop(state);
        Ok(Box::new(qp))
    }
    fn reject(mut self: Box<Self>, private_data: &[u8]) -> Result<()> {
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
    fn rnr_timer_codes_round_up() {
        assert_eq!(rnr_timer_code(Duration::from_micros(10)), 1);
        assert_eq!(rnr_timer_code(Duration::from_micros(11)), 2);
        assert_eq!(rnr_timer_code(Duration::from_micros(640)), 12);
        assert_eq!(rnr_timer_code(Duration::ZERO), 1);
        assert_eq!(rnr_timer_code(Duration::from_millis(600)), 0);
        assert_eq!(rnr_timer_code(Duration::from_secs(5)), 0);
    }

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

    #[test]
    fn conn_param_carries_private_data_and_retries() {
        let data = [1u8, 2, 3];
        let p = conn_param(&data, 4, 5, 7, true);
        assert_eq!(p.private_data_len, 3);
        assert_eq!(p.private_data as *const u8, data.as_ptr());
        assert_eq!((p.responder_resources, p.initiator_depth, p.rnr_retry_count, p.srq), (4, 5, 7, 1));
        assert!(conn_param(&[], 0, 0, 9, false).private_data.is_null());
        assert_eq!(conn_param(&[], 0, 0, 9, false).rnr_retry_count, 7);
    }
}
