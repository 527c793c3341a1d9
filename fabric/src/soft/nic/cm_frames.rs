//! The connection manager's side of the NIC thread: accepting TCP connections on listeners,
//! finishing this end's TCP connects, and the frames that set up or end a connection
//! (CONNECT_REQ, ACCEPT, REJECT, DISCONNECT; the hello and READY of queue pairs connected by
//! hand).

use std::io;
use std::sync::Arc;
use std::time::Instant;

use super::state::{Nic, ReadOutcome, ACCEPT_BATCH};
use crate::soft::conn::{connect_failure, Conn, ConnState, IncomingRequest, NicCmEvent, Phase, ReceiveState};
use crate::soft::connections::Connections;
use crate::soft::device::SoftCounters;
use crate::soft::handshakes::{Admission, Kind};
use crate::soft::hello_streams::HelloStreams;
use crate::soft::shm::Offer;
use crate::soft::timers::TimerKind;
use crate::soft::wire::{CmParams, FrameType, Header, HEADER_LEN};
use crate::types::*;

impl Nic {
    /// Accepts the TCP connections waiting on listener `id`, within the handshake limits.
    pub(super) fn accept(&mut self, id: u64) {
        let Some(entry) = self.conns.listeners.lock().get(&id).cloned() else { return };
        for _ in 0..ACCEPT_BATCH {
            match entry.sock.accept() {
                Ok((s, peer)) => {
                    let set_up = s.set_nonblocking(true).and_then(|_| s.set_nodelay(true));
                    let conn =
                        Conn::new(self.device.clone(), s, peer, Phase::Incoming, None, Some(entry.channel.clone()));
                    let base = self.device.handshake_timeout;
                    let admission =
                        self.device.handshakes.lock().admit(peer.ip(), conn.id, Kind::Conn, base, |id, kind| {
                            has_spoken(&self.conns, &self.hello_streams, id, kind)
                        });
                    let Admission::Admitted { timeout, evict } = admission else {
                        tracing::debug!("soft NIC: too many connect handshakes in progress, closing one from {peer}");
                        SoftCounters::bump(&self.device.counters.refused_handshakes);
                        continue;
                    };
                    if let Some(evicted) = evict {
                        self.evict_handshake(evicted);
                    }
                    let mut st = conn.st.lock();
                    st.handshake_slot = true;
                    if let Err(e) = set_up.and_then(|_| conn.register(&mut st, false)) {
                        tracing::debug!("soft NIC: setting up a connection from {peer}: {e}");
                        conn.end_handshake(&mut st);
                        continue;
                    }
                    self.conns.open.lock().insert(conn.id, conn.clone());
                    self.timers.schedule(Instant::now() + timeout, conn.id, TimerKind::HandshakeTimeout);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    tracing::warn!("soft NIC: accept failed: {e}");
                    return;
                }
            }
        }
        self.accept_again.push(id);
    }

    /// Closes a handshake that gave way to a newcomer (the table or its prefix was full and
    /// it was the oldest that had not spoken), counted.
    pub(super) fn evict_handshake(&mut self, (id, kind): (u64, Kind)) {
        SoftCounters::bump(&self.device.counters.evicted_handshakes);
        match kind {
            Kind::Conn => {
                if let Some(c) = self.conn(id) {
                    tracing::debug!("soft NIC: a silent connect handshake from {} gives way to a newcomer", c.peer());
                    let mut rx = c.rx.lock();
                    self.close_disconnected(&c, &mut rx);
                }
            }
            Kind::Stream => {
                self.drop_stream(id);
            }
        }
    }

    /// Checks an active connection's TCP handshake; false while it is still in progress or
    /// when it failed (the connection is then closed).
    pub(super) fn check_connect(&mut self, c: &Arc<Conn>, st: &mut ConnState) -> bool {
        if st.tcp_up {
            return true;
        }
        let Some(sock) = c.sock() else { return false };
        let err = match sock.take_error() {
            Ok(Some(e)) | Err(e) => Some(e),
            Ok(None) => match sock.peer_addr() {
                Ok(_) => None,
                Err(e) if e.kind() == io::ErrorKind::NotConnected => return false,
                Err(e) => Some(e),
            },
        };
        match err {
            None => {
                st.tcp_up = true;
                true
            }
            Some(e) if st.phase == Phase::Unbound => {
                self.lose_stream(c, st, &format!("connect to {}: {e}", c.peer()));
                false
            }
            Some(e) => {
                let ev = (st.phase == Phase::Connecting).then(|| connect_failure(c.id, c.peer(), &e));
                self.close_with(c, st, ev);
                false
            }
        }
    }

    /// Handles a CM frame (CONNECT_REQ, ACCEPT, REJECT, DISCONNECT).
    pub(super) fn on_control(
        &mut self,
        c: &Arc<Conn>,
        rx: &mut ReceiveState,
        hdr: Header,
        data: Vec<u8>,
    ) -> ReadOutcome {
        let mut st = c.st.lock();
        match (hdr.ty, st.phase) {
            (FrameType::ConnectReq, Phase::Incoming) => {
                let Some(params) = CmParams::from_aux(hdr.aux) else {
                    return ReadOutcome::Broken("invalid CM parameters".into());
                };
                st.peer_rnr_retry = params.rnr_retry;
                st.peer_responder_resources = params.responder_resources;
                st.peer_offer = Offer::from_header(&hdr);
                st.phase = Phase::Requested;
                self.timers.cancel(c.id, TimerKind::HandshakeTimeout);
                self.device.handshakes.lock().spoke(c.id);
                let ch = st.channel.clone();
                drop(st);
                if let Some(ch) = ch {
                    ch.push(NicCmEvent::ConnectRequest(IncomingRequest { conn: c.clone(), data }));
                }
                ReadOutcome::Continue
            }
            (FrameType::Accept, Phase::Connecting) => {
                let Some(params) = CmParams::from_aux(hdr.aux) else {
                    return ReadOutcome::Broken("invalid CM parameters".into());
                };
                st.peer_rnr_retry = params.rnr_retry;
                if let Some(qp) = st.qp.as_mut() {
                    qp.limit_initiator_depth(params.responder_resources);
                }
                // Same-host path: both ends offered, and this end's stream opens (or not)
                // before the connection is reported established.
                let offer = Offer::from_header(&hdr);
                if let Some((ep, offer)) = self.device.shm.as_ref().zip(offer).filter(|_| st.shm_nonce != 0) {
                    c.set_same_host(ep.connect(&offer));
                }
                st.phase = Phase::Established;
                self.timers.cancel(c.id, TimerKind::ConnectTimeout);
                st.event(NicCmEvent::Established { conn: c.id, private_data: data });
                ReadOutcome::Continue
            }
            (FrameType::Reject, Phase::Connecting) => {
                let rejected = NicCmEvent::Rejected { conn: c.id, reason: RejectReason::Consumer, private_data: data };
                self.close_with(c, &mut st, Some(rejected));
                ReadOutcome::Done
            }
            (FrameType::Disconnect, Phase::Established) => {
                drop(st);
                self.abort_rx(c, rx);
                let mut st = c.st.lock();
                st.clear_output();
                st.fail_qp(WcStatus::WorkRequestFlushed);
                self.close_with(c, &mut st, Some(NicCmEvent::Disconnected { conn: c.id }));
                ReadOutcome::Done
            }
            (FrameType::Hello, Phase::Unbound) => self.on_hello_answer(c, &mut st, &hdr, &data),
            (FrameType::Ready, Phase::Established) if st.hand.is_some() => Self::on_ready(&mut st, &hdr),
            (_, Phase::Unbound) => {
                ReadOutcome::Broken(format!("{:?} frame from {} before its hello", hdr.ty, c.peer()))
            }
            (FrameType::Disconnect, _) | (_, Phase::Closed) => {
                drop(st);
                self.close_disconnected(c, rx);
                ReadOutcome::Done
            }
            (ty, phase) => ReadOutcome::Broken(format!("{ty:?} frame from {} while {}", c.peer(), phase.name())),
        }
    }
}

/// Whether handshake `id` (of `kind`) has at least a frame header waiting to be read: it has
/// spoken, and must not give way to a newcomer (the NIC may take in many connections before
/// it reads any of them).
pub(super) fn has_spoken(conns: &Connections, streams: &HelloStreams, id: u64, kind: Kind) -> bool {
    let mut buf = [0u8; HEADER_LEN];
    let peeked = |sock: &std::net::TcpStream| sock.peek(&mut buf).unwrap_or(0);
    match kind {
        Kind::Conn => {
            let conn = conns.open.lock().get(&id).cloned();
            conn.and_then(|c| c.sock().map(peeked)).unwrap_or(0) >= HEADER_LEN
        }
        Kind::Stream => streams.pending_bytes(id, peeked) >= HEADER_LEN,
    }
}
