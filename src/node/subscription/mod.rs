//! The subscribing side of a topic: a [`Subscription`] reads one [`Feed`] per publisher
//! connection (each pulls its publisher's ring with batched RDMA READs, validates and
//! reassembles records, acknowledges consumption with coalesced SENDs, the publisher's
//! credits, and parks on a doorbell when the topic is idle: see `feed.rs`), and takes turns
//! over them: it hands out the messages they parsed, round-robin, posts their work and hands
//! each completion to its feed, and follows their connections (CM events, discovery).
//!
//! With discovery on, a subscription watches its topic in the node's directory and connects to
//! every publisher announced, reconnecting when one comes back (its [`Connector`], run by the
//! node's connector thread too). Without it, a subscription to a pattern connected to a node's
//! address reads that node's topic listing and connects to each topic listed that it includes
//! (`listing.rs`). A subscription to a pattern (a key expression with
//! wildcards) watches every topic the pattern includes: a feed is a connection to one
//! publisher of one topic, and each message is handed its feed's topic (a reference count, no
//! allocation). At most `max_feeds` feeds are open; a publisher past it is an event, not an
//! error. Messages are deduplicated by (publisher id, epoch, seq): a
//! reconnection to an epoch already read starts at the earliest retained message and skips
//! what was delivered.
//!
//! Delivery is the hot path: a message already parsed is handed out at once (no clock read,
//! no housekeeping); only when none is ready does the subscription run its feeds and wait.
//!
//! # Delivery and waiting
//!
//! `recv`, `recv_timeout`, `try_recv`, `iter`, `recv_ref` (a borrowed zero-copy view, raw
//! only) and the async `stream` share one path. A message already parsed (a READ validates its
//! whole batch in one pass and queues every message in it) is handed out at once; connection
//! events, discovery, acks and the next READ are the business of the call that finds no message
//! ready, so they run at least once per READ batch. `recv_ref` allocates nothing, `recv` only
//! the payload. Measured on 64 B messages: about 0.05 µs of CPU per message, most of it the
//! checksum of bytes another core has just landed. Feeds are served round-robin; order is kept
//! per publisher. A typed subscription decodes each message; one that does not decode is an
//! `Error::Decode` naming publisher and sequence, and delivery goes on. `recv_timeout` and
//! `try_recv` return on time even while a record that never validates is READ again and again
//! (the deadline is checked every 16 fruitless rounds of completions).
//!
//! A call with nothing to deliver spins on the subscription's CQ (for its READ, or a paced
//! READ's time) only while it holds one of the process's spin permits (`node/spin_permit.rs`:
//! as many as CPUs less one), gives it back before it blocks and when it returns, and without
//! one blocks at once (`unpolled_waits`). `busy_poll` subscriptions take no permit.
//!
//! What happens to the connections reaches the application as [`SubscriptionEvent`]s
//! (`try_event`), held in bounded queues (`events.rs`). A closed feed is removed once its
//! queued messages were delivered and the provider flushed its work requests.
//!
//! What each receive call returns in each case (`Closed` only for the subscription's own node
//! or close; `NotConnected` without a publisher; the refusal of every publisher it knows,
//! `refusals.rs`) is documented at [`Subscription::recv`].
//!
//! Files: this one (`Subscription`, whole), `feed.rs` (`Feed`), `connector.rs` (opening
//! connections, the connector thread), `listing.rs` (a pattern's listing connection to a
//! node's address, READing the node's topic listing), `feed_channel.rs` (what other threads tell a
//! subscription), `events.rs` (`SubscriptionEvent`, the bounded queues), `refusals.rs` (the
//! publishers that refused or dropped it), `stream.rs` (feature `async`), `readiness.rs` (the
//! descriptor of `ready_fd`, for event loops), `builder.rs`, `options.rs`, `message.rs`,
//! `counters.rs`.

use std::collections::HashMap;
use std::marker::PhantomData;
use std::net::SocketAddr;
use std::os::fd::BorrowedFd;
use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use crossbeam::channel::{self, Receiver};
use slab::Slab;

use crate::error::{Error, Result};
use crate::reasons::RejectCode;
use rdma_fabric::{CompletionQueue, ConnId, ConnectionEvent, RejectReason as CmReject, WorkCompletion};
use rdma_wire::protocol::{AcceptData, RejectData};

use super::discovery::{Lost, LostReason, Sighting};
use super::lazy_clock::{LazyDeadline, LazyNow};
use super::message_type::MessageType;
use super::shared::{NodeShared, RECHECK_INTERVAL};
use super::spin_permit::PollPermit;
use super::topic::TopicFilter;
use super::wr_id::WrId;
use events::{EventQueue, HeldQueue, MAX_UNDELIVERABLE};
use feed::{read_spin, Delivery, Feed, FeedContext, FeedStep, PARK_RECHECK, PROBES_PER_YIELD, READ_SPIN};
use feed_channel::{EventWaker, FeedEvent, OpenedFeed};
use readiness::Readiness;
use refusals::{Refusal, Refusals};

pub use builder::SubscriberBuilder;
pub(crate) use connector::run_all as run_connectors;
pub(crate) use connector::Connector;
pub use counters::SubscriptionCounters;
pub use events::{LossReason, SubscriptionEvent, MAX_EVENTS};
pub(crate) use feed_channel::FeedSender;
pub use message::{Message, MessageRef, PublisherInfo};
pub use options::Start;
pub(crate) use options::SubscriptionOptions;
#[cfg(feature = "async")]
pub use stream::MessageStream;

mod builder;
mod connector;
mod counters;
mod events;
mod feed;
mod feed_channel;
mod listing;
mod message;
mod options;
mod readiness;
mod refusals;
#[cfg(feature = "async")]
mod stream;

/// A subscription to one topic, or to every topic a pattern includes: receives the messages
/// of every publisher it is connected to, in order per publisher. No order is promised across
/// publishers (of one topic, or of the topics a pattern matched): their feeds are served
/// round-robin as their messages arrive. Each [`Message`] names its publisher and its topic.
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
    /// Its topic, or its pattern.
    filter: TopicFilter,
    options: SubscriptionOptions,
    /// The CQ of every feed's work.
    cq: CompletionQueue,
    /// One feed per publisher connection, by the key its work-request ids carry.
    feeds: Slab<Feed>,
    /// The feed of each connection, for its CM events.
    by_conn: HashMap<ConnId, usize>,
    /// The generation the next feed gets (tells completions of a key's earlier feed apart).
    next_gen: u32,
    /// What the CM thread and the connector tell the subscription.
    events_rx: Receiver<FeedEvent>,
    /// The events held for `try_event`.
    user_events: EventQueue,
    /// Messages of failed feeds the application is told about through `recv` (at most
    /// [`MAX_UNDELIVERABLE`]; the events name them all).
    undeliverable: HeldQueue<Error>,
    /// Where the round-robin over ready feeds goes on.
    cursor: usize,
    /// It was connected to a publisher once: without discovery, the end of its last stream
    /// ends `iter` (and the stream) rather than being an error.
    ever_connected: bool,
    /// The publishers that refused or dropped it: with no publisher left to read, the receive
    /// calls return the newest refusal.
    refusals: Refusals,
    /// Closed by [`close`](Subscription::close): every call returns [`Error::Closed`].
    closed: bool,
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
    /// The async task or the readiness descriptor waiting for connection events, woken by
    /// whoever sends one.
    event_waker: Arc<EventWaker>,
    /// The descriptor of `ready_fd`, made at its first call.
    readiness: OnceLock<Readiness>,
}

impl<T: ?Sized + MessageType> std::fmt::Debug for Subscription<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subscription").field("topic", &self.filter.as_str()).field("feeds", &self.feeds.len()).finish()
    }
}

impl<T: ?Sized + MessageType> Subscription<T> {
    /// A subscription to the topics of `filter` on `node`: its CQ, its event channel and its
    /// connector (which watches them when discovery is on).
    ///
    /// # Errors
    /// An invalid batch size, message length or feed limit; the fabric's when the CQ cannot be
    /// created.
    pub(crate) fn create(
        node: Arc<NodeShared>,
        filter: TopicFilter,
        options: SubscriptionOptions,
    ) -> Result<Subscription<T>> {
        if options.max_feeds == 0 || options.max_feeds > connector::MAX_FEEDS {
            let detail = format!("must be in 1..={}, got {}", connector::MAX_FEEDS, options.max_feeds);
            return Err(Error::InvalidOption { option: "max_feeds", detail });
        }
        if options.batch < 4096 || options.batch > 64 << 20 {
            return Err(Error::InvalidOption { option: "batch", detail: "must be in 4 KiB..=64 MiB".into() });
        }
        if options.max_message_len == 0 || options.max_message_len > u64::from(u32::MAX) {
            let detail = format!(
                "must be in 1..={} bytes (a message's length is a u32), got {}",
                u32::MAX,
                options.max_message_len
            );
            return Err(Error::InvalidOption { option: "max_message_len", detail });
        }
        let depth = 4096.min(node.fabric().attributes().max_cqe);
        let cq = node.fabric().create_cq(depth)?;
        let (events_tx, events_rx) = channel::unbounded();
        let event_waker = Arc::new(EventWaker::default());
        let events_tx = FeedSender::new(events_tx, event_waker.clone());
        let counters = Arc::new(SubscriptionCounters::default());
        let connector = Connector::new(&node, &filter, &options, cq.clone(), events_tx, counters.clone());
        let matches = filter.is_pattern().then(|| Arc::downgrade(&connector));
        node.add_subscription_stats(filter.as_str(), &counters, matches);
        let sightings = connector.sightings();
        Ok(Subscription {
            _type: PhantomData,
            filter,
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
            refusals: Refusals::default(),
            closed: false,
            stash: Vec::new(),
            permit: PollPermit::default(),
            counters,
            connector,
            sightings,
            delivered: HashMap::new(),
            event_waker,
            readiness: OnceLock::new(),
        })
    }

    /// The topic; for a subscription to a pattern, the pattern in canonical form (as
    /// [`KeyExpr::as_str`](crate::KeyExpr::as_str) gives it: `sensors/**/*` is
    /// `sensors/*/**`). Each message names its own topic
    /// ([`Message::topic`](crate::Message::topic)).
    pub fn topic(&self) -> &str {
        self.filter.as_str()
    }

    /// The topics this subscription reads publishers of now, as discovery announces them, each
    /// once and sorted: its topic when a publisher of it is announced, the topics its pattern
    /// matched for a pattern (with those listed by the nodes a pattern subscription is
    /// connected to; empty for a topic without discovery).
    pub fn matched_topics(&self) -> Vec<rdma_wire::Topic> {
        self.connector.matched_topics()
    }

    /// The counters.
    pub fn counters(&self) -> &SubscriptionCounters {
        &self.counters
    }

    /// Publishers currently connected.
    pub fn publishers(&self) -> Vec<PublisherInfo> {
        self.feeds.iter().filter(|(_, f)| !f.is_closed()).filter_map(|(_, f)| f.publisher()).collect()
    }

    /// Starts connecting to the publisher of this topic on the node at `addr` (nothing to do
    /// when a connection to `addr` is open or opening, e.g. made by discovery). The outcome
    /// arrives as a [`SubscriptionEvent`] (see [`try_event`](Self::try_event)) while receiving,
    /// or wait for it with [`connect_wait`](Self::connect_wait).
    ///
    /// A subscription to a pattern reads the node's topic listing instead, and connects to
    /// every publisher of that node whose topic the pattern includes, without discovery: those
    /// listed now, and those created later (the listing is READ again every 100 ms); one
    /// closed ends its stream as usual. Each publisher is a connection of its own (refused or
    /// accepted per topic, within [`max_feeds`](crate::SubscriberBuilder::max_feeds)); a
    /// listing that fails is a [`SubscriptionEvent::ListingFailed`].
    ///
    /// # Errors
    /// [`Error::Fabric`] when the connection cannot be started (resources, addresses);
    /// [`Error::InvalidOption`] past its [`max_feeds`](crate::SubscriberBuilder::max_feeds)
    /// publishers, or for a pattern past 64 addresses; [`Error::Closed`] once the
    /// subscription's node was dropped or the subscription closed. Refusals and unreachable
    /// nodes arrive as events.
    pub fn connect(&mut self, addr: SocketAddr) -> Result<()> {
        self.check_open()?;
        match &self.filter {
            TopicFilter::Exact(topic) => self.connector.connect(&self.node, addr, topic)?,
            TopicFilter::Pattern(_) => self.connector.connect_listing(&self.node, addr)?,
        }
        self.drain_feed_events();
        Ok(())
    }

    /// Connects to `addr` and waits until the publisher accepted or refused. A subscription to
    /// a pattern waits until the first publisher at `addr` whose topic it includes is
    /// connected (the others follow; their refusals stay events, since the other topics go
    /// on).
    ///
    /// # Errors
    /// [`Error::Rejected`] with the publisher's reason, [`Error::RecordTooLarge`] when its
    /// records are larger than this subscription READs, [`Error::Unauthenticated`] when its
    /// accept does not prove what this subscription requires (a domain secret or a credential
    /// tag answering the connect's challenge), [`Error::Unreachable`] when no node
    /// answers at `addr`, the connection broke while it was set up or, for a pattern, the
    /// node's topic listing failed ([`SubscriptionEvent::ListingFailed`]), [`Error::Timeout`] when
    /// no answer came within `timeout`, and [`Error::Closed`] at once when the subscription's
    /// node was dropped or the subscription closed (before or while waiting); the errors of
    /// [`connect`](Self::connect).
    pub fn connect_wait(&mut self, addr: SocketAddr, timeout: Duration) -> Result<PublisherInfo> {
        self.connect(addr)?;
        let deadline = rdma_fabric::time::deadline_after(timeout);
        let pattern = self.filter.is_pattern();
        loop {
            self.check_open()?;
            if pattern {
                self.connector.run(&self.node, true);
            }
            self.drain_feed_events();
            let open = self.feeds.iter().find(|(_, f)| !f.is_closed() && f.addr() == addr);
            if let Some(info) = open.and_then(|(_, f)| f.publisher()) {
                return Ok(info);
            }
            if let Some(event) = self.user_events.take_first(|e| match e {
                SubscriptionEvent::Connected(info) => info.addr == addr,
                SubscriptionEvent::Unreachable { addr: a, .. } | SubscriptionEvent::ListingFailed { addr: a, .. } => {
                    *a == addr
                }
                // A pattern's topics are refused one by one, and the others go on.
                SubscriptionEvent::Rejected { addr: a, .. }
                | SubscriptionEvent::RecordTooLarge { addr: a, .. }
                | SubscriptionEvent::Unauthenticated { addr: a, .. }
                | SubscriptionEvent::Disconnected { addr: a, .. } => !pattern && *a == addr,
                _ => false,
            }) {
                return match event {
                    SubscriptionEvent::Connected(info) => {
                        self.user_events.push_back(SubscriptionEvent::Connected(info));
                        Ok(info)
                    }
                    SubscriptionEvent::Rejected { addr, reason, detail, .. } => {
                        Err(Error::Rejected { peer: addr, reason, detail })
                    }
                    SubscriptionEvent::Unreachable { detail, .. } => Err(Error::Unreachable { peer: addr, detail }),
                    SubscriptionEvent::ListingFailed { detail, .. } => {
                        self.user_events.push_back(SubscriptionEvent::ListingFailed { addr, detail: detail.clone() });
                        Err(Error::Unreachable { peer: addr, detail: format!("its topic listing failed: {detail}") })
                    }
                    SubscriptionEvent::RecordTooLarge { len, limit, .. } => {
                        Err(Error::RecordTooLarge { peer: addr, len, limit })
                    }
                    SubscriptionEvent::Unauthenticated { detail, .. } => {
                        Err(Error::Unauthenticated { peer: addr, detail })
                    }
                    _ => Err(Error::Unreachable {
                        peer: addr,
                        detail: "the connection broke while it was being set up".into(),
                    }),
                };
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(Error::Timeout { what: "connect", millis: rdma_fabric::time::millis(timeout) });
            }
            if let Ok(ev) = self.events_rx.recv_timeout(left.min(RECHECK_INTERVAL)) {
                self.on_feed_event(ev);
            }
        }
    }

    /// The next event about this subscription's connections, if any.
    pub fn try_event(&mut self) -> Option<SubscriptionEvent> {
        self.drain_feed_events();
        self.poll_discovery();
        self.user_events.pop_front()
    }

    /// Waits for the next message.
    ///
    /// What ends the wait, besides a message:
    /// - with discovery, publishers come and go (as [events](Self::try_event): `Ended`,
    ///   `PublisherLost`, `Connected`); while none is connected, `recv` waits for one to be
    ///   announced (`recv_timeout` up to its timeout, [`try_recv`](Self::try_recv) says
    ///   [`Error::NotConnected`]);
    /// - without discovery, once no publisher is connected or being connected (the last
    ///   stream ended, its connection broke, or none was connected), it returns
    ///   [`Error::NotConnected`] at once;
    /// - when every publisher it knows has refused the subscription or dropped it, it returns
    ///   the newest refusal, naming its publisher, at once and on every call, until a publisher
    ///   accepts it again;
    /// - once its node was dropped or it was [closed](Self::close), [`Error::Closed`] at once.
    ///
    /// A typed subscription decodes each message; one that is not a `T` is an
    /// [`Error::Decode`] naming its publisher and sequence, and the next call goes on with the
    /// next message.
    ///
    /// # Errors
    /// [`Error::Decode`] for a message that is not a `T`; [`Error::MessageOverLimit`], naming
    /// the publisher and both sizes, for a message over the subscription's
    /// [`max_message_len`](crate::SubscriberBuilder::max_message_len) (the subscription stops
    /// reading that publisher: [`SubscriptionEvent::MessageTooLarge`]); after either the next
    /// call goes on with the other publishers. When every publisher it knows refused or dropped
    /// it: [`Error::Rejected`] (a wrong or missing credential, no such topic there, ...),
    /// [`Error::Dropped`] (too slow under `DropSlow`, idle), [`Error::MessageOverLimit`] or
    /// [`Error::RecordTooLarge`]. [`Error::NotConnected`] when it has no publisher and
    /// discovery is off; [`Error::Closed`] when its node was dropped or it was closed;
    /// [`Error::Fabric`] when its completion queue fails.
    pub fn recv(&mut self) -> Result<Message<T::Owned>> {
        loop {
            if let Some(m) = self.recv_timeout(Duration::MAX)? {
                return Ok(m);
            }
        }
    }

    /// Waits up to `timeout` for the next message; `None` on timeout (with discovery, also
    /// when no publisher was announced in time).
    ///
    /// # Errors
    /// As [`recv`](Self::recv).
    pub fn recv_timeout(&mut self, timeout: Duration) -> Result<Option<Message<T::Owned>>> {
        self.ready_within(Some(timeout))?.map(|key| self.take(key)).transpose()
    }

    /// Returns a message that has already arrived, making progress without blocking.
    ///
    /// # Errors
    /// As [`recv`](Self::recv), and [`Error::NotConnected`] with discovery too, when no
    /// publisher is connected or being connected now (one may be announced later).
    pub fn try_recv(&mut self) -> Result<Option<Message<T::Owned>>> {
        let ready = self.ready_within(None)?;
        if ready.is_none() && self.sightings.is_some() && !self.feeds.iter().any(|(_, f)| !f.is_closed()) {
            return Err(Error::NotConnected { topic: self.filter.as_str().to_owned(), discovery: true });
        }
        ready.map(|key| self.take(key)).transpose()
    }

    /// Closes the subscription: it disconnects from every publisher, connects to none again,
    /// and every later call returns [`Error::Closed`] at once (as when its node is dropped).
    /// Dropping it closes it too.
    pub fn close(&mut self) {
        if self.closed {
            return;
        }
        self.closed = true;
        self.connector.close(&self.node);
        let keys: Vec<usize> = self.feeds.iter().map(|(k, _)| k).collect();
        for key in keys {
            self.close_feed(key);
            self.remove_feed(key);
        }
        // Connections opened for it and not taken yet.
        for ev in self.events_rx.try_iter() {
            if let FeedEvent::Opened(opened) = ev {
                self.node.remove_route(opened.conn());
            }
        }
    }

    /// [`Error::Closed`] once the subscription's node was dropped or it was closed.
    fn check_open(&self) -> Result<()> {
        if self.closed {
            return Err(Error::Closed("the subscription was closed"));
        }
        if self.node.stopping() {
            return Err(Error::Closed("the subscription's node was dropped"));
        }
        Ok(())
    }

    /// Whether `e`, returned by a receive call, is the end of the messages rather than an error
    /// to report: the subscription closed, or its last stream ended without discovery (once it
    /// had been connected). [`iter`](Self::iter) and the stream end there; bindings that
    /// iterate (C, Python) ask the same question.
    pub fn is_end(&self, e: &Error) -> bool {
        match e {
            Error::Closed(_) => true,
            Error::NotConnected { discovery: false, .. } => self.ever_connected,
            _ => false,
        }
    }

    /// Whether an error of a receive call leaves more to receive: a message that does not
    /// decode, or one over the limit while another publisher still serves the subscription
    /// (or messages already READ wait).
    fn goes_on_after(&self, e: &Error) -> bool {
        match e {
            Error::Decode { .. } => true,
            e => e.is_undeliverable_message() && self.feeds.iter().any(|(_, f)| !f.is_closed() || f.has_ready()),
        }
    }

    /// An iterator over messages, as [`recv`](Self::recv) returns them. It ends (`None`) when
    /// the subscription closes ([`Error::Closed`]) and, without discovery, when the stream of
    /// its last publisher ended or broke ([`Error::NotConnected`] once it was connected); with
    /// discovery, publishers that come and go do not end it (it waits for the next one). A
    /// message that cannot be delivered ([`Error::Decode`], [`Error::MessageOverLimit`]) is
    /// yielded as that error and the iteration goes on while a publisher serves it; any other
    /// error (a refusal or drop by every publisher, ...) is yielded once, then it ends.
    pub fn iter(&mut self) -> impl Iterator<Item = Result<Message<T::Owned>>> + '_ {
        let mut ended = false;
        std::iter::from_fn(move || {
            if ended {
                return None;
            }
            match self.recv() {
                Ok(m) => Some(Ok(m)),
                Err(e) if self.is_end(&e) => {
                    ended = true;
                    None
                }
                Err(e) if self.goes_on_after(&e) => Some(Err(e)),
                Err(e) => {
                    ended = true;
                    Some(Err(e))
                }
            }
        })
    }

    /// The messages of this subscription as an async
    /// [`Stream`](futures_core::Stream) of `Result<Message>`, for a
    /// tokio runtime with its I/O driver (feature `async`). The task is woken by the completion
    /// channel's descriptor through tokio's reactor and by the subscription's connection
    /// events, never by a thread or a timer of its own.
    ///
    /// The stream ends (`None`) as [`iter`](Self::iter) does: when the subscription closes,
    /// and without discovery when the last publisher's stream ended; with discovery it waits
    /// for the next publisher. A message that cannot be delivered ([`Error::Decode`],
    /// [`Error::MessageOverLimit`]) is yielded as that error and the stream goes on while a
    /// publisher serves it; any other error (a refusal or drop by every publisher, ...) is
    /// yielded once, then it ends. Messages are the same as `recv`'s; events are read while
    /// streaming with [`MessageStream::try_event`].
    ///
    /// ```
    /// use std::time::Duration;
    /// use futures_core::Stream;
    /// use rdma_pubsub::{DiscoveryOptions, Node, Start};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> rdma_pubsub::Result<()> {
    /// let without_discovery = || Node::builder().discovery(DiscoveryOptions::disabled()).build();
    /// let (a, b) = (without_discovery()?, without_discovery()?);
    /// let publisher = a.publisher("doc-stream").create()?;
    /// let mut sub = b.subscriber("doc-stream").start(Start::Earliest).create()?;
    /// sub.connect_wait(a.local_addr(), Duration::from_secs(10))?;
    /// publisher.publish(b"hello")?;
    /// let mut stream = sub.stream();
    /// let next = std::future::poll_fn(|cx| std::pin::Pin::new(&mut stream).poll_next(cx));
    /// let m = next.await.expect("the stream goes on")?;
    /// assert_eq!(m.data, b"hello");
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// Items are `Err` as [`recv`](Self::recv) fails, and with [`Error::Fabric`] when the
    /// stream is polled outside a tokio runtime or the completion channel cannot be registered
    /// with its reactor.
    ///
    /// # Panics
    /// Polled in a tokio runtime built without its I/O driver (`enable_io`), as tokio's
    /// `AsyncFd` does.
    #[cfg(feature = "async")]
    pub fn stream(&mut self) -> MessageStream<'_, T> {
        MessageStream::new(self)
    }

    /// A descriptor that an event loop (`poll(2)`, `epoll`, libuv, asio) waits on for this
    /// subscription: it polls readable when something may have arrived since
    /// [`prepare_wait`](Self::prepare_wait) (a completion of the subscription's CQ, or a
    /// connection event), so that a loop that is not tokio's can drive it without a thread.
    /// It is made at the first call (two descriptors: an epoll and an eventfd) and lives as
    /// long as the subscription; never read it, close it or change its flags.
    ///
    /// The protocol, which loses no wake-up:
    ///
    /// 1. take what is there: [`try_recv`](Self::try_recv) until `None`,
    ///    and [`try_event`](Self::try_event) until `None`;
    /// 2. `prepare_wait()`: when it returns `true`, something may be ready already: go to 1;
    /// 3. wait until the descriptor polls readable (with whatever timeout), then go to 1.
    ///
    /// A readable descriptor may find nothing to take (a completion of the subscription's own
    /// work, a READ of an empty ring): callers take what is there, they do not count wake-ups.
    /// Unlike [`recv`](Self::recv), a parked subscription costs nothing until something
    /// arrives: no READ every 100 ms in case a doorbell was lost.
    ///
    /// ```
    /// use std::os::fd::AsRawFd;
    /// use std::time::Duration;
    /// use rdma_pubsub::{DiscoveryOptions, Node, Start};
    ///
    /// let without_discovery = || Node::builder().discovery(DiscoveryOptions::disabled()).build();
    /// let (a, b) = (without_discovery()?, without_discovery()?);
    /// let publisher = a.publisher("doc-ready-fd").create()?;
    /// let mut sub = b.subscriber("doc-ready-fd").start(Start::Earliest).create()?;
    /// sub.connect_wait(a.local_addr(), Duration::from_secs(10))?;
    /// publisher.publish(b"woken")?;
    /// let fd = sub.ready_fd()?.as_raw_fd();
    /// let message = loop {
    ///     if let Some(m) = sub.try_recv()? {
    ///         break m;
    ///     }
    ///     while sub.try_event().is_some() {}
    ///     if !sub.prepare_wait()? {
    ///         let mut pfd = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
    ///         // SAFETY: one valid pollfd, for the duration of the call.
    ///         assert!(unsafe { libc::poll(&mut pfd, 1, 10_000) } > 0, "woken within 10 s");
    ///     }
    /// };
    /// assert_eq!(message.data, b"woken");
    /// # Ok::<(), rdma_pubsub::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::Fabric`] when the descriptors cannot be made (out of descriptors) or the CQ's
    /// cannot be set up.
    pub fn ready_fd(&self) -> Result<BorrowedFd<'_>> {
        Ok(self.readiness()?.fd())
    }

    /// Arms the [`ready_fd`](Self::ready_fd) descriptor before a wait (step 2 of its
    /// protocol): makes it unreadable, arms the CQ and the event channel, then makes the
    /// progress a [`try_recv`](Self::try_recv) makes, without blocking and without handing out
    /// a message. Returns `true` when something may be ready already (a message; an error
    /// `try_recv` returns, such as [`Error::Closed`]; an event; a READ its pacer holds back
    /// for microseconds, or a publisher's ring on this host read in place and not yet parked,
    /// which no descriptor wakes for): the caller takes what is there again instead of waiting.
    /// `false`: wait for the descriptor.
    ///
    /// # Errors
    /// A message that cannot be delivered, found by the progress it makes
    /// ([`Error::Decode`], [`Error::MessageTooLarge`]: the next call goes on, as after
    /// `try_recv`'s); [`Error::Fabric`] when the descriptors cannot be made or the CQ fails or
    /// cannot be armed.
    pub fn prepare_wait(&mut self) -> Result<bool> {
        self.readiness()?.arm(&self.cq, &self.event_waker)?;
        // Armed before this look: what arrived since the caller's last take is found by it,
        // what arrives after makes the descriptor readable.
        if self.feeds.iter().any(|(_, f)| f.has_ready()) || !self.undeliverable.is_empty() {
            return Ok(true);
        }
        let progressed = match self.next_ready(LazyDeadline::after(None)) {
            Ok(ready) => ready.is_some(),
            // What `try_recv` says again at once: the caller hears it there.
            Err(Error::Closed(_) | Error::NotConnected { .. }) => true,
            Err(e) => return Err(e),
        };
        // A ring read in place completes nothing: until its feed parks (a doorbell then wakes
        // the descriptor), the caller polls.
        Ok(progressed
            || !self.user_events.is_empty()
            || self.paced_read_due(Instant::now()).is_some()
            || self.polls_in_place())
    }

    /// The readiness descriptor, made at the first call.
    fn readiness(&self) -> Result<&Readiness> {
        if let Some(made) = self.readiness.get() {
            return Ok(made);
        }
        let made = Readiness::new(&self.cq)?;
        Ok(self.readiness.get_or_init(|| made))
    }

    /// The key of a feed with a message ready: at once when one was parsed already (no clock
    /// read, no housekeeping), else after running the feeds for up to `timeout` (`None`: one
    /// pass that does not block).
    fn ready_within(&mut self, timeout: Option<Duration>) -> Result<Option<usize>> {
        self.check_open()?;
        if let Some(key) = self.pick_ready() {
            return Ok(Some(key));
        }
        self.next_ready(LazyDeadline::after(timeout))
    }

    /// The progress of a `try_recv` without its "no publisher now" error (the async stream
    /// waits for one).
    #[cfg(feature = "async")]
    fn try_progress(&mut self) -> Result<Option<Message<T::Owned>>> {
        self.ready_within(None)?.map(|key| self.take(key)).transpose()
    }

    /// Takes the next message of feed `key`, decoded as a `T`.
    fn take(&mut self, key: usize) -> Result<Message<T::Owned>> {
        let (publisher, seq, topic, delivery) = self.feeds[key].next_message().expect("a ready feed has a message");
        // A reference count: the topic's name is shared, not copied.
        let topic = topic.clone();
        let (data, len) = match delivery {
            Delivery::InBuffer(bytes) => (T::decode(bytes), bytes.len()),
            Delivery::Reassembled(v) => {
                let len = v.len();
                (T::decode_vec(v), len)
            }
        };
        self.counters.count_delivery(len);
        let data = data.map_err(|e| match e {
            Error::Decode { detail, .. } => {
                Error::Decode { publisher: publisher.id, seq, detail: format!("{detail} (from {})", publisher.addr) }
            }
            e => e,
        })?;
        Ok(Message { publisher, topic, seq, data })
    }

    /// The next feed with a message ready, round-robin from the one after the last served.
    fn pick_ready(&mut self) -> Option<usize> {
        let n = self.feeds.capacity();
        let mut key = self.cursor;
        for _ in 0..n {
            if key >= n {
                key = 0;
            }
            if self.feeds.get(key).is_some_and(Feed::has_ready) {
                self.cursor = key + 1;
                return Some(key);
            }
            key += 1;
        }
        None
    }

    /// Runs the feeds until one has a message ready and returns its key; `None` when the
    /// deadline passes (with no deadline: after one pass that does not block).
    fn next_ready(&mut self, deadline: LazyDeadline) -> Result<Option<usize>> {
        let ready = self.run_feeds(deadline);
        // Polling ends with the call: another subscription may poll while the caller works.
        self.permit.release();
        ready
    }

    /// The loop of [`next_ready`](Self::next_ready).
    fn run_feeds(&mut self, mut deadline: LazyDeadline) -> Result<Option<usize>> {
        let mut wcs = [WorkCompletion::default(); 64];
        // Rounds of completions that made nothing ready (READs of an empty ring).
        let mut fruitless = 0u32;
        loop {
            self.drain_feed_events();
            self.poll_discovery();
            self.reap_closed();
            if let Some(key) = self.pick_ready() {
                return Ok(Some(key));
            }
            if let Some(e) = self.undeliverable.pop_front() {
                return Err(e);
            }
            if fruitless == PROBES_PER_YIELD {
                // A feed polling an empty ring READs again at once (on the same host every READ
                // completes as it is posted): now and then let a thread sharing this CPU, such
                // as the publisher, have it, as `poll_wait` does while it spins.
                fruitless = 0;
                // Completions keep this loop from the deadline check below: a record that never
                // validates (a publisher that writes garbage) is READ again and again, and the
                // call must still end on time.
                if deadline.passed() {
                    return Ok(None);
                }
                std::thread::yield_now();
            }
            self.check_open()?;
            if !self.feeds.iter().any(|(_, f)| !f.is_closed()) {
                // No publisher serves it: the newest refusal, when every one it knows refused.
                if let Some(refusal) = self.refusals.newest() {
                    return Err(refusal);
                }
                if self.feeds.is_empty() && self.sightings.is_none() && !self.connector.reads_listings() {
                    // Without discovery nothing will ever connect it: waiting would never end.
                    return Err(Error::NotConnected { topic: self.filter.as_str().to_owned(), discovery: false });
                }
            }
            self.housekeeping();
            let n = self.cq.poll(&mut wcs)?;
            if n > 0 {
                self.handle_completions(&wcs[..n]);
                // Fruitless unless the top of the loop finds a message ready.
                fruitless += 1;
                continue;
            }
            if self.polls_in_place() {
                // A feed reading in place completes nothing: the next round reads its ring
                // again (a load of its next commit word while it is empty), yielding now and then as
                // above, until it finds messages or parks.
                fruitless += 1;
                continue;
            }
            if deadline.is_one_pass() {
                return Ok(None);
            }
            let now = Instant::now();
            let deadline = deadline.at(now);
            if now >= deadline {
                return Ok(None);
            }
            let wait = deadline.saturating_duration_since(now).min(RECHECK_INTERVAL);
            let any_active = self.feeds.iter().any(|(_, f)| f.is_reading());
            if !any_active {
                self.permit.release();
                match &self.sightings {
                    Some(sightings) => {
                        // Wake on whichever comes first: a connection event or a sighting (it is
                        // handled by `poll_discovery` at the top of the loop).
                        let mut select = channel::Select::new();
                        select.recv(&self.events_rx);
                        select.recv(sightings);
                        let _ = select.ready_timeout(wait);
                    }
                    None => {
                        if let Ok(ev) = self.events_rx.recv_timeout(wait) {
                            self.on_feed_event(ev);
                        }
                    }
                }
                continue;
            }
            let reading = self.feeds.iter().any(|(_, f)| f.read_in_flight());
            let nic_copies_here = self.node.fabric().attributes().copies_on_host_cpus;
            let read_spin = read_spin(self.feeds.iter().filter_map(|(_, f)| f.read_in_flight_len()), nic_copies_here);
            let mut spin = if self.options.busy_poll { READ_SPIN } else { read_spin };
            let mut wait = if reading || self.options.busy_poll { wait } else { wait.min(PARK_RECHECK) };
            // A paced feed READs again within microseconds: poll (yielding) until then rather
            // than sleep, whose wake-up costs more than the delay.
            if let Some(left) = self.paced_read_due(now) {
                spin = spin.max(left);
                wait = wait.min(left);
            }
            // Only so many subscriptions poll at once; the others block at once (see
            // `spin_permit`). A busy-polling one always polls. A blocking wait holds no permit.
            if spin > Duration::ZERO && !self.options.busy_poll && !self.permit.acquire() {
                spin = Duration::ZERO;
                self.counters.unpolled_waits.fetch_add(1, Ordering::Relaxed);
            }
            if spin.is_zero() {
                self.permit.release();
            }
            let n = self.cq.poll_wait(&mut wcs, spin, wait)?;
            self.permit.release();
            self.handle_completions(&wcs[..n]);
        }
    }

    /// How soon the next READ a feed's pacer holds back may go, if one does (within
    /// microseconds: see `pacing`); nothing else wakes the subscription for it.
    fn paced_read_due(&self, now: Instant) -> Option<Duration> {
        self.feeds.iter().filter_map(|(_, f)| f.paced_read_due(now)).min()
    }

    /// Posts the READs, acks and doorbell requests each feed needs now (feeds that read in
    /// place read now), and does what the feeds report.
    fn housekeeping(&mut self) {
        let mut now = LazyNow::new();
        let mut steps = Vec::new();
        let Subscription { feeds, options, node, counters, permit, user_events, filter, .. } = self;
        let mut ctx = FeedContext::new(options, node.pd(), counters, permit, user_events, filter.as_str());
        for (key, feed) in feeds.iter_mut() {
            match feed.housekeep(&mut now, &mut ctx) {
                Ok(FeedStep::Continue) => {}
                Ok(step) => steps.push((key, step)),
                Err(e) => steps.push((key, FeedStep::Failed(e))),
            }
        }
        if steps.is_empty() {
            return;
        }
        for (key, step) in steps {
            self.apply_step(key, step);
        }
    }

    /// Whether a feed reads its ring in place and is not parked: the subscription polls it
    /// rather than wait for a completion.
    pub(super) fn polls_in_place(&self) -> bool {
        self.feeds.iter().any(|(_, f)| f.polls_in_place())
    }

    /// Handles every completion already in the CQ, without waiting.
    fn drain_completions(&mut self) {
        let mut wcs = [WorkCompletion::default(); 64];
        let cq = self.cq.clone();
        if let Err(e) = cq.drain(&mut wcs, |wcs| self.handle_completions(wcs)) {
            tracing::warn!(topic = self.filter.as_str(), "subscription CQ: {e}");
        }
    }

    /// Hands each completion to the feed whose work it completes, and does what the feed
    /// reports.
    fn handle_completions(&mut self, wcs: &[WorkCompletion]) {
        for wc in wcs {
            let Some(id) = WrId::decode(wc.wr_id) else { continue };
            let key = id.owner;
            let Subscription { feeds, options, node, counters, permit, user_events, filter, .. } = self;
            let Some(feed) = feeds.get_mut(key) else { continue };
            let mut ctx = FeedContext::new(options, node.pd(), counters, permit, user_events, filter.as_str());
            let step = feed.complete(wc, id, &mut ctx);
            self.apply_step(key, step);
        }
    }

    /// Does what feed `key` reported.
    fn apply_step(&mut self, key: usize, step: FeedStep) {
        match step {
            FeedStep::Continue => {}
            FeedStep::Failed(e) => self.fail_feed(key, e),
            FeedStep::Ended { publisher, final_seq, complete } => {
                self.stream_ended(key, publisher, final_seq, complete)
            }
            FeedStep::Dropped { publisher, reason } => {
                let topic = self.feeds[key].topic().id();
                let refusal = Refusal::Dropped { publisher: publisher.id, reason };
                self.refusals.record(publisher.addr, topic, refusal);
                self.close_feed(key);
            }
        }
    }

    /// When discovery said something, runs the connector at once (it applies the sightings
    /// and opens the connections due), then takes what it did.
    fn poll_discovery(&mut self) {
        if self.sightings.as_ref().is_some_and(|rx| !rx.is_empty()) {
            self.connector.run(&self.node, true);
            self.drain_feed_events();
        }
    }

    /// Handles every event other threads sent, without waiting.
    fn drain_feed_events(&mut self) {
        // `is_empty` is two loads; a `try_recv` of an empty channel costs a full fence, every
        // round of a polling subscription's loop.
        while !self.events_rx.is_empty() {
            let Ok(ev) = self.events_rx.try_recv() else { break };
            self.on_feed_event(ev);
        }
    }

    /// Handles one event of the subscription's connections (CM events, connections its connector
    /// opened, discovery's losses and failed connects).
    fn on_feed_event(&mut self, ev: FeedEvent) {
        match ev {
            FeedEvent::Connection(ConnectionEvent::ConnectRequest(never)) => match never {},
            FeedEvent::Connection(ConnectionEvent::Established { conn, private_data }) => {
                let Some(&key) = self.by_conn.get(&conn) else { return };
                match self.activate(key, &private_data) {
                    Ok(info) => {
                        self.ever_connected = true;
                        let topic = self.feeds[key].topic().id();
                        self.refusals.forget(info.addr, topic);
                        if self.connector.established(info.addr, topic, info.id) {
                            self.counters.reconnects.fetch_add(1, Ordering::Relaxed);
                        }
                        self.user_events.push_back(SubscriptionEvent::Connected(info));
                    }
                    Err(e) => {
                        let (addr, topic) = (self.feeds[key].addr(), self.feeds[key].topic().clone());
                        let topic_id = topic.id();
                        tracing::warn!(topic = self.filter.as_str(), %addr, "unusable accept from publisher: {e}");
                        let event = match e {
                            Error::RecordTooLarge { len, limit, .. } => {
                                self.refusals.record(addr, topic_id, Refusal::RecordTooLarge { len, limit });
                                SubscriptionEvent::RecordTooLarge { addr, len, limit }
                            }
                            Error::Unauthenticated { detail, .. } => {
                                let refusal = Refusal::Unauthenticated { detail: detail.clone() };
                                self.refusals.record(addr, topic_id, refusal);
                                SubscriptionEvent::Unauthenticated { addr, topic, detail }
                            }
                            Error::Rejected { reason, detail, .. } => {
                                let refusal = Refusal::Rejected { reason, detail: detail.clone() };
                                self.refusals.record(addr, topic_id, refusal);
                                SubscriptionEvent::Rejected { addr, topic, reason, detail }
                            }
                            e => {
                                let detail = format!("the publisher's accept data is unusable: {e}");
                                let reason = RejectCode::Malformed;
                                let refusal = Refusal::Rejected { reason, detail: detail.clone() };
                                self.refusals.record(addr, topic_id, refusal);
                                SubscriptionEvent::Rejected { addr, topic, reason, detail }
                            }
                        };
                        self.user_events.push_back(event);
                        self.remove_feed(key);
                    }
                }
            }
            FeedEvent::Connection(ConnectionEvent::Rejected { conn, reason, private_data }) => {
                let Some(&key) = self.by_conn.get(&conn) else { return };
                let (addr, topic) = (self.feeds[key].addr(), self.feeds[key].topic().clone());
                let topic_id = topic.id();
                let event = match (reason, RejectData::decode(&private_data)) {
                    (_, Ok(r)) => {
                        SubscriptionEvent::Rejected { addr, topic, reason: r.reason.into(), detail: r.detail }
                    }
                    (CmReject::NoListener, Err(_)) => {
                        SubscriptionEvent::Unreachable { addr, detail: "no node listens at that address".into() }
                    }
                    (other, Err(e)) => SubscriptionEvent::Rejected {
                        addr,
                        topic,
                        reason: RejectCode::Malformed,
                        detail: format!("rejected ({other:?}) without a readable reason: {e}"),
                    },
                };
                let end_already_told =
                    matches!(event, SubscriptionEvent::Rejected { reason: RejectCode::UnknownTopic, .. })
                        && self.connector.has_ended(addr, topic_id);
                if end_already_told {
                    tracing::debug!(topic = self.filter.as_str(), %addr, "the publisher that ended is not there: no event");
                } else {
                    if let SubscriptionEvent::Rejected { reason, detail, .. } = &event {
                        let refusal = Refusal::Rejected { reason: *reason, detail: detail.clone() };
                        self.refusals.record(addr, topic_id, refusal);
                    }
                    self.user_events.push_back(event);
                }
                self.remove_feed(key);
            }
            FeedEvent::Connection(ConnectionEvent::Unreachable { conn, detail }) => {
                let Some(&key) = self.by_conn.get(&conn) else { return };
                let addr = self.feeds[key].addr();
                self.user_events.push_back(SubscriptionEvent::Unreachable { addr, detail });
                self.remove_feed(key);
            }
            FeedEvent::Connection(ConnectionEvent::Disconnected { conn }) => {
                let Some(&key) = self.by_conn.get(&conn) else { return };
                // What arrived before the disconnect (an end of stream, a drop notice) is in the
                // CQ already: handle it first, so an orderly end is not reported as a failure.
                self.drain_completions();
                // Nothing more to tell of a feed closed already.
                let Some(events) = self.feeds.get(key).and_then(Feed::disconnect_events) else { return };
                if matches!(events.last(), Some(SubscriptionEvent::Ended { .. })) {
                    self.connector.ended(self.feeds[key].addr(), self.feeds[key].topic().id());
                }
                for event in events {
                    self.user_events.push_back(event);
                }
                self.close_feed(key);
            }
            FeedEvent::Opened(opened) => self.adopt(*opened),
            FeedEvent::PublisherLost(lost) => self.publisher_lost(lost),
            FeedEvent::ConnectFailed { addr, detail } => {
                self.user_events.push_back(SubscriptionEvent::Unreachable { addr, detail });
            }
            FeedEvent::FeedLimit { addr, topic, limit } => {
                self.user_events.push_back(SubscriptionEvent::FeedLimit { addr, topic, limit });
            }
            FeedEvent::ListingFailed { addr, detail } => {
                self.user_events.push_back(SubscriptionEvent::ListingFailed { addr, detail });
            }
        }
    }

    /// Takes a connection its connector opened: posts its receives and follows it.
    fn adopt(&mut self, opened: OpenedFeed) {
        let (conn, addr, topic) = (opened.conn(), opened.addr(), opened.topic().id());
        let key = self.feeds.vacant_key();
        let gen = self.next_gen;
        self.next_gen = self.next_gen.wrapping_add(1);
        match Feed::open(key, gen, opened) {
            Ok(feed) => {
                self.by_conn.insert(conn, key);
                self.feeds.insert(feed);
            }
            Err(e) => {
                self.node.remove_route(conn);
                self.connector.removed(addr, topic, conn);
                self.user_events.push_back(SubscriptionEvent::Unreachable { addr, detail: e.to_string() });
            }
        }
    }

    /// Sets up reading of the publisher's ring from its accept data: feed `key` skips what
    /// earlier connections to the same publisher's epoch delivered (or still hold ready).
    fn activate(&mut self, key: usize, private_data: &[u8]) -> Result<PublisherInfo> {
        let accept = AcceptData::decode(private_data).map_err(Error::from_peer_bytes)?;
        if accept.topic != self.feeds[key].topic().id() {
            return Err(Error::PeerMisbehaved { detail: "the publisher accepted another topic".into() });
        }
        let expect = self.feeds[key].expectation();
        let credential = self.options.credential.as_ref();
        if let Err(e) = accept.check_tags(expect.challenge, self.node.domain_secret(), credential, expect.publisher) {
            self.counters.unauthenticated_accepts.fetch_add(1, Ordering::Relaxed);
            return Err(Error::Unauthenticated { peer: self.feeds[key].addr(), detail: e.to_string() });
        }
        if let (Some(ours), Some(theirs)) = (&self.options.message_type, &accept.message_type) {
            if ours.fingerprint != theirs.fingerprint {
                let detail = format!(
                    "the publisher sends {} (type fingerprint {:016x}), this subscription receives {} ({:016x})",
                    theirs.name, theirs.fingerprint, ours.name, ours.fingerprint
                );
                let peer = self.feeds[key].addr();
                return Err(Error::Rejected { peer, reason: RejectCode::TypeMismatch, detail });
            }
        }
        let (id, epoch) = (accept.publisher_id, accept.epoch);
        let skip_through = self
            .feeds
            .iter()
            .filter(|&(k, _)| k != key)
            .filter_map(|(_, f)| f.read_through(id, epoch))
            .chain(self.delivered.get(&(id, epoch)).copied())
            .max()
            .unwrap_or(0);
        self.feeds[key].activate(&accept, skip_through, &self.options, self.node.pd(), &self.counters)
    }

    /// Discovery says a publisher is gone: tells the application, and closes the connection
    /// to a silent or restarted one.
    fn publisher_lost(&mut self, l: Lost) {
        if matches!(l.reason, LostReason::Silent | LostReason::Restarted) {
            let gone: Vec<usize> =
                self.feeds.iter().filter(|(_, f)| f.serves(l.addr, &l.topic, l.epoch)).map(|(k, _)| k).collect();
            for key in gone {
                self.close_feed(key);
            }
        }
        self.user_events.push_back(SubscriptionEvent::PublisherLost {
            node: l.node,
            epoch: l.epoch,
            addr: l.addr,
            topic: l.topic,
            reason: l.reason,
        });
    }

    /// A publisher's stream ended, everything read: reports it and closes the feed. Discovery
    /// may announce the publisher a little longer, so a reconnection refused with
    /// `UnknownTopic` before it says anything new is that same end, not reported again.
    fn stream_ended(&mut self, key: usize, publisher: PublisherInfo, final_seq: u64, complete: bool) {
        self.user_events.push_back(SubscriptionEvent::Ended { publisher, final_seq, complete });
        self.connector.ended(publisher.addr, self.feeds[key].topic().id());
        self.close_feed(key);
    }

    /// A feed failed with `e`: tells the application and closes it (unless the connection is
    /// going away: then the CM's `Disconnected` event closes it).
    fn fail_feed(&mut self, key: usize, e: Error) {
        let Some(feed) = self.feeds.get_mut(key) else { return };
        if feed.is_closed() {
            return;
        }
        let (addr, topic) = (feed.addr(), feed.topic().id());
        if matches!(e, Error::Fabric(rdma_fabric::Error::NotConnected { .. })) {
            // The connection is going away: the CM's Disconnected event closes the feed, with
            // the right event once the CQ was handled.
            tracing::debug!(topic = self.filter.as_str(), %addr, "feed quiesced: {e}");
            feed.quiesce();
            return;
        }
        tracing::warn!(topic = self.filter.as_str(), %addr, "feed failed: {e}");
        let publisher = feed.publisher();
        match (e, publisher) {
            (Error::MessageTooLarge { len, limit }, Some(publisher)) => {
                self.user_events.push_back(SubscriptionEvent::MessageTooLarge { publisher, len, limit });
                let id = publisher.id;
                self.undeliverable.push_back(Error::MessageOverLimit { peer: addr, publisher: id, len, limit });
                self.refusals.record(addr, topic, Refusal::MessageOverLimit { publisher: id, len, limit });
            }
            (Error::RecordTooLarge { len, limit, .. }, _) => {
                self.user_events.push_back(SubscriptionEvent::RecordTooLarge { addr, len, limit });
                self.refusals.record(addr, topic, Refusal::RecordTooLarge { len, limit });
            }
            _ => {}
        }
        match self.feeds[key].unfinished_end() {
            // The publisher closed (its linger over) before everything it published was READ.
            Some(events) => {
                for event in events {
                    self.user_events.push_back(event);
                }
                self.connector.ended(addr, topic);
            }
            None => self.user_events.push_back(SubscriptionEvent::Disconnected { addr, publisher }),
        }
        self.close_feed(key);
    }

    /// Stops READing a feed; it is removed once its ready messages are delivered.
    fn close_feed(&mut self, key: usize) {
        if let Some(feed) = self.feeds.get_mut(key) {
            feed.close();
            self.connector.closed(feed.addr(), feed.topic().id(), feed.conn());
        }
    }

    /// Removes a feed: forgets its connection and keeps what it delivered (a reconnection to
    /// the same epoch skips it).
    fn remove_feed(&mut self, key: usize) {
        if self.feeds.contains(key) {
            let feed = self.feeds.remove(key);
            self.by_conn.remove(&feed.conn());
            self.node.remove_route(feed.conn());
            if let Some((publisher, last, buffer_bytes)) = feed.last_read() {
                self.counters.read_buffer_bytes.fetch_sub(buffer_bytes, Ordering::Relaxed);
                let entry = self.delivered.entry((publisher.id, publisher.epoch)).or_insert(0);
                *entry = (*entry).max(last);
                // Older epochs of this publisher are never read again.
                self.delivered.retain(|&(id, epoch), _| id != publisher.id || epoch >= publisher.epoch);
            }
            self.connector.removed(feed.addr(), feed.topic().id(), feed.conn());
        }
    }

    /// Removes the closed feeds that are done (flushed, everything delivered).
    fn reap_closed(&mut self) {
        while let Some(key) = self.feeds.iter().find(|(_, f)| f.is_done()).map(|(key, _)| key) {
            self.remove_feed(key);
        }
    }

    /// The subscription's completion queue (the async stream arms it and waits on its
    /// descriptor).
    #[cfg(feature = "async")]
    fn completion_queue(&self) -> &CompletionQueue {
        &self.cq
    }

    /// The async task waiting for connection events, woken by whoever sends one.
    #[cfg(feature = "async")]
    fn event_waker(&self) -> &EventWaker {
        &self.event_waker
    }
}

impl Subscription<[u8]> {
    /// Waits up to `timeout` for the next message and lends it without copying: the payload
    /// stays in the READ buffer it arrived in (reassembled messages in a buffer of the
    /// subscription) until the next call.
    ///
    /// ```
    /// use std::time::Duration;
    /// use rdma_pubsub::{DiscoveryOptions, Node};
    ///
    /// let without_discovery = || Node::builder().discovery(DiscoveryOptions::disabled()).build();
    /// let (a, b) = (without_discovery()?, without_discovery()?);
    /// let publisher = a.publisher("doc-zero-copy").create()?;
    /// let mut sub = b.subscriber("doc-zero-copy").create()?;
    /// sub.connect_wait(a.local_addr(), Duration::from_secs(10))?;
    /// publisher.publish(b"borrowed")?;
    /// let view = sub.recv_ref(Duration::from_secs(10))?.expect("a message within 10 s");
    /// assert_eq!(view.data, b"borrowed"); // valid until the next call on `sub`
    /// # Ok::<(), rdma_pubsub::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`recv`](Self::recv).
    pub fn recv_ref(&mut self, timeout: Duration) -> Result<Option<MessageRef<'_>>> {
        let Some(key) = self.ready_within(Some(timeout))? else { return Ok(None) };
        let Subscription { feeds, stash, counters, .. } = self;
        let (publisher, seq, topic, delivery) = feeds[key].next_message().expect("a ready feed has a message");
        let data: &[u8] = match delivery {
            Delivery::InBuffer(bytes) => bytes,
            Delivery::Reassembled(v) => {
                *stash = v;
                stash
            }
        };
        counters.count_delivery(data.len());
        Ok(Some(MessageRef { publisher, topic, seq, data }))
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
                FeedEvent::Opened(opened) => Some(opened.conn()),
                _ => None,
            })
            .collect();
        let mut routes = self.node.routes();
        for conn in self.feeds.iter().map(|(_, feed)| feed.conn()).chain(unopened) {
            routes.remove(&conn);
        }
    }
}
