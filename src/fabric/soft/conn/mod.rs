//! One RC connection (a TCP stream) and the queue-pair state it carries: the output queue with
//! its partial-write state, the in-flight send work requests, the receive list and, on the
//! same-host path, the inbox the peer writes its SENDs into.

use std::collections::VecDeque;
use std::io;
use std::net::{SocketAddr, TcpStream};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::OnceLock;
use std::sync::{Arc, Weak};
use std::time::Duration;

use mio::unix::SourceFd;
use mio::{Interest, Token};
use parking_lot::Mutex;

use super::cm::ChannelInner;
use super::cq::{CqInner, Drain, InboxSource, SrqInner};
use super::device::{Shared, SoftMr};
use super::nic::{Cmd, Rx};
use super::shm::{Corrupt, HeldSlot, Inbox, KeySlot, Offer, Pool, ShmClient};
use super::wire::{FrameType, Header, HEADER_LEN};
use crate::fabric::error::{Error, Result};
use crate::fabric::memory::{self, IoPart, RegisteredBuffer, MAX_IOV};
use crate::fabric::provider::{ConnId, QpInitOps, Sge};
use crate::fabric::types::*;

/// A range of registered memory an operation reads or writes; holds the memory alive.
#[derive(Clone)]
pub(crate) struct Seg {
    pub(crate) buf: Arc<RegisteredBuffer>,
    pub(crate) off: usize,
    pub(crate) len: usize,
}

impl Seg {
    /// A bounds-checked segment.
    pub(crate) fn new(buf: Arc<RegisteredBuffer>, off: usize, len: usize) -> Result<Seg> {
        buf.check_range(off, len)?;
        Ok(Seg { buf, off, len })
    }

    /// The segment of an SGE if its region is a soft region of protection domain `pd` that
    /// grants `need`; `None` is a local protection error.
    pub(crate) fn from_sge(sge: &Sge<'_>, pd: u32, need: Access) -> Option<Seg> {
        let mr = sge.mr.ops().as_any().downcast_ref::<SoftMr>()?;
        if mr.pd != pd || !mr.access.contains(need) {
            return None;
        }
        Seg::new(sge.mr.buffer_arc().clone(), sge.offset, sge.len).ok()
    }
}

/// Posted receives in order and, once a same-host sender asked for them, their credits: the
/// receive list of a queue pair or of a shared receive queue.
#[derive(Default)]
pub(crate) struct RecvList {
    wrs: VecDeque<RecvWr>,
    pool: Option<Arc<Pool>>,
}

impl RecvList {
    /// Receives posted and not taken.
    pub(crate) fn len(&self) -> usize {
        self.wrs.len()
    }

    /// Adds a posted receive (and its credit).
    pub(crate) fn push(&mut self, wr: RecvWr) {
        if let Some(pool) = &self.pool {
            pool.posted(wr.cap);
        }
        self.wrs.push_back(wr);
    }

    /// Takes the oldest receive, for a SEND that claimed it from the pool (`claimed`, from an
    /// inbox) or one that came over a stream (never a receive promised to an inbox SEND).
    pub(crate) fn take(&mut self, claimed: bool) -> Option<RecvWr> {
        if self.wrs.is_empty() {
            return None;
        }
        if let (false, Some(pool)) = (claimed, &self.pool) {
            if !pool.claim_for_stream() {
                return None;
            }
        }
        self.wrs.pop_front()
    }

    /// Takes the oldest receive whatever was claimed (to flush it).
    fn take_any(&mut self) -> Option<RecvWr> {
        self.wrs.pop_front()
    }

    /// The credits a same-host sender claims from, made on first use.
    pub(crate) fn pool(&mut self) -> Option<Arc<Pool>> {
        if self.pool.is_none() {
            self.pool = Some(Arc::new(Pool::new(self.wrs.iter().map(|w| w.cap)).ok()?));
        }
        self.pool.clone()
    }
}

/// A posted receive.
pub(crate) struct RecvWr {
    pub(crate) wr_id: u64,
    pub(crate) segs: Vec<Seg>,
    pub(crate) cap: usize,
}

impl RecvWr {
    /// Checks the SGEs (soft regions of `pd` with LOCAL_WRITE) and builds the receive.
    pub(crate) fn new(wr_id: u64, sges: &[Sge<'_>], pd: u32, verb: &'static str) -> Result<RecvWr> {
        let mut segs = Vec::with_capacity(sges.len());
        for sge in sges {
            let seg = Seg::from_sge(sge, pd, Access::LOCAL_WRITE).ok_or_else(|| {
                Error::invalid(verb, "receive buffer is not a LOCAL_WRITE region of this protection domain")
            })?;
            segs.push(seg);
        }
        let cap = segs.iter().map(|s| s.len).sum();
        Ok(RecvWr { wr_id, segs, cap })
    }
}

/// A send-queue work request the peer has not answered yet.
pub(crate) struct InFlight {
    pub(crate) psn: u32,
    pub(crate) wr_id: u64,
    pub(crate) op: WcOpcode,
    pub(crate) signaled: bool,
    pub(crate) len: u32,
    /// READ destination.
    pub(crate) dest: Vec<Seg>,
    /// The NIC is writing the READ response into `dest`: only the NIC may complete it.
    pub(crate) busy: bool,
    /// A same-host READ or WRITE waiting for the requests before it: it is executed (as a copy,
    /// `dest` being its local segments) once they have completed, as RC executes a request at
    /// the responder only after the ones before it.
    pub(crate) local: Option<LocalOp>,
}

/// A READ or WRITE of the same-host path.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LocalOp {
    /// READ (else WRITE).
    pub(crate) read: bool,
    /// The peer's region.
    pub(crate) rkey: u32,
    /// The peer's address.
    pub(crate) addr: u64,
}

/// The header of an RDMA READ (`read`) or WRITE request of `len` bytes at `remote`.
pub(crate) fn rdma_header(read: bool, remote: RemoteAddr, psn: u32, len: u32) -> Header {
    let mut h = Header::new(if read { FrameType::ReadReq } else { FrameType::Write });
    h.addr = remote.addr;
    h.rkey = remote.rkey;
    h.psn = psn;
    if read {
        h.aux = len;
    } else {
        h.len = len;
    }
    h
}

/// The queue-pair half of a connection.
pub(crate) struct QpData {
    pub(crate) qp_num: u32,
    pub(crate) pd: u32,
    pub(crate) send_cq: Arc<CqInner>,
    pub(crate) recv_cq: Arc<CqInner>,
    pub(crate) srq: Option<Arc<SrqInner>>,
    pub(crate) caps: QpCaps,
    pub(crate) min_rnr_timer: Duration,
    /// Send-queue slots in use: in flight, plus unsignaled ones completed since the last
    /// signaled completion (the verbs rule).
    pub(crate) sq_used: u32,
    unreaped: u32,
    pub(crate) inflight: VecDeque<InFlight>,
    pub(crate) next_psn: u32,
    pub(crate) rq: RecvList,
    /// The queue pair is in the error state.
    pub(crate) error: bool,
    /// RDMA READs this end may have on the wire unanswered: its own initiator depth, lowered
    /// to the peer's responder resources when the connection is established.
    pub(crate) initiator_depth: u32,
    /// RDMA READs of the peer this end serves at once; a peer with more outstanding breaks
    /// the protocol.
    pub(crate) responder_resources: u32,
    /// This end's READ requests queued or on the wire, not yet answered.
    reads_out: u32,
    /// Requests waiting in the send queue behind a READ beyond the initiator depth, in order.
    held: VecDeque<OutFrame>,
}

impl QpData {
    /// The queue-pair state of a new connection, with `init`'s settings.
    pub(crate) fn new(
        qp_num: u32,
        pd: u32,
        (send_cq, recv_cq): (Arc<CqInner>, Arc<CqInner>),
        srq: Option<Arc<SrqInner>>,
        init: &QpInitOps,
    ) -> Self {
        QpData {
            qp_num,
            pd,
            send_cq,
            recv_cq,
            srq,
            caps: init.caps,
            min_rnr_timer: init.min_rnr_timer,
            initiator_depth: init.initiator_depth.into(),
            responder_resources: init.responder_resources.into(),
            reads_out: 0,
            held: VecDeque::new(),
            sq_used: 0,
            unreaped: 0,
            inflight: VecDeque::new(),
            next_psn: 0,
            rq: RecvList::default(),
            error: false,
        }
    }

    /// Takes the receive the next SEND is placed into, from the shared receive queue or the
    /// queue pair's own list: for a SEND that claimed it (`claimed`, from the inbox) or one
    /// that came over the stream.
    pub(crate) fn take_recv(&mut self, claimed: bool) -> Option<RecvWr> {
        match &self.srq {
            Some(srq) => srq.take(claimed),
            None => self.rq.take(claimed),
        }
    }

    /// The receive credits a same-host sender claims from (made on first use).
    fn pool(&mut self) -> Option<Arc<Pool>> {
        match &self.srq {
            Some(srq) => srq.pool(),
            None => self.rq.pool(),
        }
    }

    /// Completes `f` with `status`: a signaled or failed request produces a completion and
    /// frees its slot and those of the unsignaled requests before it.
    pub(crate) fn retire(&mut self, f: InFlight, status: WcStatus) {
        if status.is_success() && !f.signaled {
            self.unreaped += 1;
            return;
        }
        self.sq_used = self.sq_used.saturating_sub(1 + self.unreaped);
        self.unreaped = 0;
        let byte_len = if status.is_success() { f.len } else { 0 };
        self.send_cq.push(WorkCompletion {
            wr_id: f.wr_id,
            status,
            opcode: f.op,
            byte_len,
            imm: None,
            qp_num: self.qp_num,
        });
    }

    /// A receive completion on this queue pair.
    pub(crate) fn complete_recv(&self, wr_id: u64, status: WcStatus, byte_len: u32, imm: Option<u32>) {
        self.complete_recv_solicited(wr_id, status, byte_len, imm, false);
    }

    /// Completes a receive of a SEND that was posted `solicited` (or not).
    pub(crate) fn complete_recv_solicited(
        &self,
        wr_id: u64,
        status: WcStatus,
        byte_len: u32,
        imm: Option<u32>,
        solicited: bool,
    ) {
        let wc = WorkCompletion { wr_id, status, opcode: WcOpcode::Recv, byte_len, imm, qp_num: self.qp_num };
        self.recv_cq.push_solicited(wc, solicited);
    }

    /// Turns the same-host READ or WRITE `f` (taken from the front of the send queue) into a
    /// request of the network path: returns its frame; `f` goes back to the front.
    fn network_request(&mut self, f: &mut InFlight, op: LocalOp) -> OutFrame {
        let psn = self.next_psn;
        self.next_psn = psn.wrapping_add(1);
        f.psn = psn;
        f.local = None;
        let h = rdma_header(op.read, RemoteAddr { addr: op.addr, rkey: op.rkey }, psn, f.len);
        let tail = if op.read { Tail::None } else { Tail::Segs(std::mem::take(&mut f.dest)) };
        OutFrame::new(&h, tail)
    }

    /// Lowers the initiator depth to the peer's responder resources (at establishment).
    pub(crate) fn limit_initiator_depth(&mut self, peer_responder_resources: u8) {
        self.initiator_depth = self.initiator_depth.min(peer_responder_resources.into());
    }

    /// Completes every send work request the NIC is not busy with using `send_status` and
    /// flushes the receive list.
    pub(crate) fn flush(&mut self, send_status: WcStatus) {
        self.held.clear();
        let all = std::mem::take(&mut self.inflight);
        for f in all {
            if f.busy {
                self.inflight.push_back(f);
            } else {
                self.retire(f, send_status);
            }
        }
        self.sq_used = self.inflight.len() as u32;
        self.unreaped = 0;
        while let Some(r) = self.rq.take_any() {
            self.complete_recv(r.wr_id, WcStatus::WorkRequestFlushed, 0, None);
        }
    }
}

/// Where a connection is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Active side: TCP connecting or waiting for ACCEPT.
    Connecting,
    /// Passive side: waiting for CONNECT_REQ.
    Incoming,
    /// Passive side: the request was delivered, waiting for accept or reject.
    Requested,
    /// Connected.
    Established,
    /// Disconnected, rejected, failed or broken.
    Closed,
}

impl Phase {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Phase::Connecting => "connecting",
            Phase::Incoming | Phase::Requested => "awaiting accept",
            Phase::Established => "established",
            Phase::Closed => "disconnected",
        }
    }
}

/// The payload following a queued header.
pub(crate) enum Tail {
    None,
    Bytes(Vec<u8>),
    Segs(Vec<Seg>),
}

/// What a queued frame is, for the READ depths and the limits of the output queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FrameKind {
    /// A request of our send queue (`read`: an RDMA READ request).
    Request { read: bool },
    /// The answer to a request of the peer: an acknowledgement, or a READ response (`read`).
    Response { read: bool },
    /// A CM frame.
    Control,
}

/// A queued frame.
pub(crate) struct OutFrame {
    hdr: [u8; HEADER_LEN],
    tail: Tail,
    kind: FrameKind,
}

impl OutFrame {
    pub(crate) fn new(hdr: &Header, tail: Tail) -> Self {
        let kind = match hdr.ty {
            FrameType::Send | FrameType::SendImm | FrameType::Write => FrameKind::Request { read: false },
            FrameType::ReadReq => FrameKind::Request { read: true },
            FrameType::Ack => FrameKind::Response { read: false },
            FrameType::ReadResp => FrameKind::Response { read: true },
            FrameType::ConnectReq | FrameType::Accept | FrameType::Reject | FrameType::Disconnect => FrameKind::Control,
        };
        OutFrame { hdr: hdr.encode(), tail, kind }
    }

    /// Bytes on the wire.
    fn len(&self) -> usize {
        HEADER_LEN
            + match &self.tail {
                Tail::None => 0,
                Tail::Bytes(b) => b.len(),
                Tail::Segs(s) => s.iter().map(|s| s.len).sum(),
            }
    }

    /// Memory the queue holds for the frame: the frame and its heap parts, not the registered
    /// memory a READ response or a SEND is written from.
    fn memory(&self) -> usize {
        std::mem::size_of::<OutFrame>()
            + match &self.tail {
                Tail::None => 0,
                Tail::Bytes(b) => b.capacity(),
                Tail::Segs(s) => s.capacity() * std::mem::size_of::<Seg>(),
            }
    }

    /// An RDMA READ request.
    fn is_read_request(&self) -> bool {
        self.kind == FrameKind::Request { read: true }
    }
}

/// Memory of queued responses above which the NIC stops reading the peer's requests until the
/// peer has read enough of them (back to [`OUT_RESUME`]): 1 MiB, about 14,000 acknowledgements.
/// Only the peer's requests fill it, and only while the peer does not read: READ responses are
/// bounded by the responder resources and cost a frame each (their data is written from
/// registered memory), so the figure does not depend on message sizes.
/// Our own requests are not counted: the send queue's depth bounds them, and counting them
/// could stop two ends that both wait to write from ever reading each other.
pub const OUT_CAP: usize = 1 << 20;
/// Memory of queued responses below which a paused connection is read again.
pub const OUT_RESUME: usize = 256 << 10;

/// The frames waiting to be written to the socket, with the partial-write state and what the
/// limits on the output queue need to know.
#[derive(Default)]
pub(crate) struct OutQueue {
    frames: VecDeque<OutFrame>,
    /// Bytes of the front frame already written.
    pos: usize,
    write_armed: bool,
    /// Memory held by queued responses (what a peer that does not read makes this end keep).
    response_memory: usize,
    /// READ responses queued, the front one possibly partly written.
    read_responses: u32,
    /// Bytes written to the socket so far.
    written: u64,
    /// The NIC stopped reading the peer's requests: the responses went over [`OUT_CAP`].
    paused: bool,
    /// `written` when the pause began or was last found making progress.
    stall_mark: u64,
}

impl OutQueue {
    /// Queues a frame; returns whether the queue was empty before (the caller then writes).
    fn push(&mut self, frame: OutFrame) -> bool {
        let was_empty = self.frames.is_empty();
        self.count(&frame, true);
        self.frames.push_back(frame);
        was_empty
    }

    /// Counts a frame in (`add`) or out of the response totals.
    fn count(&mut self, frame: &OutFrame, add: bool) {
        let FrameKind::Response { read } = frame.kind else { return };
        let (memory, reads) = (frame.memory(), u32::from(read));
        if add {
            self.response_memory += memory;
            self.read_responses += reads;
        } else {
            self.response_memory -= memory;
            self.read_responses -= reads;
        }
    }

    /// Keeps only the frames `keep` accepts, and a partly written frame (to keep the stream
    /// framed).
    fn retain(&mut self, mut keep: impl FnMut(&OutFrame) -> bool) {
        let partial = self.pos > 0;
        let mut kept = VecDeque::with_capacity(self.frames.len());
        for (i, f) in std::mem::take(&mut self.frames).into_iter().enumerate() {
            if (i == 0 && partial) || keep(&f) {
                kept.push_back(f);
            } else {
                self.count(&f, false);
            }
        }
        self.frames = kept;
    }

    /// Records `n` more bytes written: frames written whole leave the queue.
    fn advance(&mut self, n: usize) {
        self.written += n as u64;
        let mut n = self.pos + n;
        while let Some(f) = self.frames.front() {
            let l = f.len();
            if n < l {
                break;
            }
            n -= l;
            let f = self.frames.pop_front().expect("front checked");
            self.count(&f, false);
        }
        self.pos = n;
    }

    /// READ responses queued and not yet written whole.
    pub(crate) fn read_responses(&self) -> u32 {
        self.read_responses
    }

    /// Whether reading the peer's requests must pause now (responses over [`OUT_CAP`]); marks
    /// the pause.
    pub(crate) fn pause_if_full(&mut self) -> bool {
        if self.paused || self.response_memory <= OUT_CAP {
            return false;
        }
        self.paused = true;
        self.stall_mark = self.written;
        true
    }

    /// Whether reading is paused.
    pub(crate) fn paused(&self) -> bool {
        self.paused
    }

    /// Whether a paused connection wrote nothing since the pause began or since the last
    /// check; else the check starts over.
    pub(crate) fn stalled(&mut self) -> bool {
        let stalled = self.written == self.stall_mark;
        self.stall_mark = self.written;
        stalled
    }

    /// Ends a pause once the responses fell to [`OUT_RESUME`]; returns whether it ended.
    fn resume_if_drained(&mut self) -> bool {
        if !self.paused || self.response_memory > OUT_RESUME {
            return false;
        }
        self.paused = false;
        true
    }
}

/// Connection state guarded by the connection's lock.
pub(crate) struct ConnState {
    pub(crate) phase: Phase,
    /// Active side: the TCP handshake finished.
    pub(crate) tcp_up: bool,
    pub(crate) out: OutQueue,
    /// Shut the write side once the output queue drains (after DISCONNECT or REJECT).
    pub(crate) shut_after_flush: bool,
    pub(crate) qp: Option<QpData>,
    /// Where CM events of this connection go.
    pub(crate) channel: Option<Arc<ChannelInner>>,
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
    inbox: Option<Inbox>,
    /// Same-host path: SENDs this end wrote into the peer's inbox.
    pub(crate) inbox_sends: u64,
    /// Same-host path: this end's key slot for the connection, live while its queue pair
    /// answers the peer's requests (revoked when it fails or closes, so the peer's copies and
    /// SENDs stop as they would at a dead responder).
    live: Option<HeldSlot>,
}

impl ConnState {
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

    /// Whether frames wait to be written.
    pub(crate) fn has_output(&self) -> bool {
        !self.out.frames.is_empty()
    }

    /// Drops queued requests not yet started (a failed or disconnected queue pair must not
    /// execute them at the peer); a partly written frame stays to keep the stream framed.
    pub(crate) fn drop_unsent_requests(&mut self) {
        self.out.retain(|f| !matches!(f.kind, FrameKind::Request { .. }));
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
        let ConnState { inbox: Some(inbox), qp: Some(qp), .. } = self else { return false };
        if qp.error || !inbox.has_entries() {
            return false;
        }
        loop {
            let entry = match inbox.peek() {
                Ok(Some(entry)) => entry,
                Ok(None) => return false,
                Err(Corrupt) => break,
            };
            let Some(recv) = qp.take_recv(true) else { return true };
            if recv.cap < entry.len as usize || !inbox.copy_to(&entry, &recv.segs) {
                inbox.consume(&entry);
                qp.complete_recv(recv.wr_id, WcStatus::LocalLengthError, 0, None);
                break;
            }
            inbox.consume(&entry);
            qp.complete_recv_solicited(recv.wr_id, WcStatus::Success, entry.len, entry.imm, entry.solicited);
        }
        tracing::debug!("soft same-host: an inbox SEND of queue pair {} cannot be placed", qp.qp_num);
        self.inbox = None;
        self.qp_error();
        false
    }

    /// Sends a CM event to the connection's channel.
    pub(crate) fn event(&self, ev: super::cm::Ev) {
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
    pub(crate) sock: TcpStream,
    pub(crate) shared: Arc<Shared>,
    pub(crate) peer: SocketAddr,
    pub(crate) local: SocketAddr,
    pub(crate) st: Mutex<ConnState>,
    /// Receive state: used by the NIC thread only (lock order: `rx` before `st`).
    pub(crate) rx: Mutex<Rx>,
    /// Same-host path: this end's stream to the peer's device and what it mapped of the peer,
    /// when both ends share a host (set once, before the connection is established; the client
    /// locks inside, never while it waits for the peer).
    pub(crate) shm: OnceLock<ShmClient>,
}

impl Conn {
    pub(crate) fn new(
        shared: Arc<Shared>,
        sock: TcpStream,
        peer: SocketAddr,
        phase: Phase,
        qp: Option<QpData>,
        channel: Option<Arc<ChannelInner>>,
    ) -> Arc<Conn> {
        let local = sock.local_addr().unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)));
        let id = shared.next_id();
        Arc::new(Conn {
            id,
            sock,
            shared,
            peer,
            local,
            st: Mutex::new(ConnState {
                phase,
                tcp_up: phase != Phase::Connecting,
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
            }),
            rx: Mutex::new(Rx::new()),
            shm: OnceLock::new(),
        })
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
        st.inbox = None;
        st.live = None;
        if let Some(client) = self.shm.get() {
            client.close();
        }
    }

    /// Opens this end's inbox for the peer's SENDs (once, on a live queue pair) and
    /// makes polls of the receive CQ drain it: the descriptors of the inbox, the receive pool
    /// (counts read-only, claims) and the CQ's bell (page and eventfd), for the peer to map.
    pub(crate) fn open_inbox(self: &Arc<Self>) -> Option<([OwnedFd; 5], KeySlot)> {
        let (fds, cq, live) = {
            let mut st = self.st.lock();
            if st.inbox.is_some() {
                return None;
            }
            let live = self.responder_slot(&mut st)?;
            let qp = st.qp.as_mut().filter(|q| !q.error)?;
            let pool = qp.pool()?;
            let cq = qp.recv_cq.clone();
            let inbox = Inbox::new().ok()?;
            let [info, claims] = pool.fds();
            let fds = [
                inbox.fd().try_clone_to_owned().ok()?,
                info.try_clone_to_owned().ok()?,
                claims.try_clone_to_owned().ok()?,
                cq.bell.fd().try_clone_to_owned().ok()?,
                cq.bell.event_fd().ok()?.try_clone_to_owned().ok()?,
            ];
            st.inbox = Some(inbox);
            (fds, cq, live)
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
            let ep = self.shared.shm.as_ref()?;
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
            self.shared.handshakes.lock().release(self.peer.ip());
        }
    }

    /// The poll token of this connection.
    pub(crate) fn token(&self) -> Token {
        Token(self.id as usize)
    }

    /// Registers the socket with the NIC's poll (readable, and writable when `writable`).
    pub(crate) fn register(&self, st: &mut ConnState, writable: bool) -> io::Result<()> {
        st.out.write_armed = writable;
        let interest = if writable { Interest::READABLE | Interest::WRITABLE } else { Interest::READABLE };
        self.shared.registry.register(&mut SourceFd(&self.sock.as_raw_fd()), self.token(), interest)
    }

    /// Removes the socket from the NIC's poll.
    pub(crate) fn deregister(&self) {
        let _ = self.shared.registry.deregister(&mut SourceFd(&self.sock.as_raw_fd()));
    }

    /// Writes queued frames until the socket is full or the queue is empty (non-blocking),
    /// then asks for WRITABLE events only while something is left. Returns whether this ended
    /// a pause of reading (the NIC must then read the connection again).
    pub(crate) fn flush_out(&self, st: &mut ConnState) -> io::Result<bool> {
        if !st.tcp_up {
            return Ok(false);
        }
        let out = &mut st.out;
        while !out.frames.is_empty() {
            let sent = {
                let mut parts: Vec<IoPart<'_>> = Vec::with_capacity(16);
                let mut skip = out.pos;
                'frames: for f in &out.frames {
                    // Header.
                    if skip >= HEADER_LEN {
                        skip -= HEADER_LEN;
                    } else {
                        parts.push(IoPart::Bytes(&f.hdr[skip..]));
                        skip = 0;
                    }
                    match &f.tail {
                        Tail::None => {}
                        Tail::Bytes(b) => {
                            if skip >= b.len() {
                                skip -= b.len();
                            } else {
                                parts.push(IoPart::Bytes(&b[skip..]));
                                skip = 0;
                            }
                        }
                        Tail::Segs(segs) => {
                            for s in segs {
                                if skip >= s.len {
                                    skip -= s.len;
                                    continue;
                                }
                                let r = s.buf.range(s.off + skip, s.len - skip).map_err(io::Error::other)?;
                                parts.push(IoPart::Region(r));
                                skip = 0;
                                if parts.len() >= MAX_IOV {
                                    break 'frames;
                                }
                            }
                        }
                    }
                    if parts.len() >= MAX_IOV - 4 {
                        break;
                    }
                }
                match memory::send_vectored(self.sock.as_fd(), &parts) {
                    Ok(n) => n,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(e),
                }
            };
            out.advance(sent);
        }
        let want = !out.frames.is_empty();
        if want != out.write_armed {
            out.write_armed = want;
            let interest = if want { Interest::READABLE | Interest::WRITABLE } else { Interest::READABLE };
            self.shared.registry.reregister(&mut SourceFd(&self.sock.as_raw_fd()), self.token(), interest)?;
        }
        let resumed = out.resume_if_drained();
        if !want && st.shut_after_flush {
            let _ = self.sock.shutdown(std::net::Shutdown::Write);
        }
        Ok(resumed)
    }

    /// `flush_out` from a user thread: a failure is handed to the NIC thread as a broken
    /// connection (the user's call itself succeeded in queueing), and so is the end of a pause
    /// of reading (the NIC thread reads the connection again).
    pub(crate) fn flush_from_user(&self, st: &mut ConnState) {
        match self.flush_out(st) {
            Ok(false) => {}
            Ok(true) => self.shared.command(Cmd::Resume(self.id)),
            Err(e) => self.shared.command(Cmd::Broken(self.id, format!("write to {}: {e}", self.peer))),
        }
    }
}
