//! The data frames of an established connection, on the NIC thread: acknowledgements and READ
//! responses that complete this end's requests; the peer's READs (answered from registered
//! memory), WRITEs and SENDs (placed into posted receives, or waiting for one: RNR); and what a
//! payload was for once it is in.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::state::{Nic, ReadOutcome};
use crate::soft::conn::{
    finish_read_response, finish_recv, on_ack, on_read_response, place_send, reply, AfterPayload, Conn, ConnState,
    Destination, Expecting, FramePayload, OutFrame, Phase, ReceiveState,
};
use crate::soft::device::SoftCounters;
use crate::soft::timers::TimerKind;
use crate::soft::wire::{FrameType, Header, Status};
use crate::types::*;

impl Nic {
    /// Handles the header of a data frame (the connection must be established).
    pub(super) fn on_header(&mut self, c: &Arc<Conn>, rx: &mut ReceiveState, hdr: Header) -> ReadOutcome {
        let mut st = c.st.lock();
        if matches!(st.phase, Phase::Incoming | Phase::Requested | Phase::Connecting | Phase::Unbound) {
            return ReadOutcome::Broken(format!(
                "{:?} frame from {} before the connection is established",
                hdr.ty,
                c.peer()
            ));
        }
        let step = self.on_data_header(c, &mut st, rx, hdr);
        self.pause_if_full(c, &mut st, step)
    }

    /// Handles the header of a data frame on an established (or closing) connection.
    pub(super) fn on_data_header(
        &mut self,
        c: &Arc<Conn>,
        st: &mut ConnState,
        rx: &mut ReceiveState,
        hdr: Header,
    ) -> ReadOutcome {
        let live = st.phase == Phase::Established && st.qp.is_some();
        match hdr.ty {
            FrameType::Ack => match on_ack(c, st, &hdr) {
                Ok(()) => ReadOutcome::Continue,
                Err(why) => ReadOutcome::Broken(why),
            },
            FrameType::ReadResp => match on_read_response(c, st, rx, &hdr) {
                Ok(()) => ReadOutcome::Continue,
                Err(why) => ReadOutcome::Broken(why),
            },
            FrameType::ReadReq => {
                let Some(qp) = st.qp.as_ref().filter(|_| live) else { return ReadOutcome::Continue };
                let allowed = qp.responder_resources;
                if st.out.read_responses() >= allowed {
                    SoftCounters::bump(&self.device.counters.read_depth_violations);
                    return ReadOutcome::Broken(format!("{} has more than {allowed} RDMA READs outstanding", c.peer()));
                }
                let mut h = Header::new(FrameType::ReadResp);
                h.psn = hdr.psn;
                let mut payload = FramePayload::None;
                if qp.error {
                    h.status = Status::OperationError;
                } else {
                    let range = qp.allows(Access::REMOTE_READ).then(|| {
                        self.device.regions.remote_range(hdr.rkey, qp.pd, hdr.addr, hdr.aux.into(), Access::REMOTE_READ)
                    });
                    match range.flatten() {
                        Some(seg) => {
                            h.len = hdr.aux;
                            payload = FramePayload::Segs(smallvec::smallvec![seg]);
                        }
                        None => h.status = Status::RemoteAccess,
                    }
                }
                st.push_out(OutFrame::new(&h, payload));
                if h.status == Status::RemoteAccess {
                    self.remote_access_error(st);
                }
                ReadOutcome::Continue
            }
            FrameType::Write => {
                let Some(qp) = st.qp.as_ref().filter(|_| live) else {
                    return Self::discard(rx, &hdr, AfterPayload::Nothing);
                };
                if qp.error {
                    return Self::discard(
                        rx,
                        &hdr,
                        AfterPayload::Reply { psn: hdr.psn, status: Status::OperationError },
                    );
                }
                let range = qp.allows(Access::REMOTE_WRITE).then(|| {
                    self.device.regions.remote_range(hdr.rkey, qp.pd, hdr.addr, hdr.len.into(), Access::REMOTE_WRITE)
                });
                match range.flatten() {
                    Some(seg) => {
                        rx.expecting = Expecting::Payload {
                            destination: Destination::new(smallvec::smallvec![seg]),
                            remaining: hdr.len as usize,
                            len: hdr.len,
                            after: AfterPayload::Reply { psn: hdr.psn, status: Status::Ok },
                            psn: hdr.psn,
                        };
                        ReadOutcome::Continue
                    }
                    None => {
                        self.remote_access_error(st);
                        Self::discard(rx, &hdr, AfterPayload::Reply { psn: hdr.psn, status: Status::RemoteAccess })
                    }
                }
            }
            FrameType::Send | FrameType::SendImm => {
                if !live {
                    return Self::discard(rx, &hdr, AfterPayload::Nothing);
                }
                let retries = st.peer_rnr_retry;
                if place_send(st, rx, hdr) {
                    return ReadOutcome::Continue;
                }
                if retries == 0 {
                    Self::discard(rx, &hdr, AfterPayload::Reply { psn: hdr.psn, status: Status::RnrExceeded })
                } else {
                    let timer = st.qp.as_ref().map_or(Duration::from_micros(640), |q| q.min_rnr_timer);
                    self.timers.schedule(Instant::now() + timer, c.id, TimerKind::Rnr);
                    rx.expecting = Expecting::Rnr { hdr, left: retries };
                    ReadOutcome::Blocked
                }
            }
            _ => ReadOutcome::Broken(format!("unexpected {:?} frame from {}", hdr.ty, c.peer())),
        }
    }

    /// A READ or WRITE of the peer was refused (bad rkey, out of bounds, missing rights): as a
    /// hardware responder's, the queue pair goes to the error state, and later requests of the
    /// peer are refused.
    pub(super) fn remote_access_error(&self, st: &mut ConnState) {
        SoftCounters::bump(&self.device.counters.remote_access_errors);
        st.qp_error();
    }

    /// Completes what a payload fully received was for.
    pub(super) fn finish_payload(
        &mut self,
        c: &Arc<Conn>,
        st: &mut ConnState,
        after: AfterPayload,
        len: u32,
        psn: u32,
    ) {
        let live = st.phase == Phase::Established;
        match after {
            AfterPayload::Nothing => {}
            AfterPayload::Reply { psn, status } => {
                if live {
                    reply(st, psn, status);
                }
            }
            AfterPayload::ReadResp => finish_read_response(c, st, psn),
            recv @ AfterPayload::Recv { .. } => finish_recv(st, recv, len, psn),
        }
    }
}
