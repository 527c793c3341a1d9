//! The NIC thread's timers as they fire: connect and handshake timeouts, the linger of a
//! closing connection, RNR retries, the check of a peer that leaves its answers unread, and
//! the waits of queue pairs connected by hand (for a stream, for a hello).

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::state::{Nic, OUTPUT_STALL_TIMEOUT};
use crate::soft::conn::{place_send, AfterPayload, Conn, Expecting, NicCmEvent, Phase};
use crate::soft::device::SoftCounters;
use crate::soft::timers::TimerKind;
use crate::soft::wire::Status;
use crate::types::*;

impl Nic {
    /// Runs due timers; returns whether any fired.
    pub(super) fn fire_timers(&mut self) -> bool {
        let now = Instant::now();
        let mut fired = false;
        while let Some((id, kind)) = self.timers.pop_due(now) {
            fired = true;
            if kind == TimerKind::HelloTimeout {
                self.hello_timed_out(id);
                continue;
            }
            let Some(c) = self.conn(id) else { continue };
            match kind {
                TimerKind::ConnectTimeout => {
                    let mut st = c.st.lock();
                    if st.phase == Phase::Connecting {
                        st.fail_qp(WcStatus::WorkRequestFlushed);
                        let detail = format!("no answer from {} within the connect timeout", c.peer());
                        self.close_with(&c, &mut st, Some(NicCmEvent::Unreachable { conn: id, detail }));
                    }
                }
                TimerKind::HandshakeTimeout => {
                    // Only this thread moves a connection out of `Incoming`.
                    let mut rx = c.rx.lock();
                    if c.st.lock().phase == Phase::Incoming {
                        tracing::debug!("soft NIC: no connect request from {} in time, closing", c.peer());
                        SoftCounters::bump(&self.device.counters.handshake_timeouts);
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
                TimerKind::TransportTimeout => self.transport_timeout(&c),
                TimerKind::RefusedRegion => {
                    let mut st = c.st.lock();
                    if st.qp.as_ref().is_some_and(|q| !q.error) && st.phase != Phase::Closed {
                        tracing::debug!("soft same-host: {} asked for a region it may not have", c.peer());
                        self.remote_access_error(&mut st);
                    }
                }
                TimerKind::HelloTimeout => {}
            }
        }
        fired
    }

    /// A paused connection that wrote nothing since the pause began (or the last check) is
    /// cut: its peer does not read. One that made progress is checked again later.
    pub(super) fn check_stall(&mut self, c: &Arc<Conn>) {
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
        SoftCounters::bump(&self.device.counters.output_stalls);
        let why = format!("{} read none of its answers for {OUTPUT_STALL_TIMEOUT:?}", c.peer());
        self.broken(c, &mut rx, &why);
    }

    /// Retries a SEND waiting for a receive (RNR), or fails it once the retries are used up.
    pub(super) fn rnr_retry(&mut self, c: &Arc<Conn>) {
        // Receives may all be claimed by SENDs waiting in same-host inboxes of the same receive
        // queue: place those first (their owner may be asleep), freeing the claims.
        let recv_cq = c.st.lock().qp.as_ref().map(|q| q.recv_cq.clone());
        if let Some(cq) = recv_cq {
            cq.drain_inboxes();
        }
        let mut rx = c.rx.lock();
        let Expecting::Rnr { hdr, left } = rx.expecting else { return };
        let mut st = c.st.lock();
        if st.phase != Phase::Established {
            Self::discard(&mut rx, &hdr, AfterPayload::Nothing);
        } else if !place_send(&mut st, &mut rx, hdr) {
            let left = if left == RNR_RETRY_INFINITE { left } else { left - 1 };
            if left == 0 {
                Self::discard(&mut rx, &hdr, AfterPayload::Reply { psn: hdr.psn, status: Status::RnrExceeded });
            } else {
                let timer = st.qp.as_ref().map_or(Duration::from_micros(640), |q| q.min_rnr_timer);
                self.timers.schedule(Instant::now() + timer, c.id, TimerKind::Rnr);
                rx.expecting = Expecting::Rnr { hdr, left };
                return;
            }
        }
        drop(st);
        drop(rx);
        self.drive(c);
    }
}
