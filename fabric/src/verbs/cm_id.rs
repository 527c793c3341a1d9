//! librdmacm's objects: event channels ([`RawChannel`]), CM ids with the context their events
//! carry ([`CmId`], [`IdCtx`], [`ConnState`]), connection parameters and event names. They
//! know no device: the device finds itself through a CM id, and every object above uses them.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Instant;

use parking_lot::{Mutex, RwLock};
use rdma_sys::*;

use super::addr::from_c;
use super::os::{last_os, poll_fd};
use crate::provider::ConnId;
use crate::{Error, Result};

/// IB CM retries of a request without an answer (the CM's maximum).
const CM_RETRY_COUNT: u8 = 7;

/// A fresh connection id (of a CM id, or of a queue pair connected by hand: one namespace).
pub(super) fn next_conn_id() -> ConnId {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

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
        super::os::set_nonblocking(unsafe { (*ch).fd }, "rdma_create_event_channel")?;
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
    pub(super) active: bool,
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
    pub(super) unsafe fn adopt(id: *mut rdma_cm_id, channel: &Arc<RawChannel>, ctx: Box<IdCtx>) -> CmId {
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
    pub(super) fn migrate(&mut self, channel: &Arc<RawChannel>) -> Result<()> {
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

/// `event (status N)`.
pub(super) fn describe(ev: &rdma_cm_event) -> String {
    format!("{} (status {})", event_name(ev.event), ev.status)
}

/// The name librdmacm gives an event type.
pub(super) fn event_name(event: rdma_cm_event_type::Type) -> String {
    // SAFETY: rdma_event_str returns a static string for any value.
    unsafe { std::ffi::CStr::from_ptr(rdma_event_str(event)) }.to_string_lossy().into_owned()
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

#[cfg(test)]
mod tests {
    use super::*;

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
