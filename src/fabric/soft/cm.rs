//! The connection manager: event channels, listeners, connect, accept and reject.

use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mio::unix::SourceFd;
use mio::{Interest, Token};
use parking_lot::{Condvar, Mutex};
use socket2::{Domain, Protocol, Socket, Type};

use super::conn::{Conn, ConnState, OutFrame, Phase, QpData, Tail};
use super::cq::{SoftCq, SoftSrq};
use super::device::{Device, Shared, SoftPd};
use super::nic::{Cmd, ListenerEntry, TimerKind, LISTENER_BIT};
use super::qp::SoftQp;
use super::wire::{CmParams, FrameType, Header};
use crate::fabric::error::{Error, Result};
use crate::fabric::provider::*;
use crate::fabric::types::RejectReason;

/// How long a closing connection waits for the peer to close before it is dropped.
pub(crate) const CLOSE_LINGER: Duration = Duration::from_secs(2);

/// Incoming connections of one source address (IP) that may be in their connect handshake at
/// once on a device (from the TCP accept until the application accepts or rejects the
/// request); more are closed at once and counted (`FabricCounters::refused_handshakes`). A
/// connection that sends no connect request within the handshake timeout (5 s) is closed.
pub const MAX_PENDING_HANDSHAKES_PER_SOURCE: usize = 64;
/// Incoming connections of all sources that may be in their connect handshake at once on a
/// device; more are closed at once and counted.
pub const MAX_PENDING_HANDSHAKES: usize = 1024;

/// Incoming connections in their connect handshake, by source address.
#[derive(Default)]
pub(crate) struct Handshakes {
    by_source: HashMap<IpAddr, usize>,
    total: usize,
}

impl Handshakes {
    /// Takes a slot for a handshake from `source`, unless it or all sources have as many as
    /// allowed.
    pub(crate) fn admit(&mut self, source: IpAddr) -> bool {
        let mine = self.by_source.get(&source).copied().unwrap_or(0);
        if mine >= MAX_PENDING_HANDSHAKES_PER_SOURCE || self.total >= MAX_PENDING_HANDSHAKES {
            return false;
        }
        self.by_source.insert(source, mine + 1);
        self.total += 1;
        true
    }

    /// Gives back a slot `source` took.
    pub(crate) fn release(&mut self, source: IpAddr) {
        if let Some(n) = self.by_source.get_mut(&source) {
            *n -= 1;
            self.total -= 1;
            if *n == 0 {
                self.by_source.remove(&source);
            }
        }
    }
}

/// What this end's CONNECT_REQ or ACCEPT tells the peer.
fn cm_params(init: &QpInitAttr) -> CmParams {
    CmParams {
        rnr_retry: init.rnr_retry,
        initiator_depth: init.initiator_depth,
        responder_resources: init.responder_resources,
    }
}

/// A connect request as the NIC receives it: the requested connection and its private data.
pub(crate) struct IncomingRequest {
    pub(crate) conn: Arc<Conn>,
    pub(crate) data: Vec<u8>,
}

/// A CM event as the NIC produces it; the channel turns requests into handles.
pub(crate) type NicCmEvent = CmEventOf<IncomingRequest>;

/// The event queue of a channel.
pub(crate) struct ChannelInner {
    queue: Mutex<VecDeque<NicCmEvent>>,
    cv: Condvar,
    /// The owner dropped the channel: requests arriving now are rejected.
    closed: AtomicBool,
}

impl ChannelInner {
    /// Delivers an event; a request to a dropped channel is rejected.
    pub(crate) fn push(&self, ev: NicCmEvent) {
        if self.closed.load(Ordering::Acquire) {
            if let NicCmEvent::ConnectRequest(request) = ev {
                reject_conn(&request.conn, &[]);
            }
            return;
        }
        self.queue.lock().push_back(ev);
        self.cv.notify_one();
    }
}

/// Rejects a requested connection with `data` (nothing happens if it is not waiting).
fn reject_conn(conn: &Conn, data: &[u8]) {
    let mut st = conn.st.lock();
    if st.phase != Phase::Requested {
        return;
    }
    let mut h = Header::new(FrameType::Reject);
    h.len = data.len() as u32;
    st.push_out(OutFrame::new(&h, Tail::Bytes(data.to_vec())));
    conn.end_handshake(&mut st);
    st.phase = Phase::Closed;
    st.shut_after_flush = true;
    st.channel = None;
    conn.flush_from_user(&mut st);
    conn.shared.command(Cmd::Timer(Instant::now() + CLOSE_LINGER, conn.id, TimerKind::Close));
}

/// An event channel.
pub(crate) struct SoftChannel {
    inner: Arc<ChannelInner>,
    dev: Arc<Device>,
}

impl SoftChannel {
    pub(crate) fn new(dev: Arc<Device>) -> Self {
        let inner =
            ChannelInner { queue: Mutex::new(VecDeque::new()), cv: Condvar::new(), closed: AtomicBool::new(false) };
        SoftChannel { inner: Arc::new(inner), dev }
    }
}

impl Drop for SoftChannel {
    fn drop(&mut self) {
        self.inner.closed.store(true, Ordering::Release);
        let pending: Vec<NicCmEvent> = self.inner.queue.lock().drain(..).collect();
        for ev in pending {
            if let NicCmEvent::ConnectRequest(request) = ev {
                reject_conn(&request.conn, &[]);
            }
        }
    }
}

/// The provider objects a queue pair is made of, checked to be soft ones.
fn qp_data(init: &QpInitAttr, shared: &super::device::Shared, verb: &'static str) -> Result<QpData> {
    let foreign = || Error::invalid(verb, "queue pair objects come from another provider");
    let pd = (*init.pd).as_any().downcast_ref::<SoftPd>().ok_or_else(foreign)?;
    let send_cq = (*init.send_cq).as_any().downcast_ref::<SoftCq>().ok_or_else(foreign)?;
    let recv_cq = (*init.recv_cq).as_any().downcast_ref::<SoftCq>().ok_or_else(foreign)?;
    let srq = match &init.srq {
        Some(s) => Some((**s).as_any().downcast_ref::<SoftSrq>().ok_or_else(foreign)?.inner.clone()),
        None => None,
    };
    Ok(QpData::new(shared.next_qpn(), pd.id, (send_cq.inner.clone(), recv_cq.inner.clone()), srq, init))
}

impl CmChannelOps for SoftChannel {
    fn listen(&self, addr: SocketAddr, backlog: u32) -> Result<Box<dyn ListenerOps>> {
        let shared = &self.dev.shared;
        let sock = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))
            .map_err(|e| Error::os("listen: socket", None, e))?;
        sock.set_reuse_address(true).map_err(|e| Error::os("listen: SO_REUSEADDR", None, e))?;
        sock.bind(&addr.into()).map_err(|e| match e.kind() {
            std::io::ErrorKind::AddrInUse => Error::AddrInUse { verb: "listen", addr },
            _ => Error::os_local("listen: bind", addr, e),
        })?;
        sock.listen(backlog.clamp(1, i32::MAX as u32) as i32).map_err(|e| Error::os_local("listen", addr, e))?;
        sock.set_nonblocking(true).map_err(|e| Error::os("listen: O_NONBLOCK", None, e))?;
        let listener: std::net::TcpListener = sock.into();
        let local = listener.local_addr().map_err(|e| Error::os("listen: getsockname", None, e))?;
        let id = shared.next_id();
        let entry = Arc::new(ListenerEntry { sock: listener, channel: self.inner.clone() });
        shared.listeners.lock().insert(id, entry.clone());
        let fd = std::os::fd::AsRawFd::as_raw_fd(&entry.sock);
        if let Err(e) =
            shared.registry.register(&mut SourceFd(&fd), Token(LISTENER_BIT | id as usize), Interest::READABLE)
        {
            shared.listeners.lock().remove(&id);
            return Err(Error::os("listen: epoll_ctl", None, e));
        }
        Ok(Box::new(SoftListener { id, local, dev: self.dev.clone() }))
    }

    fn connect(
        &self,
        addr: SocketAddr,
        init: QpInitAttr,
        private_data: &[u8],
        timeout: Duration,
    ) -> Result<Box<dyn QpOps>> {
        let shared = &self.dev.shared;
        let qp = qp_data(&init, shared, "connect")?;
        let sock = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))
            .map_err(|e| Error::os("connect: socket", Some(addr), e))?;
        sock.set_nonblocking(true).map_err(|e| Error::os("connect: O_NONBLOCK", Some(addr), e))?;
        sock.set_nodelay(true).map_err(|e| Error::os("connect: TCP_NODELAY", Some(addr), e))?;
        let failed = match sock.connect(&addr.into()) {
            Ok(()) => None,
            Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => None,
            Err(e) => Some(e),
        };
        let stream: TcpStream = sock.into();
        let conn = Conn::new(shared.clone(), stream, addr, Phase::Connecting, Some(qp), Some(self.inner.clone()));
        {
            let mut st = conn.st.lock();
            if let Some(e) = failed {
                st.phase = Phase::Closed;
                self.inner.push(connect_failure(conn.id, addr, &e));
            } else {
                let mut h = Header::new(FrameType::ConnectReq);
                h.len = private_data.len() as u32;
                h.aux = cm_params(&init).to_aux();
                offer_same_host(shared, conn.id, &mut st, &mut h);
                st.push_out(OutFrame::new(&h, Tail::Bytes(private_data.to_vec())));
                shared.conns.lock().insert(conn.id, conn.clone());
                if let Err(e) = conn.register(&mut st, true) {
                    shared.conns.lock().remove(&conn.id);
                    if let Some(ep) = &shared.shm {
                        ep.withdraw(st.shm_nonce);
                    }
                    return Err(Error::os("connect: epoll_ctl", Some(addr), e));
                }
                shared.command(Cmd::Timer(crate::time::deadline_after(timeout), conn.id, TimerKind::ConnectTimeout));
            }
        }
        Ok(Box::new(SoftQp::new(conn, init, self.dev.clone(), Some(self.inner.clone()))))
    }

    fn get_event(&self, timeout: Duration) -> Result<Option<ProviderCmEvent>> {
        let deadline = crate::time::deadline_after(timeout);
        let mut q = self.inner.queue.lock();
        let ev = loop {
            if let Some(ev) = q.pop_front() {
                break ev;
            }
            if self.inner.cv.wait_until(&mut q, deadline).timed_out() {
                match q.pop_front() {
                    Some(ev) => break ev,
                    None => return Ok(None),
                }
            }
        };
        drop(q);
        Ok(Some(ev.map_request(|IncomingRequest { conn, data }| {
            Box::new(SoftConnRequest { conn, data, channel: self.inner.clone(), dev: self.dev.clone() })
                as Box<dyn ConnRequestOps>
        })))
    }
}

/// The event a failed TCP connect produces: refused means nobody listens.
pub(crate) fn connect_failure(conn: ConnId, addr: SocketAddr, e: &std::io::Error) -> NicCmEvent {
    if e.kind() == std::io::ErrorKind::ConnectionRefused {
        NicCmEvent::Rejected { conn, reason: RejectReason::NoListener, private_data: Vec::new() }
    } else {
        NicCmEvent::Unreachable { conn, detail: format!("connect to {addr}: {e}") }
    }
}

/// A listening socket; dropping it stops listening.
struct SoftListener {
    id: u64,
    local: SocketAddr,
    dev: Arc<Device>,
}

impl ListenerOps for SoftListener {
    fn local_addr(&self) -> SocketAddr {
        self.local
    }
}

impl Drop for SoftListener {
    fn drop(&mut self) {
        let shared = &self.dev.shared;
        if let Some(entry) = shared.listeners.lock().remove(&self.id) {
            let fd = std::os::fd::AsRawFd::as_raw_fd(&entry.sock);
            let _ = shared.registry.deregister(&mut SourceFd(&fd));
        }
    }
}

/// A delivered connect request.
struct SoftConnRequest {
    conn: Arc<Conn>,
    data: Vec<u8>,
    channel: Arc<ChannelInner>,
    dev: Arc<Device>,
}

impl ConnRequestOps for SoftConnRequest {
    fn conn_id(&self) -> ConnId {
        self.conn.id
    }
    fn private_data(&self) -> &[u8] {
        &self.data
    }
    fn peer_addr(&self) -> SocketAddr {
        self.conn.peer
    }
    fn accept(self: Box<Self>, init: QpInitAttr, private_data: &[u8]) -> Result<Box<dyn QpOps>> {
        let mut qp = qp_data(&init, &self.dev.shared, "accept")?;
        let qp_num = qp.qp_num;
        {
            let mut st = self.conn.st.lock();
            if st.phase != Phase::Requested {
                return Err(Error::NotConnected { verb: "accept", qp_num, state: "the requester went away" });
            }
            qp.limit_initiator_depth(st.peer_responder_resources);
            st.qp = Some(qp);
            st.phase = Phase::Established;
            self.conn.end_handshake(&mut st);
            let mut h = Header::new(FrameType::Accept);
            h.len = private_data.len() as u32;
            h.aux = cm_params(&init).to_aux();
            // Same-host path: the requester offered; this end opens its stream to the
            // requester's device and offers its own in the accept.
            let peer = st.peer_offer.take();
            if let Some((ep, peer)) = self.dev.shared.shm.as_ref().zip(peer).filter(|(ep, p)| ep.same_boot(p)) {
                self.conn.set_same_host(ep.connect(&peer));
                offer_same_host(&self.dev.shared, self.conn.id, &mut st, &mut h);
            }
            st.push_out(OutFrame::new(&h, Tail::Bytes(private_data.to_vec())));
            self.conn.flush_from_user(&mut st);
            st.event(NicCmEvent::Established { conn: self.conn.id, private_data: Vec::new() });
        }
        Ok(Box::new(SoftQp::new(self.conn.clone(), init, self.dev.clone(), Some(self.channel.clone()))))
    }
    fn reject(self: Box<Self>, private_data: &[u8]) -> Result<()> {
        reject_conn(&self.conn, private_data);
        Ok(())
    }
}

/// Offers this device's same-host path in the CM frame `h` (its token and boot identity, and a
/// fresh nonce that `st` remembers), unless the path is off or too many offers are outstanding.
fn offer_same_host(shared: &Shared, conn: ConnId, st: &mut ConnState, h: &mut Header) {
    if let Some(offer) = shared.shm.as_ref().and_then(|ep| ep.offer(conn)) {
        st.shm_nonce = offer.nonce;
        offer.stamp(h);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handshakes_are_limited_per_source_and_in_total_and_slots_come_back() {
        let source = |i: usize| IpAddr::from([10, (i >> 16) as u8, (i >> 8) as u8, i as u8]);
        let mut h = Handshakes::default();
        for _ in 0..MAX_PENDING_HANDSHAKES_PER_SOURCE {
            assert!(h.admit(source(0)));
        }
        assert!(!h.admit(source(0)), "one source over its limit");
        assert!(h.admit(source(1)), "another source is not held up");
        h.release(source(0));
        assert!(h.admit(source(0)), "a slot given back is taken again");

        let mut h = Handshakes::default();
        let per = MAX_PENDING_HANDSHAKES_PER_SOURCE;
        for i in 0..MAX_PENDING_HANDSHAKES {
            assert!(h.admit(source(i / per)), "handshake {i}");
        }
        assert!(!h.admit(source(MAX_PENDING_HANDSHAKES)), "a new source over the total limit");
        h.release(source(3));
        assert!(h.admit(source(MAX_PENDING_HANDSHAKES)));
        for i in 0..MAX_PENDING_HANDSHAKES {
            h.release(source(i / per));
        }
        assert_eq!((h.total, h.by_source.len()), (1, 1), "released slots leave nothing behind");
    }
}
