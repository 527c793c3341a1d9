//! One RC connection (a TCP stream) shared by the NIC thread and the user's queue pair: its
//! lock-guarded state (phase, output queue, queue pair, same-host inbox), writing its output
//! queue to the socket, the CM events it produces and, on the same-host path, the copies and
//! inbox SENDs it executes.

mod by_hand;
mod out_queue;
mod phase;
mod qp_state;
mod receive;
mod responses;
mod sends;

use std::io;
use std::net::{SocketAddr, TcpStream};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::OnceLock;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use mio::unix::SourceFd;
use mio::{Interest, Token};
use parking_lot::Mutex;

pub(crate) use by_hand::{data_port_of, gid_of, transport_wait, HandState};
pub(crate) use out_queue::{FramePayload, OutFrame};
pub use out_queue::{OUT_CAP, OUT_RESUME};
pub(crate) use phase::Phase;
pub(crate) use qp_state::{rdma_header, InFlight, LocalOp, QpState};
pub(crate) use receive::{AfterPayload, Destination, Expecting, ReceiveState, RX_BUF};
pub(crate) use responses::{finish_read_response, on_ack, on_read_response};
#[cfg(test)]
pub(crate) use responses::{POLLED_READ_MAX, POLLED_SEND_MAX};
pub(crate) use sends::{finish_recv, place_send, reply};

use super::cq::{BellSeat, Drain, InboxSource};
use super::device::SoftCounters;
use super::device::{DeviceState, NicCommand};
use super::events::{ChannelEvent, EventQueue};
use super::recv::Taker;
use super::shm::{Corrupt, HeldSlot, Inbox, KeySlot, NoCredit, Offer, ShmClient};
use super::timers::TimerKind;
use super::wire::{FrameType, Header};
use crate::bootstrap::QpState as IbvState;
use crate::cm_event::CmEventOf;
use crate::provider::ConnId;
use crate::types::*;
use out_queue::OutQueue;

/// How long a closing connection waits for the peer to close before it is dropped.
pub(crate) const CLOSE_LINGER: Duration = Duration::from_secs(2);

/// A connect request as the NIC receives it: the requested connection and its private data.
pub(crate) struct IncomingRequest {
    pub(crate) conn: Arc<Conn>,
    pub(crate) data: Vec<u8>,
}

/// A CM event as the NIC produces it (the one CM event type, with the NIC's own request); the
/// channel turns requests into handles. It lives with the connection: a request carries the
/// connection, whose state holds its channel's queue.
pub(crate) type NicCmEvent = CmEventOf<IncomingRequest>;

impl ChannelEvent for NicCmEvent {
    /// A request nobody will take is rejected with no private data.
    fn reject_request(self) {
        if let NicCmEvent::ConnectRequest(request) = self {
            reject_conn(&request.conn, &[]);
        }
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

/// Rejects a requested connection with `data` (nothing happens if it is not waiting).
pub(crate) fn reject_conn(conn: &Conn, data: &[u8]) {
    let mut st = conn.st.lock();
    if st.phase != Phase::Requested {
        return;
    }
    let mut h = Header::new(FrameType::Reject);
    h.len = data.len() as u32;
    st.push_out(OutFrame::new(&h, FramePayload::Bytes(data.to_vec())));
    conn.end_handshake(&mut st);
    st.phase = Phase::Closed;
    st.shut_after_flush = true;
    st.channel = None;
    conn.flush_from_user(&mut st);
    conn.device.command(NicCommand::Timer(Instant::now() + CLOSE_LINGER, conn.id, TimerKind::Close));
}

/// Connection state guarded by the connection's lock.
pub(crate) struct ConnState {
    pub(crate) phase: Phase,
    /// Active side: the TCP handshake finished.
    pub(crate) tcp_up: bool,
    pub(crate) out: OutQueue,
    /// Shut the write side once the output queue drains (after DISCONNECT or REJECT).
    pub(crate) shut_after_flush: bool,
    pub(crate) qp: Option<QpState>,
    /// Where CM events of this connection go.
    pub(crate) channel: Option<Arc<EventQueue<NicCmEvent>>>,
    pub(crate) peer_rnr_retry: u8,
    /// Passive side: RDMA READs of ours the peer serves at once (from its connect request).
    pub(crate) peer_responder_resources: u8,
    /// Passive side: the connection holds one of its source's slots for handshakes in
    /// progress (until it is accepted, rejected or closed).
    pub(crate) handshake_slot: bool,
    /// The nonce this end offered for the peer's same-host stream (0: none).
    pub(crate) shm_nonce: u64,
    /// The peer's same-host offer (passive side, from its connect request).
    pub(crate) peer_offer: Option<Offer>,
    /// Same-host path: the inbox the peer writes its SENDs into (once it asked for it).
    inbox: Option<OpenInbox>,
    /// Same-host path: SENDs this end wrote into the peer's inbox.
    pub(crate) inbox_sends: u64,
    /// Same-host path: this end's key slot for the connection, live while its queue pair
    /// answers the peer's requests (revoked when it fails or closes, so the peer's copies and
    /// SENDs stop as they would at a dead responder).
    live: Option<HeldSlot>,
    /// A queue pair connected by hand: its state machine and endpoints (`None`: the connection
    /// manager made this connection).
    pub(crate) hand: Option<HandState>,
}

/// The inbox a same-host peer writes its SENDs into, with its sender id in the receive
/// list's credits, and the device that counts its violations.
struct OpenInbox {
    inbox: Inbox,
    sender: u64,
    device: Arc<DeviceState>,
    /// The sender's place at the receive CQ's bell (its eventfd leaves the bell with it).
    _seat: BellSeat,
}

impl ConnState {
    /// The state of a new connection in `phase` (its stream is up unless it is connecting or
    /// has none yet).
    fn new(
        phase: Phase,
        qp: Option<QpState>,
        channel: Option<Arc<EventQueue<NicCmEvent>>>,
        hand: Option<HandState>,
    ) -> Self {
        ConnState {
            phase,
            tcp_up: !matches!(phase, Phase::Connecting | Phase::Unbound),
            out: OutQueue::default(),
            shut_after_flush: false,
            qp,
            channel,
            peer_rnr_retry: 0,
            peer_responder_resources: 0,
            handshake_slot: false,
            shm_nonce: 0,
            peer_offer: None,
            inbox: None,
            inbox_sends: 0,
            live: None,
            hand,
        }
    }

    /// Whether the send queue takes requests: an established connection, and a queue pair
    /// connected by hand once it is in RTS (before its stream is up too: the requests wait).
    pub(crate) fn can_post_send(&self) -> bool {
        match (self.phase, &self.hand) {
            (Phase::Established, None) => true,
            (Phase::Established | Phase::Unbound, Some(hand)) => hand.state == IbvState::ReadyToSend,
            _ => false,
        }
    }

    /// Where the queue pair is, as errors name it: its phase, or the state of a queue pair
    /// connected by hand.
    pub(crate) fn state_name(&self) -> &'static str {
        match &self.hand {
            Some(hand) if self.phase != Phase::Closed => hand.name(),
            _ => self.phase.name(),
        }
    }

    /// Queues a frame; returns whether the queue was empty before (the caller then writes).
    pub(crate) fn push_out(&mut self, frame: OutFrame) -> bool {
        self.out.push(frame)
    }

    /// Queues a request of the send queue; returns whether the caller writes now. An RDMA READ
    /// beyond the initiator depth waits in the send queue, and so does every request posted
    /// after it (requests leave in order), until READ responses come back.
    pub(crate) fn push_request(&mut self, frame: OutFrame) -> bool {
        if let Some(qp) = self.qp.as_mut() {
            if !qp.held.is_empty() || (frame.is_read_request() && qp.reads_out >= qp.initiator_depth) {
                qp.held.push_back(frame);
                return false;
            }
            qp.reads_out += u32::from(frame.is_read_request());
        }
        self.out.push(frame)
    }

    /// One of this end's READs was answered: the requests waiting behind the initiator depth
    /// go out, in order, as far as it allows.
    pub(crate) fn read_answered(&mut self) {
        let ConnState { qp: Some(qp), out, .. } = self else { return };
        qp.reads_out = qp.reads_out.saturating_sub(1);
        while let Some(f) = qp.held.front() {
            if f.is_read_request() && qp.reads_out >= qp.initiator_depth {
                break;
            }
            let f = qp.held.pop_front().expect("front checked");
            qp.reads_out += u32::from(f.is_read_request());
            out.push(f);
        }
    }

    /// Queues the frame that opens a stream ahead of everything queued before it was up.
    pub(crate) fn push_first(&mut self, frame: OutFrame) {
        self.out.push_first(frame);
    }

    /// Whether frames wait to be written.
    pub(crate) fn has_output(&self) -> bool {
        !self.out.is_empty()
    }

    /// Drops queued requests not yet started (a failed or disconnected queue pair must not
    /// execute them at the peer); a partly written frame stays to keep the stream framed.
    pub(crate) fn drop_unsent_requests(&mut self) {
        self.out.retain(|f| !f.is_request());
    }

    /// Drops all queued output but a partly written frame.
    pub(crate) fn clear_output(&mut self) {
        self.out.retain(|_| false);
    }

    /// Moves the queue pair to the error state: later and outstanding requests are flushed.
    pub(crate) fn qp_error(&mut self) {
        self.drop_unsent_requests();
        self.fail_qp(WcStatus::WorkRequestFlushed);
    }

    /// Moves the queue pair to the error state after placing the SENDs its inbox holds (they
    /// completed at the sender, as SENDs the responder acknowledged), then flushes outstanding
    /// send requests with `send_status` and every receive.
    pub(crate) fn fail_qp(&mut self, send_status: WcStatus) {
        self.drain_inbox();
        self.live = None;
        if let Some(qp) = self.qp.as_mut() {
            qp.error = true;
            qp.flush(send_status);
        }
    }

    /// Places the SENDs waiting in the inbox into posted receives, in order, completing each
    /// receive. Returns whether some wait for a receive. A SEND larger than its receive fails
    /// the receive and the queue pair, as on the network path; an inbox found corrupt (the
    /// peer wrote garbage into it) is dropped and the queue pair fails.
    pub(crate) fn drain_inbox(&mut self) -> bool {
        let ConnState { inbox: Some(open), qp: Some(qp), .. } = self else { return false };
        if qp.error || !open.inbox.has_entries() {
            return false;
        }
        let mut violation = false;
        loop {
            let entry = match open.inbox.peek() {
                Ok(Some(entry)) => entry,
                Ok(None) => return false,
                Err(Corrupt) => {
                    violation = true;
                    break;
                }
            };
            let recv = match qp.take_recv(Taker::Inbox(open.sender)) {
                Ok(Some(recv)) => recv,
                // The credit's receive was flushed.
                Ok(None) => break,
                Err(NoCredit) => {
                    violation = true;
                    break;
                }
            };
            if recv.cap < entry.len as usize || !open.inbox.copy_to(&entry, &recv.segs) {
                open.inbox.consume(&entry);
                qp.complete_recv(recv.wr_id, WcStatus::LocalLengthError, 0, None);
                break;
            }
            open.inbox.consume(&entry);
            qp.complete_recv_solicited(recv.wr_id, WcStatus::Success, entry.len, entry.imm, entry.solicited);
        }
        if violation {
            tracing::debug!("soft same-host: the peer of queue pair {} broke its inbox or credits: cut", qp.qp_num);
            SoftCounters::bump(&open.device.counters.shared_page_violations);
        } else {
            tracing::debug!("soft same-host: an inbox SEND of queue pair {} cannot be placed", qp.qp_num);
        }
        self.drop_inbox();
        self.qp_error();
        false
    }

    /// Drops the inbox, giving its sender's unused credits back to the receive list.
    fn drop_inbox(&mut self) {
        if let (Some(open), Some(qp)) = (self.inbox.take(), self.qp.as_mut()) {
            qp.detach_sender(open.sender);
        }
    }

    /// The sender id of the peer's inbox when it holds no SEND: a SEND of the stream may then
    /// take that sender's unused credits back.
    pub(crate) fn idle_sender(&self) -> Option<u64> {
        self.inbox.as_ref().filter(|o| !o.inbox.has_entries()).map(|o| o.sender)
    }

    /// Sends a CM event to the connection's channel.
    pub(crate) fn event(&self, ev: NicCmEvent) {
        if let Some(ch) = &self.channel {
            ch.push(ev);
        }
    }
}

impl InboxSource for Conn {
    fn drain(&self) -> Drain {
        let mut st = self.st.lock();
        if st.inbox.is_none() || st.phase == Phase::Closed {
            return Drain::Gone;
        }
        if st.drain_inbox() {
            Drain::Waiting
        } else {
            Drain::Done
        }
    }
}

/// A connection shared by the NIC thread and the user's queue pair.
pub(crate) struct Conn {
    pub(crate) id: ConnId,
    /// The stream (set once: at creation, or for a queue pair connected by hand when it dials
    /// or its peer's stream is bound to it).
    sock: OnceLock<TcpStream>,
    pub(crate) device: Arc<DeviceState>,
    /// The peer's address (a queue pair connected by hand learns it at RTR).
    peer: OnceLock<SocketAddr>,
    pub(crate) local: SocketAddr,
    pub(crate) st: Mutex<ConnState>,
    /// Receive state: used by the NIC thread, and by a thread polling an empty CQ that takes
    /// its READ responses itself (`responses.rs`, with `try_lock`) (lock order: `rx` before
    /// `st`).
    pub(crate) rx: Mutex<ReceiveState>,
    /// Same-host path: this end's stream to the peer's device and what it mapped of the peer,
    /// when both ends share a host (set once, before the connection is established; the client
    /// locks inside, never while it waits for the peer).
    pub(crate) shm: OnceLock<ShmClient>,
}

impl Conn {
    /// A connection of the connection manager over `sock`.
    pub(crate) fn new(
        device: Arc<DeviceState>,
        sock: TcpStream,
        peer: SocketAddr,
        phase: Phase,
        qp: Option<QpState>,
        channel: Option<Arc<EventQueue<NicCmEvent>>>,
    ) -> Arc<Conn> {
        let local = sock.local_addr().unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)));
        let st = ConnState::new(phase, qp, channel, None);
        Conn::with(device, OnceLock::from(sock), OnceLock::from(peer), local, st)
    }

    /// The connection of a queue pair connected by hand, made with it in RESET: no stream and
    /// no peer yet; `local` is its device's data port.
    pub(crate) fn by_hand(device: Arc<DeviceState>, local: SocketAddr, qp: QpState, hand: HandState) -> Arc<Conn> {
        let st = ConnState::new(Phase::Unbound, Some(qp), None, Some(hand));
        Conn::with(device, OnceLock::new(), OnceLock::new(), local, st)
    }

    /// A connection with a fresh id, made of its parts.
    fn with(
        device: Arc<DeviceState>,
        sock: OnceLock<TcpStream>,
        peer: OnceLock<SocketAddr>,
        local: SocketAddr,
        st: ConnState,
    ) -> Arc<Conn> {
        Arc::new(Conn {
            id: device.next_id(),
            sock,
            device,
            peer,
            local,
            st: Mutex::new(st),
            rx: Mutex::new(ReceiveState::new()),
            shm: OnceLock::new(),
        })
    }

    /// The stream, once there is one.
    pub(crate) fn sock(&self) -> Option<&TcpStream> {
        self.sock.get()
    }

    /// Gives a queue pair connected by hand its stream; false if it has one already.
    pub(crate) fn attach_stream(&self, sock: TcpStream) -> bool {
        self.sock.set(sock).is_ok()
    }

    /// The peer's address (unspecified until a queue pair connected by hand is in RTR).
    pub(crate) fn peer(&self) -> SocketAddr {
        self.peer.get().copied().unwrap_or_else(|| SocketAddr::from(([0, 0, 0, 0], 0)))
    }

    /// Sets the peer's address of a queue pair connected by hand (at RTR; once).
    pub(crate) fn set_peer(&self, peer: SocketAddr) {
        let _ = self.peer.set(peer);
    }

    /// Closes the stream of a queue pair connected by hand that was never bound (the peer
    /// refused it, the connect failed, it broke, or requests waited too long): the queue pair
    /// stays unbound, and what was queued for the stream is dropped.
    pub(crate) fn abandon_stream(&self, st: &mut ConnState) {
        self.deregister();
        self.shutdown();
        st.clear_output();
        st.tcp_up = false;
        if let Some(ep) = &self.device.shm {
            ep.withdraw(std::mem::take(&mut st.shm_nonce));
        }
    }

    /// Offers this device's same-host path in the frame `h` that opens the connection
    /// (CONNECT_REQ, ACCEPT, a hello): its token and boot identity, and a fresh nonce that `st`
    /// remembers; unless the path is off or too many offers are outstanding.
    pub(crate) fn offer_same_host(&self, st: &mut ConnState, h: &mut Header) {
        if let Some(offer) = self.device.shm.as_ref().and_then(|ep| ep.offer(self.id)) {
            st.shm_nonce = offer.nonce;
            offer.stamp(h);
        }
    }

    /// Whether this end's READs and WRITEs take the same-host path.
    pub(crate) fn same_host(&self) -> bool {
        self.shm.get().is_some()
    }

    /// Makes this end take the same-host path (at connection set-up, under `st`).
    pub(crate) fn set_same_host(&self, client: Option<ShmClient>) {
        if let Some(client) = client {
            let _ = self.shm.set(client);
        }
    }

    /// Ends the same-host path, unmapping the peer's regions (the connection closed).
    pub(crate) fn drop_same_host(&self, st: &mut ConnState) {
        st.drop_inbox();
        st.live = None;
        if let Some(client) = self.shm.get() {
            client.close();
        }
    }

    /// Opens this end's inbox for the peer's SENDs (once, on a live queue pair) and
    /// makes polls of the receive CQ drain it: the descriptors of the inbox, the peer's credit
    /// page (read-only), and its place at the CQ's bell (the owner page, read-only, the hint
    /// page and the peer's own eventfd), for the peer to map.
    pub(crate) fn open_inbox(self: &Arc<Self>) -> Option<([OwnedFd; 5], KeySlot)> {
        let (fds, cq, live) = {
            let mut st = self.st.lock();
            if st.inbox.is_some() {
                return None;
            }
            let live = self.responder_slot(&mut st)?;
            let qp = st.qp.as_mut().filter(|q| !q.error)?;
            let cq = qp.recv_cq.clone();
            let inbox = Inbox::new().ok()?;
            let inbox_fd = inbox.fd().try_clone_to_owned().ok()?;
            let (bell, seat) = cq.seat()?;
            let (sender, credits) = qp.attach_sender()?;
            st.inbox = Some(OpenInbox { inbox, sender, device: self.device.clone(), _seat: seat });
            ([inbox_fd, credits, bell.owner, bell.hint, bell.event], cq, live)
        };
        let source: Weak<dyn InboxSource> = Arc::downgrade(self) as Weak<Conn>;
        cq.attach(source);
        Some((fds, live))
    }

    /// This end's key slot for the connection (published on first use): `None` once the queue
    /// pair failed or closed, or when the key table is full.
    pub(crate) fn responder_slot(&self, st: &mut ConnState) -> Option<KeySlot> {
        // Not necessarily established yet here: the peer may ask as soon as its end is, before
        // this end's NIC thread has read the frame that establishes it.
        let qp = st.qp.as_ref().filter(|q| !q.error && st.phase != Phase::Closed)?;
        if st.live.is_none() {
            let ep = self.device.shm.as_ref()?;
            st.live = Some(HeldSlot::publish(&ep.keys, qp.qp_num)?);
        }
        st.live.as_ref().map(HeldSlot::slot)
    }

    /// Executes and retires the same-host requests now at the front of the send queue (every
    /// request before them has completed), after placing the SENDs the peer completed before
    /// (a copy may see what the peer did after them). One refused for its access goes to the
    /// peer's NIC to judge (so the responder's queue pair fails, as on the network), unless a
    /// later request is on the wire already: then, like any other failed one, it fails here and
    /// puts the queue pair in the error state, after the SENDs that arrived during it.
    pub(crate) fn run_local_front(&self, st: &mut ConnState) {
        st.drain_inbox();
        let Some(client) = self.shm.get() else { return };
        loop {
            let Some(qp) = st.qp.as_mut() else { return };
            let Some(op) = qp.inflight.front().and_then(|f| f.local) else { return };
            let mut f = qp.inflight.pop_front().expect("front checked");
            let status = client.copy(op.rkey, op.addr, &f.dest, op.read);
            if status.is_success() {
                qp.retire(f, status);
                continue;
            }
            // Only while nothing after it has gone on the wire: a frame sent now must be
            // answered before theirs, or their answers would find it first.
            let nothing_sent_after = qp.held.is_empty() && qp.inflight.iter().all(|g| g.local.is_some());
            if status == WcStatus::RemoteAccessError && nothing_sent_after {
                // The peer's NIC judges the request, as on the network path: it refuses it (and
                // its queue pair goes to the error state, as a responder's does) or, when the
                // region became valid meanwhile, executes it.
                let frame = qp.network_request(&mut f, op);
                qp.inflight.push_front(f);
                if st.push_request(frame) {
                    self.flush_from_user(st);
                }
                return;
            }
            st.drain_inbox();
            if let Some(qp) = st.qp.as_mut() {
                qp.retire(f, status);
            }
            st.qp_error();
            return;
        }
    }

    /// Gives back the connection's slot for handshakes in progress from its source, if it
    /// holds one (it was accepted, rejected or closed).
    pub(crate) fn end_handshake(&self, st: &mut ConnState) {
        if std::mem::take(&mut st.handshake_slot) {
            self.device.handshakes.lock().release(self.id);
        }
    }

    /// The poll token of this connection.
    pub(crate) fn token(&self) -> Token {
        Token(self.id as usize)
    }

    /// Registers the socket with the NIC's poll (readable, and writable when `writable`).
    pub(crate) fn register(&self, st: &mut ConnState, writable: bool) -> io::Result<()> {
        let sock = self.sock().ok_or_else(|| io::Error::from(io::ErrorKind::NotConnected))?;
        st.out.write_armed = writable;
        let interest = if writable { Interest::READABLE | Interest::WRITABLE } else { Interest::READABLE };
        self.device.registry.register(&mut SourceFd(&sock.as_raw_fd()), self.token(), interest)
    }

    /// Removes the socket from the NIC's poll.
    pub(crate) fn deregister(&self) {
        if let Some(sock) = self.sock() {
            let _ = self.device.registry.deregister(&mut SourceFd(&sock.as_raw_fd()));
        }
    }

    /// Shuts the stream down both ways, if there is one (the peer sees it end).
    pub(crate) fn shutdown(&self) {
        if let Some(sock) = self.sock() {
            let _ = sock.shutdown(std::net::Shutdown::Both);
        }
    }

    /// Writes queued frames until the socket is full or the queue is empty (non-blocking),
    /// then asks for WRITABLE events only while something is left. Returns whether this ended
    /// a pause of reading (the NIC must then read the connection again).
    pub(crate) fn flush_out(&self, st: &mut ConnState) -> io::Result<bool> {
        let Some(sock) = self.sock().filter(|_| st.tcp_up) else { return Ok(false) };
        let out = &mut st.out;
        out.write_to(sock.as_fd())?;
        let want = !out.is_empty();
        if want != out.write_armed {
            out.write_armed = want;
            let interest = if want { Interest::READABLE | Interest::WRITABLE } else { Interest::READABLE };
            self.device.registry.reregister(&mut SourceFd(&sock.as_raw_fd()), self.token(), interest)?;
        }
        let resumed = out.resume_if_drained();
        if !want && st.shut_after_flush {
            let _ = sock.shutdown(std::net::Shutdown::Write);
        }
        Ok(resumed)
    }

    /// `flush_out` from a user thread: a failure is handed to the NIC thread as a broken
    /// connection (the user's call itself succeeded in queueing), and so is the end of a pause
    /// of reading (the NIC thread reads the connection again).
    pub(crate) fn flush_from_user(&self, st: &mut ConnState) {
        match self.flush_out(st) {
            Ok(false) => {}
            Ok(true) => self.device.command(NicCommand::Resume(self.id)),
            Err(e) => self.device.command(NicCommand::Broken(self.id, format!("write to {}: {e}", self.peer()))),
        }
    }
}
