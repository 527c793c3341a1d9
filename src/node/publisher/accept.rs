//! The CM thread's side of a publisher: connect requests are checked (the topic's credential
//! first) and accepted (the ring's address and the subscriber's start point go out in the
//! accept private data) or rejected with a reason; established and disconnected connections
//! are tracked.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

use super::liveness::Liveness;
use super::state::{PublisherShared, SubConn, RECVS_PER_SUBSCRIBER, SLOT};
use crate::node::ack_clock::AckClock;
use crate::node::route::{LocalPublisher, Route};
use crate::node::wr_id::{WrId, WrKind};
use rdma_fabric::{ConnId, ConnectRequest, QpCaps, QpInit, RNR_RETRY_INFINITE};
use rdma_wire::protocol::{wall_clock_ms, AcceptData, ConnectData, CredentialError, RejectCode, StartAt};

impl PublisherShared {
    /// CM thread: a subscriber asks to connect. Its credential is checked first: nothing of
    /// the ring (the accept data carries its address and rkey) leaves before it passed.
    fn accept(self: &Arc<Self>, req: ConnectRequest, data: &ConnectData) {
        if let Err(e) = self.check_credential(data) {
            self.counters.rejected_unauthorized.fetch_add(1, Ordering::Relaxed);
            self.node.reject_connect(req, RejectCode::Unauthorized, &e.to_string());
            return;
        }
        let mut st = self.state.lock();
        let refuse = if st.closing {
            Some((RejectCode::ShuttingDown, "the publisher is closing".to_string()))
        } else if st.subs.len() >= self.options.max_subscribers {
            Some((RejectCode::TooManySubscribers, format!("limit {}", self.options.max_subscribers)))
        } else if !data.accepts.contains(self.options.policy.kind()) {
            Some((RejectCode::PolicyNotAccepted, format!("{:?}", self.options.policy.kind())))
        } else {
            None
        };
        if let Some((reason, detail)) = refuse {
            drop(st);
            self.node.reject_connect(req, reason, &detail);
            return;
        }
        let start = match data.start {
            StartAt::Latest => st.producer.latest(),
            StartAt::Earliest => st.producer.earliest(),
        };
        let accept = AcceptData {
            topic: self.topic_id,
            ring: self.remote,
            region_len: self.region_len as u64,
            capacity: st.producer.capacity() as u64,
            epoch: self.node.epoch,
            publisher_id: self.id,
            policy: self.options.policy.kind(),
            max_record_payload: self.max_record_payload as u32,
            start_position: start.position,
            start_seq: start.seq,
            first_seq: start.first_seq,
            checksum: st.producer.checksum(),
        };
        let encoded = match accept.encode() {
            Ok(b) => b,
            Err(e) => {
                tracing::error!(topic = %self.topic, "encoding accept data: {e}");
                return;
            }
        };
        let caps = QpCaps {
            max_send_wr: 32,
            max_recv_wr: if self.srq.is_some() { 0 } else { RECVS_PER_SUBSCRIBER },
            max_send_sge: 1,
            max_recv_sge: 1,
        };
        let init = QpInit {
            srq: self.srq.as_ref(),
            caps,
            rnr_retry: RNR_RETRY_INFINITE,
            // READ depths: the default, within the device's limits.
            ..QpInit::new(&self.node.pd, &self.cq)
        };
        let conn = req.conn_id();
        let peer = req.peer_addr();
        let route: Weak<Self> = Arc::downgrade(self);
        self.node.routes.lock().insert(conn, Route::Subscriber(route));
        let qp = match req.accept(&init, &encoded) {
            Ok(qp) => qp,
            Err(e) => {
                self.node.routes.lock().remove(&conn);
                tracing::warn!(topic = %self.topic, %peer, "accept failed: {e}");
                return;
            }
        };
        let key = st.subs.vacant_key();
        if self.srq.is_none() {
            for i in 0..RECVS_PER_SUBSCRIBER {
                let slot = key as u32 * RECVS_PER_SUBSCRIBER + i;
                if slot < self.recv_slots {
                    let _ = qp.post_recv(
                        WrId::publisher(WrKind::Recv, slot).encode(),
                        &[self.ctrl.sge(slot as usize * SLOT, SLOT)],
                    );
                }
            }
        }
        st.by_conn.insert(conn, key);
        st.by_qp.insert(qp.qp_num(), key);
        st.subs.insert(SubConn {
            qp,
            conn,
            acked: start.position,
            doorbell_at: None,
            slow_since: None,
            clock: AckClock::default(),
            asked_for: 0,
            liveness: Liveness::default(),
        });
        st.refresh_credit(&self.counters);
        self.subscribers_changed.notify_all();
        self.counters.accepted.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(topic = %self.topic, %peer, position = start.position, "subscriber accepted");
    }

    /// Whether the subscriber proved the topic's credential (always, when the topic has none).
    fn check_credential(&self, data: &ConnectData) -> Result<(), CredentialError> {
        let Some(secret) = &self.options.credential else { return Ok(()) };
        data.check_credential(secret, &mut self.node.replay.lock(), wall_clock_ms())
    }
}

impl LocalPublisher for PublisherShared {
    fn service(&self) {
        PublisherShared::service(self);
    }

    fn answer_connect(self: Arc<Self>, req: ConnectRequest, data: &ConnectData) {
        self.accept(req, data);
    }

    fn on_established(&self, conn: ConnId) {
        tracing::trace!(topic = %self.topic, conn, "subscriber established");
    }

    fn on_disconnected(&self, conn: ConnId) {
        let mut st = self.state.lock();
        if let Some(&key) = st.by_conn.get(&conn) {
            self.remove_subscriber(&mut st, key);
        }
    }
}
