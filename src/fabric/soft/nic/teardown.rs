//! Closing connections on the NIC thread: a transport that broke, a connection already
//! disconnected, the removal that delivers a connection's last event, and closing everything
//! when the device stops.

use std::os::fd::AsRawFd;
use std::sync::Arc;

use mio::unix::SourceFd;

use super::state::Nic;
use crate::fabric::soft::conn::{AfterPayload, Conn, ConnState, Expecting, NicCmEvent, Phase, ReceiveState};
use crate::fabric::types::*;

impl Nic {
    /// Closes everything: the device is gone.
    pub(super) fn stop(&mut self) {
        let conns: Vec<Arc<Conn>> = self.conns.open.lock().drain().map(|(_, c)| c).collect();
        for c in conns {
            c.deregister();
            let _ = c.sock.shutdown(std::net::Shutdown::Both);
            let mut st = c.st.lock();
            st.phase = Phase::Closed;
            st.channel = None;
            st.qp = None;
            c.drop_same_host(&mut st);
        }
        self.streams.clear(&self.device.registry);
        let listeners: Vec<_> = self.conns.listeners.lock().drain().map(|(_, l)| l).collect();
        for l in listeners {
            let _ = self.device.registry.deregister(&mut SourceFd(&l.sock.as_raw_fd()));
        }
    }

    /// Abandons the payload being received: a receive taken for it is flushed and a READ
    /// being filled is handed back to the flush.
    pub(super) fn abort_rx(&mut self, c: &Conn, rx: &mut ReceiveState) {
        let expecting = std::mem::replace(&mut rx.expecting, Expecting::Header);
        let mut st = c.st.lock();
        let Some(qp) = st.qp.as_mut() else { return };
        for f in qp.inflight.iter_mut() {
            f.busy = false;
        }
        if let Expecting::Payload { after: AfterPayload::Recv { recv, .. }, .. } = expecting {
            qp.complete_recv(recv.wr_id, WcStatus::WorkRequestFlushed, 0, None);
        }
    }

    /// The transport failed (or was cut): outstanding sends fail with
    /// `TransportRetryExceeded`, receives are flushed, the owner gets `Disconnected`.
    pub(super) fn broken(&mut self, c: &Arc<Conn>, rx: &mut ReceiveState, why: &str) {
        tracing::debug!("soft NIC: connection {} to {} broken: {why}", c.id, c.peer);
        self.abort_rx(c, rx);
        let mut st = c.st.lock();
        let ev = match st.phase {
            Phase::Established => {
                st.fail_qp(WcStatus::TransportRetryExceeded);
                Some(NicCmEvent::Disconnected { conn: c.id })
            }
            Phase::Connecting => {
                let detail = format!("connection to {} lost before it was accepted: {why}", c.peer);
                st.fail_qp(WcStatus::WorkRequestFlushed);
                Some(NicCmEvent::Unreachable { conn: c.id, detail })
            }
            Phase::Incoming | Phase::Requested | Phase::Closed => None,
        };
        st.clear_output();
        self.close_with(c, &mut st, ev);
    }

    /// Removes a connection whose queue pair was already disconnected: a READ response or
    /// SEND being received when the stream ends is completed as flushed.
    pub(super) fn close_disconnected(&mut self, c: &Conn, rx: &mut ReceiveState) {
        self.abort_rx(c, rx);
        let mut st = c.st.lock();
        if let Some(qp) = st.qp.as_mut() {
            qp.flush(WcStatus::WorkRequestFlushed);
        }
        self.close_with(c, &mut st, None);
    }

    /// Removes a connection, then delivers its last event (so that whoever sees the event
    /// finds the connection gone).
    pub(super) fn close_with(&mut self, c: &Conn, st: &mut ConnState, ev: Option<NicCmEvent>) {
        st.phase = Phase::Closed;
        c.end_handshake(st);
        self.conns.open.lock().remove(&c.id);
        self.timers.cancel_conn(c.id);
        self.streams.close_conn(c.id, &self.device.registry);
        c.drop_same_host(st);
        if let Some(ep) = &self.device.shm {
            ep.withdraw(std::mem::take(&mut st.shm_nonce));
        }
        c.deregister();
        let _ = c.sock.shutdown(std::net::Shutdown::Both);
        if let Some(ev) = ev {
            st.event(ev);
        }
        st.channel = None;
    }
}
