//! Reading a connection on the NIC thread: the byte stream framed into headers and payloads,
//! payloads received straight into their destination, within a budget per turn; then the
//! answers queued meanwhile are written.

use std::io::Read;
use std::os::fd::AsFd;
use std::sync::Arc;

use super::state::{io_step, Nic, ReadOutcome, READ_BUDGET};
use crate::memory;
use crate::soft::conn::{AfterPayload, Conn, Expecting, Phase, ReceiveState, RX_BUF};
use crate::soft::wire::{Header, HEADER_LEN};

impl Nic {
    /// Reads and processes frames until the socket is drained, the budget is used, or an RNR
    /// wait stops the connection; then writes the responses queued meanwhile. A connection
    /// whose receive state a polling thread holds is read again later ([`Nic::held`]).
    pub(super) fn drive(&mut self, c: &Arc<Conn>) {
        {
            let mut st = c.st.lock();
            if !self.check_connect(c, &mut st) || st.out.paused() {
                return;
            }
        }
        let Some(mut rx) = c.rx.try_lock() else {
            // A thread polling its CQ is taking its READ responses (`conn/responses.rs`): read
            // the connection again after the device's other connections, a pause and a yield
            // (see `Nic::held`), rather than wait for it here.
            self.held.push(c.id);
            return;
        };
        rx.drained = false;
        let mut budget = READ_BUDGET;
        loop {
            match self.step(c, &mut rx, &mut budget) {
                ReadOutcome::Continue => continue,
                ReadOutcome::Idle | ReadOutcome::Blocked | ReadOutcome::Paused => break,
                ReadOutcome::Done => return,
                ReadOutcome::Yield => {
                    self.ready.push(c.id);
                    break;
                }
                ReadOutcome::Eof => {
                    let closed = c.st.lock().phase == Phase::Closed;
                    if closed {
                        self.close_disconnected(c, &mut rx);
                    } else {
                        self.broken(c, &mut rx, "the peer closed the connection without DISCONNECT");
                    }
                    return;
                }
                ReadOutcome::Broken(why) => {
                    self.broken(c, &mut rx, &why);
                    return;
                }
            }
        }
        let mut st = c.st.lock();
        if st.has_output() {
            match c.flush_out(&mut st) {
                Ok(false) => {}
                Ok(true) => self.ready.push(c.id),
                Err(e) => {
                    drop(st);
                    self.broken(c, &mut rx, &format!("write: {e}"));
                }
            }
        }
    }

    /// Reads more of the stream into the receive buffer.
    pub(super) fn fill(&mut self, c: &Conn, rx: &mut ReceiveState, budget: &mut usize) -> ReadOutcome {
        if rx.buf.is_empty() {
            rx.buf = vec![0; RX_BUF];
        }
        if rx.start > 0 {
            rx.buf.copy_within(rx.start..rx.end, 0);
            rx.end -= rx.start;
            rx.start = 0;
        }
        if std::mem::take(&mut rx.drained) && !rx.peer_closed {
            return ReadOutcome::Idle;
        }
        let end = rx.end;
        let Some(mut sock) = c.sock() else { return ReadOutcome::Idle };
        match sock.read(&mut rx.buf[end..]) {
            Ok(0) => ReadOutcome::Eof,
            Ok(n) => {
                rx.drained = n < rx.buf.len() - end;
                rx.end += n;
                self.charge(budget, n)
            }
            Err(e) => io_step(e),
        }
    }

    /// Takes the next step of reading the stream: a header, a CM frame, or payload bytes.
    pub(super) fn step(&mut self, c: &Arc<Conn>, rx: &mut ReceiveState, budget: &mut usize) -> ReadOutcome {
        match rx.expecting {
            Expecting::Rnr { hdr, .. } if rx.peer_closed => Self::discard(rx, &hdr, AfterPayload::Nothing),
            Expecting::Rnr { .. } => ReadOutcome::Blocked,
            Expecting::Payload { .. } => self.payload(c, rx, budget),
            Expecting::Header => {
                if rx.avail() < HEADER_LEN {
                    return self.fill(c, rx, budget);
                }
                let mut raw = [0u8; HEADER_LEN];
                raw.copy_from_slice(&rx.buf[rx.start..rx.start + HEADER_LEN]);
                let hdr = match Header::decode(&raw, self.device.attrs.max_msg_size) {
                    Ok(h) => h,
                    Err(e) => return ReadOutcome::Broken(format!("protocol error from {}: {e}", c.peer())),
                };
                if hdr.is_control() {
                    let total = HEADER_LEN + hdr.len as usize;
                    if rx.avail() < total {
                        return self.fill(c, rx, budget);
                    }
                    let data = rx.buf[rx.start + HEADER_LEN..rx.start + total].to_vec();
                    rx.start += total;
                    return self.on_control(c, rx, hdr, data);
                }
                rx.start += HEADER_LEN;
                self.on_header(c, rx, hdr)
            }
        }
    }

    /// Receives payload bytes into their destination (or discards them).
    pub(super) fn payload(&mut self, c: &Arc<Conn>, rx: &mut ReceiveState, budget: &mut usize) -> ReadOutcome {
        let Some(mut sock) = c.sock() else { return ReadOutcome::Idle };
        let Expecting::Payload { destination, remaining, .. } = &mut rx.expecting else { return ReadOutcome::Continue };
        // Bytes already buffered first.
        let n = (rx.end - rx.start).min(*remaining);
        if n > 0 {
            if !destination.is_discard() && !destination.write(&rx.buf[rx.start..rx.start + n]) {
                return ReadOutcome::Broken("payload larger than its destination".into());
            }
            rx.start += n;
            *remaining -= n;
        }
        if *remaining > 0 {
            if std::mem::take(&mut rx.drained) && !rx.peer_closed {
                return ReadOutcome::Idle;
            }
            let asked;
            let got = if destination.is_discard() {
                if rx.buf.is_empty() {
                    rx.buf = vec![0; RX_BUF];
                }
                rx.start = 0;
                rx.end = 0;
                let k = (*remaining).min(rx.buf.len());
                asked = k;
                sock.read(&mut rx.buf[..k])
            } else {
                let ranges = destination.ranges(*remaining);
                if ranges.is_empty() {
                    return ReadOutcome::Broken("payload larger than its destination".into());
                }
                asked = ranges.iter().map(|r| r.len()).sum();
                memory::recv_vectored(sock.as_fd(), &ranges)
            };
            match got {
                Ok(0) => return ReadOutcome::Eof,
                Ok(k) => {
                    rx.drained = k < asked;
                    if !destination.is_discard() {
                        destination.advance(k);
                    }
                    *remaining -= k;
                    if *remaining > 0 {
                        return self.charge(budget, k);
                    }
                    *budget = budget.saturating_sub(k);
                }
                Err(e) => return io_step(e),
            }
        }
        if *remaining > 0 {
            return ReadOutcome::Continue;
        }
        let Expecting::Payload { after, len, psn, .. } = std::mem::replace(&mut rx.expecting, Expecting::Header) else {
            return ReadOutcome::Continue;
        };
        self.finish(c, after, len, psn)
    }

    /// Completes what a payload was for, once it is in.
    pub(super) fn finish(&mut self, c: &Arc<Conn>, after: AfterPayload, len: u32, psn: u32) -> ReadOutcome {
        let mut st = c.st.lock();
        self.finish_payload(c, &mut st, after, len, psn);
        self.pause_if_full(c, &mut st, ReadOutcome::Continue)
    }
}
