//! Queue pairs connected by hand, without the connection manager: creating one in RESET (the
//! device's data port is made with the first), its endpoint, its state, and its moves through
//! INIT, RTR and RTS, from user threads.
//!
//! At RTR the end with the larger (GID, LID, queue pair number) dials the data port its peer's
//! endpoint names and opens the stream with a hello; the other end's NIC thread binds that
//! stream to it if the hello is exactly the one its peer's endpoint predicts (`nic/`). From
//! then on the stream is an RC connection like one the connection manager made: RNR, flushes,
//! disconnects, the remote checks and the same-host path work as there. RTS sends the peer
//! this end's RNR retries (the peer applies them to this end's SENDs).
//!
//! The endpoint names the device's data port: the GID is the device's address IPv4-mapped (or
//! IPv6), the LID the data port's port, the port 1, the MTU 4096, the PSN random (24 bits).
//! The hello names both queue pairs by number and PSN (and carries the same-host offer, as a
//! CONNECT_REQ does); a hello for a queue pair not yet in RTR waits for it. INIT's access flags
//! bound what the peer may do; the READ depths are RTR's `max_dest_rd_atomic` and RTS's
//! `max_rd_atomic`, not negotiated (as on verbs). Requests posted in RTS before the stream is
//! bound wait in the send queue; if it is not bound within RTS's `timeout` and `retry_count`
//! (4.096 µs × 2^timeout per try, at most 30 s; `timeout` 0 takes the 30 s) they fail with
//! `TransportRetryExceeded` and the queue pair goes to ERROR, as requests nobody answers do. A
//! dialer whose stream is refused or lost before it is bound does not dial again, so a peer
//! must reach RTR within the handshake timeout of this end's RTR, as the seed programs' flow
//! does. The data port's streams count as connect handshakes (64 per source, 1,024 in all,
//! 5 s); a malformed or unmatched hello is closed and counted (`rejected_hellos`). As on RDMA,
//! the numbers and PSNs are the only credential: whoever knows both endpoints can open the
//! stream first. A device bound to the unspecified address names it in its GID, which reaches
//! it from its own host only.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::Arc;

use mio::unix::SourceFd;
use mio::Interest;
use rand::RngExt;
use socket2::{Domain, Protocol, Socket, Type};

use super::conn::{
    data_port_of, gid_of, transport_wait, Conn, ConnState, FramePayload, HandState, OutFrame, Phase, QpState,
};
use super::connections::{Connections, DataPort};
use super::device::{DeviceState, NicCommand};
use super::hello::Hello;
use super::hello_streams::DATA_PORT_TOKEN;
use super::timers::TimerKind;
use super::wire::{CmParams, FrameType, Header, HELLO_LEN};
use super::SoftQpInit;
use crate::bootstrap::MAX_24_BIT_FIELD;
use crate::bootstrap::{InitAttr, PathMtu, QpEndpoint, QpState as IbvState, QpTransition, RtrAttr, RtsAttr};
use crate::error::{Error, Result};
use crate::types::Access;

/// The verb errors name.
const VERB: &str = "modify_qp";

/// Creates the connection of a queue pair connected by hand, in RESET, with `init`'s objects:
/// its endpoint names the device's data port (made now if this is the first) and a random
/// first PSN.
pub(crate) fn create(device: &Arc<DeviceState>, conns: &Connections, init: &SoftQpInit) -> Result<Arc<Conn>> {
    let mut qp = QpState::of(init, device, "create_qp")?;
    let port = data_port(device, conns)?;
    let psn = rand::rng().random_range(0..=MAX_24_BIT_FIELD);
    qp.next_psn = psn;
    let local =
        QpEndpoint { qp_num: qp.qp_num, psn, port: 1, lid: port.port(), gid: gid_of(port.ip()), mtu: PathMtu::Mtu4096 };
    let conn = Conn::by_hand(device.clone(), port, qp, HandState::new(local));
    conns.open.lock().insert(conn.id, conn.clone());
    conns.by_hand.lock().insert(local.qp_num, conn.id);
    Ok(conn)
}

/// The device's data port, made on first use: a TCP listener on the device's address, polled
/// by the NIC thread.
fn data_port(device: &DeviceState, conns: &Connections) -> Result<SocketAddr> {
    let mut slot = conns.data_port.lock();
    if let Some(port) = slot.as_ref() {
        return Ok(port.addr);
    }
    let bind = SocketAddr::new(device.addr, 0);
    let os = |what, e| Error::os_local(what, bind, e);
    let sock = Socket::new(Domain::for_address(bind), Type::STREAM, Some(Protocol::TCP))
        .map_err(|e| os("create_qp: data port socket", e))?;
    sock.bind(&bind.into()).map_err(|e| os("create_qp: data port bind", e))?;
    sock.listen(1024).map_err(|e| os("create_qp: data port listen", e))?;
    sock.set_nonblocking(true).map_err(|e| os("create_qp: data port O_NONBLOCK", e))?;
    let sock: TcpListener = sock.into();
    let addr = sock.local_addr().map_err(|e| os("create_qp: data port getsockname", e))?;
    device
        .registry
        .register(&mut SourceFd(&sock.as_raw_fd()), DATA_PORT_TOKEN, Interest::READABLE)
        .map_err(|e| os("create_qp: data port epoll_ctl", e))?;
    *slot = Some(Arc::new(DataPort { sock, addr }));
    Ok(addr)
}

/// The endpoint of a queue pair connected by hand.
pub(crate) fn local_endpoint(conn: &Conn) -> Result<QpEndpoint> {
    let st = conn.st.lock();
    st.hand.as_ref().map(|h| h.local).ok_or_else(cm_made)
}

/// The state of a queue pair connected by hand (ERROR once it failed); RTS for one the
/// connection manager made.
pub(crate) fn state(conn: &Conn) -> IbvState {
    state_of(&conn.st.lock())
}

fn state_of(st: &ConnState) -> IbvState {
    match (&st.qp, &st.hand) {
        (Some(qp), _) if qp.error => IbvState::Error,
        (None, _) => IbvState::Error,
        (Some(_), Some(hand)) => hand.state,
        (Some(_), None) => IbvState::ReadyToSend,
    }
}

/// Makes one move of a queue pair connected by hand (checked again here, under the lock: the
/// NIC thread may have failed the queue pair since the handle checked).
pub(crate) fn modify(conn: &Arc<Conn>, transition: &QpTransition) -> Result<()> {
    let mut st = conn.st.lock();
    if st.hand.is_none() {
        return Err(cm_made());
    }
    transition.check(state_of(&st), &conn.device.attrs)?;
    match transition {
        QpTransition::Init(a) => init(&mut st, a),
        QpTransition::ReadyToReceive(a) => ready_to_receive(conn, &mut st, a),
        QpTransition::ReadyToSend(a) => {
            ready_to_send(conn, &mut st, a);
            Ok(())
        }
        QpTransition::Error => {
            st.qp_error();
            Ok(())
        }
    }
}

/// A request was posted on a queue pair connected by hand whose stream is not up: unless the
/// stream is bound within the transport wait (RTS's timeout and retry count), the requests
/// fail with retry exceeded (the NIC thread's timer keeps the first deadline).
pub(crate) fn request_waits(conn: &Conn, st: &ConnState) {
    if st.phase != Phase::Unbound {
        return;
    }
    let Some(hand) = st.hand.as_ref() else { return };
    let at = crate::time::deadline_after(hand.transport_wait);
    conn.device.command(NicCommand::Timer(at, conn.id, TimerKind::TransportTimeout));
}

fn cm_made() -> Error {
    Error::invalid(VERB, "this queue pair was connected by the connection manager")
}

/// RESET → INIT: the port (the device has one) and what the peer may do to this end's memory.
fn init(st: &mut ConnState, a: &InitAttr) -> Result<()> {
    if a.port != 1 {
        return Err(Error::invalid(VERB, format!("port {}: the soft device has one port, 1", a.port)));
    }
    let remote = Access::REMOTE_READ.bits() | Access::REMOTE_WRITE.bits();
    if let Some(qp) = st.qp.as_mut() {
        qp.remote_access = Access::from_bits_truncate(a.access.bits() & remote);
    }
    set_state(st, IbvState::Init);
    Ok(())
}

/// INIT → RTR: the peer, the READs this end serves, its RNR timer; the end that dials opens
/// the stream, the other has its NIC look for the peer's stream (it may be waiting already).
fn ready_to_receive(conn: &Arc<Conn>, st: &mut ConnState, a: &RtrAttr) -> Result<()> {
    let remote = a.remote;
    let Some(peer) = data_port_of(&remote) else {
        return Err(Error::invalid(VERB, "the remote endpoint's LID 0 names no soft data port"));
    };
    let Some(hand) = st.hand.as_mut() else { return Err(cm_made()) };
    let local = hand.local;
    let dials = HandState::dials_between(&local, &remote);
    // The only step that may fail (no socket): before anything changes.
    let stream = if dials { dial(peer)? } else { None };
    hand.remote = Some(remote);
    hand.state = IbvState::ReadyToReceive;
    if let Some(qp) = st.qp.as_mut() {
        qp.min_rnr_timer = a.min_rnr_timer;
        qp.responder_resources = a.max_dest_rd_atomic.into();
    }
    conn.set_peer(peer);
    match stream {
        Some(stream) => open_stream(conn, st, stream, Hello::between(&local, &remote)),
        None if !dials => conn.device.command(NicCommand::ReadyToReceive(conn.id)),
        None => {}
    }
    Ok(())
}

/// RTR → RTS: the READs this end may have outstanding and how long a request waits for the
/// stream; the peer learns this end's RNR retries (and READ depths) from a READY frame, queued
/// before any request can be.
fn ready_to_send(conn: &Conn, st: &mut ConnState, a: &RtsAttr) {
    let Some(qp) = st.qp.as_mut() else { return };
    qp.initiator_depth = a.max_rd_atomic.into();
    let params = CmParams {
        rnr_retry: a.rnr_retry,
        initiator_depth: a.max_rd_atomic,
        responder_resources: qp.responder_resources.try_into().unwrap_or(u8::MAX),
    };
    if let Some(hand) = st.hand.as_mut() {
        hand.transport_wait = transport_wait(a);
    }
    set_state(st, IbvState::ReadyToSend);
    let mut h = Header::new(FrameType::Ready);
    h.aux = params.to_aux();
    if st.push_out(OutFrame::new(&h, FramePayload::None)) {
        conn.flush_from_user(st);
    }
}

fn set_state(st: &mut ConnState, state: IbvState) {
    if let Some(hand) = st.hand.as_mut() {
        hand.state = state;
    }
}

/// Starts a non-blocking connect to the peer's data port. `Err` when no socket can be made;
/// `None` when the connect failed at once (the peer is not there: requests will time out, as
/// unanswered ones do).
fn dial(peer: SocketAddr) -> Result<Option<TcpStream>> {
    let os = |what, e| Error::os(what, Some(peer), e);
    let sock = Socket::new(Domain::for_address(peer), Type::STREAM, Some(Protocol::TCP))
        .map_err(|e| os("modify_qp: socket", e))?;
    sock.set_nonblocking(true).map_err(|e| os("modify_qp: O_NONBLOCK", e))?;
    sock.set_nodelay(true).map_err(|e| os("modify_qp: TCP_NODELAY", e))?;
    match sock.connect(&peer.into()) {
        Ok(()) => Ok(Some(sock.into())),
        Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => Ok(Some(sock.into())),
        Err(e) => {
            tracing::debug!("soft: dialing the data port {peer}: {e}");
            Ok(None)
        }
    }
}

/// Gives the dialing end its stream, the hello first in it (with this device's same-host
/// offer), and has the NIC thread finish the connect.
fn open_stream(conn: &Conn, st: &mut ConnState, stream: TcpStream, hello: Hello) {
    if !conn.attach_stream(stream) {
        return;
    }
    let mut h = Header::new(FrameType::Hello);
    h.len = HELLO_LEN as u32;
    conn.offer_same_host(st, &mut h);
    st.push_out(OutFrame::new(&h, FramePayload::Bytes(hello.encode().to_vec())));
    if let Err(e) = conn.register(st, true) {
        tracing::debug!("soft: polling the stream to {}: {e}", conn.peer());
        conn.abandon_stream(st);
    }
}
