//! The subscribing side of a topic: one feed per publisher connection, each pulling its
//! publisher's ring with batched RDMA READs into two local READ buffers (one fills while the
//! messages of the other are delivered), validating and
//! reassembling records, acknowledging consumption with coalesced SENDs (the publisher's
//! credits), and parking on a doorbell when the topic is idle.
//!
//! With discovery on, a subscription watches its topic in the node's directory and connects to
//! every publisher announced, reconnecting when one comes back. Messages are deduplicated by
//! (publisher id, epoch, seq): a reconnection to an epoch already read starts at the earliest
//! retained message and skips what was delivered.

use std::collections::HashMap;
use std::marker::PhantomData;
use std::sync::Arc;

use crossbeam::channel::{self, Receiver};
use slab::Slab;

use crate::error::{Error, Result};
use rdma_fabric::{CompletionQueue, ConnId};
use rdma_wire::protocol::TopicId;

use super::discovery::Sighting;
use super::message_type::MessageType;
use super::shared::NodeShared;
use super::topic::check_topic;
use connector::Connector;
use events::{EventQueue, HeldQueue, MAX_UNDELIVERABLE};
use feed::{Feed, PollPermit};
use feed_channel::{EventWaker, FeedEvent, FeedSender};

pub use builder::SubscriberBuilder;
pub(crate) use connector::run_all as run_connectors;
pub use counters::SubscriptionCounters;
pub use events::{SubscriptionEvent, MAX_EVENTS};
pub use message::{Message, MessageRef, PublisherInfo};
pub use options::Start;
pub(crate) use options::SubscriptionOptions;
#[cfg(feature = "async")]
pub use stream::MessageStream;

mod builder;
mod connect;
mod connector;
pub(super) mod counters;
mod deliver;
mod events;
mod feed;
mod feed_channel;
mod message;
mod options;
mod pull;
#[cfg(feature = "async")]
mod stream;

/// A subscription to one topic: receives the messages of every publisher it is connected to,
/// in order per publisher.
///
/// ```
/// use std::time::Duration;
/// use rdma_pubsub::{DiscoveryOptions, Node, Start};
///
/// let without_discovery = || Node::builder().discovery(DiscoveryOptions::disabled()).build();
/// let (a, b) = (without_discovery()?, without_discovery()?);
/// let publisher = a.publisher("doc-subscription").create()?;
/// let mut sub = b.subscriber("doc-subscription").start(Start::Earliest).create()?;
/// sub.connect_wait(a.local_addr(), Duration::from_secs(10))?;
/// publisher.publish(b"hello")?;
/// let m = sub.recv_timeout(Duration::from_secs(10))?.expect("a message within 10 s");
/// assert_eq!((m.seq, m.data.as_slice()), (1, &b"hello"[..]));
/// # Ok::<(), rdma_pubsub::Error>(())
/// ```
pub struct Subscription<T: ?Sized + MessageType = [u8]> {
    _type: PhantomData<fn() -> Box<T>>,
    node: Arc<NodeShared>,
    topic: String,
    topic_id: TopicId,
    options: SubscriptionOptions,
    cq: CompletionQueue,
    feeds: Slab<Feed>,
    by_conn: HashMap<ConnId, usize>,
    next_gen: u32,
    events_rx: Receiver<FeedEvent>,
    user_events: EventQueue,
    /// Messages of failed feeds the application is told about through `recv` (at most
    /// [`MAX_UNDELIVERABLE`](events::MAX_UNDELIVERABLE); the events name them all).
    undeliverable: HeldQueue<Error>,
    cursor: usize,
    ever_connected: bool,
    /// Holds a reassembled message lent by `recv_ref`.
    stash: Vec<u8>,
    /// The spin permit, while the subscription polls (see [`PollPermit`]).
    permit: PollPermit,
    counters: Arc<SubscriptionCounters>,
    /// Opens connections (in the background, with discovery) and holds discovery's view.
    connector: Arc<Connector>,
    /// Discovery's sightings of the topic, to wake on while waiting (auto-connect).
    sightings: Option<Receiver<Sighting>>,
    /// Highest sequence delivered per (publisher id, epoch) by removed connections.
    delivered: HashMap<(u64, u64), u64>,
    /// The async task waiting for connection events, woken by whoever sends one.
    #[cfg_attr(not(feature = "async"), allow(dead_code))]
    event_waker: Arc<EventWaker>,
}

impl<T: ?Sized + MessageType> std::fmt::Debug for Subscription<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subscription").field("topic", &self.topic).field("feeds", &self.feeds.len()).finish()
    }
}

impl<T: ?Sized + MessageType> Subscription<T> {
    pub(crate) fn create(node: Arc<NodeShared>, topic: &str, options: SubscriptionOptions) -> Result<Subscription<T>> {
        check_topic(topic)?;
        if options.batch < 4096 || options.batch > 64 << 20 {
            return Err(Error::InvalidOption { option: "batch", detail: "must be in 4 KiB..=64 MiB".into() });
        }
        let depth = 4096.min(node.fabric.attributes().max_cqe);
        let cq = node.fabric.create_cq(depth)?;
        let (events_tx, events_rx) = channel::unbounded();
        let event_waker = Arc::new(EventWaker::default());
        let events_tx = FeedSender::new(events_tx, event_waker.clone());
        let counters = Arc::new(SubscriptionCounters::default());
        node.stats.add_subscription(topic, &counters);
        let topic_id = TopicId::of(topic);
        let connector = Connector::new(&node, topic, topic_id, &options, cq.clone(), events_tx);
        let sightings = connector.sightings();
        Ok(Subscription {
            _type: PhantomData,
            topic: topic.to_owned(),
            topic_id,
            node,
            options,
            cq,
            feeds: Slab::new(),
            by_conn: HashMap::new(),
            next_gen: 1,
            events_rx,
            user_events: EventQueue::new(MAX_EVENTS, counters.clone()),
            undeliverable: HeldQueue::new(MAX_UNDELIVERABLE, counters.clone()),
            cursor: 0,
            ever_connected: false,
            stash: Vec::new(),
            permit: PollPermit::default(),
            counters,
            connector,
            sightings,
            delivered: HashMap::new(),
            event_waker,
        })
    }

    /// The topic.
    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// The counters.
    pub fn counters(&self) -> &SubscriptionCounters {
        &self.counters
    }

    /// Publishers currently connected.
    pub fn publishers(&self) -> Vec<PublisherInfo> {
        self.feeds.iter().filter(|(_, f)| !f.closed).filter_map(|(_, f)| f.active.as_ref().map(|a| a.info)).collect()
    }
}

impl<T: ?Sized + MessageType> Drop for Subscription<T> {
    fn drop(&mut self) {
        self.connector.close(&self.node);
        // Connections opened and not taken yet are closed with the rest.
        let unopened: Vec<ConnId> = self
            .events_rx
            .try_iter()
            .filter_map(|ev| match ev {
                FeedEvent::Opened(opened) => Some(opened.conn),
                _ => None,
            })
            .collect();
        let mut routes = self.node.routes.lock();
        for conn in self.feeds.iter().map(|(_, feed)| feed.conn).chain(unopened) {
            routes.remove(&conn);
        }
    }
}
