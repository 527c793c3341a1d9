//! [`SubscriberBuilder`]: `node.subscriber("t").start(..).create()` (a topic or a pattern).

use crate::node::topic::{IntoKeyExpr, TopicFilter};
use rdma_wire::KeyExpr;
use std::marker::PhantomData;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use super::options::{Start, SubscriptionOptions};
use super::Subscription;
use crate::error::Result;
use crate::node::message_type::MessageType;
use crate::node::shared::NodeShared;
use rdma_wire::protocol::Secret;

/// Configures and creates a [`Subscription`] to one topic, or to every topic a pattern
/// includes (a [`KeyExpr`] with wildcards, found by discovery or in the topic listing of the
/// nodes it is connected to); from
/// [`Node::subscriber`](crate::Node::subscriber).
///
/// ```
/// use std::time::Duration;
/// use rdma_pubsub::{DiscoveryOptions, Node, Start};
///
/// #[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
/// struct Quote { symbol: String, price: f64 }
///
/// let node = Node::builder().discovery(DiscoveryOptions::disabled()).build()?;
/// let publisher = node.publisher("doc-quotes").typed::<Quote>().create()?;
/// let mut quotes = node
///     .subscriber("doc-quotes")
///     .start(Start::Earliest)
///     .connect(node.local_addr())
///     .typed::<Quote>()
///     .create()?;
/// publisher.publish(&Quote { symbol: "ABC".into(), price: 1.5 })?;
/// let m = quotes.recv_timeout(Duration::from_secs(10))?.expect("a quote within 10 s");
/// assert_eq!(m.data, Quote { symbol: "ABC".into(), price: 1.5 });
/// # Ok::<(), rdma_pubsub::Error>(())
/// ```
#[must_use = "a builder does nothing until `create` is called"]
pub struct SubscriberBuilder<'n, T: ?Sized + MessageType = [u8]> {
    node: &'n Arc<NodeShared>,
    topic: Result<KeyExpr>,
    options: SubscriptionOptions,
    /// Publishers' nodes to connect to at creation.
    connect: Vec<SocketAddr>,
    _type: PhantomData<fn() -> Box<T>>,
}

impl<T: ?Sized + MessageType> std::fmt::Debug for SubscriberBuilder<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SubscriberBuilder")
            .field("topic", &self.topic)
            .field("options", &self.options)
            .field("connect", &self.connect)
            .finish()
    }
}

impl<'n> SubscriberBuilder<'n> {
    pub(crate) fn new(node: &'n Arc<NodeShared>, topic: impl IntoKeyExpr) -> Self {
        SubscriberBuilder {
            node,
            topic: topic.into_key_expr(),
            options: SubscriptionOptions::default(),
            connect: Vec::new(),
            _type: PhantomData,
        }
    }
}

impl<'n, T: ?Sized + MessageType> SubscriberBuilder<'n, T> {
    /// Receives values of `U` (any `Serialize + DeserializeOwned` type) instead of raw bytes.
    pub fn typed<U: ?Sized + MessageType>(self) -> SubscriberBuilder<'n, U> {
        let SubscriberBuilder { node, topic, options, connect, .. } = self;
        SubscriberBuilder { node, topic, options, connect, _type: PhantomData }
    }
    /// Where the subscription starts in each publisher's stream (default [`Start::Latest`]).
    pub fn start(mut self, start: Start) -> Self {
        self.options.start = start;
        self
    }
    /// Bytes one READ brings at most, 4 KiB to 64 MiB (default 256 KiB).
    pub fn batch(mut self, bytes: usize) -> Self {
        self.options.batch = bytes;
        self
    }
    /// Never park: keep READing while idle (lowest latency, one busy core; default off).
    pub fn busy_poll(mut self, on: bool) -> Self {
        self.options.busy_poll = on;
        self
    }
    /// How long empty READs continue before the subscription asks for a doorbell and parks
    /// (default 200 µs).
    pub fn spin(mut self, spin: Duration) -> Self {
        self.options.spin = spin;
        self
    }
    /// Largest message reassembled, 1 byte to `u32::MAX` (4 GiB - 1, the largest message a
    /// publisher sends; default 64 MiB): a larger one is
    /// [`Error::MessageOverLimit`](crate::Error::MessageOverLimit) from the next receive, naming
    /// the publisher and both sizes, and its publisher is not read further
    /// ([`SubscriptionEvent::MessageTooLarge`](crate::SubscriptionEvent::MessageTooLarge)).
    pub fn max_message_len(mut self, bytes: u64) -> Self {
        self.options.max_message_len = bytes;
        self
    }
    /// Largest record payload the subscription READs (default 16 MiB): a publisher that
    /// advertises larger records is not read, so READ buffers never grow past it.
    pub fn max_record_payload(mut self, bytes: usize) -> Self {
        self.options.max_record_payload = bytes;
        self
    }
    /// The topic's credential, proven (never sent) to publishers that require one. It is
    /// mutual: the publisher's accept must prove it holds the credential too (a tag answering
    /// this connect's nonce), or the subscription refuses it before READing anything
    /// ([`Error::Unauthenticated`](crate::Error::Unauthenticated)).
    pub fn credential(mut self, secret: Secret) -> Self {
        self.options.credential = Some(secret);
        self
    }
    /// Whether to connect by itself, in the background, to every publisher of the topic that
    /// discovery announces, and to reconnect to those that come back (default on; no effect
    /// when the node's discovery is off).
    pub fn auto_connect(mut self, on: bool) -> Self {
        self.options.auto_connect = on;
        self
    }
    /// Also connects to the publisher of the topic on the node at `addr` (without discovery,
    /// the way to reach one); the outcome arrives as a
    /// [`SubscriptionEvent`](crate::SubscriptionEvent). May be called several times. A
    /// pattern subscription reads the topic listing of the node at `addr` and connects to
    /// every publisher there whose topic the pattern includes, those created later too,
    /// without discovery (see [`Subscription::connect`]).
    pub fn connect(mut self, addr: SocketAddr) -> Self {
        self.connect.push(addr);
        self
    }
    /// Compares `id` with the publishers' message type instead of the fingerprint of this
    /// subscription's type's serde shape (see [`MessageType`]): publishers that announce the
    /// same id ([`PublisherBuilder::schema_id`](crate::PublisherBuilder::schema_id)) are read,
    /// typed ones with another are refused with
    /// [`RejectCode::TypeMismatch`](crate::RejectCode::TypeMismatch). No effect on a raw
    /// subscription, which reads any publisher.
    pub fn schema_id(mut self, id: u64) -> Self {
        self.options.schema_id = Some(id);
        self
    }
    /// Most publisher connections (feeds) the subscription holds at once, 1 to 65,536
    /// (default 1,024): a pattern may match many topics. A publisher announced past it is not
    /// connected, and that is a
    /// [`SubscriptionEvent::FeedLimit`](crate::SubscriptionEvent::FeedLimit) (counted in
    /// `feed_limit_reached`), not an error: the others go on, and it is connected once a
    /// connection goes.
    pub fn max_feeds(mut self, feeds: usize) -> Self {
        self.options.max_feeds = feeds;
        self
    }
    /// Creates the subscription and starts connecting.
    ///
    /// # Errors
    /// [`Error::InvalidTopic`](crate::Error::InvalidTopic),
    /// [`Error::InvalidOption`](crate::Error::InvalidOption) (the batch size, a
    /// `max_message_len` out of `1..=u32::MAX`, `max_feeds` out of `1..=65,536`),
    /// [`Error::PatternNeedsDiscovery`](crate::Error::PatternNeedsDiscovery) for a pattern
    /// with no way to find publishers: without discovery (the node's off, or
    /// `auto_connect(false)`) and without addresses to [`connect`](Self::connect) to,
    /// and [`Error::Fabric`](crate::Error::Fabric) when the completion queue or a connection
    /// cannot be created.
    pub fn create(mut self) -> Result<Subscription<T>> {
        self.options.message_type = T::type_tag(self.options.schema_id);
        let filter = TopicFilter::new(self.topic?)?;
        let discovers = self.options.auto_connect && self.node.discovery().enabled();
        if filter.is_pattern() && self.connect.is_empty() && !discovers {
            let detail =
                if self.options.auto_connect { "the node's discovery is off" } else { "its auto_connect is off" };
            return Err(crate::Error::PatternNeedsDiscovery { pattern: filter.as_str().to_owned(), detail });
        }
        let mut subscription = Subscription::create(self.node.clone(), filter, self.options)?;
        for addr in self.connect {
            subscription.connect(addr)?;
        }
        Ok(subscription)
    }
}
