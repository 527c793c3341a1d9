//! The publish hot path: a message that fits under the cached publisher limit costs one
//! uncontended lock, the copy into the ring, the header and its checksum, a release store of
//! the tail, a look at the CQ (a few atomic loads on soft when it is empty) and a comparison
//! with the lowest armed doorbell. No clock read, no allocation, no system call: those wait
//! for the calls that must block (`credit.rs`).

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::credit::Deadline;
use super::state::{PubState, PublisherShared};
use super::Publisher;
use crate::error::{Error, Result};
use crate::node::message_type::MessageType;
use crate::node::single_writer::add_single_writer;
use rdma_wire::ring::Append;

impl<T: ?Sized + MessageType> Publisher<T> {
    /// Publishes one message (fragmented through the ring when it is large); returns its
    /// sequence number. Raw bytes are copied into the ring as they are; a serde value is
    /// encoded straight into it when it fits one ring record (else through a buffer, then
    /// fragmented). Under [`super::Policy::Block`] it waits for credit up to the timeout; on
    /// timeout nothing of the message was published, unless it was larger than the free space
    /// and partly written: then it is finished by the next `publish`/`flush` call.
    ///
    /// # Errors
    /// [`Error::Timeout`] when a Block publisher waited its whole timeout for credit;
    /// [`Error::Encode`] when a value does not serialize; [`Error::Ring`] for a message over
    /// 4 GiB.
    pub fn publish(&self, message: &T) -> Result<u64> {
        if let Some(bytes) = T::as_raw(message) {
            return self.publish_bytes(bytes);
        }
        let len = T::encoded_len(message)?;
        if len > self.shared.max_record_payload {
            let mut bytes = vec![0; len];
            T::encode_into(message, &mut bytes)?;
            return self.publish_bytes(&bytes);
        }
        let mut loan = self.loan(len)?;
        T::encode_into(message, &mut loan)?;
        loan.send()
    }

    /// Publishes bytes as one message (see [`publish`](Self::publish)).
    fn publish_bytes(&self, payload: &[u8]) -> Result<u64> {
        let shared = &*self.shared;
        let mut st = shared.state.lock();
        if st.may_publish_now() {
            let limit = st.limit;
            if let Append::Complete { seq } = st.producer.append(payload, limit)? {
                shared.after_commit(&mut st, payload.len());
                return Ok(seq);
            }
        }
        // Blocked by the limit (possibly after writing the first fragments, which the waiting
        // path resumes), or another call holds the turn.
        let deadline = Deadline::publish(shared.options.policy);
        let (turn, st) = shared.take_turn(st, deadline)?;
        let result = shared.finish_unfinished(st, deadline).and_then(|st| shared.append_waiting(st, payload, deadline));
        let seq = result.map(|(seq, st)| {
            drop(st);
            seq
        });
        drop(turn);
        seq
    }

    /// Waits (under Block, up to the timeout) until every connected subscriber has consumed
    /// everything published, and finishes a partly written message first.
    ///
    /// # Errors
    /// [`Error::Timeout`] when a subscriber has not consumed everything within `timeout`.
    pub fn flush(&self, timeout: Duration) -> Result<()> {
        let shared = &*self.shared;
        let deadline = Deadline::flush(timeout);
        let (turn, st) = shared.take_turn(shared.state.lock(), deadline)?;
        let finished = shared.finish_unfinished(st, deadline).map(drop);
        let consumed = finished.and_then(|()| {
            if shared.wait_consumed(deadline.at) {
                Ok(())
            } else {
                Err(Error::Timeout { what: "flush", millis: rdma_fabric::time::millis(timeout) })
            }
        });
        drop(turn);
        consumed
    }
}

impl PubState {
    /// Whether a publishing call may write now without taking the turn: no other call holds
    /// it and no partly written message waits to be finished.
    pub(super) fn may_publish_now(&self) -> bool {
        !self.publishing && self.unfinished.is_none()
    }
}

impl PublisherShared {
    /// Per message, after a commit: the counters, the acks and doorbell requests the CQ
    /// holds, and doorbells only when the tail passed an armed one.
    pub(super) fn after_commit(&self, st: &mut PubState, len: usize) {
        let c = &*self.counters;
        add_single_writer(&c.published, 1);
        add_single_writer(&c.bytes, len as u64);
        c.position.store(st.producer.tail(), Ordering::Relaxed);
        self.progress(st);
        self.ring_doorbells(st);
        if len >= self.yield_after {
            std::thread::yield_now();
        }
    }
}
