//! The READ pipeline of each feed: posting READs of the publisher's ring, validating what they
//! bring, acks (the publisher's credits), doorbell requests, and the publisher's control
//! messages.

use super::counters::SubscriptionCounters;
use super::events::SubscriptionEvent;
use super::feed::{ActiveFeed, Feed, Idle, Payload, Ready, PARK_RECHECK, SLOT};
use super::Subscription;
use crate::error::{Error, Result};
use crate::node::message_type::MessageType;
use crate::node::wr_id::{WrId, WrKind};
use rdma_fabric::{
    MemoryRegion, ProtectionDomain, QueuePair, ReadBuffer, RemoteAddr, SendOp, SendRequest, WcOpcode, WcStatus,
    WorkCompletion,
};
use rdma_wire::protocol::{Control, PolicyKind as WirePolicy};
use rdma_wire::ring::{ControlOutcome, ControlSnapshot, ReadPlan, Stop};
use std::sync::atomic::Ordering;
use std::time::Instant;

impl<T: ?Sized + MessageType> Subscription<T> {
    /// Posts the READs, acks and doorbell requests each feed needs now.
    pub(super) fn housekeeping(&mut self) {
        let now = Instant::now();
        let mut failed = Vec::new();
        for (key, feed) in self.feeds.iter_mut() {
            if feed.closed || feed.quiesced {
                continue;
            }
            let Some(a) = feed.active.as_deref_mut() else { continue };
            // Acks are coalesced to a quarter ring; one more goes out once the feed has found
            // nothing new for `spin` (parking or busy-polling), so a publisher flushing or
            // closing sees everything consumed. A feed that merely caught up does not ack at
            // once: with at most a quarter ring unacknowledged the publisher always has room for
            // its largest record, so it never waits on such a feed.
            let idle = a.idle != Idle::Active
                || a.empty_since.is_some_and(|since| now.duration_since(since) >= self.options.spin);
            // A publisher waiting for credit asked for an ack at a position: that one goes out as
            // soon as it is consumed, solicited (the publisher wakes for it alone).
            if !a.ack_in_flight {
                let consumed = a.reader.consumed_position();
                let wanted = a.credit_wanted.is_some_and(|p| consumed >= p);
                if wanted || (consumed > a.acked && (idle || consumed - a.acked >= a.capacity / 4)) {
                    if let Err(e) = send_ack((feed.gen, key, &feed.qp, &feed.ctrl), a, wanted) {
                        failed.push((key, e));
                        continue;
                    }
                    feed.outstanding += 1;
                    self.counters.acks.fetch_add(1, Ordering::Relaxed);
                    if wanted {
                        a.credit_wanted = None;
                        self.counters.solicited_acks.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            if a.plan.is_some() || (a.caught_up && !a.ready.is_empty()) {
                continue;
            }
            // A buffer no queued message points into: the READ lands there while the messages
            // of the other buffer are being delivered.
            let Some(buf) = (0..2).find(|&b| a.pending[b] == 0 && !a.landings[b].in_flight()) else { continue };
            if let Idle::Parked { since } = a.idle {
                if now.duration_since(since) < PARK_RECHECK {
                    continue;
                }
                a.idle = Idle::Requested;
            }
            if !a.need_control && !a.pacer.ready(now) {
                continue;
            }
            let plan = if a.need_control {
                ReadPlan::control()
            } else {
                let most = if a.empty_since.is_some() { a.empty_probe_len } else { usize::MAX };
                a.reader.next_read_at_most(self.options.batch, !a.caught_up, most)
            };
            match post_ring_read((feed.gen, key, &feed.qp), a, buf, plan, (&self.node.pd, &self.counters)) {
                Ok(()) => {
                    feed.outstanding += 1;
                    self.counters.reads.fetch_add(1, Ordering::Relaxed);
                }
                Err(e) => failed.push((key, e.into())),
            }
        }
        for (key, e) in failed {
            self.fail_feed(key, e);
        }
    }

    /// Handles every completion already in the CQ, without waiting.
    pub(super) fn drain_completions(&mut self) {
        let mut wcs = [WorkCompletion::default(); 64];
        let cq = self.cq.clone();
        if let Err(e) = cq.drain(&mut wcs, |wcs| self.handle_completions(wcs)) {
            tracing::warn!(topic = %self.topic, "subscription CQ: {e}");
        }
    }

    pub(super) fn handle_completions(&mut self, wcs: &[WorkCompletion]) {
        for wc in wcs {
            let Some(WrId { owner: key, generation: gen, kind, slot }) = WrId::decode(wc.wr_id) else { continue };
            let Some(feed) = self.feeds.get_mut(key) else { continue };
            if feed.gen & 0xffff != gen {
                continue;
            }
            feed.outstanding = feed.outstanding.saturating_sub(1);
            match kind {
                WrKind::Read => {
                    let Some(a) = feed.active.as_deref_mut() else { continue };
                    let plan = a.plan.take();
                    // SAFETY: a feed has one READ outstanding, into `reading_into`, and `wc` is
                    // its completion (its queue pair's CQ, its kind and generation).
                    unsafe { a.landings[a.reading_into].complete(wc) };
                    if wc.status != WcStatus::Success {
                        if wc.status == WcStatus::WorkRequestFlushed {
                            // Flushed by a disconnect: the CM event decides how it ended.
                            feed.quiesced = true;
                            continue;
                        }
                        let e = rdma_fabric::Error::invalid("RDMA READ", format!("completed with {:?}", wc.status));
                        self.fail_feed(key, e.into());
                        continue;
                    }
                    let buf = a.reading_into;
                    if feed.closed {
                        // The stream already ended or failed: what this READ brought is moot.
                        continue;
                    }
                    let Some(plan) = plan else { continue };
                    // When the headers show more written data, the next READ goes out before
                    // this one is validated (checksums), into the other buffer.
                    let other = 1 - buf;
                    let other_free = a.pending[other] == 0 && !a.landings[other].in_flight();
                    let ahead = (other_free && plan != ReadPlan::control() && !feed.quiesced)
                        .then(|| a.reader.plan_ahead(a.landings[buf].bytes(), plan.position, self.options.batch))
                        .flatten();
                    if let Some(next) = ahead {
                        match post_ring_read((feed.gen, key, &feed.qp), a, other, next, (&self.node.pd, &self.counters))
                        {
                            Ok(()) => {
                                feed.outstanding += 1;
                                self.counters.reads.fetch_add(1, Ordering::Relaxed);
                                self.counters.reads_ahead.fetch_add(1, Ordering::Relaxed);
                            }
                            Err(e) => tracing::debug!(topic = %self.topic, "a READ ahead was refused: {e}"),
                        }
                    }
                    if let Err(e) = self.on_read(key, plan, buf) {
                        self.fail_feed(key, e);
                    }
                }
                WrKind::Ack => {
                    if let Some(a) = feed.active.as_deref_mut() {
                        a.ack_in_flight = false;
                    }
                }
                WrKind::DoorbellRequest => {
                    if let Some(a) = feed.active.as_deref_mut() {
                        a.doorbell_req_in_flight = false;
                    }
                }
                WrKind::Recv if wc.status == WcStatus::Success && wc.opcode == WcOpcode::Recv && !feed.closed => {
                    self.on_control(key, slot, wc.byte_len as usize);
                }
                _ => {}
            }
        }
    }

    /// A READ completed: validate and queue what it brought.
    pub(super) fn on_read(&mut self, key: usize, plan: ReadPlan, buf: usize) -> Result<()> {
        let Feed { qp, ctrl, gen, active, outstanding, .. } = &mut self.feeds[key];
        let a = active.as_deref_mut().expect("a READ completes on an active feed");
        let post = (*gen, key, &*qp, &*ctrl);
        if plan == ReadPlan::control() && a.need_control {
            let snapshot = ControlSnapshot::decode(a.landings[buf].bytes()).map_err(Error::from)?;
            a.need_control = false;
            match a.reader.apply_control(&snapshot)? {
                ControlOutcome::Retry => a.need_control = true,
                ControlOutcome::Resync { .. } | ControlOutcome::Behind { .. } => {
                    // Written data waits past the position: READ at once (the reader makes it a
                    // whole batch).
                    a.pacer.reset();
                    a.note_progress();
                }
                ControlOutcome::CaughtUp => {
                    self.counters.empty_reads.fetch_add(1, Ordering::Relaxed);
                    if a.note_empty(&self.options, Instant::now(), &mut self.permit) {
                        request_doorbell_counted(post, outstanding, a, &self.counters)?;
                    }
                }
            }
            return Ok(());
        }
        let bytes = a.landings[buf].bytes();
        let base = bytes.as_ptr() as usize;
        let end = base + bytes.len();
        let ready = &mut a.ready;
        let pending = &mut a.pending[buf];
        let skip_through = a.skip_through;
        let mut skipped = 0u64;
        let parsed = a
            .reader
            .parse(bytes, plan.position, |seq, payload| {
                if seq <= skip_through {
                    skipped += 1;
                    return;
                }
                let p = payload.as_ptr() as usize;
                let payload = if p >= base && p + payload.len() <= end {
                    *pending += 1;
                    Payload::Slice { buf, offset: p - base, len: payload.len() }
                } else {
                    Payload::Owned(payload.to_vec())
                };
                ready.push_back(Ready { seq, payload });
            })
            .map_err(Error::from)?;
        if skipped > 0 {
            self.counters.duplicates.fetch_add(skipped, Ordering::Relaxed);
        }
        if parsed.stop == Stop::Stale {
            // A READ ahead past a record the parse of the previous READ did not accept: it
            // says nothing about the ring, and the state that parse left stands.
            return Ok(());
        }
        a.caught_up = parsed.stop != Stop::End;
        a.pacer.after_read(Instant::now(), parsed.consumed, plan.len, !a.caught_up);
        if parsed.lost > 0 {
            self.counters.lost.fetch_add(parsed.lost, Ordering::Relaxed);
            self.user_events.push_back(SubscriptionEvent::Lost { publisher: a.info, count: parsed.lost });
        }
        if parsed.stop == Stop::Torn {
            self.counters.torn.fetch_add(1, Ordering::Relaxed);
        }
        // Only the control block tells "not written yet" from "overwritten by a later lap" when
        // the publisher may overwrite; otherwise a lap is proven by the record itself.
        let overwrites = a.info.policy == WirePolicy::Overwrite;
        a.need_control = match parsed.stop {
            Stop::NeedControl => true,
            Stop::NotYetWritten | Stop::Torn => overwrites,
            Stop::End | Stop::Stale => false,
        };
        if parsed.consumed > 0 || parsed.stop != Stop::NotYetWritten {
            a.note_progress();
        } else if !a.need_control {
            self.counters.empty_reads.fetch_add(1, Ordering::Relaxed);
            if a.note_empty(&self.options, Instant::now(), &mut self.permit) {
                request_doorbell_counted(post, outstanding, a, &self.counters)?;
            }
        }
        if let Some(final_seq) = a.end {
            if a.reader.next_seq() > final_seq {
                let publisher = a.info;
                self.stream_ended(key, publisher, final_seq);
            }
        }
        Ok(())
    }

    /// A control message from the publisher arrived in receive slot `slot`.
    pub(super) fn on_control(&mut self, key: usize, slot: usize, len: usize) {
        let feed = &mut self.feeds[key];
        let offset = (2 + slot) * SLOT;
        let mut bytes = [0u8; SLOT];
        let len = len.min(SLOT);
        let decoded = feed
            .ctrl
            .buffer()
            .read(offset, &mut bytes[..len])
            .map_err(Error::from)
            .and_then(|_| Control::decode(&bytes[..len]).map_err(Error::from));
        if !feed.closed {
            match feed
                .qp
                .post_recv(WrId::feed(key, feed.gen, WrKind::Recv, slot).encode(), &[feed.ctrl.sge(offset, SLOT)])
            {
                Ok(()) => feed.outstanding += 1,
                Err(e) => tracing::debug!("reposting a receive: {e}"),
            }
        }
        let Some(a) = feed.active.as_deref_mut() else { return };
        match decoded {
            Ok(Control::Doorbell { .. }) => {
                self.counters.doorbells.fetch_add(1, Ordering::Relaxed);
                a.idle = Idle::Active;
                a.empty_since = None;
                a.pacer.reset();
            }
            Ok(Control::CreditWanted { position }) => {
                self.counters.credit_requests.fetch_add(1, Ordering::Relaxed);
                a.credit_wanted = Some(a.credit_wanted.map_or(position, |p| p.max(position)));
            }
            Ok(Control::Dropped { reason }) => {
                self.user_events.push_back(SubscriptionEvent::Dropped { publisher: a.info, reason });
                self.close_feed(key);
            }
            Ok(Control::EndOfStream { final_seq }) => {
                a.end = Some(final_seq);
                a.idle = Idle::Active;
                if a.reader.next_seq() > final_seq {
                    let publisher = a.info;
                    self.stream_ended(key, publisher, final_seq);
                }
            }
            Ok(other) => {
                tracing::debug!(topic = %self.topic, ?other, "the publisher sent a subscriber's control message")
            }
            Err(e) => tracing::debug!(topic = %self.topic, "undecodable control message from the publisher: {e}"),
        }
    }
}

/// Posts a control SEND from `slot` of the feed's control region (`solicited`: the publisher
/// waits for it alone).
pub(super) fn post_control(
    (gen, key, qp, ctrl): ControlPost<'_>,
    kind: WrKind,
    slot: usize,
    msg: &Control,
    solicited: bool,
) -> Result<()> {
    let bytes = msg.encode()?;
    let offset = slot * SLOT;
    ctrl.buffer().write(offset, &bytes)?;
    let sge = [ctrl.sge(offset, bytes.len())];
    qp.post_send(&SendRequest {
        solicited,
        ..SendRequest::new(WrId::feed(key, gen, kind, slot).encode(), SendOp::Send, &sge)
    })?;
    Ok(())
}

/// Posts a READ of the publisher's ring as `plan` says into READ buffer `buf`, which has no
/// READ in flight and no queued message pointing into it; it is then the feed's READ in flight.
/// A buffer too small for the READ is replaced by a larger one first (at least twice its size,
/// at most the feed's longest READ), registered in `pd` and counted in `counters`.
pub(super) fn post_ring_read(
    (gen, key, qp): (u32, usize, &QueuePair),
    a: &mut ActiveFeed,
    buf: usize,
    plan: ReadPlan,
    (pd, counters): (&ProtectionDomain, &SubscriptionCounters),
) -> rdma_fabric::Result<()> {
    let old = a.landings[buf].capacity();
    if plan.len > old {
        let len = (2 * old).min(a.max_read_len).max(plan.len);
        a.landings[buf] = ReadBuffer::new(pd, len)?;
        counters.read_buffer_bytes.fetch_add((len - old) as u64, Ordering::Relaxed);
    }
    let remote = RemoteAddr { addr: a.ring.addr + plan.ring_offset as u64, rkey: a.ring.rkey };
    a.landings[buf].post_read(qp, WrId::feed(key, gen, WrKind::Read, 0).encode(), remote, plan.len)?;
    a.plan = Some(plan);
    a.reading_into = buf;
    Ok(())
}

/// The feed's parts a control SEND needs: generation, key, queue pair, control region.
pub(super) type ControlPost<'a> = (u32, usize, &'a QueuePair, &'a MemoryRegion);

pub(super) fn send_ack(post: ControlPost<'_>, a: &mut ActiveFeed, solicited: bool) -> Result<()> {
    let position = a.reader.consumed_position();
    let ack = Control::Ack { position, seq: a.reader.next_seq() };
    post_control(post, WrKind::Ack, 0, &ack, solicited)?;
    a.ack_in_flight = true;
    a.acked = position;
    Ok(())
}

/// Asks the publisher for a doorbell and counts it; the feed then makes one more READ and
/// parks if that finds nothing.
pub(super) fn request_doorbell_counted(
    post: ControlPost<'_>,
    outstanding: &mut u32,
    a: &mut ActiveFeed,
    counters: &SubscriptionCounters,
) -> Result<()> {
    if request_doorbell(post, a)? {
        *outstanding += 1;
        counters.doorbell_requests.fetch_add(1, Ordering::Relaxed);
    }
    a.idle = Idle::Requested;
    Ok(())
}

/// Asks the publisher for a doorbell; returns whether a request was posted.
pub(super) fn request_doorbell(post: ControlPost<'_>, a: &mut ActiveFeed) -> Result<bool> {
    if a.doorbell_req_in_flight {
        return Ok(false);
    }
    let position = a.reader.consumed_position();
    let request = Control::DoorbellRequest { armed: true, position };
    post_control(post, WrKind::DoorbellRequest, 1, &request, false)?;
    a.doorbell_req_in_flight = true;
    Ok(true)
}
