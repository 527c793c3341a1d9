//! The queue-pair handle: posting from user threads. The posting thread writes the frame to
//! the socket itself when nothing is queued before it, so the hot path needs no NIC wake-up.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use super::conn::{rdma_header, Conn, FramePayload, InFlight, LocalOp, NicCmEvent, OutFrame, Phase, CLOSE_LINGER};
use super::cq::ResponseSource;
use super::device::{Device, NicCommand};
use super::events::EventQueue;
use super::hand_qp;
use super::recv::{sge_segment, RecvWr};
use super::seg::Segs;
use super::shm::{ShmView, ViewRefused, MAX_INLINE};
use super::timers::TimerKind;
use super::wire::{FrameType, Header, AUX_SOLICITED};
use super::SoftQpInit;
use crate::bootstrap::{QpEndpoint, QpState as IbvState, QpTransition};
use crate::error::{Error, Result};
use crate::provider::{ConnId, SendRequest, Sge};
use crate::types::*;

/// A reliable-connected queue pair.
pub(crate) struct SoftQp {
    conn: Arc<Conn>,
    qp_num: u32,
    /// The connection is among its send CQ's requesters (from its first READ over the network).
    polled_for_responses: AtomicBool,
    // Kept alive for as long as the queue pair exists (CQs, PD, SRQ, channel, device).
    init: SoftQpInit,
    _channel: Option<Arc<EventQueue<NicCmEvent>>>,
    _dev: Arc<Device>,
}

impl SoftQp {
    /// The queue pair of `conn`, created with `init` on `dev` (by the connection manager on
    /// `channel`, or by hand).
    pub(crate) fn new(
        conn: Arc<Conn>,
        init: SoftQpInit,
        dev: Arc<Device>,
        channel: Option<Arc<EventQueue<NicCmEvent>>>,
    ) -> Self {
        let qp_num = conn.st.lock().qp.as_ref().map_or(0, |q| q.qp_num);
        SoftQp { conn, qp_num, polled_for_responses: AtomicBool::new(false), init, _channel: channel, _dev: dev }
    }

    /// The error of a post the queue pair cannot take in `state` (as errors name it).
    fn not_connected(&self, verb: &'static str, state: &'static str) -> Error {
        Error::NotConnected { verb, qp_num: self.qp_num, state }
    }

    /// The queue pair number.
    pub(crate) fn qp_num(&self) -> u32 {
        self.qp_num
    }
    /// The connection id that CM events about this queue pair carry.
    pub(crate) fn conn_id(&self) -> ConnId {
        self.conn.id
    }
    /// Address of the peer.
    pub(crate) fn peer_addr(&self) -> SocketAddr {
        self.conn.peer()
    }
    /// Local address of the connection.
    pub(crate) fn local_addr(&self) -> SocketAddr {
        self.conn.local
    }
    /// How this end's RDMA READs and WRITEs reach the peer (fixed once the connection is
    /// established).
    pub(crate) fn data_path(&self) -> DataPath {
        if self.conn.same_host() {
            DataPath::SharedMemory
        } else {
            DataPath::Network
        }
    }
    /// A read-only view of `len` bytes at `remote` of the peer's memory, on the same-host path
    /// (`None` on the network path), checked as a READ of that range is checked. A refusal
    /// fails the queue pair as the READ's completion would.
    pub(crate) fn remote_view(&self, remote: RemoteAddr, len: usize) -> Result<Option<ShmView>> {
        const VERB: &str = "remote view";
        let Some(client) = self.conn.shm.get() else { return Ok(None) };
        {
            let st = self.conn.st.lock();
            if !st.can_post_send() || st.qp.as_ref().is_none_or(|qp| qp.error) {
                return Err(self.not_connected(VERB, st.state_name()));
            }
        }
        // Asking the peer waits for its NIC thread: no lock of the connection is held.
        client.prefetch(remote.rkey);
        match client.view(remote.rkey, remote.addr, len) {
            Ok(view) => Ok(Some(view)),
            Err(why) => {
                let mut st = self.conn.st.lock();
                st.qp_error();
                let detail = match why {
                    ViewRefused::Access => format!(
                        "the peer refused [{:#x}, +{len}) of rkey {:#x} (remote access error)",
                        remote.addr, remote.rkey
                    ),
                    ViewRefused::Transport => "the connection to the peer is gone".to_owned(),
                };
                Err(Error::RemoteAccess { verb: VERB, detail })
            }
        }
    }

    /// The queue pair's state. One the connection manager made is RTS while connected.
    pub(crate) fn state(&self) -> IbvState {
        hand_qp::state(&self.conn)
    }
    /// What a peer needs to connect to this queue pair by hand.
    pub(crate) fn local_endpoint(&self) -> Result<QpEndpoint> {
        hand_qp::local_endpoint(&self.conn)
    }
    /// Moves the queue pair (`ibv_modify_qp`); the handle has checked that the move is legal
    /// from [`state`](Self::state) and its attributes in range.
    pub(crate) fn modify(&self, transition: &QpTransition) -> Result<()> {
        hand_qp::modify(&self.conn, transition)
    }

    /// Posts a receive (fails when the queue pair uses a shared receive queue).
    pub(crate) fn post_recv(&self, wr_id: u64, sges: &[Sge<'_>]) -> Result<()> {
        let mut st = self.conn.st.lock();
        let phase = st.phase;
        if st.hand.as_ref().is_some_and(|h| h.state == IbvState::Reset) {
            return Err(Error::invalid("post_recv", "the queue pair is in RESET: move it to INIT first"));
        }
        let Some(qp) = st.qp.as_mut() else { return Err(self.not_connected("post_recv", st.state_name())) };
        if qp.srq.is_some() {
            return Err(Error::invalid("post_recv", "the queue pair uses a shared receive queue"));
        }
        if sges.len() > qp.caps.max_recv_sge as usize {
            return Err(Error::invalid(
                "post_recv",
                format!("{} SGEs, the queue pair allows {}", sges.len(), qp.caps.max_recv_sge),
            ));
        }
        let wr = RecvWr::new(wr_id, sges, qp.pd, "post_recv")?;
        if phase == Phase::Closed {
            return Err(self.not_connected("post_recv", phase.name()));
        }
        if qp.error {
            qp.complete_recv(wr_id, WcStatus::WorkRequestFlushed, 0, None);
            return Ok(());
        }
        if qp.rq.len() >= qp.caps.max_recv_wr as usize {
            return Err(Error::QueueFull { queue: "receive queue", depth: qp.caps.max_recv_wr });
        }
        qp.rq.push(wr);
        Ok(())
    }

    /// Posts a send-queue work request.
    pub(crate) fn post_send(&self, wr: &SendRequest<'_>) -> Result<()> {
        let max_msg = self.conn.device.attrs.max_msg_size;
        let total: u64 = wr.sges.iter().map(|s| s.len as u64).sum();
        if total > max_msg {
            return Err(Error::invalid("post_send", format!("{total} bytes exceed the message limit of {max_msg}")));
        }
        // Same-host path: a READ or WRITE is a copy by this thread, and a small SEND goes into
        // the peer's inbox when it can. The region or the inbox is mapped before the
        // connection's lock is taken: asking the peer for it waits for the peer's NIC thread,
        // which must not wait for ours meanwhile.
        let shm = self.conn.shm.get();
        let local = match wr.op {
            SendOp::RdmaRead(r) | SendOp::RdmaWrite(r) if shm.is_some() => {
                Some(LocalOp { read: matches!(wr.op, SendOp::RdmaRead(_)), rkey: r.rkey, addr: r.addr })
            }
            _ => None,
        };
        let inline = matches!(wr.op, SendOp::Send | SendOp::SendWithImm(_)) && total <= MAX_INLINE as u64;
        match (shm, local) {
            (Some(client), Some(op)) => client.prefetch(op.rkey),
            (Some(client), None) if inline => client.prefetch_inbox(),
            _ => {}
        }
        if shm.is_none() && matches!(wr.op, SendOp::RdmaRead(_)) {
            self.poll_for_responses();
        }
        let mut st = self.conn.st.lock();
        if !st.can_post_send() {
            return Err(self.not_connected("post_send", st.state_name()));
        }
        let Some(qp) = st.qp.as_mut() else { return Err(self.not_connected("post_send", Phase::Closed.name())) };
        if wr.sges.len() > qp.caps.max_send_sge as usize {
            return Err(Error::invalid(
                "post_send",
                format!("{} SGEs, the queue pair allows {}", wr.sges.len(), qp.caps.max_send_sge),
            ));
        }
        let (opcode, need) = match wr.op {
            SendOp::Send | SendOp::SendWithImm(_) => (WcOpcode::Send, Access::NONE),
            SendOp::RdmaWrite(_) => (WcOpcode::RdmaWrite, Access::NONE),
            SendOp::RdmaRead(_) => (WcOpcode::RdmaRead, Access::LOCAL_WRITE),
        };
        let entry = |psn: u32, dest: Segs| InFlight {
            psn,
            wr_id: wr.wr_id,
            op: opcode,
            signaled: wr.signaled,
            len: total as u32,
            dest,
            busy: false,
            local: None,
        };
        if qp.error {
            qp.retire(entry(0, Segs::new()), WcStatus::WorkRequestFlushed);
            return Ok(());
        }
        if qp.sq_used >= qp.caps.max_send_wr {
            return Err(Error::QueueFull { queue: "send queue", depth: qp.caps.max_send_wr });
        }
        let segs: Option<Segs> = wr.sges.iter().map(|s| sge_segment(s, qp.pd, need)).collect();
        let Some(segs) = segs else {
            // Like hardware: the request fails with a completion and the queue pair errors.
            qp.sq_used += 1;
            qp.retire(entry(0, Segs::new()), WcStatus::LocalProtectionError);
            st.qp_error();
            return Ok(());
        };
        if let Some(op) = local {
            // The copy joins the send queue and runs now if nothing is in flight before it, else
            // once the requests before it have completed (as RC executes requests in order at
            // the responder); `run_local_front` runs it either way.
            qp.sq_used += 1;
            let mut f = entry(0, segs);
            f.local = Some(op);
            qp.inflight.push_back(f);
            if qp.inflight.len() == 1 {
                self.conn.run_local_front(&mut st);
            }
            return Ok(());
        }
        if let (Some(client), true, true) = (shm, inline, qp.inflight.is_empty()) {
            // Nothing is in flight before it, and a receive is claimed for it: it is as good as
            // placed, and completes now. Otherwise it takes the stream, behind what is there.
            let imm = match wr.op {
                SendOp::SendWithImm(imm) => Some(imm),
                _ => None,
            };
            if client.send(&segs, total as usize, imm, wr.solicited) {
                qp.sq_used += 1;
                qp.retire(entry(0, Segs::new()), WcStatus::Success);
                st.inbox_sends += 1;
                return Ok(());
            }
        }
        let psn = qp.next_psn;
        qp.next_psn = psn.wrapping_add(1);
        let mut h;
        let payload;
        let mut dest = Segs::new();
        match wr.op {
            SendOp::Send => {
                h = Header::new(FrameType::Send);
                h.aux = if wr.solicited { AUX_SOLICITED } else { 0 };
                payload = FramePayload::Segs(segs);
            }
            SendOp::SendWithImm(imm) => {
                h = Header::new(FrameType::SendImm);
                h.imm = imm;
                h.aux = if wr.solicited { AUX_SOLICITED } else { 0 };
                payload = FramePayload::Segs(segs);
            }
            SendOp::RdmaWrite(r) => {
                h = rdma_header(false, r, psn, total as u32);
                payload = FramePayload::Segs(segs);
            }
            SendOp::RdmaRead(r) => {
                h = rdma_header(true, r, psn, total as u32);
                dest = segs;
                payload = FramePayload::None;
            }
        }
        h.psn = psn;
        if matches!(wr.op, SendOp::Send | SendOp::SendWithImm(_)) {
            h.len = total as u32;
        }
        qp.sq_used += 1;
        qp.inflight.push_back(entry(psn, dest));
        if st.push_request(OutFrame::new(&h, payload)) {
            self.conn.flush_from_user(&mut st);
        }
        hand_qp::request_waits(&self.conn, &st);
        Ok(())
    }

    /// Has polls of the send CQ take this connection's READ responses, and the receive CQ's
    /// bell watch its socket so that a woken poller places small SENDs itself
    /// (`conn/responses.rs`); once, before the connection's lock is taken (the CQs' lists are
    /// locked before it). Only a connection that READs (the pulling side) is watched: a
    /// responder's parked owner is not woken by every READ request it serves.
    fn poll_for_responses(&self) {
        if self.polled_for_responses.load(Ordering::Relaxed) || self.polled_for_responses.swap(true, Ordering::Relaxed)
        {
            return;
        }
        let source: Arc<dyn ResponseSource> = self.conn.clone();
        self.init.send_cq.inner.attach_requester(Arc::downgrade(&source));
        self.init.recv_cq.inner.attach_stream(&source);
    }

    /// Disconnects: outstanding work requests complete with `WorkRequestFlushed`, both sides
    /// get a `Disconnected` event. Idempotent.
    pub(crate) fn disconnect(&self) -> Result<()> {
        let conn = &self.conn;
        let mut st = conn.st.lock();
        match st.phase {
            Phase::Closed => return Ok(()),
            Phase::Established => {
                st.drop_unsent_requests();
                st.push_out(OutFrame::new(&Header::new(FrameType::Disconnect), FramePayload::None));
                st.shut_after_flush = true;
                st.fail_qp(WcStatus::WorkRequestFlushed);
                st.phase = Phase::Closed;
                st.event(NicCmEvent::Disconnected { conn: conn.id });
                conn.flush_from_user(&mut st);
                conn.device.command(NicCommand::Timer(Instant::now() + CLOSE_LINGER, conn.id, TimerKind::Close));
            }
            Phase::Connecting | Phase::Incoming | Phase::Requested | Phase::Unbound => {
                st.clear_output();
                st.fail_qp(WcStatus::WorkRequestFlushed);
                st.phase = Phase::Closed;
                conn.device.command(NicCommand::Timer(Instant::now(), conn.id, TimerKind::Close));
            }
        }
        Ok(())
    }
}

impl Drop for SoftQp {
    fn drop(&mut self) {
        let _ = self.disconnect();
    }
}
