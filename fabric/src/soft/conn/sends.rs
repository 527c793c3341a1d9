//! A SEND of the peer placed into a posted receive, and its acknowledgement: the steps the NIC
//! thread takes for every SEND of the stream, and a thread woken on the receive CQ's bell takes
//! for a small one it finds in the socket (`responses.rs`), under the same locks (the receive
//! state, then the connection's state).

use super::receive::{AfterPayload, Destination, Expecting, ReceiveState};
use super::{ConnState, FramePayload, OutFrame, Phase};
use crate::soft::recv::Taker;
use crate::soft::wire::{FrameType, Header, Status, AUX_SOLICITED};
use crate::types::*;

/// Queues the acknowledgement (or NAK) of the peer's request `psn`.
pub(crate) fn reply(st: &mut ConnState, psn: u32, status: Status) {
    let mut h = Header::new(FrameType::Ack);
    h.psn = psn;
    h.status = status;
    st.push_out(OutFrame::new(&h, FramePayload::None));
}

/// Tries to place the SEND `hdr`: takes a receive and sets the payload stage (or an error
/// answer). False when no receive is posted (RNR), with nothing changed but the same-host
/// inbox drained.
pub(crate) fn place_send(st: &mut ConnState, rx: &mut ReceiveState, hdr: Header) -> bool {
    // SENDs the peer wrote into the inbox before this one go first.
    st.drain_inbox();
    let own = st.idle_sender();
    let Some(qp) = st.qp.as_mut() else {
        rx.discard(&hdr, AfterPayload::Nothing);
        return true;
    };
    if qp.error {
        rx.discard(&hdr, AfterPayload::Reply { psn: hdr.psn, status: Status::OperationError });
        return true;
    }
    let Some(recv) = qp.take_recv(Taker::Stream { own }).ok().flatten() else {
        if rx.peer_closed {
            rx.discard(&hdr, AfterPayload::Nothing);
            return true;
        }
        return false;
    };
    if recv.cap < hdr.len as usize {
        qp.complete_recv(recv.wr_id, WcStatus::LocalLengthError, 0, None);
        st.qp_error();
        rx.discard(&hdr, AfterPayload::Reply { psn: hdr.psn, status: Status::InvalidRequest });
        return true;
    }
    let imm = (hdr.ty == FrameType::SendImm).then_some(hdr.imm);
    let solicited = hdr.aux & AUX_SOLICITED != 0;
    rx.expecting = Expecting::Payload {
        destination: Destination::new(recv.segs.clone()),
        remaining: hdr.len as usize,
        len: hdr.len,
        after: AfterPayload::Recv { recv, imm, solicited },
        psn: hdr.psn,
    };
    true
}

/// Completes the receive a SEND's payload (`len` bytes, request `psn`) went into and queues the
/// SEND's acknowledgement; on a connection or queue pair that failed meanwhile the receive is
/// flushed.
pub(crate) fn finish_recv(st: &mut ConnState, after: AfterPayload, len: u32, psn: u32) {
    let AfterPayload::Recv { recv, imm, solicited } = after else { return };
    let live = st.phase == Phase::Established;
    let Some(qp) = st.qp.as_mut() else { return };
    if live && !qp.error {
        qp.complete_recv_solicited(recv.wr_id, WcStatus::Success, len, imm, solicited);
        reply(st, psn, Status::Ok);
    } else {
        qp.complete_recv(recv.wr_id, WcStatus::WorkRequestFlushed, 0, None);
    }
}
