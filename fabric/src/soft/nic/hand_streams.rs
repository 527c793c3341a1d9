//! Queue pairs connected by hand, on the NIC thread: the streams of the device's data port
//! (accepted within the handshake limits, read up to their hello and no further, bound to the
//! queue pair in RTR whose peer's endpoint predicts exactly that hello, kept while the queue
//! pair they name is not in RTR yet, refused and counted otherwise, closed when the handshake
//! timeout ends their wait); the dialing end's answer and the peer's readiness on a stream;
//! and requests that waited for a stream longer than their transport wait.

use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::Instant;

use super::state::{Nic, ReadOutcome, ACCEPT_BATCH, DATA_PORT_AGAIN};
use crate::bootstrap::QpState as IbvState;
use crate::provider::ConnId;
use crate::soft::conn::{Conn, ConnState, FramePayload, OutFrame, Phase};
use crate::soft::device::{NicCommand, SoftCounters};
use crate::soft::handshakes::{Admission, Kind};
use crate::soft::hello::Hello;
use crate::soft::hello_streams::{HelloRead, HelloStream};
use crate::soft::shm::Offer;
use crate::soft::timers::TimerKind;
use crate::soft::wire::{CmParams, FrameType, Header, HELLO_LEN};
use crate::types::WcStatus;

/// What becomes of a stream whose hello names a queue pair.
enum Verdict {
    /// Bind it to the queue pair.
    Bind,
    /// Keep it until the queue pair reaches RTR.
    Wait,
    /// Close it: why.
    Refuse(&'static str),
}

/// Whether the queue pair of `st` takes a stream opened with `hello`.
fn verdict(st: &ConnState, hello: &Hello) -> Verdict {
    let Some(hand) = st.hand.as_ref() else { return Verdict::Refuse("that queue pair was not made by hand") };
    if st.phase != Phase::Unbound || st.qp.as_ref().is_none_or(|q| q.error) {
        return Verdict::Refuse("that queue pair has a stream already, failed or closed");
    }
    let Some(remote) = hand.remote.filter(|_| hand.state != IbvState::Init && hand.state != IbvState::Reset) else {
        return Verdict::Wait;
    };
    if hand.dials() {
        return Verdict::Refuse("that queue pair dials its peer itself");
    }
    if *hello != Hello::between(&remote, &hand.local) {
        return Verdict::Refuse("that queue pair's peer endpoint predicts another hello");
    }
    Verdict::Bind
}

impl Nic {
    /// Accepts the streams waiting on the data port, within the handshake limits.
    pub(super) fn accept_hello_streams(&mut self) {
        let Some(port) = self.conns.data_port.lock().clone() else { return };
        for _ in 0..ACCEPT_BATCH {
            match port.sock.accept() {
                Ok((s, peer)) => self.admit_hello_stream(s, peer),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    tracing::warn!("soft NIC: accept on the data port failed: {e}");
                    return;
                }
            }
        }
        self.accept_again.push(DATA_PORT_AGAIN);
    }

    /// Takes a stream of the data port as a handshake of its source (or closes it, counted,
    /// when the source or the device has as many as allowed) and reads its hello.
    fn admit_hello_stream(&mut self, s: TcpStream, peer: SocketAddr) {
        let id = self.device.next_id();
        let base = self.device.handshake_timeout;
        let admission = self.device.handshakes.lock().admit(peer.ip(), id, Kind::Stream, base, |id, kind| {
            super::cm_frames::has_spoken(&self.conns, &self.hello_streams, id, kind)
        });
        let Admission::Admitted { timeout, evict } = admission else {
            tracing::debug!("soft NIC: too many handshakes in progress, closing a stream of the data port from {peer}");
            SoftCounters::bump(&self.device.counters.refused_handshakes);
            return;
        };
        if let Some(evicted) = evict {
            self.evict_handshake(evicted);
        }
        let set_up = s.set_nonblocking(true).and_then(|()| s.set_nodelay(true));
        if let Err(e) = set_up.and_then(|()| self.hello_streams.insert(id, s, peer, &self.device.registry)) {
            tracing::debug!("soft NIC: setting up a stream of the data port from {peer}: {e}");
            self.device.handshakes.lock().release(id);
            return;
        }
        self.timers.schedule(Instant::now() + timeout, id, TimerKind::HelloTimeout);
        // Edge-triggered poll: the hello may be in already.
        self.read_hello(id);
    }

    /// Reads what arrived of stream `id`'s hello and, once it is in, offers the stream to the
    /// queue pair it names.
    pub(super) fn read_hello(&mut self, id: u64) {
        match self.hello_streams.read(id) {
            None | Some(HelloRead::Incomplete) => {}
            Some(HelloRead::Refused(why)) => self.refuse_stream(id, &why),
            Some(HelloRead::Complete(hdr, hello)) => {
                self.device.handshakes.lock().spoke(id);
                self.offer_stream(id, &hdr, &hello)
            }
        }
    }

    /// The queue pair of connection `conn` reached RTR: binds the stream waiting for it, if
    /// one is.
    pub(super) fn bind_waiting(&mut self, conn: ConnId) {
        let Some(c) = self.conn(conn) else { return };
        let Some(qp_num) = c.st.lock().hand.as_ref().map(|h| h.local.qp_num) else { return };
        for id in self.hello_streams.waiting_for(qp_num) {
            self.read_hello(id);
        }
    }

    /// Binds stream `id` to the queue pair its hello names, keeps it waiting, or refuses it.
    fn offer_stream(&mut self, id: u64, hdr: &Header, hello: &Hello) {
        let Some(c) = self.conns.by_qp_num(hello.target_qp_num) else {
            return self.refuse_stream(id, "it names no queue pair of this device");
        };
        let mut st = c.st.lock();
        match verdict(&st, hello) {
            Verdict::Wait => {}
            Verdict::Refuse(why) => {
                drop(st);
                self.refuse_stream(id, why);
            }
            Verdict::Bind => {
                if let Some(stream) = self.drop_stream(id) {
                    self.bind(&c, &mut st, stream, hdr);
                }
            }
        }
    }

    /// Makes `stream` the connection's: established, the answering hello queued ahead of what
    /// was posted meanwhile (with this device's same-host offer if the peer made one from this
    /// host), and what the peer sent after its hello read on the next turn.
    fn bind(&mut self, c: &Arc<Conn>, st: &mut ConnState, stream: HelloStream, hdr: &Header) {
        let Some((local, Some(remote))) = st.hand.as_ref().map(|h| (h.local, h.remote)) else { return };
        if !c.attach_stream(stream.sock) {
            return;
        }
        st.tcp_up = true;
        st.phase = Phase::Established;
        self.timers.cancel(c.id, TimerKind::TransportTimeout);
        let mut h = Header::new(FrameType::Hello);
        h.len = HELLO_LEN as u32;
        let offer = Offer::from_header(hdr);
        if let Some((ep, offer)) = self.device.shm.as_ref().zip(offer).filter(|(ep, o)| ep.same_boot(o)) {
            c.set_same_host(ep.connect(&offer));
            c.offer_same_host(st, &mut h);
        }
        let answer = Hello::between(&local, &remote).encode();
        st.push_first(OutFrame::new(&h, FramePayload::Bytes(answer.to_vec())));
        if let Err(e) = c.register(st, true) {
            self.device.command(NicCommand::Broken(c.id, format!("polling the stream from {}: {e}", c.peer())));
            return;
        }
        self.ready.push(c.id);
    }

    /// Closes stream `id`, counted: its hello is malformed or names no queue pair that takes it.
    fn refuse_stream(&mut self, id: u64, why: &str) {
        if let Some(s) = self.drop_stream(id) {
            tracing::debug!("soft NIC: refusing a stream of the data port from {}: {why}", s.peer);
            SoftCounters::bump(&self.device.counters.rejected_hellos);
        }
    }

    /// Stream `id` waited too long for its hello or its queue pair: closed, counted.
    pub(super) fn hello_timed_out(&mut self, id: u64) {
        if let Some(s) = self.drop_stream(id) {
            tracing::debug!("soft NIC: no hello, or no queue pair for it, from {} in time", s.peer);
            SoftCounters::bump(&self.device.counters.handshake_timeouts);
        }
    }

    /// Takes stream `id` out of the waiting ones, giving back its handshake slot.
    pub(super) fn drop_stream(&mut self, id: u64) -> Option<HelloStream> {
        let s = self.hello_streams.remove(id, &self.device.registry)?;
        self.device.handshakes.lock().release(id);
        self.timers.cancel(id, TimerKind::HelloTimeout);
        Some(s)
    }

    /// Closes every waiting stream (the device is closing).
    pub(super) fn drop_hello_streams(&mut self) {
        for id in self.hello_streams.ids() {
            self.drop_stream(id);
        }
    }

    /// The answering hello on the dialing end's stream: the stream is bound if it is exactly
    /// the hello the peer's endpoint predicts (the same-host path opens now if both ends
    /// offered it, as at an ACCEPT); anything else breaks the stream.
    pub(super) fn on_hello_answer(&mut self, c: &Conn, st: &mut ConnState, hdr: &Header, data: &[u8]) -> ReadOutcome {
        let expected = st.hand.as_ref().filter(|h| h.dials()).and_then(|h| Some(Hello::between(&h.remote?, &h.local)));
        if expected.is_none() || expected != Hello::decode(data) {
            return ReadOutcome::Broken(format!("{} answered with a hello this queue pair does not expect", c.peer()));
        }
        let offer = Offer::from_header(hdr);
        if let Some((ep, offer)) = self.device.shm.as_ref().zip(offer).filter(|_| st.shm_nonce != 0) {
            c.set_same_host(ep.connect(&offer));
        }
        st.phase = Phase::Established;
        self.timers.cancel(c.id, TimerKind::TransportTimeout);
        ReadOutcome::Continue
    }

    /// The peer's queue pair moved to RTS: its SENDs get the RNR retries it asks for.
    pub(super) fn on_ready(st: &mut ConnState, hdr: &Header) -> ReadOutcome {
        match CmParams::from_aux(hdr.aux) {
            Some(params) => {
                st.peer_rnr_retry = params.rnr_retry;
                ReadOutcome::Continue
            }
            None => ReadOutcome::Broken("invalid READY parameters".into()),
        }
    }

    /// Requests of a queue pair connected by hand waited for a stream to the peer as long as
    /// RTS allows: they fail with retry exceeded, the queue pair goes to the error state (its
    /// receives are flushed) and its stream, if it dialed one, is closed.
    pub(super) fn transport_timeout(&mut self, c: &Conn) {
        let mut st = c.st.lock();
        if st.phase != Phase::Unbound {
            return;
        }
        self.lose_stream(c, &mut st, "its requests waited too long for it");
        st.drop_unsent_requests();
        st.fail_qp(WcStatus::TransportRetryExceeded);
    }
}
