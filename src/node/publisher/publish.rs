//! The publish hot path: a message that fits under the cached publisher limit costs one
//! uncontended lock, the copy into the ring, the header and its checksum, a release store of
//! the tail, a look at the CQ (a few atomic loads on soft when it is empty) and a comparison
//! with the lowest armed doorbell. No clock read, no allocation, no system call: those wait
//! for the calls that must block (`credit.rs`).

use std::sync::atomic::Ordering;
use std::time::Duration;

use parking_lot::MutexGuard;
use serde::Serialize;

use super::credit::Deadline;
use super::{Claim, PubState, Publisher, PublisherShared};
use crate::error::{Error, Result};
use crate::node::add_single_writer;
use crate::ring::Append;

impl Publisher {
    /// Publishes one message (fragmented through the ring when it is large); returns its
    /// sequence number. Under [`super::Policy::Block`] it waits for credit up to the timeout;
    /// on timeout nothing of the message was published, unless it was larger than the free
    /// space and partly written: then it is finished by the next `publish`/`flush` call.
    ///
    /// # Errors
    /// [`Error::Timeout`] when a Block publisher waited its whole timeout for credit;
    /// [`Error::Ring`] for a message over 4 GiB.
    pub fn publish(&self, payload: &[u8]) -> Result<u64> {
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

    /// Serializes `value` with bincode 2 (serde, standard configuration) and publishes it.
    ///
    /// # Errors
    /// [`Error::Encode`] when the value does not serialize; otherwise as
    /// [`publish`](Self::publish).
    pub fn publish_value<T: Serialize>(&self, value: &T) -> Result<u64> {
        let bytes = bincode::serde::encode_to_vec(value, bincode::config::standard())
            .map_err(|e| Error::Encode(e.to_string()))?;
        self.publish(&bytes)
    }

    /// Writes a message of `len` bytes (at most one ring record) in place: `fill` gets the
    /// reserved record and writes the payload straight into the ring (no intermediate copy),
    /// then the message is committed and its sequence number returned. If `fill` fails,
    /// nothing is published.
    ///
    /// ```
    /// use rdma_pubsub::{DiscoveryOptions, Node};
    ///
    /// let node = Node::builder().discovery(DiscoveryOptions::disabled()).build()?;
    /// let publisher = node.publisher("doc-in-place")?;
    /// let seq = publisher.publish_with(16, |claim| {
    ///     claim.write_at(0, &7u64.to_le_bytes())?;
    ///     claim.write_at(8, &42u64.to_le_bytes())?;
    ///     Ok(())
    /// })?;
    /// assert_eq!(seq, 1);
    /// # Ok::<(), rdma_pubsub::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidOption`] when `len` exceeds one ring record, [`Error::Timeout`] as for
    /// [`publish`](Self::publish), and whatever `fill` returns (nothing is published then).
    pub fn publish_with<F>(&self, len: usize, fill: F) -> Result<u64>
    where
        F: FnOnce(&mut Claim<'_>) -> Result<()>,
    {
        let shared = &*self.shared;
        if len > shared.max_record_payload {
            return Err(Error::InvalidOption {
                option: "in-place message length",
                detail: format!("{len} bytes exceeds one ring record ({}); use publish", shared.max_record_payload),
            });
        }
        let st = shared.state.lock();
        if st.may_publish_now() && st.producer.needed_limit(len) <= st.limit {
            return shared.commit_in_place(st, len, fill);
        }
        let deadline = Deadline::publish(shared.options.policy);
        let (turn, st) = shared.take_turn(st, deadline)?;
        let result = shared
            .finish_unfinished(st, deadline)
            .and_then(|st| shared.wait_for_room(st, len, deadline))
            .and_then(|st| shared.commit_in_place(st, len, fill));
        drop(turn);
        result
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
                Err(Error::Timeout { what: "flush", millis: crate::time::millis(timeout) })
            }
        });
        drop(turn);
        consumed
    }
}

impl PubState {
    /// Whether a publishing call may write now without taking the turn: no other call holds
    /// it and no partly written message waits to be finished.
    fn may_publish_now(&self) -> bool {
        !self.publishing && self.unfinished.is_none()
    }
}

impl PublisherShared {
    /// Claims one record of `len` bytes (room was checked), lets `fill` write it in place,
    /// and commits it.
    fn commit_in_place<F>(&self, mut st: MutexGuard<'_, PubState>, len: usize, fill: F) -> Result<u64>
    where
        F: FnOnce(&mut Claim<'_>) -> Result<()>,
    {
        let limit = st.limit;
        let seq = {
            let mut claim = st.producer.claim(len, limit)?.ok_or(Error::Closed("the ring has no room"))?;
            fill(&mut claim)?;
            claim.commit()?
        };
        self.after_commit(&mut st, len);
        Ok(seq)
    }

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
