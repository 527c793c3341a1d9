//! The publisher's control traffic: draining its CQ (acks and doorbell requests in, control
//! SENDs completing), the publisher → subscriber control SENDs (doorbells, drops), the service
//! tick that does both for an idle publisher and drops idle subscribers, and removing
//! subscribers.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::liveness::SENDS_PER_SUBSCRIBER;
use super::state::{PubState, PublisherShared, RECVS_PER_SUBSCRIBER, SLOT};
use crate::error::{Error, Result};
use crate::node::wr_id::{WrId, WrKind};
use rdma_fabric::{SendOp, SendRequest, WcOpcode, WcStatus, WorkCompletion};
use rdma_wire::protocol::{Control, DropReason, CONTROL_MSG_MAX};

/// Completions taken from the CQ per poll.
const POLL_BATCH: usize = 32;

impl PublisherShared {
    /// Drains the completion queue without blocking. Most commits find it empty: a poll of one
    /// entry tells, before a batch of completions is set up (zeroing 32 per commit was about a
    /// quarter of the publisher's CPU time for 64 B messages).
    pub(super) fn progress(&self, st: &mut PubState) {
        let mut first = [WorkCompletion::default(); 1];
        let polled = self.cq.poll(&mut first).and_then(|n| {
            if n == 0 {
                return Ok(());
            }
            self.handle_completions(st, &first);
            let mut wcs = [WorkCompletion::default(); POLL_BATCH];
            self.cq.drain(&mut wcs, |wcs| self.handle_completions(st, wcs))
        });
        if let Err(e) = polled {
            tracing::warn!(topic = %self.topic, "publisher CQ: {e}");
        }
    }

    pub(super) fn handle_completions(&self, st: &mut PubState, wcs: &[WorkCompletion]) {
        for wc in wcs {
            let Some(id) = WrId::decode(wc.wr_id) else { continue };
            let slot = id.slot as u32;
            match id.kind {
                WrKind::Send => {
                    // Only a live subscriber's own queue pair frees its slot: the flushed SENDs
                    // of a removed one must not free a slot its successor is using.
                    let key = (slot / SENDS_PER_SUBSCRIBER) as usize;
                    if st.by_qp.get(&wc.qp_num) == Some(&key) {
                        st.subs[key].liveness.give_send(slot, wc.status == WcStatus::Success);
                        if wc.status != WcStatus::Success {
                            // Its queue pair failed (a remote access error, retries exhausted):
                            // it can never ack again.
                            tracing::debug!(topic = %self.topic, status = ?wc.status, "a subscriber's queue pair failed");
                            self.remove_subscriber(st, key);
                        }
                    }
                }
                WrKind::Recv => {
                    if wc.status == WcStatus::Success && wc.opcode == WcOpcode::Recv {
                        self.on_control(st, wc.qp_num, slot, wc.byte_len as usize);
                    }
                    self.repost_recv(st, slot, wc.status);
                }
                _ => {}
            }
        }
    }

    fn repost_recv(&self, st: &PubState, slot: u32, status: WcStatus) {
        let sge = [self.ctrl.sge(slot as usize * SLOT, SLOT)];
        let result = match &self.srq {
            Some(srq) => srq.post_recv(WrId::publisher(WrKind::Recv, slot).encode(), &sge),
            None => {
                // Per-QP receives: slot s belongs to subscriber s / RECVS_PER_SUBSCRIBER.
                if status != WcStatus::Success {
                    return;
                }
                match st.subs.get((slot / RECVS_PER_SUBSCRIBER) as usize) {
                    Some(sub) => sub.qp.post_recv(WrId::publisher(WrKind::Recv, slot).encode(), &sge),
                    None => return,
                }
            }
        };
        if let Err(e) = result {
            tracing::debug!(topic = %self.topic, "reposting a receive: {e}");
        }
    }

    fn on_control(&self, st: &mut PubState, qp_num: u32, slot: u32, len: usize) {
        let mut bytes = [0u8; SLOT];
        let len = len.min(SLOT);
        if self.ctrl.buffer().read(slot as usize * SLOT, &mut bytes[..len]).is_err() {
            return;
        }
        let Some(&key) = st.by_qp.get(&qp_num) else {
            self.counters.bad_acks.fetch_add(1, Ordering::Relaxed);
            return;
        };
        let tail = st.producer.tail();
        match Control::decode(&bytes[..len]) {
            Ok(Control::Ack { position, .. }) => {
                let sub = &mut st.subs[key];
                if position > tail || position < sub.acked {
                    self.counters.bad_acks.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(topic = %self.topic, position, tail, "refused an ack outside [acked, tail]");
                    return;
                }
                self.counters.acks.fetch_add(1, Ordering::Relaxed);
                sub.liveness.heard();
                sub.acked = position;
                sub.slow_since = None;
                sub.clock.on_ack(Instant::now());
                st.refresh_credit(&self.counters);
            }
            Ok(Control::DoorbellRequest { armed, position }) => {
                st.subs[key].liveness.heard();
                st.subs[key].doorbell_at = armed.then_some(position);
                if armed {
                    st.doorbell_floor = st.doorbell_floor.min(position);
                }
                self.ring_doorbells(st);
            }
            Ok(Control::Bye) => {}
            Ok(other) => {
                self.counters.bad_acks.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(topic = %self.topic, ?other, "a subscriber sent a publisher's control message");
            }
            Err(e) => {
                self.counters.bad_acks.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(topic = %self.topic, "undecodable control message: {e}");
            }
        }
    }

    /// Sends a doorbell to every parked subscriber whose position the tail has passed, and
    /// lowers the doorbell floor to the lowest one still armed. Nothing to do (one comparison)
    /// while the tail has not passed the floor.
    pub(super) fn ring_doorbells(&self, st: &mut PubState) {
        let tail = st.producer.tail();
        if tail <= st.doorbell_floor {
            return;
        }
        // A doorbell request handled while this loop sends (a send drains the CQ when its
        // subscriber's slots are busy) lowers the floor from here: kept by the `min` below.
        st.doorbell_floor = u64::MAX;
        let mut floor = u64::MAX;
        for key in 0..st.subs.capacity() {
            let Some(at) = st.subs.get(key).and_then(|s| s.doorbell_at) else { continue };
            if tail > at && self.send_control(st, key, &Control::Doorbell { tail }).is_ok() {
                st.subs[key].doorbell_at = None;
                self.counters.doorbells.fetch_add(1, Ordering::Relaxed);
            } else {
                // Not passed yet, or no send slot now: the next commit tries again.
                floor = floor.min(at);
            }
        }
        st.doorbell_floor = floor.min(st.doorbell_floor);
    }

    /// Posts a control SEND to subscriber `key` from one of its own send slots; returns the
    /// slot used.
    pub(super) fn send_control(&self, st: &mut PubState, key: usize, msg: &Control) -> Result<u32> {
        let take = |st: &mut PubState| st.subs.get_mut(key).and_then(|s| s.liveness.take_send());
        let bit = match take(st) {
            Some(bit) => bit,
            None => {
                // Its SENDs may have completed since the last drain.
                self.progress(st);
                take(st).ok_or(Error::Closed("every control send slot of this subscriber is in use"))?
            }
        };
        let slot = key as u32 * SENDS_PER_SUBSCRIBER + bit;
        let bytes = msg.encode()?;
        debug_assert!(bytes.len() <= CONTROL_MSG_MAX);
        let offset = (self.recv_slots + slot) as usize * SLOT;
        let result = self.ctrl.buffer().write(offset, &bytes).map_err(Error::from).and_then(|_| {
            let sge = [self.ctrl.sge(offset, bytes.len())];
            st.subs[key]
                .qp
                .post_send(&SendRequest::new(WrId::publisher(WrKind::Send, slot).encode(), SendOp::Send, &sge))
                .map_err(Error::from)
        });
        match result {
            Ok(()) => Ok(slot),
            Err(e) => {
                st.subs[key].liveness.give_send(slot, false);
                Err(e)
            }
        }
    }

    /// Drops subscribers (DropSlow, idle): counts each, tells it why, and disconnects it. The
    /// notices get one short wait in all: a dropped subscriber may take none, and the others
    /// must not wait for each in turn.
    pub(super) fn drop_subscribers(&self, st: &mut PubState, drops: &[(usize, DropReason)]) {
        let mut parting = Vec::with_capacity(drops.len());
        for &(key, reason) in drops.iter().filter(|(key, _)| st.subs.contains(*key)) {
            self.counters.dropped.fetch_add(1, Ordering::Relaxed);
            tracing::info!(topic = %self.topic, ?reason, "dropping a subscriber");
            parting.push((key, Control::Dropped { reason }));
        }
        self.part_with(st, &parting, Instant::now() + Duration::from_millis(100));
    }

    /// Sends each subscriber its parting notice (its end of stream, why it is dropped), waits
    /// until `deadline` at most for the notices to leave (all at once, so that a disconnect
    /// does not flush them), and removes the subscribers.
    pub(super) fn part_with(&self, st: &mut PubState, parting: &[(usize, Control)], deadline: Instant) {
        let mut slots = Vec::with_capacity(parting.len());
        for (key, notice) in parting {
            // Sending one drains the CQ, which may have removed another.
            if st.subs.contains(*key) {
                slots.extend(self.send_control(st, *key, notice).ok());
            }
        }
        for slot in slots {
            self.await_send(st, slot, deadline);
        }
        for &(key, _) in parting {
            self.remove_subscriber(st, key);
        }
    }

    /// Waits (bounded) for the send in `slot` to complete, so a disconnect does not flush it.
    pub(super) fn await_send(&self, st: &mut PubState, slot: u32, deadline: Instant) {
        let key = (slot / SENDS_PER_SUBSCRIBER) as usize;
        let mut wcs = [WorkCompletion::default(); POLL_BATCH];
        while st.subs.get(key).is_some_and(|s| !s.liveness.send_free(slot)) && Instant::now() < deadline {
            let n = self.cq.poll_wait(&mut wcs, Duration::from_micros(50), Duration::from_millis(5)).unwrap_or(0);
            self.handle_completions(st, &wcs[..n]);
        }
    }

    /// The service tick (CM thread, every [`SERVICE_INTERVAL`]): unless a publishing call holds
    /// the state (it drains the CQ itself), drains the CQ, so that receives are reposted and
    /// acks and doorbell requests handled while the application publishes nothing, and drops
    /// idle subscribers.
    ///
    /// [`SERVICE_INTERVAL`]: super::SERVICE_INTERVAL
    pub(super) fn service(&self) {
        let Some(mut st) = self.state.try_lock() else { return };
        if st.publishing {
            return;
        }
        self.progress(&mut st);
        self.drop_idle(&mut st, Instant::now());
    }

    /// Drops every subscriber idle for `idle_timeout` or longer (see [`Liveness::tick`]);
    /// returns whether it dropped any.
    ///
    /// [`Liveness::tick`]: super::liveness::Liveness::tick
    pub(super) fn drop_idle(&self, st: &mut PubState, now: Instant) -> bool {
        let timeout = self.options.idle_timeout;
        let tail = st.producer.tail();
        let waits_for_acks = !st.overwrite;
        let mut probes = Vec::new();
        let mut idle = Vec::new();
        for (key, sub) in st.subs.iter_mut() {
            let quiet = sub.liveness.tick(now, waits_for_acks && sub.acked < tail);
            if quiet >= timeout {
                idle.push((key, quiet));
            } else if sub.liveness.wants_probe(quiet) {
                probes.push(key);
            }
        }
        for key in probes {
            // A live subscriber takes it (and acks solicited once it has consumed that far); a
            // failed queue pair fails it, and the completion removes the subscriber.
            if st.subs.contains(key) && self.send_control(st, key, &Control::CreditWanted { position: tail }).is_ok() {
                st.subs[key].asked_for = tail;
            }
        }
        let drops: Vec<(usize, DropReason)> = idle
            .iter()
            .map(|&(key, quiet)| (key, DropReason::Idle { millis: rdma_fabric::time::millis(quiet) }))
            .collect();
        self.drop_subscribers(st, &drops);
        !idle.is_empty()
    }

    pub(super) fn remove_subscriber(&self, st: &mut PubState, key: usize) {
        if !st.subs.contains(key) {
            return;
        }
        let sub = st.subs.remove(key);
        st.refresh_credit(&self.counters);
        self.subscribers_changed.notify_all();
        st.by_conn.remove(&sub.conn);
        st.by_qp.remove(&sub.qp.qp_num());
        self.node.routes.lock().remove(&sub.conn);
        if let Err(e) = sub.qp.disconnect() {
            tracing::debug!(topic = %self.topic, "disconnect: {e}");
        }
    }
}
