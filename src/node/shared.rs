//! [`NodeShared`]: what a node's parts share: the fabric objects, the tables the CM and
//! connector threads work from (the local publishers, the owner of each connection, the
//! subscriptions' connectors), the discovery directory, the stats registry and the node's
//! counters. The tables hold the publishers' and subscriptions' own types; the threads call
//! them directly.

use rdma_wire::Topic;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use parking_lot::{Mutex, MutexGuard};

use crossbeam::channel::Sender;
use rdma_fabric::{ConnId, ConnectRequest, ConnectionEvent, EventChannel, Fabric, ProtectionDomain};
use rdma_wire::protocol::TopicId;
use rdma_wire::protocol::{RejectCode, RejectData, Secret};

use super::discovery::Directory;
use super::identity::NodeId;
use super::publisher::PublisherShared;
use super::seq_floors::SeqFloors;
use super::stats_registry::Registry;
use super::subscription::{Connector, FeedSender, SubscriptionCounters};
use super::topic_listing::ListingServer;
use crate::error::{Error, Result};

/// The longest a node thread or a blocking call waits before it checks again what it waits
/// for and whether the node is stopping (also the period of the CM and connector threads' work).
pub(crate) const RECHECK_INTERVAL: Duration = Duration::from_millis(20);

/// The owner of a connection, for routing its CM events.
#[derive(Clone)]
pub(crate) enum Route {
    /// A subscriber connected to a local publisher.
    Subscriber(Weak<PublisherShared>),
    /// A local subscription's connection to a publisher: its events go on the subscription's
    /// event channel.
    Feed(FeedSender),
    /// A local pattern subscription's listing connection to a node: its events go to the
    /// subscription's connector, which reads the node's topic listing through it.
    Listing(Sender<ConnectionEvent>),
    /// A subscriber's listing connection to this node's topic listing.
    ListingServed,
}

/// The connections of a node and where their CM events go, locked.
pub(crate) type Routes = HashMap<ConnId, Route>;

/// What the node's parts share.
pub(crate) struct NodeShared {
    id: NodeId,
    epoch: u64,
    addr: SocketAddr,
    fabric: Fabric,
    pd: ProtectionDomain,
    channel: EventChannel,
    /// Local publishers by topic, for incoming connect requests.
    publishers: Mutex<HashMap<TopicId, Weak<PublisherShared>>>,
    /// Where each topic's next local publisher starts its sequence (taken with `publishers`
    /// held, after it).
    seq_floors: Mutex<SeqFloors>,
    /// Where events of each connection go.
    routes: Mutex<Routes>,
    /// The connectors of the subscriptions that connect by themselves (discovery), run by the
    /// connector thread.
    connectors: Mutex<Vec<Weak<Connector>>>,
    stop: AtomicBool,
    counters: NodeCounters,
    /// Publishers and subscriptions whose counters are exported.
    stats: Registry,
    /// Local and discovered publishers, and the subscriptions watching them.
    discovery: Directory,
    /// The topics of the local publishers, for pattern subscriptions connected by address.
    listing: ListingServer,
    /// The domain secret: it seals announcements, and accepts answer subscribers' challenges
    /// under it (either side of a connection proves it is of the domain).
    domain_secret: Option<Secret>,
}

impl NodeShared {
    /// The shared state of node `id` (started at `epoch`) listening at `addr`.
    pub(crate) fn new(
        (id, epoch, addr): (NodeId, u64, SocketAddr),
        (fabric, pd, channel): (Fabric, ProtectionDomain, EventChannel),
        (discovery, listing): (Directory, ListingServer),
        domain_secret: Option<Secret>,
    ) -> NodeShared {
        NodeShared {
            id,
            epoch,
            addr,
            fabric,
            pd,
            channel,
            publishers: Mutex::new(HashMap::new()),
            seq_floors: Mutex::new(SeqFloors::default()),
            routes: Mutex::new(HashMap::new()),
            connectors: Mutex::new(Vec::new()),
            stop: AtomicBool::new(false),
            counters: NodeCounters::default(),
            stats: Registry::default(),
            discovery,
            listing,
            domain_secret,
        }
    }

    /// The domain secret, if the node has one.
    pub(crate) fn domain_secret(&self) -> Option<&Secret> {
        self.domain_secret.as_ref()
    }

    /// The node's id.
    pub(crate) fn id(&self) -> NodeId {
        self.id
    }

    /// The node's epoch (its start time in microseconds).
    pub(crate) fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Where subscribers connect to this node.
    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The fabric the node runs on.
    pub(crate) fn fabric(&self) -> &Fabric {
        &self.fabric
    }

    /// The protection domain of every region and queue pair of the node.
    pub(crate) fn pd(&self) -> &ProtectionDomain {
        &self.pd
    }

    /// The node's CM event channel: it listens there, and subscriptions connect through it.
    pub(crate) fn channel(&self) -> &EventChannel {
        &self.channel
    }

    /// The node's counters.
    pub(crate) fn counters(&self) -> &NodeCounters {
        &self.counters
    }

    /// The publishers and subscriptions whose counters are exported.
    pub(crate) fn stats(&self) -> &Registry {
        &self.stats
    }

    /// Local and discovered publishers, and the subscriptions watching them.
    pub(crate) fn discovery(&self) -> &Directory {
        &self.discovery
    }

    /// The topic listing of the local publishers.
    pub(crate) fn listing(&self) -> &ListingServer {
        &self.listing
    }

    /// Whether the node is stopping: its threads end.
    pub(crate) fn stopping(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }

    /// Tells the node's threads to end.
    pub(crate) fn stop(&self) {
        self.stop.store(true, Ordering::Release);
    }

    /// Adds the publisher of `topic` to the node: connect requests for the topic reach it, its
    /// counters are exported, discovery announces it and the topic listing lists it.
    ///
    /// # Errors
    /// [`Error::AlreadyPublishing`] when a live publisher of the topic is there already.
    pub(crate) fn add_publisher(&self, topic: &Topic, publisher: &Arc<PublisherShared>) -> Result<()> {
        let topic_id = topic.id();
        {
            let mut publishers = self.publishers.lock();
            if publishers.get(&topic_id).and_then(Weak::upgrade).is_some() {
                return Err(Error::AlreadyPublishing { topic: topic.to_string() });
            }
            // Numbered after the topic's last publisher here, decided with the table held:
            // a predecessor still closing records its last sequence before it leaves it.
            publisher.start_at_seq(self.seq_floors.lock().first_seq(topic_id))?;
            publishers.insert(topic_id, Arc::downgrade(publisher));
        }
        self.stats.add_publisher(topic.as_str(), publisher.id(), publisher.counters_arc());
        self.discovery.publisher_added(topic);
        self.listing.publisher_added(topic);
        Ok(())
    }

    /// The publisher of `topic_id` is closing: it takes no more connect requests and is no
    /// longer announced nor listed (unless another publisher of the topic has replaced it).
    /// Its next message would have been `next_seq` (the next publisher of the topic here
    /// starts there).
    pub(crate) fn remove_publisher(&self, topic_id: TopicId, publisher: &PublisherShared, next_seq: u64) {
        let mut publishers = self.publishers.lock();
        self.seq_floors.lock().closed(topic_id, next_seq);
        if publishers.get(&topic_id).is_some_and(|w| std::ptr::addr_eq(w.as_ptr(), publisher)) {
            publishers.remove(&topic_id);
            self.discovery.publisher_removed(topic_id);
            self.listing.publisher_removed(topic_id);
        }
    }

    /// The live local publisher of `topic_id`, if any.
    pub(crate) fn publisher_of(&self, topic_id: TopicId) -> Option<Arc<PublisherShared>> {
        self.publishers.lock().get(&topic_id).and_then(Weak::upgrade)
    }

    /// Every live local publisher (taken out of the table: none is held locked while served).
    pub(crate) fn live_publishers(&self) -> Vec<Arc<PublisherShared>> {
        self.publishers.lock().values().filter_map(Weak::upgrade).collect()
    }

    /// Registers a subscription's counters for export.
    pub(crate) fn add_subscription_stats(
        &self,
        topic: &str,
        counters: &Arc<SubscriptionCounters>,
        matches: Option<Weak<Connector>>,
    ) {
        self.stats.add_subscription(topic, counters, matches);
    }

    /// The routes of the node's connections, locked: hold them while a connection is opened and
    /// handed over, so that the CM thread routes none of its events before its owner has it.
    pub(crate) fn routes(&self) -> MutexGuard<'_, Routes> {
        self.routes.lock()
    }

    /// Forgets the route of `conn` (its events are dropped from now on).
    pub(crate) fn remove_route(&self, conn: ConnId) {
        self.routes.lock().remove(&conn);
    }

    /// Adds a subscription's connector to those the connector thread runs.
    pub(crate) fn add_connector(&self, connector: Weak<Connector>) {
        self.connectors.lock().push(connector);
    }

    /// The live connectors (pruning those of dropped subscriptions).
    pub(crate) fn live_connectors(&self) -> Vec<Arc<Connector>> {
        let mut connectors = self.connectors.lock();
        connectors.retain(|c| c.strong_count() > 0);
        connectors.iter().filter_map(Weak::upgrade).collect()
    }

    /// Rejects a connect request with a reason, counting it.
    pub(crate) fn reject_connect(&self, req: ConnectRequest, reason: RejectCode, detail: &str) {
        tracing::debug!(peer = %req.peer_addr(), ?reason, detail, "rejecting a subscriber");
        self.counters.rejected_connects.fetch_add(1, Ordering::Relaxed);
        let data = RejectData::new(reason, detail).encode().unwrap_or_default();
        if let Err(e) = req.reject(&data) {
            tracing::debug!("reject failed: {e}");
        }
    }
}

crate::counters::counter_set! {
    /// Counters of a node, readable while it runs.
    pub struct NodeCounters {
        /// Connect requests refused (bad private data, unknown topic, limits).
        rejected_connects: Total, Connections;
    }
}
