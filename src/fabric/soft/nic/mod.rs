//! The NIC thread of a soft device: a `mio` loop over the listeners and connections that
//! parses incoming frames, serves remote READs and WRITEs from registered memory, places
//! SENDs into posted receives (with RNR waits), and completes work requests.

use std::io::{self, Read};
use std::os::fd::{AsFd, AsRawFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mio::unix::SourceFd;
use mio::{Events, Poll, Token};

use super::cm::{connect_failure, ChannelInner, Ev};
use super::conn::{Conn, ConnState, OutFrame, Phase, RecvWr, Seg, Tail};
use super::device::{Shared, SoftCounters};
use super::shm::{Offer, Streams};
pub(crate) use super::timers::TimerKind;
use super::timers::Timers;
use super::wire::{CmParams, FrameType, Header, Status, AUX_SOLICITED, HEADER_LEN};
use crate::fabric::memory::{self, RawRange, MAX_IOV};
use crate::fabric::provider::ConnId;
use crate::fabric::types::*;

/// Token of the waker.
pub(crate) const WAKER: Token = Token(0);
/// Tokens of listeners have this bit set; connections use their id.
pub(crate) const LISTENER_BIT: usize = 1 << 62;
/// Receive buffer of a connection (headers and small frames).
const RX_BUF: usize = 16 * 1024;
/// Bytes one connection may read before others get a turn.
const READ_BUDGET: usize = 4 << 20;
/// Pause instructions between two polls of the sockets while the NIC thread spins.
const SPIN_PAUSES: u32 = 64;
/// How long a connection whose reading is paused (its answers over `OUT_CAP`, unread by the
/// peer) may go without writing a byte before it is cut (`FabricCounters::output_stalls`).
pub const OUTPUT_STALL_TIMEOUT: Duration = Duration::from_secs(2);

/// A request from a user thread to the NIC thread.
pub(crate) enum Cmd {
    /// Stop the thread (the device is closing).
    Stop,
    /// Run a timer of a connection.
    Timer(Instant, ConnId, TimerKind),
    /// The connection's transport failed.
    Broken(ConnId, String),
    /// A user thread's write ended a pause of reading the connection.
    Resume(ConnId),
}

/// A listening socket and the channel its requests go to.
pub(crate) struct ListenerEntry {
    pub(crate) sock: std::net::TcpListener,
    pub(crate) channel: Arc<ChannelInner>,
}

/// Where incoming bytes go.
struct Sink {
    segs: Vec<Seg>,
    idx: usize,
    pos: usize,
}

impl Sink {
    fn new(segs: Vec<Seg>) -> Self {
        Sink { segs, idx: 0, pos: 0 }
    }

    fn is_discard(&self) -> bool {
        self.segs.is_empty()
    }

    fn advance(&mut self, mut n: usize) {
        while n > 0 && self.idx < self.segs.len() {
            let room = self.segs[self.idx].len - self.pos;
            let k = room.min(n);
            self.pos += k;
            n -= k;
            if self.pos == self.segs[self.idx].len {
                self.idx += 1;
                self.pos = 0;
            }
        }
    }

    /// Copies buffered bytes into the segments; false if they do not fit.
    fn write(&mut self, mut data: &[u8]) -> bool {
        while !data.is_empty() {
            let Some(s) = self.segs.get(self.idx) else { return false };
            let k = (s.len - self.pos).min(data.len());
            if s.buf.write(s.off + self.pos, &data[..k]).is_err() {
                return false;
            }
            data = &data[k..];
            self.advance(k);
        }
        true
    }

    /// The raw ranges of the next `limit` bytes.
    fn ranges(&self, limit: usize) -> Vec<RawRange<'_>> {
        let mut out = Vec::new();
        let mut left = limit;
        let mut pos = self.pos;
        for s in self.segs.iter().skip(self.idx) {
            if left == 0 || out.len() == MAX_IOV {
                break;
            }
            let k = (s.len - pos).min(left);
            if let Ok(r) = s.buf.range(s.off + pos, k) {
                if k > 0 {
                    out.push(r);
                }
            }
            left -= k;
            pos = 0;
        }
        out
    }
}

/// What to do once a payload is in.
enum Then {
    /// Complete the READ at the front of the send queue.
    ReadResp,
    /// Complete the receive and acknowledge the SEND.
    Recv { recv: RecvWr, imm: Option<u32>, solicited: bool },
    /// Answer the request `psn` with `status`.
    Reply { psn: u32, status: Status },
    /// Nothing.
    Nothing,
}

enum Stage {
    Header,
    Payload {
        sink: Sink,
        remaining: usize,
        len: u32,
        then: Then,
        psn: u32,
    },
    /// A SEND waits for a receive; reading this connection stops (RC ordering).
    Rnr {
        hdr: Header,
        left: u8,
    },
}

/// The receive state of a connection (NIC thread only).
pub(crate) struct Rx {
    buf: Vec<u8>,
    start: usize,
    end: usize,
    stage: Stage,
    /// The peer closed its side: SENDs without a receive are dropped rather than waited for.
    peer_closed: bool,
    /// The last read returned less than it asked for: the socket is empty, so the next read
    /// of this drive would only return EAGAIN. Safe with edge-triggered epoll on Linux, which
    /// signals every arrival, not only the transition from empty. Not trusted once the peer
    /// closed: its FIN may already be queued behind the data (and signaled), and only a read
    /// returning 0 reveals it.
    drained: bool,
}

impl Rx {
    pub(crate) fn new() -> Self {
        Rx { buf: Vec::new(), start: 0, end: 0, stage: Stage::Header, peer_closed: false, drained: false }
    }
    fn avail(&self) -> usize {
        self.end - self.start
    }
}

enum Step {
    Continue,
    /// Nothing more to read now.
    Idle,
    /// The peer leaves its answers unread: reading stops until it has read enough.
    Paused,
    /// Budget used up: continue on the next turn.
    Yield,
    /// Waiting for a receive (RNR).
    Blocked,
    Eof,
    /// The connection was closed while processing.
    Done,
    Broken(String),
}

struct Nic {
    shared: Arc<Shared>,
    timers: Timers,
    ready: Vec<ConnId>,
    /// Same-host streams of peers on this host (see `shm`).
    streams: Streams,
}

/// The NIC thread's main loop.
pub(crate) fn run(shared: Arc<Shared>, mut poll: Poll) {
    let spin = shared.nic_spin;
    let mut nic = Nic { shared, timers: Timers::default(), ready: Vec::new(), streams: Streams::default() };
    let mut events = Events::with_capacity(256);
    let mut last_busy = Instant::now();
    // Commands come with a wake-up: the queue is looked at only after the waker fired.
    let mut woken = true;
    loop {
        let cmds = if std::mem::take(&mut woken) { std::mem::take(&mut *nic.shared.cmds.lock()) } else { Vec::new() };
        let mut busy = !cmds.is_empty();
        for cmd in cmds {
            match cmd {
                Cmd::Stop => {
                    nic.stop();
                    return;
                }
                Cmd::Timer(at, id, kind) => nic.schedule(at, id, kind),
                Cmd::Broken(id, why) => {
                    if let Some(c) = nic.conn(id) {
                        let mut rx = c.rx.lock();
                        nic.broken(&c, &mut rx, &why);
                    }
                }
                Cmd::Resume(id) => nic.ready.push(id),
            }
        }
        let ready = std::mem::take(&mut nic.ready);
        busy |= !ready.is_empty();
        for id in ready {
            if let Some(c) = nic.conn(id) {
                nic.drive(&c);
            }
        }
        busy |= nic.fire_timers();
        nic.shared.timers_pending.store(nic.timers.len(), std::sync::atomic::Ordering::Relaxed);
        let now = Instant::now();
        if busy {
            last_busy = now;
        }
        let timeout = if !nic.ready.is_empty() {
            Some(Duration::ZERO)
        } else if now.duration_since(last_busy) < spin {
            // Pause between two polls of the sockets (a system call each), then yield once: a
            // thread this one serves and that shares its CPU gets a turn every few µs.
            for _ in 0..SPIN_PAUSES {
                std::hint::spin_loop();
            }
            std::thread::yield_now();
            Some(Duration::ZERO)
        } else {
            nic.timers.next().map(|at| at.saturating_duration_since(now))
        };
        if let Err(e) = poll.poll(&mut events, timeout) {
            if e.kind() != io::ErrorKind::Interrupted {
                tracing::error!("soft NIC: epoll_wait failed: {e}");
                std::thread::sleep(Duration::from_millis(1));
            }
            continue;
        }
        if !events.is_empty() {
            last_busy = Instant::now();
        }
        for ev in events.iter() {
            let t = ev.token().0;
            if ev.token() == WAKER {
                woken = true;
                continue;
            }
            if Streams::owns(ev.token()) {
                if nic.shared.shm.is_some() {
                    nic.streams.on_event(ev.token(), &*nic.shared, &nic.shared.registry);
                }
                continue;
            }
            if t & LISTENER_BIT != 0 {
                nic.accept((t & !LISTENER_BIT) as u64);
                continue;
            }
            let Some(c) = nic.conn(t as ConnId) else { continue };
            if ev.is_read_closed() || ev.is_error() {
                c.rx.lock().peer_closed = true;
            }
            if ev.is_writable() {
                nic.on_writable(&c);
            }
            if ev.is_readable() || ev.is_read_closed() || ev.is_error() {
                nic.drive(&c);
            }
        }
    }
}

impl Nic {
    fn conn(&self, id: ConnId) -> Option<Arc<Conn>> {
        self.shared.conns.lock().get(&id).cloned()
    }

    /// Schedules a timer a user thread asked for, unless it no longer matters: the connection
    /// is gone (its timers were cancelled when it was removed, on this thread) or, for a
    /// connect timeout, the connect already completed.
    fn schedule(&mut self, at: Instant, id: ConnId, kind: TimerKind) {
        let Some(c) = self.conn(id) else { return };
        if kind == TimerKind::ConnectTimeout && c.st.lock().phase != Phase::Connecting {
            return;
        }
        self.timers.schedule(at, id, kind);
    }

    /// Closes everything: the device is gone.
    fn stop(&mut self) {
        let conns: Vec<Arc<Conn>> = self.shared.conns.lock().drain().map(|(_, c)| c).collect();
        for c in conns {
            c.deregister();
            let _ = c.sock.shutdown(std::net::Shutdown::Both);
            let mut st = c.st.lock();
            st.phase = Phase::Closed;
            st.channel = None;
            st.qp = None;
            c.drop_same_host(&mut st);
        }
        self.streams.clear(&self.shared.registry);
        let listeners: Vec<_> = self.shared.listeners.lock().drain().map(|(_, l)| l).collect();
        for l in listeners {
            let _ = self.shared.registry.deregister(&mut SourceFd(&l.sock.as_raw_fd()));
        }
    }

    fn accept(&mut self, id: u64) {
        let Some(entry) = self.shared.listeners.lock().get(&id).cloned() else { return };
        loop {
            match entry.sock.accept() {
                Ok((s, peer)) => {
                    if !self.shared.handshakes.lock().admit(peer.ip()) {
                        tracing::debug!("soft NIC: too many connect handshakes in progress, closing one from {peer}");
                        drop(s);
                        SoftCounters::bump(&self.shared.counters.refused_handshakes);
                        continue;
                    }
                    let conn =
                        Conn::new(self.shared.clone(), s, peer, Phase::Incoming, None, Some(entry.channel.clone()));
                    let mut st = conn.st.lock();
                    st.handshake_slot = true;
                    let set_up = conn.sock.set_nonblocking(true).and_then(|_| conn.sock.set_nodelay(true));
                    if let Err(e) = set_up.and_then(|_| conn.register(&mut st, false)) {
                        tracing::debug!("soft NIC: setting up a connection from {peer}: {e}");
                        conn.end_handshake(&mut st);
                        continue;
                    }
                    self.shared.conns.lock().insert(conn.id, conn.clone());
                    let at = Instant::now() + self.shared.handshake_timeout;
                    self.timers.schedule(at, conn.id, TimerKind::HandshakeTimeout);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    tracing::warn!("soft NIC: accept failed: {e}");
                    return;
                }
            }
        }
    }

    /// Checks an active connection's TCP handshake; false while it is still in progress or
    /// when it failed (the connection is then closed).
    fn check_connect(&mut self, c: &Arc<Conn>, st: &mut ConnState) -> bool {
        if st.tcp_up {
            return true;
        }
        let err = match c.sock.take_error() {
            Ok(Some(e)) | Err(e) => Some(e),
            Ok(None) => match c.sock.peer_addr() {
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
            Some(e) => {
                let ev = (st.phase == Phase::Connecting).then(|| connect_failure(c.id, c.peer, &e));
                self.close_with(c, st, ev);
                false
            }
        }
    }

    fn on_writable(&mut self, c: &Arc<Conn>) {
        let mut st = c.st.lock();
        if !self.check_connect(c, &mut st) {
            return;
        }
        match c.flush_out(&mut st) {
            Ok(false) => {}
            Ok(true) => {
                drop(st);
                self.drive(c);
            }
            Err(e) => {
                drop(st);
                let mut rx = c.rx.lock();
                self.broken(c, &mut rx, &format!("write: {e}"));
            }
        }
    }

    /// Reads and processes frames until the socket is drained, the budget is used, or an RNR
    /// wait stops the connection; then writes the responses queued meanwhile.
    fn drive(&mut self, c: &Arc<Conn>) {
        {
            let mut st = c.st.lock();
            if !self.check_connect(c, &mut st) || st.out.paused() {
                return;
            }
        }
        let mut rx = c.rx.lock();
        rx.drained = false;
        let mut budget = READ_BUDGET;
        loop {
            match self.step(c, &mut rx, &mut budget) {
                Step::Continue => continue,
                Step::Idle | Step::Blocked | Step::Paused => break,
                Step::Done => return,
                Step::Yield => {
                    self.ready.push(c.id);
                    break;
                }
                Step::Eof => {
                    let closed = c.st.lock().phase == Phase::Closed;
                    if closed {
                        self.close_disconnected(c, &mut rx);
                    } else {
                        self.broken(c, &mut rx, "the peer closed the connection without DISCONNECT");
                    }
                    return;
                }
                Step::Broken(why) => {
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

    fn fill(&mut self, c: &Conn, rx: &mut Rx, budget: &mut usize) -> Step {
        if rx.buf.is_empty() {
            rx.buf = vec![0; RX_BUF];
        }
        if rx.start > 0 {
            rx.buf.copy_within(rx.start..rx.end, 0);
            rx.end -= rx.start;
            rx.start = 0;
        }
        if std::mem::take(&mut rx.drained) && !rx.peer_closed {
            return Step::Idle;
        }
        let end = rx.end;
        match (&c.sock).read(&mut rx.buf[end..]) {
            Ok(0) => Step::Eof,
            Ok(n) => {
                rx.drained = n < rx.buf.len() - end;
                rx.end += n;
                self.charge(budget, n)
            }
            Err(e) => io_step(e),
        }
    }

    fn charge(&self, budget: &mut usize, n: usize) -> Step {
        *budget = budget.saturating_sub(n);
        if *budget == 0 {
            Step::Yield
        } else {
            Step::Continue
        }
    }

    fn step(&mut self, c: &Arc<Conn>, rx: &mut Rx, budget: &mut usize) -> Step {
        match rx.stage {
            Stage::Rnr { hdr, .. } if rx.peer_closed => Self::discard(rx, &hdr, Then::Nothing),
            Stage::Rnr { .. } => Step::Blocked,
            Stage::Payload { .. } => self.payload(c, rx, budget),
            Stage::Header => {
                if rx.avail() < HEADER_LEN {
                    return self.fill(c, rx, budget);
                }
                let mut raw = [0u8; HEADER_LEN];
                raw.copy_from_slice(&rx.buf[rx.start..rx.start + HEADER_LEN]);
                let hdr = match Header::decode(&raw, self.shared.attrs.max_msg_size) {
                    Ok(h) => h,
                    Err(e) => return Step::Broken(format!("protocol error from {}: {e}", c.peer)),
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

    fn discard(rx: &mut Rx, hdr: &Header, then: Then) -> Step {
        rx.stage = Stage::Payload {
            sink: Sink::new(Vec::new()),
            remaining: hdr.len as usize,
            len: hdr.len,
            then,
            psn: hdr.psn,
        };
        Step::Continue
    }

    fn reply(st: &mut ConnState, psn: u32, status: Status) {
        let mut h = Header::new(FrameType::Ack);
        h.psn = psn;
        h.status = status;
        st.push_out(OutFrame::new(&h, Tail::None));
    }

    fn on_header(&mut self, c: &Arc<Conn>, rx: &mut Rx, hdr: Header) -> Step {
        let mut st = c.st.lock();
        if matches!(st.phase, Phase::Incoming | Phase::Requested | Phase::Connecting) {
            return Step::Broken(format!("{:?} frame from {} before the connection is established", hdr.ty, c.peer));
        }
        let step = self.on_data_header(c, &mut st, rx, hdr);
        self.pause_if_full(c, &mut st, step)
    }

    /// Handles the header of a data frame on an established (or closing) connection.
    fn on_data_header(&mut self, c: &Arc<Conn>, st: &mut ConnState, rx: &mut Rx, hdr: Header) -> Step {
        let live = st.phase == Phase::Established && st.qp.is_some();
        match hdr.ty {
            FrameType::Ack => {
                let Some(qp) = st.qp.as_mut().filter(|q| live && !q.error) else { return Step::Continue };
                match qp.inflight.front() {
                    Some(f) if f.psn == hdr.psn && matches!(f.op, WcOpcode::Send | WcOpcode::RdmaWrite) => {}
                    _ => return Step::Broken(format!("unexpected acknowledgement {} from {}", hdr.psn, c.peer)),
                }
                let f = qp.inflight.pop_front().expect("front checked");
                qp.retire(f, hdr.status.wc_status());
                if hdr.status == Status::Ok {
                    c.run_local_front(st);
                } else {
                    st.qp_error();
                }
                Step::Continue
            }
            FrameType::ReadResp => {
                let Some(qp) = st.qp.as_mut().filter(|q| live && !q.error) else {
                    return Self::discard(rx, &hdr, Then::Nothing);
                };
                let front_ok = matches!(qp.inflight.front(), Some(f) if f.psn == hdr.psn && f.op == WcOpcode::RdmaRead);
                if !front_ok {
                    return Step::Broken(format!("unexpected READ response {} from {}", hdr.psn, c.peer));
                }
                if hdr.status != Status::Ok {
                    let f = qp.inflight.pop_front().expect("front checked");
                    qp.retire(f, hdr.status.wc_status());
                    st.qp_error();
                    return Step::Continue;
                }
                let f = qp.inflight.front_mut().expect("front checked");
                if f.len != hdr.len {
                    return Step::Broken(format!("READ response of {} bytes for {} from {}", hdr.len, f.len, c.peer));
                }
                f.busy = true;
                let segs = f.dest.clone();
                rx.stage = Stage::Payload {
                    sink: Sink::new(segs),
                    remaining: hdr.len as usize,
                    len: hdr.len,
                    then: Then::ReadResp,
                    psn: hdr.psn,
                };
                Step::Continue
            }
            FrameType::ReadReq => {
                let Some(qp) = st.qp.as_ref().filter(|_| live) else { return Step::Continue };
                let allowed = qp.responder_resources;
                if st.out.read_responses() >= allowed {
                    SoftCounters::bump(&self.shared.counters.read_depth_violations);
                    return Step::Broken(format!("{} has more than {allowed} RDMA READs outstanding", c.peer));
                }
                let mut h = Header::new(FrameType::ReadResp);
                h.psn = hdr.psn;
                let mut tail = Tail::None;
                if qp.error {
                    h.status = Status::OperationError;
                } else {
                    match self.shared.remote_range(hdr.rkey, qp.pd, hdr.addr, hdr.aux.into(), Access::REMOTE_READ) {
                        Some(seg) => {
                            h.len = hdr.aux;
                            tail = Tail::Segs(vec![seg]);
                        }
                        None => h.status = Status::RemoteAccess,
                    }
                }
                st.push_out(OutFrame::new(&h, tail));
                if h.status == Status::RemoteAccess {
                    self.remote_access_error(st);
                }
                Step::Continue
            }
            FrameType::Write => {
                let Some(qp) = st.qp.as_ref().filter(|_| live) else {
                    return Self::discard(rx, &hdr, Then::Nothing);
                };
                if qp.error {
                    return Self::discard(rx, &hdr, Then::Reply { psn: hdr.psn, status: Status::OperationError });
                }
                match self.shared.remote_range(hdr.rkey, qp.pd, hdr.addr, hdr.len.into(), Access::REMOTE_WRITE) {
                    Some(seg) => {
                        rx.stage = Stage::Payload {
                            sink: Sink::new(vec![seg]),
                            remaining: hdr.len as usize,
                            len: hdr.len,
                            then: Then::Reply { psn: hdr.psn, status: Status::Ok },
                            psn: hdr.psn,
                        };
                        Step::Continue
                    }
                    None => {
                        self.remote_access_error(st);
                        Self::discard(rx, &hdr, Then::Reply { psn: hdr.psn, status: Status::RemoteAccess })
                    }
                }
            }
            FrameType::Send | FrameType::SendImm => {
                if !live {
                    return Self::discard(rx, &hdr, Then::Nothing);
                }
                let retries = st.peer_rnr_retry;
                if self.place_send(st, rx, hdr) {
                    return Step::Continue;
                }
                if retries == 0 {
                    Self::discard(rx, &hdr, Then::Reply { psn: hdr.psn, status: Status::RnrExceeded })
                } else {
                    let timer = st.qp.as_ref().map_or(Duration::from_micros(640), |q| q.min_rnr_timer);
                    self.timers.schedule(Instant::now() + timer, c.id, TimerKind::Rnr);
                    rx.stage = Stage::Rnr { hdr, left: retries };
                    Step::Blocked
                }
            }
            _ => Step::Broken(format!("unexpected {:?} frame from {}", hdr.ty, c.peer)),
        }
    }

    /// A READ or WRITE of the peer was refused (bad rkey, out of bounds, missing rights): as a
    /// hardware responder's, the queue pair goes to the error state, and later requests of the
    /// peer are refused.
    fn remote_access_error(&self, st: &mut ConnState) {
        SoftCounters::bump(&self.shared.counters.remote_access_errors);
        st.qp_error();
    }

    /// Pauses reading when the answers queued for the peer went over `OUT_CAP` (it does not
    /// read them), and starts the timer that cuts the connection if it writes nothing more.
    fn pause_if_full(&mut self, c: &Conn, st: &mut ConnState, step: Step) -> Step {
        if !matches!(step, Step::Continue) || !st.out.pause_if_full() {
            return step;
        }
        tracing::debug!("soft NIC: {} leaves its answers unread, reading paused", c.peer);
        // A timer of an earlier pause (the peer read a little, then stopped again) would check
        // this one too early.
        self.timers.cancel(c.id, TimerKind::OutputStall);
        self.timers.schedule(Instant::now() + OUTPUT_STALL_TIMEOUT, c.id, TimerKind::OutputStall);
        Step::Paused
    }

    /// Tries to place a SEND: takes a receive and sets the payload stage (or an error
    /// answer). False when no receive is posted (RNR).
    fn place_send(&mut self, st: &mut ConnState, rx: &mut Rx, hdr: Header) -> bool {
        // SENDs the peer wrote into the inbox before this one go first.
        st.drain_inbox();
        let Some(qp) = st.qp.as_mut() else {
            Self::discard(rx, &hdr, Then::Nothing);
            return true;
        };
        if qp.error {
            Self::discard(rx, &hdr, Then::Reply { psn: hdr.psn, status: Status::OperationError });
            return true;
        }
        let Some(recv) = qp.take_recv(false) else {
            if rx.peer_closed {
                Self::discard(rx, &hdr, Then::Nothing);
                return true;
            }
            return false;
        };
        if recv.cap < hdr.len as usize {
            qp.complete_recv(recv.wr_id, WcStatus::LocalLengthError, 0, None);
            st.qp_error();
            Self::discard(rx, &hdr, Then::Reply { psn: hdr.psn, status: Status::InvalidRequest });
            return true;
        }
        let imm = (hdr.ty == FrameType::SendImm).then_some(hdr.imm);
        let solicited = hdr.aux & AUX_SOLICITED != 0;
        rx.stage = Stage::Payload {
            sink: Sink::new(recv.segs.clone()),
            remaining: hdr.len as usize,
            len: hdr.len,
            then: Then::Recv { recv, imm, solicited },
            psn: hdr.psn,
        };
        true
    }

    fn payload(&mut self, c: &Arc<Conn>, rx: &mut Rx, budget: &mut usize) -> Step {
        let Stage::Payload { sink, remaining, .. } = &mut rx.stage else { return Step::Continue };
        // Bytes already buffered first.
        let n = (rx.end - rx.start).min(*remaining);
        if n > 0 {
            if !sink.is_discard() && !sink.write(&rx.buf[rx.start..rx.start + n]) {
                return Step::Broken("payload larger than its destination".into());
            }
            rx.start += n;
            *remaining -= n;
        }
        if *remaining > 0 {
            if std::mem::take(&mut rx.drained) && !rx.peer_closed {
                return Step::Idle;
            }
            let asked;
            let got = if sink.is_discard() {
                if rx.buf.is_empty() {
                    rx.buf = vec![0; RX_BUF];
                }
                rx.start = 0;
                rx.end = 0;
                let k = (*remaining).min(rx.buf.len());
                asked = k;
                (&c.sock).read(&mut rx.buf[..k])
            } else {
                let ranges = sink.ranges(*remaining);
                if ranges.is_empty() {
                    return Step::Broken("payload larger than its destination".into());
                }
                asked = ranges.iter().map(|r| r.len()).sum();
                memory::recv_vectored(c.sock.as_fd(), &ranges)
            };
            match got {
                Ok(0) => return Step::Eof,
                Ok(k) => {
                    rx.drained = k < asked;
                    if !sink.is_discard() {
                        sink.advance(k);
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
            return Step::Continue;
        }
        let Stage::Payload { then, len, psn, .. } = std::mem::replace(&mut rx.stage, Stage::Header) else {
            return Step::Continue;
        };
        self.finish(c, then, len, psn)
    }

    fn finish(&mut self, c: &Arc<Conn>, then: Then, len: u32, psn: u32) -> Step {
        let mut st = c.st.lock();
        self.finish_payload(c, &mut st, then, len, psn);
        self.pause_if_full(c, &mut st, Step::Continue)
    }

    /// Completes what a payload fully received was for.
    fn finish_payload(&mut self, c: &Arc<Conn>, st: &mut ConnState, then: Then, len: u32, psn: u32) {
        let live = st.phase == Phase::Established;
        match then {
            Then::Nothing => {}
            Then::Reply { psn, status } => {
                if live {
                    Self::reply(st, psn, status);
                }
            }
            Then::ReadResp => {
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
            Then::Recv { recv, imm, solicited } => {
                let Some(qp) = st.qp.as_mut() else { return };
                if live && !qp.error {
                    qp.complete_recv_solicited(recv.wr_id, WcStatus::Success, len, imm, solicited);
                    Self::reply(st, psn, Status::Ok);
                } else {
                    qp.complete_recv(recv.wr_id, WcStatus::WorkRequestFlushed, 0, None);
                }
            }
        }
    }

    fn on_control(&mut self, c: &Arc<Conn>, rx: &mut Rx, hdr: Header, data: Vec<u8>) -> Step {
        let mut st = c.st.lock();
        match (hdr.ty, st.phase) {
            (FrameType::ConnectReq, Phase::Incoming) => {
                let Some(params) = CmParams::from_aux(hdr.aux) else {
                    return Step::Broken("invalid CM parameters".into());
                };
                st.peer_rnr_retry = params.rnr_retry;
                st.peer_responder_resources = params.responder_resources;
                st.peer_offer = Offer::from_header(&hdr);
                st.phase = Phase::Requested;
                self.timers.cancel(c.id, TimerKind::HandshakeTimeout);
                let ch = st.channel.clone();
                drop(st);
                if let Some(ch) = ch {
                    ch.push(Ev::Request { conn: c.clone(), data });
                }
                Step::Continue
            }
            (FrameType::Accept, Phase::Connecting) => {
                let Some(params) = CmParams::from_aux(hdr.aux) else {
                    return Step::Broken("invalid CM parameters".into());
                };
                st.peer_rnr_retry = params.rnr_retry;
                if let Some(qp) = st.qp.as_mut() {
                    qp.limit_initiator_depth(params.responder_resources);
                }
                // Same-host path: both ends offered, and this end's stream opens (or not)
                // before the connection is reported established.
                let offer = Offer::from_header(&hdr);
                if let Some((ep, offer)) = self.shared.shm.as_ref().zip(offer).filter(|_| st.shm_nonce != 0) {
                    c.set_same_host(ep.connect(&offer));
                }
                st.phase = Phase::Established;
                self.timers.cancel(c.id, TimerKind::ConnectTimeout);
                st.event(Ev::Established { conn: c.id, data });
                Step::Continue
            }
            (FrameType::Reject, Phase::Connecting) => {
                self.close_with(c, &mut st, Some(Ev::Rejected { conn: c.id, reason: RejectReason::Consumer, data }));
                Step::Done
            }
            (FrameType::Disconnect, Phase::Established) => {
                drop(st);
                self.abort_rx(c, rx);
                let mut st = c.st.lock();
                st.clear_output();
                st.fail_qp(WcStatus::WorkRequestFlushed);
                self.close_with(c, &mut st, Some(Ev::Disconnected { conn: c.id }));
                Step::Done
            }
            (FrameType::Disconnect, _) | (_, Phase::Closed) => {
                drop(st);
                self.close_disconnected(c, rx);
                Step::Done
            }
            (ty, phase) => Step::Broken(format!("{ty:?} frame from {} while {}", c.peer, phase.name())),
        }
    }

    /// Abandons the payload being received: a receive taken for it is flushed and a READ
    /// being filled is handed back to the flush.
    fn abort_rx(&mut self, c: &Conn, rx: &mut Rx) {
        let stage = std::mem::replace(&mut rx.stage, Stage::Header);
        let mut st = c.st.lock();
        let Some(qp) = st.qp.as_mut() else { return };
        for f in qp.inflight.iter_mut() {
            f.busy = false;
        }
        if let Stage::Payload { then: Then::Recv { recv, .. }, .. } = stage {
            qp.complete_recv(recv.wr_id, WcStatus::WorkRequestFlushed, 0, None);
        }
    }

    /// The transport failed (or was cut): outstanding sends fail with
    /// `TransportRetryExceeded`, receives are flushed, the owner gets `Disconnected`.
    fn broken(&mut self, c: &Arc<Conn>, rx: &mut Rx, why: &str) {
        tracing::debug!("soft NIC: connection {} to {} broken: {why}", c.id, c.peer);
        self.abort_rx(c, rx);
        let mut st = c.st.lock();
        let ev = match st.phase {
            Phase::Established => {
                st.fail_qp(WcStatus::TransportRetryExceeded);
                Some(Ev::Disconnected { conn: c.id })
            }
            Phase::Connecting => {
                let detail = format!("connection to {} lost before it was accepted: {why}", c.peer);
                st.fail_qp(WcStatus::WorkRequestFlushed);
                Some(Ev::Unreachable { conn: c.id, detail })
            }
            Phase::Incoming | Phase::Requested | Phase::Closed => None,
        };
        st.clear_output();
        self.close_with(c, &mut st, ev);
    }

    /// Removes a connection whose queue pair was already disconnected: a READ response or
    /// SEND being received when the stream ends is completed as flushed.
    fn close_disconnected(&mut self, c: &Conn, rx: &mut Rx) {
        self.abort_rx(c, rx);
        let mut st = c.st.lock();
        if let Some(qp) = st.qp.as_mut() {
            qp.flush(WcStatus::WorkRequestFlushed);
        }
        self.close_with(c, &mut st, None);
    }

    /// Removes a connection, then delivers its last event (so that whoever sees the event
    /// finds the connection gone).
    fn close_with(&mut self, c: &Conn, st: &mut ConnState, ev: Option<Ev>) {
        st.phase = Phase::Closed;
        c.end_handshake(st);
        self.shared.conns.lock().remove(&c.id);
        self.timers.cancel_conn(c.id);
        self.streams.close_conn(c.id, &self.shared.registry);
        c.drop_same_host(st);
        if let Some(ep) = &self.shared.shm {
            ep.withdraw(std::mem::take(&mut st.shm_nonce));
        }
        c.deregister();
        let _ = c.sock.shutdown(std::net::Shutdown::Both);
        if let Some(ev) = ev {
            st.event(ev);
        }
        st.channel = None;
    }

    /// Runs due timers; returns whether any fired.
    fn fire_timers(&mut self) -> bool {
        let now = Instant::now();
        let mut fired = false;
        while let Some((id, kind)) = self.timers.pop_due(now) {
            fired = true;
            let Some(c) = self.conn(id) else { continue };
            match kind {
                TimerKind::ConnectTimeout => {
                    let mut st = c.st.lock();
                    if st.phase == Phase::Connecting {
                        st.fail_qp(WcStatus::WorkRequestFlushed);
                        let detail = format!("no answer from {} within the connect timeout", c.peer);
                        self.close_with(&c, &mut st, Some(Ev::Unreachable { conn: id, detail }));
                    }
                }
                TimerKind::HandshakeTimeout => {
                    // Only this thread moves a connection out of `Incoming`.
                    let mut rx = c.rx.lock();
                    if c.st.lock().phase == Phase::Incoming {
                        tracing::debug!("soft NIC: no connect request from {} in time, closing", c.peer);
                        SoftCounters::bump(&self.shared.counters.handshake_timeouts);
                        self.close_disconnected(&c, &mut rx);
                    }
                }
                TimerKind::Close => {
                    let mut rx = c.rx.lock();
                    if c.st.lock().phase == Phase::Closed {
                        self.close_disconnected(&c, &mut rx);
                    }
                }
                TimerKind::Rnr => self.rnr_retry(&c),
                TimerKind::OutputStall => self.check_stall(&c),
            }
        }
        fired
    }

    /// A paused connection that wrote nothing since the pause began (or the last check) is
    /// cut: its peer does not read. One that made progress is checked again later.
    fn check_stall(&mut self, c: &Arc<Conn>) {
        let mut rx = c.rx.lock();
        let mut st = c.st.lock();
        if !st.out.paused() {
            return;
        }
        if !st.out.stalled() {
            self.timers.schedule(Instant::now() + OUTPUT_STALL_TIMEOUT, c.id, TimerKind::OutputStall);
            return;
        }
        drop(st);
        SoftCounters::bump(&self.shared.counters.output_stalls);
        let why = format!("{} read none of its answers for {OUTPUT_STALL_TIMEOUT:?}", c.peer);
        self.broken(c, &mut rx, &why);
    }

    fn rnr_retry(&mut self, c: &Arc<Conn>) {
        // Receives may all be claimed by SENDs waiting in same-host inboxes of the same receive
        // queue: place those first (their owner may be asleep), freeing the claims.
        let recv_cq = c.st.lock().qp.as_ref().map(|q| q.recv_cq.clone());
        if let Some(cq) = recv_cq {
            cq.drain_inboxes();
        }
        let mut rx = c.rx.lock();
        let Stage::Rnr { hdr, left } = rx.stage else { return };
        let mut st = c.st.lock();
        if st.phase != Phase::Established {
            Self::discard(&mut rx, &hdr, Then::Nothing);
        } else if !self.place_send(&mut st, &mut rx, hdr) {
            let left = if left == RNR_RETRY_INFINITE { left } else { left - 1 };
            if left == 0 {
                Self::discard(&mut rx, &hdr, Then::Reply { psn: hdr.psn, status: Status::RnrExceeded });
            } else {
                let timer = st.qp.as_ref().map_or(Duration::from_micros(640), |q| q.min_rnr_timer);
                self.timers.schedule(Instant::now() + timer, c.id, TimerKind::Rnr);
                rx.stage = Stage::Rnr { hdr, left };
                return;
            }
        }
        drop(st);
        drop(rx);
        self.drive(c);
    }
}

fn io_step(e: io::Error) -> Step {
    match e.kind() {
        io::ErrorKind::WouldBlock => Step::Idle,
        io::ErrorKind::Interrupted => Step::Continue,
        _ => Step::Broken(format!("read: {e}")),
    }
}
