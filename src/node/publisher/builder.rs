//! [`PublisherBuilder`]: `node.publisher("t").policy(..).ring_capacity(..).create()`.

use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use super::{Policy, Publisher, PublisherOptions};
use crate::error::Result;
use crate::node::message_type::MessageType;
use crate::node::shared::NodeShared;
use crate::node::topic::IntoTopic;
use rdma_wire::protocol::Secret;
use rdma_wire::ring::Checksum;
use rdma_wire::Topic;

/// Configures and creates a [`Publisher`] of one topic; from [`Node::publisher`](crate::Node::publisher).
///
/// ```
/// use std::time::Duration;
/// use rdma_pubsub::{DiscoveryOptions, Node, Policy};
///
/// #[derive(serde::Serialize, serde::Deserialize)]
/// struct Quote { symbol: String, price: f64 }
///
/// let node = Node::builder().discovery(DiscoveryOptions::disabled()).build()?;
/// let quotes = node
///     .publisher("quotes")
///     .policy(Policy::DropSlow { grace: Duration::from_millis(100) })
///     .ring_capacity(1 << 20)
///     .typed::<Quote>()
///     .create()?;
/// quotes.publish(&Quote { symbol: "ABC".into(), price: 1.5 })?;
/// # Ok::<(), rdma_pubsub::Error>(())
/// ```
#[must_use = "a builder does nothing until `create` is called"]
pub struct PublisherBuilder<'n, T: ?Sized + MessageType = [u8]> {
    node: &'n Arc<NodeShared>,
    topic: Result<Topic>,
    options: PublisherOptions,
    _type: PhantomData<fn(&T)>,
}

impl<T: ?Sized + MessageType> std::fmt::Debug for PublisherBuilder<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PublisherBuilder").field("topic", &self.topic).field("options", &self.options).finish()
    }
}

impl<'n> PublisherBuilder<'n> {
    pub(crate) fn new(node: &'n Arc<NodeShared>, topic: impl IntoTopic) -> Self {
        PublisherBuilder { node, topic: topic.into_topic(), options: PublisherOptions::default(), _type: PhantomData }
    }
}

impl<'n, T: ?Sized + MessageType> PublisherBuilder<'n, T> {
    /// Publishes values of `U` (any `Serialize + DeserializeOwned` type) instead of raw bytes.
    pub fn typed<U: MessageType>(self) -> PublisherBuilder<'n, U> {
        PublisherBuilder { node: self.node, topic: self.topic, options: self.options, _type: PhantomData }
    }
    /// What the publisher does when a subscriber falls behind by a whole ring (default
    /// [`Policy::Block`] with a 5 s timeout).
    pub fn policy(mut self, policy: Policy) -> Self {
        self.options.policy = policy;
        self
    }
    /// Ring data bytes: a power of two, at least 64 KiB (default 1 MiB).
    pub fn ring_capacity(mut self, bytes: usize) -> Self {
        self.options.ring_capacity = bytes;
        self
    }
    /// Largest payload of one ring record; larger messages are fragmented (default a quarter
    /// of the ring).
    pub fn max_record_payload(mut self, bytes: usize) -> Self {
        self.options.max_record_payload = Some(bytes);
        self
    }
    /// Most subscribers connected at once, 1 to 4,096 (default 256).
    pub fn max_subscribers(mut self, n: usize) -> Self {
        self.options.max_subscribers = n;
        self
    }
    /// How long dropping the publisher waits for subscribers to consume what was published
    /// (default 2 s; `Duration::MAX`: as long as they take, bounded by their
    /// [`idle_timeout`](Self::idle_timeout)). The drop blocks at most this, and 20 ms more to
    /// post the end of stream; what a subscriber did not READ by then it reports lost
    /// (`SubscriptionEvent::Lost { reason: PublisherClosed }`). See
    /// [`Publisher::close`](crate::Publisher::close) for another timeout.
    pub fn linger(mut self, linger: Duration) -> Self {
        self.options.linger = linger;
        self
    }
    /// The function that checksums the ring's records (default: whichever is faster on this
    /// CPU, [`Checksum::fastest_here`]).
    pub fn checksum(mut self, checksum: Checksum) -> Self {
        self.options.checksum = Some(checksum);
        self
    }
    /// How long a subscriber may hold the publisher back, or take none of its control
    /// messages, before it is dropped with [`DropReason::Idle`](crate::DropReason::Idle)
    /// (default 30 s, at least 500 ms; `Duration::MAX`: never). A subscriber's acks come from
    /// its `recv` calls, so under `Block` an application that stops calling `recv` on a
    /// subscription that is behind is dropped after this long; it is told why and may
    /// reconnect.
    pub fn idle_timeout(mut self, timeout: Duration) -> Self {
        self.options.idle_timeout = timeout;
        self
    }
    /// Requires subscribers to prove they hold `secret` (see
    /// [`SubscriberBuilder::credential`](crate::SubscriberBuilder::credential)); the others are
    /// rejected with [`RejectCode::Unauthorized`](crate::RejectCode::Unauthorized) before they
    /// learn anything of the ring, and counted (`rejected_unauthorized`). Default: anyone who
    /// can reach the node may subscribe.
    pub fn credential(mut self, secret: Secret) -> Self {
        self.options.credential = Some(secret);
        self
    }
    /// Announces `id` as the identity of the message type, instead of the fingerprint of its
    /// serde shape (see [`MessageType`](crate::MessageType)): subscriptions that give the
    /// same id ([`SubscriberBuilder::schema_id`](crate::SubscriberBuilder::schema_id)) read it,
    /// typed ones with another id or none are refused with
    /// [`RejectCode::TypeMismatch`](crate::RejectCode::TypeMismatch). No effect on a raw
    /// publisher.
    pub fn schema_id(mut self, id: u64) -> Self {
        self.options.schema_id = Some(id);
        self
    }
    /// Creates the publisher and announces it (with discovery).
    ///
    /// # Errors
    /// [`Error::InvalidTopic`](crate::Error::InvalidTopic),
    /// [`Error::InvalidOption`](crate::Error::InvalidOption) (ring geometry, subscriber limit,
    /// idle timeout), [`Error::AlreadyPublishing`](crate::Error::AlreadyPublishing) when this
    /// node publishes the topic already, and [`Error::Fabric`](crate::Error::Fabric) when the
    /// ring cannot be registered.
    pub fn create(mut self) -> Result<Publisher<T>> {
        self.options.message_type = T::type_tag(self.options.schema_id);
        Publisher::create(self.node.clone(), self.topic?, self.options)
    }
}
