//! The answers to this end's requests (ACKs of its SENDs and WRITEs, READ responses), taken
//! either by the NIC thread or, while a user thread polls an empty CQ with a READ of the
//! connection on the wire, by that thread itself ([`receive`], `Look::Answers`); and the small
//! SENDs a thread woken on its receive CQ's bell places itself (`Look::AnswersAndSends`).
//!
//! Taking a READ response on the polling thread removes a hop from the path of a small READ: the
//! response lands in the socket, and the thread that waits for it reads it into the READ's
//! destination and completes the READ, instead of the NIC thread being scheduled to do so and
//! the poller then finding the completion (on 2 vCPUs shared by four busy threads each hop
//! costs microseconds to tens of microseconds). It changes nothing of what the connection does:
//! the same checks, the same completions in the same order, under the same locks (the receive
//! state `rx`, then `st`), and only the frames whose handling needs no NIC thread state (ACKs,
//! READ responses of up to [`POLLED_READ_MAX`] bytes; the poller peeks at the next header before
//! it reads the stream). Anything else (a SEND, a READ request, a large READ response, a CM
//! frame, a frame that would cut the connection, the end of the stream) is left where it is,
//! unconsumed, and, if this thread read bytes ahead of it, the NIC thread is told to read the
//! connection (its edge-triggered poll signals every arrival too, so they are found either way).
//!
//! # A parked poller woken in one hop
//!
//! A connection that READs over the network also has its socket watched by the bell of its
//! receive CQ (`CqInner::attach_stream`, the epoll set a parked owner sleeps on; the pulling
//! side only, so a publisher's parked owner is not woken by each READ request it serves), while
//! the connection awaits no READ response larger than [`POLLED_READ_MAX`] (chosen when the
//! owner arms: each segment of a large one would wake it for nothing it takes). An arrival
//! wakes the owner, and its next poll looks into the socket with
//! `Look::AnswersAndSends`: besides the answers, a SEND of at most [`POLLED_SEND_MAX`] bytes
//! (a doorbell, a credit) is placed into the next posted receive, its payload received
//! straight into it, the receive completed and the SEND acknowledged, by the same code the NIC
//! thread runs (`sends.rs`), in stream order. The path of a doorbell to a parked subscriber is
//! then publisher → subscriber thread, where it was publisher → subscriber's NIC thread →
//! subscriber thread (each hop a wake-up of a thread, tens of µs from an idle vCPU). What stays
//! the NIC thread's: a SEND that finds no posted receive (its RNR wait and timer), a SEND while
//! acknowledgements owed are still unwritten (the pause of a peer that reads none), a large
//! SEND, and everything a spinning poller leaves too. The NIC thread is woken by the same
//! arrival (its own edge-triggered poll) and, finding the socket read, has nothing to do; a
//! frame the woken thread takes no part of is read by it as before. A NIC thread that finds
//! the receive state held reads the connection again only after a pause and a yield of its
//! CPU (`Nic::held`): the holder may be the thread it has just preempted.

use std::io::{self, Read};
use std::os::fd::{AsFd, BorrowedFd};

use super::receive::{AfterPayload, Destination, Expecting, ReceiveState};
use super::sends::{finish_recv, place_send};
use super::{Conn, ConnState, InFlight, Phase};
use crate::memory;
use crate::soft::cq::ResponseSource;
use crate::soft::device::NicCommand;
use crate::soft::wire::{FrameType, Header, Status, HEADER_LEN};
use crate::types::*;

/// Frames one look of a polling thread takes at most before it leaves the rest to the NIC
/// thread (a poller's call stays short).
const FRAMES_PER_LOOK: usize = 64;
/// The largest READ response a polling thread takes: small READs are where a hop costs (the
/// probe of a caught-up subscriber, a message READ alone); a large one is received by the NIC
/// thread while the poller validates the READ before it, as before.
pub(crate) const POLLED_READ_MAX: u32 = 16 << 10;
/// The largest SEND a woken poller places: the doorbells and credits of a feed are tens of
/// bytes; a large SEND is the NIC thread's, as before.
pub(crate) const POLLED_SEND_MAX: u32 = 16 << 10;

/// What a look may take.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Look {
    /// A spinning poller's: ACKs and small READ responses, while a READ is on the wire.
    Answers,
    /// A woken poller's: those, and the small SENDs that find a posted receive.
    AnswersAndSends,
}

/// Handles the ACK (or NAK) of the request at the front of the send queue. An ACK that answers
/// nothing in flight is an error, returned before anything changes.
pub(crate) fn on_ack(c: &Conn, st: &mut ConnState, hdr: &Header) -> Result<(), String> {
    let live = st.phase == Phase::Established;
    let Some(qp) = st.qp.as_mut().filter(|q| live && !q.error) else { return Ok(()) };
    match qp.inflight.front() {
        Some(f) if f.psn == hdr.psn && matches!(f.op, WcOpcode::Send | WcOpcode::RdmaWrite) => {}
        _ => return Err(format!("unexpected acknowledgement {} from {}", hdr.psn, c.peer())),
    }
    let f = qp.inflight.pop_front().expect("front checked");
    qp.retire(f, hdr.status.wc_status());
    if hdr.status == Status::Ok {
        c.run_local_front(st);
    } else {
        st.qp_error();
    }
    Ok(())
}

/// Handles the header of a READ response: its payload goes into the destination of the READ
/// at the front of the send queue (or, on a dead queue pair, nowhere); a NAK completes the
/// READ with its error. A response that answers no READ in flight, or of another length, is
/// an error, returned before anything changes.
pub(crate) fn on_read_response(
    c: &Conn,
    st: &mut ConnState,
    rx: &mut ReceiveState,
    hdr: &Header,
) -> Result<(), String> {
    let live = st.phase == Phase::Established;
    let Some(qp) = st.qp.as_mut().filter(|q| live && !q.error) else {
        rx.discard(hdr, AfterPayload::Nothing);
        return Ok(());
    };
    let front_ok = matches!(qp.inflight.front(), Some(f) if f.psn == hdr.psn && f.op == WcOpcode::RdmaRead);
    if !front_ok {
        return Err(format!("unexpected READ response {} from {}", hdr.psn, c.peer()));
    }
    if hdr.status != Status::Ok {
        let f = qp.inflight.pop_front().expect("front checked");
        qp.retire(f, hdr.status.wc_status());
        st.qp_error();
        return Ok(());
    }
    let f = qp.inflight.front_mut().expect("front checked");
    if f.len != hdr.len {
        return Err(format!("READ response of {} bytes for {} from {}", hdr.len, f.len, c.peer()));
    }
    f.busy = true;
    rx.expecting = Expecting::Payload {
        destination: Destination::new(f.dest.clone()),
        remaining: hdr.len as usize,
        len: hdr.len,
        after: AfterPayload::ReadResp,
        psn: hdr.psn,
    };
    Ok(())
}

/// Completes the READ `psn` once its response's payload is in: the requests held behind the
/// initiator depth may go out.
pub(crate) fn finish_read_response(c: &Conn, st: &mut ConnState, psn: u32) {
    let live = st.phase == Phase::Established;
    let Some(qp) = st.qp.as_mut() else { return };
    match qp.inflight.front() {
        Some(f) if f.busy && f.psn == psn => {}
        _ => return,
    }
    let f = qp.inflight.pop_front().expect("front checked");
    let status = if live && !qp.error { WcStatus::Success } else { WcStatus::WorkRequestFlushed };
    qp.retire(f, status);
    if status.is_success() {
        st.read_answered();
        c.run_local_front(st);
    }
}

/// What one step of a polling thread's look came to.
enum Step {
    /// Go on.
    Continue,
    /// The socket is empty: every later arrival is signaled to the NIC thread.
    Empty,
    /// The next frame (or the stream's end, or an error) is the NIC thread's to handle.
    HandOff,
}

impl ResponseSource for Conn {
    fn receive_on_poll(&self) {
        receive(self, Look::Answers);
    }

    fn receive_on_wake(&self) {
        receive(self, Look::AnswersAndSends);
    }

    fn stream(&self) -> Option<BorrowedFd<'_>> {
        self.sock().map(|s| s.as_fd())
    }

    fn awaits_no_large_read(&self) -> bool {
        let st = self.st.lock();
        let small = |f: &InFlight| f.op != WcOpcode::RdmaRead || f.len <= POLLED_READ_MAX;
        st.phase == Phase::Established && st.qp.as_ref().is_some_and(|qp| qp.inflight.iter().all(small))
    }
}

/// A user thread polling an empty CQ (`Look::Answers`) takes the ACKs and READ responses
/// waiting in `c`'s socket itself, when `c` has a READ on the wire; a thread woken on the
/// receive CQ's bell (`Look::AnswersAndSends`) takes them and places the small SENDs; either
/// only when the NIC thread is not reading the connection (see the module doc).
fn receive(c: &Conn, look: Look) {
    let Some(mut rx) = c.rx.try_lock() else { return };
    {
        let st = c.st.lock();
        let waiting = st.phase == Phase::Established
            && !st.out.paused()
            && st.qp.as_ref().is_some_and(|qp| !qp.error && (look == Look::AnswersAndSends || qp.reads_out > 0));
        if !waiting {
            return;
        }
    }
    // Whether this look read or took anything: if it then stops short of an empty socket, the
    // NIC thread is told to read on (it would be anyway, by the poll's signal of those bytes;
    // this does not depend on it).
    let mut moved = false;
    for _ in 0..FRAMES_PER_LOOK {
        let step = match rx.expecting {
            Expecting::Header => header_step(c, &mut rx, look),
            Expecting::Payload { after: AfterPayload::ReadResp, .. } => payload_step(c, &mut rx),
            Expecting::Payload { after: AfterPayload::Recv { .. }, .. } if look == Look::AnswersAndSends => {
                payload_step(c, &mut rx)
            }
            // A WRITE's payload, one discarded, a SEND's for a spinning poller, a SEND waiting
            // for a receive: the NIC's.
            Expecting::Payload { .. } | Expecting::Rnr { .. } => Step::HandOff,
        };
        match step {
            Step::Continue => moved = true,
            Step::Empty => return,
            Step::HandOff => break,
        }
    }
    if moved {
        c.device.command(NicCommand::Resume(c.id));
    }
}

/// The next header: an ACK or a READ response is taken, and on `Look::AnswersAndSends` a small
/// SEND that finds a posted receive; anything else is left to the NIC thread.
fn header_step(c: &Conn, rx: &mut ReceiveState, look: Look) -> Step {
    if rx.avail() < HEADER_LEN {
        return peek_then_fill(c, rx, look);
    }
    let mut raw = [0u8; HEADER_LEN];
    raw.copy_from_slice(&rx.buf[rx.start..rx.start + HEADER_LEN]);
    let Some(hdr) = takeable(c, &raw, look) else { return Step::HandOff };
    let mut st = c.st.lock();
    let taken = match hdr.ty {
        FrameType::Ack => on_ack(c, &mut st, &hdr),
        FrameType::ReadResp => on_read_response(c, &mut st, rx, &hdr),
        _ => take_send(&mut st, rx, hdr),
    };
    if taken.is_err() {
        // The NIC reads the frame again: it cuts the connection (an answer to nothing), or
        // waits for a receive (a SEND).
        return Step::HandOff;
    }
    rx.start += HEADER_LEN;
    if st.has_output() {
        c.flush_from_user(&mut st);
    }
    Step::Continue
}

/// The header in `raw`, if it is a frame a polling thread takes: an ACK, a READ response of at
/// most [`POLLED_READ_MAX`] bytes, and on `Look::AnswersAndSends` a SEND of at most
/// [`POLLED_SEND_MAX`].
fn takeable(c: &Conn, raw: &[u8; HEADER_LEN], look: Look) -> Option<Header> {
    let hdr = Header::decode(raw, c.device.attrs.max_msg_size).ok()?;
    match hdr.ty {
        FrameType::Ack => Some(hdr),
        FrameType::ReadResp if hdr.len <= POLLED_READ_MAX => Some(hdr),
        FrameType::Send | FrameType::SendImm if look == Look::AnswersAndSends && hdr.len <= POLLED_SEND_MAX => {
            Some(hdr)
        }
        _ => None,
    }
}

/// Places the SEND `hdr` into a posted receive, as the NIC thread does; `Err` (the frame left
/// to the NIC thread, nothing changed) when no receive is posted (the RNR wait and its timer
/// are the NIC's), or when the acknowledgements owed are not all written yet (the pause of a
/// peer that reads none of them is the NIC's too).
fn take_send(st: &mut ConnState, rx: &mut ReceiveState, hdr: Header) -> Result<(), String> {
    if st.has_output() {
        return Err("output waiting".into());
    }
    if place_send(st, rx, hdr) {
        Ok(())
    } else {
        Err("no receive posted".into())
    }
}

/// With nothing buffered, looks at the next header in the socket without taking it (a frame
/// this thread leaves to the NIC thread stays in the socket, untouched), and reads the stream
/// into the receive buffer only if the frame is one it takes.
fn peek_then_fill(c: &Conn, rx: &mut ReceiveState, look: Look) -> Step {
    if rx.avail() > 0 {
        // Part of a header, read by the NIC thread: the NIC thread's to finish.
        return Step::HandOff;
    }
    let Some(sock) = c.sock() else { return Step::HandOff };
    let mut raw = [0u8; HEADER_LEN];
    match sock.peek(&mut raw) {
        Ok(0) => Step::HandOff,
        Ok(n) if n < HEADER_LEN => Step::Empty,
        Ok(_) if takeable(c, &raw, look).is_none() => Step::HandOff,
        Ok(_) => fill(c, rx),
        Err(e) => io_step(&e),
    }
}

/// Reads more of the stream into the receive buffer.
fn fill(c: &Conn, rx: &mut ReceiveState) -> Step {
    if rx.buf.is_empty() {
        rx.buf = vec![0; super::RX_BUF];
    }
    if rx.start > 0 {
        rx.buf.copy_within(rx.start..rx.end, 0);
        rx.end -= rx.start;
        rx.start = 0;
    }
    let Some(mut sock) = c.sock() else { return Step::HandOff };
    let end = rx.end;
    if end == rx.buf.len() {
        return Step::HandOff;
    }
    match sock.read(&mut rx.buf[end..]) {
        Ok(0) => Step::HandOff,
        Ok(n) => {
            rx.end += n;
            Step::Continue
        }
        Err(e) => io_step(&e),
    }
}

/// Receives the payload of a READ response or a SEND into its destination (buffered bytes
/// first), and completes the READ or the receive (acknowledging the SEND) once it is in.
fn payload_step(c: &Conn, rx: &mut ReceiveState) -> Step {
    let ReceiveState { buf, start, end, expecting, .. } = rx;
    let Expecting::Payload { destination, remaining, .. } = expecting else { return Step::HandOff };
    let n = (*end - *start).min(*remaining);
    if n > 0 {
        if !destination.write(&buf[*start..*start + n]) {
            return Step::HandOff;
        }
        *start += n;
        *remaining -= n;
    }
    if *remaining > 0 {
        let Some(sock) = c.sock() else { return Step::HandOff };
        let ranges = destination.ranges(*remaining);
        if ranges.is_empty() {
            return Step::HandOff;
        }
        match memory::recv_vectored(sock.as_fd(), &ranges) {
            Ok(0) => return Step::HandOff,
            Ok(k) => {
                destination.advance(k);
                *remaining -= k;
            }
            Err(e) => return io_step(&e),
        }
        if *remaining > 0 {
            return Step::Continue;
        }
    }
    let Expecting::Payload { after, len, psn, .. } = std::mem::replace(&mut rx.expecting, Expecting::Header) else {
        return Step::HandOff;
    };
    let mut st = c.st.lock();
    match after {
        AfterPayload::ReadResp => finish_read_response(c, &mut st, psn),
        recv => finish_recv(&mut st, recv, len, psn),
    }
    if st.has_output() {
        c.flush_from_user(&mut st);
    }
    Step::Continue
}

/// What a failed read means for a polling thread's look.
fn io_step(e: &io::Error) -> Step {
    match e.kind() {
        io::ErrorKind::WouldBlock => Step::Empty,
        io::ErrorKind::Interrupted => Step::Continue,
        _ => Step::HandOff,
    }
}
