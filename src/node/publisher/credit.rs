//! Flow control off the hot path: the publishing turn, waiting for credit under each policy
//! (its rules: `flow_control.rs`), asking the laggard for a solicited ack, and waiting until
//! everything is consumed.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use parking_lot::MutexGuard;

use super::flow_control::{credit_wanted, judge_slow, SlowVerdict};
use super::options::Policy;
use super::state::{PubState, PublisherShared};
use crate::error::{Error, Result};
use crate::node::ack_clock;
use crate::node::shared::RECHECK_INTERVAL;
use rdma_fabric::WorkCompletion;
use rdma_wire::protocol::{Control, DropReason};
use rdma_wire::ring::Append;

/// The publishing turn, held by the one call that may release the state lock in the middle
/// of a message (to wait for credit). Given back on drop; drop it only after the state lock.
pub(super) struct Turn<'a> {
    shared: &'a PublisherShared,
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        self.shared.state.lock().publishing = false;
        self.shared.turn.notify_one();
    }
}

/// When a waiting publisher call gives up, and the timeout it then reports: its own (`flush`)
/// or the Block policy's (a publishing call).
#[derive(Debug, Clone, Copy)]
pub(super) struct Deadline {
    pub(super) at: Instant,
    timeout: Duration,
    call: Call,
}

/// The call a [`Deadline`] belongs to.
#[derive(Debug, Clone, Copy)]
enum Call {
    Publish,
    Flush,
}

impl Deadline {
    /// A publishing call's: the Block timeout from now (DropSlow and Overwrite do not time out).
    pub(super) fn publish(policy: Policy) -> Deadline {
        let timeout = match policy {
            Policy::Block { timeout } => timeout,
            _ => Duration::MAX,
        };
        Deadline { at: rdma_fabric::time::deadline_after(timeout), timeout, call: Call::Publish }
    }

    /// A `flush(timeout)`'s.
    pub(super) fn flush(timeout: Duration) -> Deadline {
        Deadline { at: rdma_fabric::time::deadline_after(timeout), timeout, call: Call::Flush }
    }

    /// One that never passes (closing takes the turn however long it takes).
    pub(super) fn never() -> Deadline {
        Deadline::publish(Policy::Overwrite)
    }

    /// The error of a call that waited until this deadline for the turn (`turn`) or for the
    /// slowest subscriber.
    fn expired(&self, turn: bool) -> Error {
        let what = match (self.call, turn) {
            (Call::Publish, true) => "publish (waiting for another publishing call)",
            (Call::Publish, false) => "publish (waiting for the slowest subscriber)",
            (Call::Flush, true) => "flush (waiting for another publishing call)",
            (Call::Flush, false) => "flush (waiting for the slowest subscriber)",
        };
        Error::Timeout { what, millis: rdma_fabric::time::millis(self.timeout) }
    }
}

impl PublisherShared {
    /// Takes the publishing turn, waiting until `deadline` for the call that holds it.
    pub(super) fn take_turn<'a>(
        &'a self,
        mut st: MutexGuard<'a, PubState>,
        deadline: Deadline,
    ) -> Result<(Turn<'a>, MutexGuard<'a, PubState>)> {
        while st.publishing {
            if self.turn.wait_until(&mut st, deadline.at).timed_out() && st.publishing {
                return Err(deadline.expired(true));
            }
        }
        st.publishing = true;
        Ok((Turn { shared: self }, st))
    }

    /// Finishes a message a timed-out call left partly written (with the turn held).
    pub(super) fn finish_unfinished<'a>(
        &'a self,
        mut st: MutexGuard<'a, PubState>,
        deadline: Deadline,
    ) -> Result<MutexGuard<'a, PubState>> {
        match st.unfinished.take() {
            Some(pending) => self.append_waiting(st, &pending, deadline).map(|(_, st)| st),
            None => Ok(st),
        }
    }

    /// Appends `payload`, waiting for credit as the policy says (with the turn held). On a
    /// Block timeout after part of the message was written, keeps it to be finished by the
    /// next call.
    pub(super) fn append_waiting<'a>(
        &'a self,
        mut st: MutexGuard<'a, PubState>,
        payload: &[u8],
        deadline: Deadline,
    ) -> Result<(u64, MutexGuard<'a, PubState>)> {
        loop {
            self.progress(&mut st);
            let limit = st.limit;
            match st.producer.append(payload, limit)? {
                Append::Complete { seq } => {
                    self.after_commit(&mut st, payload.len());
                    return Ok((seq, st));
                }
                Append::Blocked { written, needed_limit, .. } => {
                    if written > 0 {
                        self.ring_doorbells(&mut st);
                    }
                    st = match self.wait_credit(st, needed_limit, deadline) {
                        Ok(st) => st,
                        Err(e) => {
                            if written > 0 {
                                self.state.lock().unfinished = Some(payload.to_vec());
                            }
                            return Err(e);
                        }
                    };
                }
            }
        }
    }

    /// Waits until a record of `len` bytes fits (with the turn held).
    pub(super) fn wait_for_room<'a>(
        &'a self,
        mut st: MutexGuard<'a, PubState>,
        len: usize,
        deadline: Deadline,
    ) -> Result<MutexGuard<'a, PubState>> {
        loop {
            self.progress(&mut st);
            let needed = st.producer.needed_limit(len);
            if needed <= st.limit {
                return Ok(st);
            }
            st = self.wait_credit(st, needed, deadline)?;
        }
    }

    /// Called with the state locked when the producer needs `needed_limit`; releases the lock,
    /// applies the policy, and waits for acks. Returns the lock again when it is worth trying
    /// again.
    fn wait_credit<'a>(
        &'a self,
        mut st: MutexGuard<'a, PubState>,
        needed_limit: u64,
        deadline: Deadline,
    ) -> Result<MutexGuard<'a, PubState>> {
        self.counters.waits.fetch_add(1, Ordering::Relaxed);
        let now = Instant::now();
        // The service tick does not run while a call waits here: idle subscribers are found
        // here instead. One dropped may be all that held the publisher back.
        if self.drop_idle(&mut st, now) {
            return Ok(st);
        }
        let capacity = st.producer.capacity() as u64;
        let mut wait_until = deadline.at;
        if let Policy::DropSlow { grace } = self.options.policy {
            let mut to_drop = Vec::new();
            for (key, sub) in st.subs.iter_mut() {
                match judge_slow(sub.acked, capacity, needed_limit, &mut sub.slow_since, grace, now) {
                    SlowVerdict::Drop => to_drop.push(key),
                    SlowVerdict::Waiting { until } => wait_until = wait_until.min(until),
                    SlowVerdict::NotHoldingBack => {}
                }
            }
            if !to_drop.is_empty() {
                let tail = st.producer.tail();
                let drops: Vec<(usize, DropReason)> = to_drop
                    .into_iter()
                    .map(|key| (key, DropReason::TooSlow { lag: tail - st.subs[key].acked }))
                    .collect();
                self.drop_subscribers(&mut st, &drops);
                return Ok(st);
            }
        } else if now >= deadline.at {
            return Err(deadline.expired(false));
        }
        let solicited = st.subs.len() >= 2 && self.ask_for_credit(&mut st, needed_limit.saturating_sub(capacity));
        drop(st);
        let mut wcs = [WorkCompletion::default(); 32];
        let timeout = wait_until.saturating_duration_since(Instant::now()).min(RECHECK_INTERVAL);
        // No spinning while waiting for credit: the subscribers that will grant it need the CPU
        // (measured on 2 vCPUs: spinning here cost the publisher up to 7x CPU per message).
        let n = if solicited {
            self.counters.solicited_waits.fetch_add(1, Ordering::Relaxed);
            self.cq.poll_wait_solicited(&mut wcs, timeout)?
        } else {
            self.cq.poll_wait(&mut wcs, Duration::ZERO, timeout)?
        };
        let mut st = self.state.lock();
        self.handle_completions(&mut st, &wcs[..n]);
        if n == 0 && Instant::now() >= deadline.at && !matches!(self.options.policy, Policy::DropSlow { .. }) {
            return Err(deadline.expired(false));
        }
        Ok(st)
    }

    /// Several subscribers hold the publisher back (acked below `floor`): asks the one that
    /// will probably ack last ([`ack_clock::last_to_ack`]) for a solicited ack at `floor` or a
    /// quarter ring past its last ack, whichever is further (not past the tail), unless it was
    /// asked for that already. Returns whether the publisher may wait for solicited
    /// completions only: some subscriber has been asked and has not answered yet.
    fn ask_for_credit(&self, st: &mut PubState, floor: u64) -> bool {
        let laggards = st.subs.iter().filter(|(_, s)| s.acked < floor).map(|(k, s)| (k, &s.clock, s.acked));
        let Some(key) = ack_clock::last_to_ack(laggards) else { return false };
        let sub = &st.subs[key];
        let want = credit_wanted(sub.acked, floor, st.producer.capacity() as u64, st.producer.tail());
        if sub.asked_for >= want {
            return true;
        }
        match self.send_control(st, key, &Control::CreditWanted { position: want }) {
            Ok(_) => {
                st.subs[key].asked_for = want;
                self.counters.credit_requests.fetch_add(1, Ordering::Relaxed);
                true
            }
            Err(e) => {
                tracing::debug!(topic = %self.topic, "asking for credit: {e}");
                false
            }
        }
    }

    /// Whether every subscriber consumed up to the tail before `deadline`.
    pub(super) fn wait_consumed(&self, deadline: Instant) -> bool {
        let mut wcs = [WorkCompletion::default(); 32];
        loop {
            {
                let mut st = self.state.lock();
                self.progress(&mut st);
                // The service tick skips a publisher in a call: idle subscribers are found here.
                self.drop_idle(&mut st, Instant::now());
                let tail = st.producer.tail();
                if st.subs.iter().all(|(_, s)| s.acked >= tail) {
                    return true;
                }
                self.ring_doorbells(&mut st);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            let n = self.cq.poll_wait(&mut wcs, Duration::from_micros(50), left.min(RECHECK_INTERVAL)).unwrap_or(0);
            let mut st = self.state.lock();
            self.handle_completions(&mut st, &wcs[..n]);
        }
    }
}
