//! Closing connections on the NIC thread: a transport that broke, a connection already
//! disconnected, the removal that delivers a connection's last event, the stream a queue pair
//! connected by hand lost before it was bound, and closing everything when the device stops.

use std::os::fd::AsRawFd;
use std::sync::Arc;

use mio::unix::SourceFd;

use super::state::Nic;
use crate::soft::conn::{AfterPayload, Conn, ConnState, Expecting, NicCmEvent, Phase, ReceiveState};
use crate::types::*;

impl Nic {
    /// Closes everything: the device is gone (the streams waiting for a hello are closed
    /// first, by `drop_hello_streams`).
    pub(super) fn stop(&mut self) {
        let conns: Vec<Arc<Conn>> = self.conns.open.lock().drain().map(|(_, c)| c).collect();
        for c in conns {
            c.deregister();
            c.shutdown();
            let mut st = c.st.lock();
            st.phase = Phase::Closed;
            st.channel = None;
            st.qp = None;
            c.drop_same_host(&mut st);
        }
        self.streams.clear(&self.device.registry);
        self.conns.by_hand.lock().clear();
        if let Some(port) = self.conns.data_port.lock().take() {
            let _ = self.device.registry.deregister(&mut SourceFd(&port.sock.as_raw_fd()));
        }
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
        tracing::debug!("soft NIC: connection {} to {} broken: {why}", c.id, c.peer());
        self.abort_rx(c, rx);
        let mut st = c.st.lock();
        let ev = match st.phase {
            Phase::Unbound => return self.lose_stream(c, &mut st, why),
            Phase::Established => {
                st.fail_qp(WcStatus::TransportRetryExceeded);
                Some(NicCmEvent::Disconnected { conn: c.id })
            }
            Phase::Connecting => {
                let detail = format!("connection to {} lost before it was accepted: {why}", c.peer());
                st.fail_qp(WcStatus::WorkRequestFlushed);
                Some(NicCmEvent::Unreachable { conn: c.id, detail })
            }
            Phase::Incoming | Phase::Requested | Phase::Closed => None,
        };
        st.clear_output();
        self.close_with(c, &mut st, ev);
    }

    /// A queue pair connected by hand lost its stream before it was bound (the peer refused
    /// it, the connect failed, it broke): the stream is closed and the queue pair stays, its
    /// requests waiting until their transport wait ends, as unanswered requests do. This end
    /// does not dial again.
    pub(super) fn lose_stream(&mut self, c: &Conn, st: &mut ConnState, why: &str) {
        if c.sock().is_some() {
            tracing::debug!("soft NIC: queue pair connected by hand lost its stream to {}: {why}", c.peer());
        }
        c.abandon_stream(st);
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
        if let Some(hand) = &st.hand {
            self.conns.by_hand.lock().remove(&hand.local.qp_num);
        }
        self.timers.cancel_conn(c.id);
        self.streams.close_conn(c.id, &self.device.registry);
        c.drop_same_host(st);
        if let Some(ep) = &self.device.shm {
            ep.withdraw(std::mem::take(&mut st.shm_nonce));
        }
        c.deregister();
        c.shutdown();
        if let Some(ev) = ev {
            st.event(ev);
        }
        st.channel = None;
    }
}
