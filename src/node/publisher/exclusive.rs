//! A publisher's single-threaded handle: [`ExclusivePublisher`] holds the publishing turn and
//! the state lock from its creation to its drop, so that a message costs no locked instruction
//! (Aeron's `ExclusivePublication`).
//!
//! It borrows its [`Publisher`](super::Publisher) mutably, so no other call of the application
//! can wait for it. The node's CM thread can: between two of its messages the handle lends the
//! lock to it (`MutexGuard::bump`, one relaxed load when nothing waits) and handles the
//! connection events the CM thread left to it (`PublisherShared::run_deferred`, one relaxed
//! load when there are none). The CM thread waits at most `CM_LOCK_WAIT`: a connect or a
//! disconnect that finds the state held longer is handled by this handle's next message, its
//! drop, or the next service tick after that.

use std::marker::PhantomData;
use std::sync::Arc;

use parking_lot::MutexGuard;

use super::counters::PublisherCounters;
use super::shared::{PubState, PublisherShared, Turn};
use crate::error::Result;
use crate::node::message_type::MessageType;

/// Publishes on one topic from one thread without a lock per message: made by
/// [`Publisher::exclusive`](super::Publisher::exclusive), it holds the publisher until it is
/// dropped. Every message costs the copy into the ring, the header, a release store of the tail
/// and a look at the CQ: no locked instruction, no clock read, no allocation, no system call
/// (a serde value is encoded into a buffer the handle keeps). A message the policy makes wait
/// for credit waits as [`Publisher::publish`](super::Publisher::publish) does.
///
/// Hold it for a run of messages and drop it when the run ends: a subscriber's connect that
/// arrives while it publishes nothing is answered only at its next message or its drop (acks
/// and doorbell requests wait likewise, and nothing is owed to a subscriber meanwhile).
///
/// ```
/// use rdma_pubsub::{DiscoveryOptions, Node};
///
/// let node = Node::builder().discovery(DiscoveryOptions::disabled()).build()?;
/// let mut publisher = node.publisher("doc-exclusive").create()?;
/// let mut exclusive = publisher.exclusive()?;
/// for i in 0..100u64 {
///     exclusive.publish(&i.to_le_bytes())?;
/// }
/// drop(exclusive);
/// assert_eq!(publisher.next_seq(), 101);
/// # Ok::<(), rdma_pubsub::Error>(())
/// ```
pub struct ExclusivePublisher<'a, T: ?Sized + MessageType = [u8]> {
    shared: &'a Arc<PublisherShared>,
    /// The state lock, held between calls (`None` only inside a call that waits for credit).
    /// Declared before `_turn`: the lock is released before the turn is given back.
    state: Option<MutexGuard<'a, PubState>>,
    /// Held for its drop.
    _turn: Turn<'a>,
    /// A serde value's encoding, reused from one message to the next.
    scratch: Vec<u8>,
    _type: PhantomData<fn(&T)>,
}

impl<T: ?Sized + MessageType> std::fmt::Debug for ExclusivePublisher<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExclusivePublisher")
            .field("topic", &self.shared.topic())
            .field("id", &self.shared.id())
            .finish()
    }
}

impl<'a, T: ?Sized + MessageType> ExclusivePublisher<'a, T> {
    /// Takes the turn and the state of `shared` (see [`PublisherShared::hold`]).
    pub(super) fn new(shared: &'a Arc<PublisherShared>) -> Result<ExclusivePublisher<'a, T>> {
        let (turn, state) = shared.hold()?;
        Ok(ExclusivePublisher { shared, state: Some(state), _turn: turn, scratch: Vec::new(), _type: PhantomData })
    }

    /// Publishes one message, as [`Publisher::publish`](super::Publisher::publish) does;
    /// returns its sequence number.
    ///
    /// # Errors
    /// As [`Publisher::publish`](super::Publisher::publish):
    /// [`Error::Timeout`](crate::Error::Timeout) when a Block publisher waited its whole
    /// timeout for credit (a message larger than the free space may then be partly written: the
    /// next call finishes it first), [`Error::Encode`](crate::Error::Encode) when a value does
    /// not serialize, [`Error::MessageTooLarge`](crate::Error::MessageTooLarge) over 4 GiB.
    pub fn publish(&mut self, message: &T) -> Result<u64> {
        if let Some(bytes) = T::as_raw(message) {
            return self.shared.publish_held(&mut self.state, bytes);
        }
        let mut scratch = std::mem::take(&mut self.scratch);
        scratch.clear();
        scratch.resize(T::encoded_len(message)?, 0);
        let result =
            T::encode_into(message, &mut scratch).and_then(|()| self.shared.publish_held(&mut self.state, &scratch));
        self.scratch = scratch;
        result
    }

    /// The publisher's counters.
    pub fn counters(&self) -> &PublisherCounters {
        self.shared.counters()
    }

    /// Sequence number the next message gets.
    pub fn next_seq(&self) -> u64 {
        self.state.as_ref().map_or_else(|| self.shared.next_seq(), |st| st.next_seq())
    }
}

impl<T: ?Sized + MessageType> Drop for ExclusivePublisher<'_, T> {
    /// Handles the connection events left to it, then gives the lock and the turn back.
    fn drop(&mut self) {
        if let Some(st) = self.state.as_mut() {
            self.shared.run_deferred(st);
        }
    }
}
