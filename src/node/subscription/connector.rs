//! Opening connections to publishers, in the background: a subscription's [`Connector`] turns
//! discovery's sightings of its topic (or of every topic its pattern includes), and the topic
//! listings of the nodes a pattern subscription was connected to (`listing.rs`: one
//! [`ListingReader`] per address, without discovery), into connections without any call of the
//! application, and the node's connector thread runs every connector each
//! [`RECHECK_INTERVAL`]. A connection is per publisher: per address and
//! topic (a pattern may read several topics of one node, each on its own connection), and a
//! subscription holds at most its `max_feeds` of them: past that a publisher is not connected
//! ([`FeedEvent::FeedLimit`], once per publisher) until one goes.
//!
//! The connector owns what deciding and opening need: the discovery [`Watch`] (with its retry
//! backoff), the addresses with an open connection, and the publishers connected before (a
//! reconnection starts at the earliest retained message). It opens the queue pair on the
//! subscription's CQ and hands it over as a [`FeedEvent::Opened`] on the subscription's event
//! channel, ahead of any CM event of that connection; the subscription posts its receives and
//! reads the ring once it runs (a publisher's SEND meanwhile waits on RNR, as on hardware).
//! The subscription runs its connector too whenever it runs, so while the application calls
//! `recv` it connects as soon as discovery says; the thread covers the time in between.
//!
//! Lock order: a connector's state, then the node's routes. The subscription never holds the
//! routes while it takes the state.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam::channel::Receiver;
use parking_lot::Mutex;

use super::counters::SubscriptionCounters;
use super::feed::{CTRL_LEN, RECV_SLOTS};
use super::feed_channel::{AcceptExpectation, FeedEvent, FeedSender, OpenedFeed};
use super::listing::{ListingNews, ListingReader};
use super::options::{Start, SubscriptionOptions};
use crate::error::{Error, Result};
use crate::node::discovery::{Lost, LostReason, Sighting, Watch};
use crate::node::identity::publisher_id;
use crate::node::shared::{NodeShared, Route, RECHECK_INTERVAL};
use crate::node::topic::TopicFilter;
use rdma_fabric::{Access, CompletionQueue, ConnId, QpCaps, QpInit, WorkCompletion, RNR_RETRY_INFINITE};
use rdma_wire::protocol::{wall_clock_ms, ConnectAuth, ConnectData, ConnectFlags, PolicySet, StartAt, TopicId};
use rdma_wire::Topic;

/// Most connections of one subscription open at once, the largest `max_feeds` (its feed keys
/// have 24 bits; far fewer publishers of one topic exist).
pub(super) const MAX_FEEDS: usize = 1 << 16;
/// How long opening one connection may take (address and route resolution on verbs).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Most nodes one pattern subscription reads the topic listing of (addresses it was asked to
/// connect to).
pub(super) const MAX_LISTED_NODES: usize = 64;

/// What a subscription's connections are opened with, and the state of its discovery.
pub(crate) struct Connector {
    state: Mutex<ConnectorState>,
}

struct ConnectorState {
    filter: TopicFilter,
    /// Most connections open at once (`SubscriberBuilder::max_feeds`).
    max_feeds: usize,
    /// Publishers (address and topic) not connected for the limit, told once each.
    over_limit: HashSet<(SocketAddr, TopicId)>,
    start: Start,
    busy_poll: bool,
    credential: Option<rdma_wire::protocol::Secret>,
    cq: CompletionQueue,
    events: FeedSender,
    /// The subscription's counters (`matched_topics`, `feed_limit_reached`).
    counters: Arc<SubscriptionCounters>,
    /// Discovery's view of the topic (auto-connect on, discovery on).
    watch: Option<Watch>,
    /// The connection open (not closed) to each publisher: its address and topic.
    open: HashMap<(SocketAddr, TopicId), ConnId>,
    /// Publishers (by id) ever connected: a connection to one again is a reconnection.
    seen: HashSet<u64>,
    /// The listing connections of a pattern subscription, one per address it was asked to
    /// connect to (without discovery, how it learns the topics of those nodes).
    listings: Vec<ListingReader>,
    /// The CQ of the listing connections' READs (made with the first).
    listing_cq: Option<CompletionQueue>,
    /// The node's connector thread runs this connector.
    registered: bool,
    /// The subscription is gone: open nothing more.
    closed: bool,
}

impl Connector {
    /// A connector for a subscription to the topics of `filter` whose CQ is `cq` and whose CM
    /// events go to `events`; it watches them when the options and the node's discovery say
    /// so.
    pub(super) fn new(
        node: &NodeShared,
        filter: &TopicFilter,
        options: &SubscriptionOptions,
        cq: CompletionQueue,
        events: FeedSender,
        counters: Arc<SubscriptionCounters>,
    ) -> Arc<Connector> {
        let discovery = node.discovery();
        let watch = (options.auto_connect && discovery.enabled()).then(|| Watch::new(discovery, filter.clone()));
        let connector = Arc::new(Connector {
            state: Mutex::new(ConnectorState {
                filter: filter.clone(),
                max_feeds: options.max_feeds.min(MAX_FEEDS),
                over_limit: HashSet::new(),
                start: options.start,
                busy_poll: options.busy_poll,
                credential: options.credential.clone(),
                cq,
                events,
                counters,
                watch,
                open: HashMap::new(),
                seen: HashSet::new(),
                listings: Vec::new(),
                listing_cq: None,
                registered: false,
                closed: false,
            }),
        });
        let mut state = connector.state.lock();
        if state.watch.is_some() {
            state.registered = true;
            node.add_connector(Arc::downgrade(&connector));
        }
        drop(state);
        connector
    }

    /// The channel discovery's sightings arrive on (to wake on it), when it watches.
    pub(super) fn sightings(&self) -> Option<Receiver<Sighting>> {
        self.state.lock().watch.as_ref().map(|w| w.receiver().clone())
    }

    /// Applies discovery's sightings and opens the connections due. `wait`: take the state
    /// even when another thread runs the connector (else skip: that thread does the work).
    pub(super) fn run(&self, node: &NodeShared, wait: bool) {
        let state = if wait { Some(self.state.lock()) } else { self.state.try_lock() };
        let Some(mut state) = state else { return };
        state.apply_sightings();
        state.open_due(node);
        state.run_listings(node);
    }

    /// Starts reading the topic listing of the node at `addr` (a pattern subscription asked to
    /// connect to it; nothing to do when it reads it already), and runs the connector on the
    /// node's connector thread from then on: every topic listed there that the pattern
    /// includes is connected, as discovery's would be, now and as the listing changes.
    ///
    /// # Errors
    /// [`Error::InvalidOption`] past [`MAX_LISTED_NODES`] addresses; the fabric's when the
    /// connection cannot be started.
    pub(super) fn connect_listing(self: &Arc<Self>, node: &NodeShared, addr: SocketAddr) -> Result<()> {
        let mut state = self.state.lock();
        if state.closed || state.listings.iter().any(|l| l.addr() == addr) {
            return Ok(());
        }
        if state.listings.len() >= MAX_LISTED_NODES {
            let detail = format!("a pattern subscription reads the topics of at most {MAX_LISTED_NODES} nodes");
            return Err(Error::InvalidOption { option: "connect", detail });
        }
        let cq = match &state.listing_cq {
            Some(cq) => cq.clone(),
            None => {
                let depth = (2 * MAX_LISTED_NODES as u32).min(node.fabric().attributes().max_cqe);
                let cq = node.fabric().create_cq(depth)?;
                state.listing_cq = Some(cq.clone());
                cq
            }
        };
        let data = ConnectData {
            topic: TopicId(0),
            start: StartAt::Latest,
            accepts: PolicySet::ALL,
            node_id: node.id(),
            flags: ConnectFlags::LISTING,
            auth: ConnectAuth::None,
        };
        let data = if node.domain_secret().is_some() { data.with_challenge(rand::random()) } else { data };
        let encoded = data.encode().map_err(Error::from_own_encoding)?;
        let reader = ListingReader::open(node, &cq, addr, &encoded, data.challenge(), CONNECT_TIMEOUT)?;
        state.listings.push(reader);
        if !state.registered {
            state.registered = true;
            node.add_connector(Arc::downgrade(self));
        }
        drop(state);
        self.run(node, true);
        Ok(())
    }

    /// Whether it reads the topic listing of a node (so publishers may still be connected
    /// without discovery).
    pub(super) fn reads_listings(&self) -> bool {
        !self.state.lock().listings.is_empty()
    }

    /// Opens a connection to the publisher of `topic` at `addr` unless one is open, starting
    /// where the options say.
    pub(super) fn connect(&self, node: &NodeShared, addr: SocketAddr, topic: &Topic) -> Result<()> {
        let mut state = self.state.lock();
        let start = state.start_for_new();
        if state.open.len() >= state.max_feeds && !state.open.contains_key(&(addr, topic.id())) {
            let detail = format!("the subscription reads {} publishers, its max_feeds", state.max_feeds);
            return Err(Error::InvalidOption { option: "max_feeds", detail });
        }
        state.open_feed(node, addr, topic, start, None)
    }

    /// A connection was established to publisher `id` of `topic` at `addr`; returns whether it
    /// had been connected before.
    pub(super) fn established(&self, addr: SocketAddr, topic: TopicId, id: u64) -> bool {
        let mut state = self.state.lock();
        if let Some(watch) = state.watch.as_mut() {
            watch.connected(addr, topic);
        }
        !state.seen.insert(id)
    }

    /// The connection `conn` to the publisher of `topic` at `addr` is closed (no READs any
    /// more): another may be opened.
    pub(super) fn closed(&self, addr: SocketAddr, topic: TopicId, conn: ConnId) {
        let mut state = self.state.lock();
        if state.open.get(&(addr, topic)) == Some(&conn) {
            state.open.remove(&(addr, topic));
        }
    }

    /// A connection to the publisher of `topic` at `addr` is gone for good: retry it only
    /// after the backoff.
    pub(super) fn removed(&self, addr: SocketAddr, topic: TopicId, conn: ConnId) {
        let mut state = self.state.lock();
        if state.open.get(&(addr, topic)) == Some(&conn) {
            state.open.remove(&(addr, topic));
        }
        if let Some(watch) = state.watch.as_mut() {
            watch.closed(addr, topic, Instant::now());
        }
    }

    /// The publisher of `topic` at `addr` ended its stream.
    pub(super) fn ended(&self, addr: SocketAddr, topic: TopicId) {
        if let Some(watch) = self.state.lock().watch.as_mut() {
            watch.ended(addr, topic);
        }
    }

    /// Whether the publisher of `topic` at `addr` ended its stream and discovery said nothing
    /// new of it.
    pub(super) fn has_ended(&self, addr: SocketAddr, topic: TopicId) -> bool {
        self.state.lock().watch.as_ref().is_some_and(|w| w.has_ended(addr, topic))
    }

    /// The topics of the publishers discovery says are present, or the nodes whose listing it
    /// reads list (those a pattern matched), each once and sorted.
    pub(super) fn matched_topics(&self) -> Vec<Topic> {
        let state = self.state.lock();
        let mut topics = state.watch.as_ref().map(Watch::matched_topics).unwrap_or_default();
        topics.extend(state.listings.iter().flat_map(ListingReader::listed).map(|(t, _)| t.clone()));
        topics.sort_by(|a, b| a.as_str().cmp(b.as_str()));
        topics.dedup();
        topics
    }

    /// Those topics, sorted, each with its publishers present (for the stats file).
    pub(crate) fn matched_publishers(&self) -> Vec<(Topic, usize)> {
        let state = self.state.lock();
        let mut counts: HashMap<Topic, usize> =
            state.watch.as_ref().map(Watch::matched_publishers).unwrap_or_default().into_iter().collect();
        for (topic, _) in state.listings.iter().flat_map(ListingReader::listed) {
            *counts.entry(topic.clone()).or_insert(0) += 1;
        }
        let mut all: Vec<(Topic, usize)> = counts.into_iter().collect();
        all.sort_by(|a, b| a.0.as_str().cmp(b.0.as_str()));
        all
    }

    /// The subscription is gone: opens nothing more and leaves the directory.
    pub(super) fn close(&self, node: &NodeShared) {
        let mut state = self.state.lock();
        state.closed = true;
        if let Some(watch) = state.watch.take() {
            watch.unwatch(node.discovery());
        }
        // Dropping a listing's queue pair disconnects it.
        for listing in state.listings.drain(..) {
            node.remove_route(listing.conn());
        }
    }
}

impl ConnectorState {
    /// Applies the sightings queued; a lost publisher is told to the subscription, and its
    /// address may be connected again at once (the subscription closes the old connection).
    fn apply_sightings(&mut self) {
        let Some(watch) = self.watch.as_mut() else { return };
        let now = Instant::now();
        let sightings: Vec<Sighting> = watch.receiver().try_iter().collect();
        let lost: Vec<Lost> = sightings.into_iter().filter_map(|s| watch.apply(s, now)).collect();
        let matched = watch.matched_topic_count();
        self.counters.matched_topics.store(matched as u64, std::sync::atomic::Ordering::Relaxed);
        for l in lost {
            self.over_limit.remove(&(l.addr, l.topic.id()));
            if matches!(l.reason, LostReason::Silent | LostReason::Restarted) {
                self.open.remove(&(l.addr, l.topic.id()));
            }
            let _ = self.events.send(FeedEvent::PublisherLost(l));
        }
    }

    /// Opens the connections discovery makes due; a failure is told to the subscription.
    fn open_due(&mut self, node: &NodeShared) {
        let open = &self.open;
        let Some(watch) = self.watch.as_mut() else { return };
        let room = self.max_feeds.saturating_sub(open.len());
        let (due, no_room) = watch.due(Instant::now(), room, |addr, topic| open.contains_key(&(addr, topic)));
        for (addr, topic) in no_room {
            // Told once per publisher; it stays due, and is connected once a feed goes.
            if self.over_limit.insert((addr, topic.id())) {
                self.counters.feed_limit_reached.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let limit = self.max_feeds;
                let _ = self.events.send(FeedEvent::FeedLimit { addr, topic, limit });
            }
        }
        for (publisher_node, addr, topic) in due {
            // A publisher read before is resumed from its earliest retained message (duplicates
            // of the same epoch are skipped); a new one starts where the options say.
            let id = publisher_id(publisher_node, topic.id());
            let start = if self.seen.contains(&id) { StartAt::Earliest } else { self.start_for_new() };
            if let Err(e) = self.open_feed(node, addr, &topic, start, Some(id)) {
                tracing::debug!(filter = %self.filter.as_str(), %topic, %addr, "auto-connect: {e}");
                let _ = self.events.send(FeedEvent::ConnectFailed { addr, detail: e.to_string() });
            }
        }
    }

    /// Runs the listing connections: their READs' completions, their CM events, the READs
    /// due; then connects each listed publisher the pattern includes that is not yet, within
    /// `max_feeds` (past it a `FeedLimit`, once, as for discovery's). A failed listing is told
    /// to the subscription and counted, and its connection closed.
    fn run_listings(&mut self, node: &NodeShared) {
        if self.listings.is_empty() || self.closed {
            return;
        }
        let now = Instant::now();
        let filter = &self.filter;
        let keep = |topic: &Topic| filter.matches(topic);
        let mut news = Vec::new();
        if let Some(cq) = &self.listing_cq {
            let mut wcs = [WorkCompletion::default(); 16];
            let n = cq.poll(&mut wcs).unwrap_or_else(|e| {
                tracing::warn!(filter = %filter.as_str(), "listing CQ: {e}");
                0
            });
            for wc in &wcs[..n] {
                if let Some(l) = self.listings.iter_mut().find(|l| l.conn() == wc.wr_id) {
                    news.push((l.addr(), l.complete(wc, &keep, now)));
                }
            }
        }
        for l in &mut self.listings {
            news.push((l.addr(), l.poll(node.domain_secret(), now)));
        }
        for (addr, n) in news {
            if let ListingNews::Failed(detail) = n {
                self.counters.listing_failures.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let _ = self.events.send(FeedEvent::ListingFailed { addr, detail });
            }
        }
        for failed in self.listings.iter().filter(|l| l.failed()) {
            node.remove_route(failed.conn());
        }
        self.listings.retain(|l| !l.failed());
        self.open_listed(node);
    }

    /// Connects the listed publishers not connected yet (see [`run_listings`](Self::run_listings)).
    fn open_listed(&mut self, node: &NodeShared) {
        let mut due = Vec::new();
        for l in &self.listings {
            let Some(node_id) = l.node_id() else { continue };
            for (topic, instance) in l.listed() {
                // A connection to an earlier instance still open: this one once it goes.
                if !l.attempted(topic.id(), instance) && !self.open.contains_key(&(l.addr(), topic.id())) {
                    due.push((l.addr(), node_id, topic.clone(), instance));
                }
            }
        }
        for (addr, node_id, topic, instance) in due {
            if self.open.len() >= self.max_feeds {
                if self.over_limit.insert((addr, topic.id())) {
                    self.counters.feed_limit_reached.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let limit = self.max_feeds;
                    let _ = self.events.send(FeedEvent::FeedLimit { addr, topic, limit });
                }
                continue;
            }
            let id = publisher_id(node_id, topic.id());
            let start = if self.seen.contains(&id) { StartAt::Earliest } else { self.start_for_new() };
            if let Err(e) = self.open_feed(node, addr, &topic, start, Some(id)) {
                tracing::debug!(filter = %self.filter.as_str(), %topic, %addr, "listed topic: {e}");
                let _ = self.events.send(FeedEvent::ConnectFailed { addr, detail: e.to_string() });
            }
            if let Some(l) = self.listings.iter_mut().find(|l| l.addr() == addr) {
                l.mark_attempted(topic.id(), instance);
            }
        }
        let matched: usize = self.listings.iter().map(|l| l.listed().count()).sum();
        if self.watch.is_none() {
            self.counters.matched_topics.store(matched as u64, std::sync::atomic::Ordering::Relaxed);
        }
    }

    fn start_for_new(&self) -> StartAt {
        match self.start {
            Start::Latest => StartAt::Latest,
            Start::Earliest => StartAt::Earliest,
        }
    }

    /// Opens a connection to the publisher of `topic` at `addr` (nothing to do when one is
    /// open) and hands it to the subscription; `publisher` is the publisher discovery announced
    /// there (none for an explicit connect), whose accept must name it.
    fn open_feed(
        &mut self,
        node: &NodeShared,
        addr: SocketAddr,
        topic: &Topic,
        start: StartAt,
        publisher: Option<u64>,
    ) -> Result<()> {
        if self.closed || self.open.contains_key(&(addr, topic.id())) {
            return Ok(());
        }
        self.over_limit.remove(&(addr, topic.id()));
        let (data, challenge) = self.connect_data(node, topic.id(), start)?;
        let ctrl = node.pd().register(CTRL_LEN, Access::LOCAL_WRITE)?;
        let init = QpInit {
            caps: QpCaps { max_send_wr: 16, max_recv_wr: RECV_SLOTS as u32, max_send_sge: 1, max_recv_sge: 1 },
            rnr_retry: RNR_RETRY_INFINITE,
            // READ depths: the default, within the device's limits.
            ..QpInit::new(node.pd(), &self.cq)
        };
        // Hold the routes while connecting and handing over, so that the CM thread cannot
        // route an event of the connection before the subscription has it.
        let mut routes = node.routes();
        let qp = node.channel().connect(addr, &init, &data, CONNECT_TIMEOUT)?;
        let conn = qp.conn_id();
        let expect = AcceptExpectation { challenge, publisher };
        let opened = Box::new(OpenedFeed::new(qp, conn, addr, topic.clone(), ctrl, expect));
        if self.events.send(FeedEvent::Opened(opened)).is_err() {
            return Ok(()); // the subscription is gone; dropping the queue pair disconnects it
        }
        routes.insert(conn, Route::Feed(self.events.clone()));
        drop(routes);
        self.open.insert((addr, topic.id()), conn);
        Ok(())
    }

    /// The connect private data: what this subscription asks for, with a fresh proof of its
    /// credential if it has one, or else a fresh challenge if its node has a domain secret; and
    /// the nonce the publisher's accept tags must answer (the proof's or the challenge's).
    fn connect_data(&self, node: &NodeShared, topic: TopicId, start: StartAt) -> Result<(Vec<u8>, Option<u64>)> {
        let data = ConnectData {
            topic,
            start,
            accepts: PolicySet::ALL,
            node_id: node.id(),
            // Its receives take doorbells with records (`feed::RECV_SLOT`).
            flags: if self.busy_poll {
                ConnectFlags::NONE
            } else {
                ConnectFlags::WANTS_DOORBELLS | ConnectFlags::DOORBELL_RECORDS
            },
            auth: ConnectAuth::None,
        };
        let data = match &self.credential {
            Some(secret) => {
                data.with_proof(secret, rand::random(), wall_clock_ms()).map_err(Error::from_own_encoding)?
            }
            None if node.domain_secret().is_some() => data.with_challenge(rand::random()),
            None => data,
        };
        Ok((data.encode().map_err(Error::from_own_encoding)?, data.challenge()))
    }
}

/// The node's connector thread: runs every live connector each [`RECHECK_INTERVAL`] until the node stops.
pub(crate) fn run_all(node: Arc<NodeShared>) {
    while !node.stopping() {
        for connector in node.live_connectors() {
            connector.run(&node, false);
        }
        std::thread::sleep(RECHECK_INTERVAL);
    }
}
