//! The queue-pair half of a connection: the send queue (requests in flight, and those held
//! behind the initiator depth), the receive list, the READ depths and the error state.

use std::collections::VecDeque;
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::time::Duration;

use super::out_queue::{FramePayload, OutFrame};
use crate::error::{Error, Result};
use crate::soft::cq::CqInner;
use crate::soft::device::DeviceState;
use crate::soft::recv::{RecvList, RecvWr, Taker};
use crate::soft::seg::Segs;
use crate::soft::shm::NoCredit;
use crate::soft::srq::SrqInner;
use crate::soft::wire::{FrameType, Header};
use crate::soft::SoftQpInit;
use crate::types::*;

/// A send-queue work request the peer has not answered yet.
pub(crate) struct InFlight {
    pub(crate) psn: u32,
    pub(crate) wr_id: u64,
    pub(crate) op: WcOpcode,
    pub(crate) signaled: bool,
    pub(crate) len: u32,
    /// READ destination.
    pub(crate) dest: Segs,
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
pub(crate) struct QpState {
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
    pub(super) reads_out: u32,
    /// Requests waiting in the send queue behind a READ beyond the initiator depth, in order.
    pub(super) held: VecDeque<OutFrame>,
    /// What the peer may do to this end's memory through the queue pair (the regions grant
    /// their own rights too): both READ and WRITE unless INIT of a queue pair connected by
    /// hand said less.
    pub(crate) remote_access: Access,
}

impl QpState {
    /// The queue-pair state of a new queue pair with `init`'s settings and a fresh number of
    /// `device`, its objects checked to be of that device (`verb` names the call in errors), as
    /// `ibv_create_qp` refuses objects of another device context.
    pub(crate) fn of(init: &SoftQpInit, device: &DeviceState, verb: &'static str) -> Result<QpState> {
        let mismatch = |object| Err(Error::DeviceMismatch { verb, object });
        if !init.pd.is_of(device) {
            return mismatch("protection domain");
        }
        if !init.send_cq.is_of(device) || !init.recv_cq.is_of(device) {
            return mismatch("completion queue");
        }
        if init.srq.as_ref().is_some_and(|srq| !srq.is_of(device)) {
            return mismatch("shared receive queue");
        }
        let cqs = (init.send_cq.inner.clone(), init.recv_cq.inner.clone());
        let srq = init.srq.as_ref().map(|srq| srq.inner.clone());
        Ok(QpState::new(device.next_qpn(), init.pd.id, cqs, srq, init))
    }

    /// The queue-pair state of a new connection, with `init`'s settings.
    fn new(
        qp_num: u32,
        pd: u32,
        (send_cq, recv_cq): (Arc<CqInner>, Arc<CqInner>),
        srq: Option<Arc<SrqInner>>,
        init: &SoftQpInit,
    ) -> Self {
        QpState {
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
            rq: RecvList::new(false),
            error: false,
            remote_access: Access::REMOTE_READ | Access::REMOTE_WRITE,
        }
    }

    /// Whether the queue pair lets the peer do `need` (REMOTE_READ or REMOTE_WRITE).
    pub(crate) fn allows(&self, need: Access) -> bool {
        self.remote_access.contains(need)
    }

    /// Takes the receive the next SEND is placed into, from the shared receive queue or the
    /// queue pair's own list, for a SEND of `taker` (see [`RecvList::take`]).
    pub(crate) fn take_recv(&mut self, taker: Taker) -> std::result::Result<Option<RecvWr>, NoCredit> {
        match &self.srq {
            Some(srq) => srq.take(taker),
            None => self.rq.take(taker),
        }
    }

    /// A new same-host sender of the receive list: its id and credit page (read-only).
    pub(super) fn attach_sender(&mut self) -> Option<(u64, OwnedFd)> {
        match &self.srq {
            Some(srq) => srq.attach(),
            None => self.rq.attach(),
        }
    }

    /// Same-host sender `id` is gone: its unused credits come back.
    pub(super) fn detach_sender(&mut self, id: u64) {
        match &self.srq {
            Some(srq) => srq.detach(id),
            None => self.rq.detach(id),
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
    pub(super) fn network_request(&mut self, f: &mut InFlight, op: LocalOp) -> OutFrame {
        let psn = self.next_psn;
        self.next_psn = psn.wrapping_add(1);
        f.psn = psn;
        f.local = None;
        let h = rdma_header(op.read, RemoteAddr { addr: op.addr, rkey: op.rkey }, psn, f.len);
        let payload = if op.read { FramePayload::None } else { FramePayload::Segs(std::mem::take(&mut f.dest)) };
        OutFrame::new(&h, payload)
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
