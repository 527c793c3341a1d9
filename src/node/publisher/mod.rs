//! The publishing side of a topic: the [`Publisher`] handle (publish, loan, flush, and the
//! publisher's queries), over its [`PublisherShared`](shared::PublisherShared): the ring in a
//! remote-read-only region, the subscribers connected to it, acks as credits, the
//! slow-subscriber policy, and doorbells for parked subscribers.
//!
//! Files: `shared.rs` (the shared state, whole: publishing, credit, control traffic,
//! accepting), `loan.rs` (a record lent in place), `liveness.rs` (one subscriber's activity),
//! `flow_control.rs` (the policy's rules as pure functions), `builder.rs`, `options.rs`,
//! `counters.rs`, `exclusive.rs` (the single-threaded handle: no lock per message).

mod builder;
mod counters;
mod exclusive;
mod flow_control;
mod liveness;
mod loan;
mod options;
mod shared;

use rdma_wire::Topic;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use crate::error::Result;
use rdma_wire::ring::Checksum;

use super::message_type::MessageType;
use super::shared::NodeShared;

pub use builder::PublisherBuilder;
pub use counters::PublisherCounters;
pub use exclusive::ExclusivePublisher;
pub use loan::Loan;
pub use options::Policy;
pub(crate) use options::PublisherOptions;
pub(crate) use shared::{PublisherShared, SERVICE_INTERVAL};

/// Publishes messages of type `T` on one topic: raw bytes (`Publisher`, that is
/// `Publisher<[u8]>`) or a serde type (`Publisher<Quote>`, from
/// [`PublisherBuilder::typed`](crate::PublisherBuilder::typed)). `Send + Sync`: share it
/// between threads with an `Arc`.
///
/// ```
/// use std::time::Duration;
/// use rdma_pubsub::{DiscoveryOptions, Node, Policy};
///
/// let node = Node::builder().discovery(DiscoveryOptions::disabled()).build()?;
/// let publisher = node.publisher("doc-publisher").policy(Policy::Block { timeout: Duration::from_secs(1) }).create()?;
/// // With no subscriber connected nothing holds the ring back.
/// assert_eq!(publisher.publish(b"first")?, 1);
/// let typed = node.publisher("doc-typed").typed::<(String, u32)>().create()?;
/// assert_eq!(typed.publish(&("second".into(), 2))?, 1);
/// # Ok::<(), rdma_pubsub::Error>(())
/// ```
pub struct Publisher<T: ?Sized + MessageType = [u8]> {
    shared: Arc<PublisherShared>,
    _type: PhantomData<fn(&T)>,
}

impl<T: ?Sized + MessageType> std::fmt::Debug for Publisher<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Publisher").field("topic", &self.shared.topic()).field("id", &self.shared.id()).finish()
    }
}

impl<T: ?Sized + MessageType> Publisher<T> {
    /// A publisher of `topic` on `node` (see [`PublisherShared::create`]).
    ///
    /// # Errors
    /// As [`PublisherBuilder::create`].
    pub(crate) fn create(node: Arc<NodeShared>, topic: Topic, options: PublisherOptions) -> Result<Publisher<T>> {
        Ok(Publisher { shared: PublisherShared::create(node, topic, options)?, _type: PhantomData })
    }

    /// Publishes one message (fragmented through the ring when it is large); returns its
    /// sequence number. Raw bytes are copied into the ring as they are; a serde value is
    /// encoded straight into it when it fits one ring record (else through a buffer, then
    /// fragmented). Under [`Policy::Block`] it waits for credit up to the timeout; on
    /// timeout nothing of the message was published, unless it was larger than the free space
    /// and partly written: then it is finished by the next `publish`/`flush` call.
    ///
    /// A message that fits under the publisher limit costs one uncontended lock, the copy into
    /// the ring, the header and its checksum, a release store of the tail, a look at the CQ
    /// and a comparison with the lowest armed doorbell: no clock read, no allocation, no
    /// system call. A run of messages from one thread costs less through
    /// [`exclusive`](Self::exclusive), which takes no lock per message.
    ///
    /// # Errors
    /// [`Error::Timeout`](crate::Error::Timeout) when a Block publisher waited its whole timeout for credit;
    /// [`Error::Encode`](crate::Error::Encode) when a value does not serialize; [`Error::MessageTooLarge`](crate::Error::MessageTooLarge) for a message over
    /// 4 GiB.
    pub fn publish(&self, message: &T) -> Result<u64> {
        if let Some(bytes) = T::as_raw(message) {
            return self.shared.publish_bytes(bytes);
        }
        let len = T::encoded_len(message)?;
        if len > self.shared.max_record_payload() {
            let mut bytes = vec![0; len];
            T::encode_into(message, &mut bytes)?;
            return self.shared.publish_bytes(&bytes);
        }
        let mut loan = self.loan(len)?;
        T::encode_into(message, &mut loan)?;
        loan.send()
    }

    /// Lends `len` bytes of the ring (at most one ring record) for the next message, zeroed:
    /// write them through the loan (`&mut [u8]`) and [`send`](Loan::send) it. Under
    /// [`Policy::Block`] it first waits for room, up to the timeout.
    ///
    /// # Errors
    /// [`Error::MessageTooLarge`](crate::Error::MessageTooLarge) when `len` exceeds one ring record (publish such messages
    /// with [`publish`](Self::publish), which fragments them); [`Error::Timeout`](crate::Error::Timeout) when a Block
    /// publisher waited its whole timeout for room.
    pub fn loan(&self, len: usize) -> Result<Loan<'_>> {
        self.shared.loan(len)
    }

    /// A handle that publishes from this thread without a lock per message, holding the
    /// publisher until it is dropped (see [`ExclusivePublisher`]). It borrows the publisher
    /// mutably: nothing else can call it meanwhile, so no call of this process can wait for
    /// the handle (a publisher shared through an `Arc` publishes with
    /// [`publish`](Self::publish)).
    ///
    /// # Errors
    /// [`Error::Timeout`](crate::Error::Timeout) when a Block publisher's earlier call left a
    /// message partly written and it cannot be finished within the timeout.
    pub fn exclusive(&mut self) -> Result<ExclusivePublisher<'_, T>> {
        ExclusivePublisher::new(&self.shared)
    }

    /// Waits (under Block, up to the timeout) until every connected subscriber has consumed
    /// everything published, and finishes a partly written message first.
    ///
    /// # Errors
    /// [`Error::Timeout`](crate::Error::Timeout) when a subscriber has not consumed everything within `timeout`.
    pub fn flush(&self, timeout: Duration) -> Result<()> {
        self.shared.flush(timeout)
    }

    /// The topic.
    pub fn topic(&self) -> &str {
        self.shared.topic()
    }

    /// This publisher's id (what subscribers see in [`crate::PublisherInfo`]).
    pub fn id(&self) -> u64 {
        self.shared.id()
    }

    /// The function that checksums this publisher's records.
    pub fn checksum(&self) -> Checksum {
        self.shared.checksum()
    }

    /// Subscribers currently connected.
    pub fn subscriber_count(&self) -> usize {
        self.shared.subscriber_count()
    }

    /// Waits up to `timeout` (any `Duration`) until at least `n` subscribers are connected;
    /// returns how many are.
    ///
    /// # Errors
    /// [`Error::Timeout`](crate::Error::Timeout) when fewer than `n` are connected when the time is up.
    pub fn wait_for_subscribers(&self, n: usize, timeout: Duration) -> Result<usize> {
        self.shared.wait_for_subscribers(n, timeout)
    }

    /// The counters.
    pub fn counters(&self) -> &PublisherCounters {
        self.shared.counters()
    }

    /// Sequence number the next message gets.
    pub fn next_seq(&self) -> u64 {
        self.shared.next_seq()
    }

    /// Closes the publisher, waiting at most `timeout` (any `Duration`; `ZERO` does not wait
    /// for subscribers): it stops accepting subscribers, waits until every connected
    /// subscriber consumed everything published (or `timeout` passes), tells each the stream
    /// ended (`SubscriptionEvent::Ended`; what one did not READ by then it reports as
    /// `Lost { reason: PublisherClosed }`), and disconnects them. Dropping a publisher does
    /// the same with its [`linger`](crate::PublisherBuilder::linger) (default 2 s): in an async
    /// task, close it with a short timeout (or from `spawn_blocking`) rather than drop it.
    ///
    /// It blocks at most `timeout` and, past it, 20 ms to post the end of stream.
    ///
    /// # Errors
    /// [`Error::Timeout`](crate::Error::Timeout) when a subscriber had not consumed
    /// everything within `timeout` (it was told the stream ended all the same).
    pub fn close(self, timeout: Duration) -> Result<()> {
        if self.shared.close(timeout) {
            Ok(())
        } else {
            Err(crate::Error::Timeout { what: "close", millis: rdma_fabric::time::millis(timeout) })
        }
    }
}

impl<T: ?Sized + MessageType> Drop for Publisher<T> {
    /// Closes the publisher as [`close`](Publisher::close) does, with its linger.
    fn drop(&mut self) {
        let linger = self.shared.linger();
        self.shared.close(linger);
    }
}
