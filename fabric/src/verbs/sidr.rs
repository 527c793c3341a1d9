//! Unicast addressing of UD endpoints through RDMA-CM service ID resolution (SIDR).
//!
//! An endpoint's unicast address is `(interface, port)` of an `RDMA_PS_UDP` CM id listening
//! for it ([`SidrListener`]); a thread answers each resolution request with the endpoint's QP
//! number and, in the reply's private data, its Q_Key (librdmacm's reply carries the default
//! UDP Q_Key, not the one the endpoint set). A sender resolves an address once
//! ([`resolve`]: address, route, SIDR request) and keeps the address handle.
//!
//! The request's private data carries the sender's own unicast port and QP number, so the
//! receiver can name the sender of a datagram (GRH source IP + source QP) by its unicast
//! address, which a reply then resolves like any other.

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use rdma_sys::*;

use super::cm_id::{CmId, IdCtx, RawChannel};
use super::os::{last_os, poll_fd};
use super::stoppable::StoppableThread;
use crate::{Error, Result};

/// First bytes of our SIDR private data (requests and replies), to ignore anybody else's.
const MAGIC: [u8; 4] = *b"rpsU";
/// Bytes of a request's private data: magic, sender port (u16 LE), sender QPN (u32 LE).
const REQ_LEN: usize = 10;
/// Bytes of a reply's private data: magic, Q_Key (u32 LE).
const REP_LEN: usize = 8;

/// Senders that resolved this endpoint: (IP, QP number) → their unicast port.
pub(super) type Senders = Arc<Mutex<HashMap<(Ipv4Addr, u32), u16>>>;

/// The listening id of an endpoint and the thread answering resolution requests.
pub(super) struct SidrListener {
    local: SocketAddrV4,
    senders: Senders,
    // Declared before the id: the thread stops before the id is destroyed.
    _thread: StoppableThread,
    _id: CmId,
}

impl SidrListener {
    /// Listens on `(interface, any port)` and answers with `qpn` and `qkey`.
    pub(super) fn start(interface: Ipv4Addr, qpn: u32, qkey: u32) -> Result<SidrListener> {
        let channel = Arc::new(RawChannel::new()?);
        let id = CmId::new(&channel, rdma_port_space::RDMA_PS_UDP, IdCtx::new(0, false, 0))?;
        let mut sa = super::addr::CSockAddr::new(SocketAddr::new(interface.into(), 0));
        // SAFETY: the id is live; sa is valid for the call.
        if unsafe { rdma_bind_addr(id.raw(), sa.as_mut_ptr()) } != 0 {
            return Err(last_os("rdma_bind_addr(UD unicast)"));
        }
        // SAFETY: the id is live and bound.
        if unsafe { rdma_listen(id.raw(), 64) } != 0 {
            return Err(last_os("rdma_listen(UD unicast)"));
        }
        let local = match id.local_addr() {
            Some(SocketAddr::V4(a)) => a,
            other => return Err(Error::invalid("create_ud", format!("unicast id bound to {other:?}"))),
        };
        let senders: Senders = Arc::default();
        let (ch, known) = (channel.clone(), senders.clone());
        let thread = StoppableThread::spawn(format!("ud-sidr-{}", local.port()), "spawn SIDR thread", move |stop| {
            serve(&ch, stop, qpn, qkey, &known)
        })?;
        Ok(SidrListener { local, senders, _thread: thread, _id: id })
    }

    /// The unicast address of the endpoint.
    pub(super) fn local(&self) -> SocketAddrV4 {
        self.local
    }

    /// The unicast port of the sender `(ip, qpn)`, when it resolved this endpoint.
    pub(super) fn sender_port(&self, ip: Ipv4Addr, qpn: u32) -> Option<u16> {
        self.senders.lock().get(&(ip, qpn)).copied()
    }
}

/// The listener thread: answers requests until `stop` is readable.
fn serve(channel: &RawChannel, stop: i32, qpn: u32, qkey: u32, senders: &Senders) {
    let mut fds = [
        libc::pollfd { fd: channel.fd(), events: libc::POLLIN, revents: 0 },
        libc::pollfd { fd: stop, events: libc::POLLIN, revents: 0 },
    ];
    loop {
        // SAFETY: two valid pollfds for the duration of the call.
        let rc = unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) };
        if rc < 0 && std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            tracing::warn!("verbs: SIDR listener poll: {}", std::io::Error::last_os_error());
            return;
        }
        if fds[1].revents != 0 {
            return;
        }
        loop {
            let answered = channel.next_event(Instant::now(), |ev| answer(ev, qpn, qkey, senders));
            match answered {
                Ok(Some(Some(child))) => {
                    // SAFETY: the request's id, answered and acknowledged; nobody else owns it.
                    unsafe { rdma_destroy_id(child) };
                }
                Ok(Some(None)) => {}
                Ok(None) => break,
                Err(e) => {
                    tracing::warn!("verbs: SIDR listener: {e}");
                    return;
                }
            }
        }
    }
}

/// Answers one event of the listening channel; returns the request's id to destroy.
fn answer(ev: &rdma_cm_event, qpn: u32, qkey: u32, senders: &Senders) -> Option<*mut rdma_cm_id> {
    if ev.event != rdma_cm_event_type::RDMA_CM_EVENT_CONNECT_REQUEST {
        return None;
    }
    // SAFETY: for a UD connect request the ud member of the union is valid until the ack.
    let data = unsafe { private_data(ev.param.ud.private_data, ev.param.ud.private_data_len) };
    // SAFETY: the request's id is live until destroyed by the caller.
    let peer = unsafe { super::addr::from_c(&(*ev.id).route.addr.dst_addr_union.dst_addr) };
    if let (Some((port, sender_qpn)), Some(SocketAddr::V4(peer))) = (decode_request(&data), peer) {
        senders.lock().insert((*peer.ip(), sender_qpn), port);
    }
    let reply = encode_reply(qkey);
    let mut param: rdma_conn_param = super::cm_id::conn_param(&reply, 0, 0, 0, false);
    param.qp_num = qpn;
    // SAFETY: the id is live; param and its private data outlive the call.
    if unsafe { rdma_accept(ev.id, &mut param) } != 0 {
        tracing::debug!("verbs: answering a SIDR request: {}", std::io::Error::last_os_error());
    }
    Some(ev.id)
}

/// Copies CM private data.
///
/// # Safety
/// `ptr` must be null or valid for `len` bytes.
unsafe fn private_data(ptr: *const std::ffi::c_void, len: u8) -> Vec<u8> {
    if ptr.is_null() || len == 0 {
        return Vec::new();
    }
    // SAFETY: guaranteed by the caller.
    unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), usize::from(len)) }.to_vec()
}

/// A request's private data.
fn encode_request(port: u16, qpn: u32) -> [u8; REQ_LEN] {
    let mut b = [0u8; REQ_LEN];
    b[..4].copy_from_slice(&MAGIC);
    b[4..6].copy_from_slice(&port.to_le_bytes());
    b[6..10].copy_from_slice(&qpn.to_le_bytes());
    b
}

/// The sender port and QP number of a request (`None` when it is not ours).
fn decode_request(data: &[u8]) -> Option<(u16, u32)> {
    if data.len() < REQ_LEN || data[..4] != MAGIC {
        return None;
    }
    Some((u16::from_le_bytes([data[4], data[5]]), u32::from_le_bytes(data[6..10].try_into().ok()?)))
}

/// A reply's private data.
fn encode_reply(qkey: u32) -> [u8; REP_LEN] {
    let mut b = [0u8; REP_LEN];
    b[..4].copy_from_slice(&MAGIC);
    b[4..8].copy_from_slice(&qkey.to_le_bytes());
    b
}

/// The Q_Key of a reply (`None` when the reply is not ours).
fn decode_reply(data: &[u8]) -> Option<u32> {
    if data.len() < REP_LEN || data[..4] != MAGIC {
        return None;
    }
    Some(u32::from_le_bytes(data[4..8].try_into().ok()?))
}

/// Where unicast datagrams to a peer go.
pub(super) struct Resolved {
    /// Address handle attributes for the peer.
    pub(super) ah_attr: ibv_ah_attr,
    /// The peer's QP number.
    pub(super) qpn: u32,
    /// The peer's Q_Key.
    pub(super) qkey: u32,
}

/// Resolves `to` (a peer's unicast address) from `interface`, announcing `(own_port, own_qpn)`.
pub(super) fn resolve(
    interface: Ipv4Addr,
    to: SocketAddrV4,
    own_port: u16,
    own_qpn: u32,
    timeout: Duration,
) -> Result<Resolved> {
    let deadline = crate::time::deadline_after(timeout);
    let fail = |detail: String| Error::os("resolve UD unicast address", Some(to.into()), std::io::Error::other(detail));
    let channel = Arc::new(RawChannel::new()?);
    let id = CmId::new(&channel, rdma_port_space::RDMA_PS_UDP, IdCtx::new(0, false, 0))?;
    let ms = |deadline: Instant| deadline.saturating_duration_since(Instant::now()).as_millis().clamp(1, 60_000) as i32;
    let mut src = super::addr::CSockAddr::new(SocketAddr::new(interface.into(), 0));
    let mut dst = super::addr::CSockAddr::new(to.into());
    // SAFETY: the id is live; both addresses are valid for the call.
    if unsafe { rdma_resolve_addr(id.raw(), src.as_mut_ptr(), dst.as_mut_ptr(), ms(deadline)) } != 0 {
        return Err(last_os("rdma_resolve_addr(UD)"));
    }
    expect(&channel, deadline, rdma_cm_event_type::RDMA_CM_EVENT_ADDR_RESOLVED).map_err(fail)?;
    // SAFETY: the id is live with its address resolved.
    if unsafe { rdma_resolve_route(id.raw(), ms(deadline)) } != 0 {
        return Err(last_os("rdma_resolve_route(UD)"));
    }
    expect(&channel, deadline, rdma_cm_event_type::RDMA_CM_EVENT_ROUTE_RESOLVED).map_err(fail)?;
    let request = encode_request(own_port, own_qpn);
    let mut param = super::cm_id::conn_param(&request, 0, 0, 0, false);
    // SAFETY: the id is live with its route resolved; param and its data outlive the call.
    if unsafe { rdma_connect(id.raw(), &mut param) } != 0 {
        return Err(last_os("rdma_connect(SIDR)"));
    }
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(Error::Timeout { verb: "SIDR resolution", millis: crate::time::millis(timeout) });
        }
        poll_fd(channel.fd(), left, "poll SIDR channel")?;
        let got = channel.next_event(Instant::now(), |ev| {
            if ev.event != rdma_cm_event_type::RDMA_CM_EVENT_ESTABLISHED {
                return Err(super::cm_id::describe(ev));
            }
            // SAFETY: for ESTABLISHED on a UD id the ud member is valid until the ack.
            let ud = unsafe { ev.param.ud };
            // SAFETY: as above.
            let data = unsafe { private_data(ud.private_data, ud.private_data_len) };
            Ok(Resolved { ah_attr: ud.ah_attr, qpn: ud.qp_num, qkey: decode_reply(&data).unwrap_or(ud.qkey) })
        })?;
        match got {
            Some(Ok(r)) => return Ok(r),
            Some(Err(what)) => return Err(fail(format!("{to}: {what}"))),
            None => {}
        }
    }
}

/// Waits for `want` on `channel`; anything else is the failure it describes.
fn expect(channel: &RawChannel, deadline: Instant, want: rdma_cm_event_type::Type) -> Result<(), String> {
    match channel.next_event(deadline, |ev| (ev.event, super::cm_id::describe(ev))) {
        Ok(Some((got, _))) if got == want => Ok(()),
        Ok(Some((_, what))) => Err(what),
        Ok(None) => Err("timed out".into()),
        Err(e) => Err(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn private_data_round_trips_and_foreign_data_is_ignored() {
        assert_eq!(decode_request(&encode_request(4791, 0x00ab_cdef)), Some((4791, 0x00ab_cdef)));
        assert_eq!(decode_reply(&encode_reply(0x0123_4567 ^ 99)), Some(0x0123_4567 ^ 99));
        // Padded by the transport: trailing zeros do not matter.
        let mut padded = encode_request(1, 2).to_vec();
        padded.resize(56, 0);
        assert_eq!(decode_request(&padded), Some((1, 2)));
        assert_eq!(decode_request(&[0u8; 56]), None);
        assert_eq!(decode_reply(b"rps"), None);
    }
}
