//! The connection manager: event channels, listeners, connect, accept and reject.

use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use mio::unix::SourceFd;
use mio::{Interest, Token};
use socket2::{Domain, Protocol, Socket, Type};

use super::conn::{
    connect_failure, reject_conn, Conn, FramePayload, IncomingRequest, NicCmEvent, OutFrame, Phase, QpState,
};
use super::connections::{Connections, ListenerEntry};
use super::device::{Device, NicCommand, LISTENER_BIT};
use super::events::EventQueue;
use super::qp::SoftQp;
use super::timers::TimerKind;
use super::wire::{CmParams, FrameType, Header};
use super::SoftQpInit;
use crate::cm_event::CmEventOf;
use crate::error::{Error, Result};
use crate::types::ConnId;

/// What this end's CONNECT_REQ or ACCEPT tells the peer.
fn cm_params(init: &SoftQpInit) -> CmParams {
    CmParams {
        rnr_retry: init.rnr_retry,
        initiator_depth: init.initiator_depth,
        responder_resources: init.responder_resources,
    }
}

/// An event channel.
pub(crate) struct SoftChannel {
    inner: Arc<EventQueue<NicCmEvent>>,
    dev: Arc<Device>,
    conns: Arc<Connections>,
}

impl SoftChannel {
    /// A channel of `dev`, whose connections and listeners go into `conns`.
    pub(crate) fn new(dev: Arc<Device>, conns: Arc<Connections>) -> Self {
        SoftChannel { inner: Arc::new(EventQueue::new()), dev, conns }
    }

    /// Listens on `addr` (port 0 picks a free port).
    pub(crate) fn listen(&self, addr: SocketAddr, backlog: u32) -> Result<SoftListener> {
        let device = &self.dev.state;
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
        let id = device.next_id();
        let entry = Arc::new(ListenerEntry { sock: listener, channel: self.inner.clone() });
        self.conns.listeners.lock().insert(id, entry.clone());
        let fd = std::os::fd::AsRawFd::as_raw_fd(&entry.sock);
        if let Err(e) =
            device.registry.register(&mut SourceFd(&fd), Token(LISTENER_BIT | id as usize), Interest::READABLE)
        {
            self.conns.listeners.lock().remove(&id);
            return Err(Error::os("listen: epoll_ctl", None, e));
        }
        Ok(SoftListener { id, local, dev: self.dev.clone(), conns: self.conns.clone() })
    }

    /// Resolves `addr`, creates the queue pair and sends a connect request. The outcome
    /// (established, rejected, unreachable) arrives as an event with the queue pair's conn id.
    pub(crate) fn connect(
        &self,
        addr: SocketAddr,
        init: SoftQpInit,
        private_data: &[u8],
        timeout: Duration,
    ) -> Result<SoftQp> {
        let device = &self.dev.state;
        let qp = QpState::of(&init, device, "connect")?;
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
        let conn = Conn::new(device.clone(), stream, addr, Phase::Connecting, Some(qp), Some(self.inner.clone()));
        {
            let mut st = conn.st.lock();
            if let Some(e) = failed {
                st.phase = Phase::Closed;
                self.inner.push(connect_failure(conn.id, addr, &e));
            } else {
                let mut h = Header::new(FrameType::ConnectReq);
                h.len = private_data.len() as u32;
                h.aux = cm_params(&init).to_aux();
                conn.offer_same_host(&mut st, &mut h);
                st.push_out(OutFrame::new(&h, FramePayload::Bytes(private_data.to_vec())));
                self.conns.open.lock().insert(conn.id, conn.clone());
                if let Err(e) = conn.register(&mut st, true) {
                    self.conns.open.lock().remove(&conn.id);
                    if let Some(ep) = &device.shm {
                        ep.withdraw(st.shm_nonce);
                    }
                    return Err(Error::os("connect: epoll_ctl", Some(addr), e));
                }
                device.command(NicCommand::Timer(
                    crate::time::deadline_after(timeout),
                    conn.id,
                    TimerKind::ConnectTimeout,
                ));
            }
        }
        Ok(SoftQp::new(conn, init, self.dev.clone(), Some(self.inner.clone())))
    }

    /// Waits up to `timeout` for the next event.
    pub(crate) fn get_event(&self, timeout: Duration) -> Result<Option<CmEventOf<SoftConnRequest>>> {
        let Some(ev) = self.inner.next(crate::time::deadline_after(timeout)) else { return Ok(None) };
        Ok(Some(ev.map_request(|IncomingRequest { conn, data }| SoftConnRequest {
            conn,
            data,
            channel: self.inner.clone(),
            dev: self.dev.clone(),
        })))
    }
}

impl Drop for SoftChannel {
    fn drop(&mut self) {
        self.inner.close();
    }
}

/// A listening socket; dropping it stops listening.
pub(crate) struct SoftListener {
    id: u64,
    local: SocketAddr,
    dev: Arc<Device>,
    conns: Arc<Connections>,
}

impl SoftListener {
    /// The bound address (with the port picked).
    pub(crate) fn local_addr(&self) -> SocketAddr {
        self.local
    }
}

impl Drop for SoftListener {
    fn drop(&mut self) {
        let device = &self.dev.state;
        if let Some(entry) = self.conns.listeners.lock().remove(&self.id) {
            let fd = std::os::fd::AsRawFd::as_raw_fd(&entry.sock);
            let _ = device.registry.deregister(&mut SourceFd(&fd));
        }
    }
}

/// A delivered connect request.
pub(crate) struct SoftConnRequest {
    conn: Arc<Conn>,
    data: Vec<u8>,
    channel: Arc<EventQueue<NicCmEvent>>,
    dev: Arc<Device>,
}

impl SoftConnRequest {
    /// The connection id that later events about this connection carry.
    pub(crate) fn conn_id(&self) -> ConnId {
        self.conn.id
    }
    /// The requester's private data.
    pub(crate) fn private_data(&self) -> &[u8] {
        &self.data
    }
    /// The requester's address.
    pub(crate) fn peer_addr(&self) -> SocketAddr {
        self.conn.peer()
    }
    /// Creates the queue pair and accepts with `private_data`.
    pub(crate) fn accept(self, init: SoftQpInit, private_data: &[u8]) -> Result<SoftQp> {
        let mut qp = QpState::of(&init, &self.dev.state, "accept")?;
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
            if let Some((ep, peer)) = self.dev.state.shm.as_ref().zip(peer).filter(|(ep, p)| ep.same_boot(p)) {
                self.conn.set_same_host(ep.connect(&peer));
                self.conn.offer_same_host(&mut st, &mut h);
            }
            st.push_out(OutFrame::new(&h, FramePayload::Bytes(private_data.to_vec())));
            self.conn.flush_from_user(&mut st);
            st.event(NicCmEvent::Established { conn: self.conn.id, private_data: Vec::new() });
        }
        Ok(SoftQp::new(self.conn.clone(), init, self.dev.clone(), Some(self.channel.clone())))
    }
    /// Rejects with `private_data`.
    pub(crate) fn reject(self, private_data: &[u8]) -> Result<()> {
        reject_conn(&self.conn, private_data);
        Ok(())
    }
}
