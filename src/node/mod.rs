//! The embedded broker: a [`Node`] opens the fabric, listens for subscribers, runs the
//! connection-manager thread and creates publishers and subscriptions.
//!
//! Threads: one CM thread per node (accepts subscribers of local publishers, routes connection
//! events to subscriptions), one discovery thread (announces the node's publishers over UD
//! multicast or unicast, hears the other nodes', tells subscriptions: see [`discovery`]), one
//! connector thread (opens the subscriptions' connections to the publishers discovery
//! announces or a node's topic listing lists, without any call of the application, every
//! 20 ms), and,
//! unless `stats_dir(None)`, the stats exporter (rewrites the node's stats file every 100 ms:
//! [`crate::stats`]). Data never passes through them: a publisher's thread writes its ring and
//! handles acks inline; a subscription's thread posts READs and polls its own CQ. There is no
//! thread per publisher or subscription.

// The files of this module (for its maintainers; not part of the API docs):
//
// Files: one type and its impl per file, or one folder when a type's parts carry their own
// state. Files of one folder may refer to each other; folders side by side may not form a
// cycle (`scripts/layers.py`): `publisher/` and `subscription/` never name each other, and
// both may use `discovery/` and the files of this folder.
//
// | files | what |
// |---|---|
// | `identity`, `topic`, `wr_id`, `single_writer`, `message_type`, `type_shape`, `ack_clock`, `pacing`, `spin_permit` | ids and epochs, the topic check, work-request ids, single-writer counting, the message codec and the type fingerprint checked at connect, ack rhythm, READ pacing, the process's spin permits and a subscription's hold on one (`PollPermit`) |
// | `shared` | `NodeShared`: the fabric objects and the tables the threads work from (local publishers, connection routes to a `PublisherShared` or a subscription's `FeedSender`, the subscriptions' connectors), called directly |
// | `discovery/` | announcing and hearing publishers; each subscription's view of its topic |
// | `publisher/` | `Publisher` over `PublisherShared` (`shared.rs`, whole: publishing, credit, control traffic, accepting), `ExclusivePublisher`, `Loan`, `Liveness`, the flow-control rules |
// | `subscription/` | `Subscription` (`mod.rs`, whole) taking turns over its `Feed`s (`feed.rs`: one publisher's stream, posted, completed, parsed and acked), the `Connector` and its thread, events, the async stream |
// | `cm`, `topic_listing`, `stats_registry`, `stats_export` | the CM thread; the node's topic listing (`ListingServer`: the region pattern subscriptions connected by address READ, its listing connections); the counters exported and the stats snapshot |
// | `mod` (this file) | `Node`, `NodeBuilder`, the threads' start, re-exports |

mod ack_clock;
mod cm;
pub mod discovery;
mod identity;
mod lazy_clock;
mod message_type;
mod pacing;
mod publisher;
mod seq_floors;
mod shared;
mod single_writer;
mod spin_permit;
mod stats_export;
mod stats_registry;
mod subscription;
mod topic;
mod topic_listing;
mod type_shape;
mod wr_id;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crate::error::Result;
use crate::fabric::{self, Fabric, FabricConfig, FabricKind, SameHost, SoftOptions};
use crate::stats;
use rdma_wire::protocol::Secret;

use identity::epoch_now;
use shared::NodeShared;

pub use discovery::{DiscoveryCounters, DiscoveryOptions, LostReason, PeerInfo};
pub use identity::NodeId;
pub use message_type::MessageType;
pub use publisher::{ExclusivePublisher, Loan, Policy, Publisher, PublisherBuilder, PublisherCounters};
pub use shared::NodeCounters;
#[cfg(feature = "async")]
pub use subscription::MessageStream;
pub use subscription::{
    LossReason, Message, MessageRef, PublisherInfo, Start, SubscriberBuilder, Subscription, SubscriptionCounters,
    SubscriptionEvent, MAX_EVENTS,
};
pub use topic::{IntoKeyExpr, IntoTopic};

/// Builds a [`Node`].
///
/// ```
/// use std::time::Duration;
/// use rdma_pubsub::{DiscoveryOptions, FabricKind, Node};
///
/// let node = Node::builder()
///     .fabric(FabricKind::Soft)                      // or Verbs, or Auto (the default)
///     .bind("127.0.0.1:0".parse().unwrap())           // port 0: any free port
///     .discovery(DiscoveryOptions::disabled())        // connect by address only
///     .stats_dir(None)                                // no stats file
///     .build()?;
/// assert_eq!(node.local_addr().ip().to_string(), "127.0.0.1");
/// # Ok::<(), rdma_pubsub::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct NodeBuilder {
    fabric: FabricConfig,
    port: u16,
    /// Where the stats file goes (`None`: no file).
    stats_dir: Option<PathBuf>,
    stats_interval: Duration,
    discovery: DiscoveryOptions,
    /// Set by [`domain`](NodeBuilder::domain): overrides the discovery options' domain.
    domain: Option<u16>,
    /// Set by [`same_host`](NodeBuilder::same_host): overrides the soft options' setting.
    same_host: Option<SameHost>,
    node_id: Option<NodeId>,
    /// Set by [`domain_secret`](NodeBuilder::domain_secret): overrides the discovery options'.
    domain_secret: Option<Secret>,
}

impl Default for NodeBuilder {
    fn default() -> Self {
        NodeBuilder {
            fabric: FabricConfig::default(),
            port: 0,
            stats_dir: Some(stats::default_dir()),
            stats_interval: stats::DEFAULT_INTERVAL,
            discovery: DiscoveryOptions::default(),
            domain: None,
            same_host: None,
            node_id: None,
            domain_secret: None,
        }
    }
}

impl NodeBuilder {
    /// Chooses the fabric provider (default: auto).
    pub fn fabric(mut self, kind: FabricKind) -> Self {
        self.fabric.kind = kind;
        self
    }
    /// The discovery domain (default 0): nodes discover only nodes of their own domain
    /// ([`DiscoveryOptions::domain`]). Shorthand for setting it in [`discovery`](Self::discovery)
    /// options, and it wins over theirs whichever is called first.
    pub fn domain(mut self, domain: u16) -> Self {
        self.domain = Some(domain);
        self
    }
    /// The secret of the discovery domain ([`DiscoveryOptions::secret`]): announcements are
    /// sealed with it and only those sealed with it are heard. Wins over the discovery options'
    /// whichever is called first. With neither, `build` reads the secret from the file named
    /// by the environment variable `RDMA_PUBSUB_DOMAIN_SECRET_FILE` when it is set
    /// ([`discovery::SECRET_FILE_ENV`]).
    pub fn domain_secret(mut self, secret: Secret) -> Self {
        self.domain_secret = Some(secret);
        self
    }

    /// Chooses the RDMA device by name (verbs).
    pub fn device(mut self, name: impl Into<String>) -> Self {
        self.fabric.device = Some(name.into());
        self
    }
    /// The address subscribers connect to (default 127.0.0.1, port 0 = any free port).
    pub fn bind(mut self, addr: SocketAddr) -> Self {
        self.fabric.bind = addr.ip();
        self.port = addr.port();
        self
    }
    /// Whether connections between processes of this host use shared memory (soft fabric;
    /// default [`SameHost::Auto`]): READs then become copies by the subscriber's own thread
    /// instead of trips through the soft NIC threads and TCP loopback. Shorthand for
    /// [`SoftOptions::same_host`], and it wins over [`soft_options`](Self::soft_options)
    /// whichever is called first.
    pub fn same_host(mut self, same_host: SameHost) -> Self {
        self.same_host = Some(same_host);
        self
    }
    /// Settings of the soft fabric.
    pub fn soft_options(mut self, options: SoftOptions) -> Self {
        self.fabric.soft = options;
        self
    }
    /// Where the node writes its stats file (default [`stats::default_dir`]); `None` writes
    /// none. The counters stay readable through [`Node::stats`].
    pub fn stats_dir(mut self, dir: Option<PathBuf>) -> Self {
        self.stats_dir = dir;
        self
    }
    /// How often the stats file is rewritten (default 100 ms, at least 1 ms: `build` refuses
    /// less).
    pub fn stats_interval(mut self, interval: Duration) -> Self {
        self.stats_interval = interval;
        self
    }
    /// How the node discovers peers (default: multicast on [`discovery::DEFAULT_GROUP`]:
    /// [`discovery::DEFAULT_PORT`] from the bind address's interface, heartbeat 200 ms, gone
    /// after 5 missed).
    pub fn discovery(mut self, options: DiscoveryOptions) -> Self {
        self.discovery = options;
        self
    }
    /// A fixed node id (default: random). A node restarted with the same id is recognised as
    /// the same node with a new epoch, and its subscribers reconnect to it.
    pub fn node_id(mut self, id: NodeId) -> Self {
        self.node_id = Some(id);
        self
    }
    /// Opens the fabric, starts listening, and starts the CM and discovery threads.
    ///
    /// # Errors
    /// [`Error::Fabric`](crate::Error::Fabric) when the fabric cannot be opened (no such device or provider, the
    /// address is in use or not local); [`Error::InvalidOption`](crate::Error::InvalidOption) for discovery options out of
    /// range, or a domain secret file (`RDMA_PUBSUB_DOMAIN_SECRET_FILE`) that cannot be read or
    /// holds no valid secret, or a [`stats_interval`](Self::stats_interval) under 1 ms.
    pub fn build(mut self) -> Result<Node> {
        if self.stats_interval < MIN_STATS_INTERVAL {
            return Err(crate::Error::InvalidOption {
                option: "stats_interval",
                detail: format!("must be at least 1 ms, got {:?}", self.stats_interval),
            });
        }
        if let Some(domain) = self.domain {
            self.discovery.domain = domain;
        }
        if let Some(secret) = self.domain_secret.take() {
            self.discovery.secret = Some(secret);
        }
        if self.discovery.enabled && self.discovery.secret.is_none() {
            self.discovery.secret = discovery::secret_from_env()?;
        }
        if let Some(same_host) = self.same_host {
            self.fabric.soft = self.fabric.soft.same_host(same_host);
        }
        let fabric = fabric::open(&self.fabric)?;
        let pd = fabric.alloc_pd()?;
        let channel = fabric.create_event_channel()?;
        let listener = channel.listen(SocketAddr::new(self.fabric.bind, self.port), 128)?;
        let addr = listener.local_addr();
        let (id, epoch) = (self.node_id.unwrap_or_else(rand::random), epoch_now());
        let directory = discovery::Directory::new(id, self.discovery.domain, epoch, addr, self.discovery.enabled);
        let secret = self.discovery.secret.clone();
        let listing = topic_listing::ListingServer::new(&fabric, id, epoch)?;
        let shared = Arc::new(NodeShared::new((id, epoch, addr), (fabric, pd, channel), (directory, listing), secret));
        let disc_setup =
            if self.discovery.enabled { Some(discovery::thread::setup(&shared, &self.discovery)?) } else { None };
        let discovery_addr = disc_setup.as_ref().map(|s| s.ud.local_addr());
        let thread_shared = shared.clone();
        let cm = std::thread::Builder::new()
            .name(format!("pubsub-cm-{}", addr.port()))
            .spawn(move || cm::run(thread_shared, listener))
            .map_err(|e| fabric::Error::os("spawn CM thread", None, e))?;
        let mut node = Node { shared, cm: Some(cm), discovery: None, connector: None, discovery_addr, exporter: None };
        let thread_shared = node.shared.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("pubsub-conn-{}", addr.port()))
            .spawn(move || subscription::run_connectors(thread_shared))
            .map_err(|e| fabric::Error::os("spawn connector thread", None, e))?;
        node.connector = Some(spawned);
        if let Some(setup) = disc_setup {
            let thread_shared = node.shared.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("pubsub-disc-{}", addr.port()))
                .spawn(move || discovery::thread::run(thread_shared, setup))
                .map_err(|e| fabric::Error::os("spawn discovery thread", None, e))?;
            node.discovery = Some(spawned);
        }
        node.exporter = self.stats_dir.and_then(|dir| start_exporter(&node.shared, &dir, self.stats_interval));
        tracing::debug!(node = node.shared.id(), %addr, fabric = %node.shared.fabric().kind(), "node started");
        Ok(node)
    }
}

/// An embedded pub/sub node: the entry point of the API.
///
/// Dropping the node stops its CM thread and its discovery thread (which says goodbye first):
/// it accepts no new subscribers, and its subscriptions are closed: every call of theirs
/// returns [`Error::Closed`](crate::Error::Closed) at once. Its publishers keep serving the
/// subscribers connected until they are dropped.
///
/// ```
/// use rdma_pubsub::{DiscoveryOptions, FabricKind, Node};
///
/// // The soft fabric on loopback, without discovery: subscribers connect by address.
/// let node = Node::builder().fabric(FabricKind::Soft).discovery(DiscoveryOptions::disabled()).build()?;
/// println!("node {:016x} at {} on the {} fabric", node.id(), node.local_addr(), node.fabric().kind());
/// # Ok::<(), rdma_pubsub::Error>(())
/// ```
pub struct Node {
    shared: Arc<NodeShared>,
    cm: Option<JoinHandle<()>>,
    exporter: Option<stats::Exporter>,
    discovery: Option<JoinHandle<()>>,
    /// Opens the subscriptions' connections to discovered or listed publishers.
    connector: Option<JoinHandle<()>>,
    discovery_addr: Option<SocketAddr>,
}

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node").field("id", &self.shared.id()).field("addr", &self.shared.addr()).finish()
    }
}

impl Node {
    /// A builder with defaults: auto fabric, 127.0.0.1, any port.
    pub fn builder() -> NodeBuilder {
        NodeBuilder::default()
    }
    /// The node's id.
    pub fn id(&self) -> NodeId {
        self.shared.id()
    }
    /// The node's epoch (start time in microseconds; a restarted node has a larger one).
    pub fn epoch(&self) -> u64 {
        self.shared.epoch()
    }
    /// Where subscribers connect to this node.
    pub fn local_addr(&self) -> SocketAddr {
        self.shared.addr()
    }
    /// The fabric the node runs on.
    pub fn fabric(&self) -> &Fabric {
        self.shared.fabric()
    }
    /// The node's counters.
    pub fn counters(&self) -> &NodeCounters {
        self.shared.counters()
    }
    /// A snapshot of the counters of the node and of its live publishers and subscriptions.
    pub fn stats(&self) -> stats::Snapshot {
        stats_export::snapshot_of(&self.shared)
    }
    /// The stats file this node keeps up to date, if it writes one.
    pub fn stats_path(&self) -> Option<&Path> {
        self.exporter.as_ref().map(|e| e.path())
    }
    /// Where the node's discovery endpoint receives unicast announcements (what other nodes
    /// list in [`DiscoveryOptions::peers`]); `None` when discovery is off.
    pub fn discovery_addr(&self) -> Option<SocketAddr> {
        self.discovery_addr
    }
    /// The other nodes discovery knows now.
    pub fn peers(&self) -> Vec<PeerInfo> {
        self.shared.discovery().peers()
    }
    /// The discovery counters.
    pub fn discovery_counters(&self) -> &DiscoveryCounters {
        &self.shared.discovery().counters
    }
    /// Starts configuring the publisher of `topic` on this node: set what differs from the
    /// defaults, then [`create`](PublisherBuilder::create) it.
    pub fn publisher(&self, topic: impl IntoTopic) -> PublisherBuilder<'_> {
        PublisherBuilder::new(&self.shared, topic)
    }
    /// Starts configuring a subscription to `topic`: set what differs from the defaults, then
    /// [`create`](SubscriberBuilder::create) it. With discovery on it connects by itself, in
    /// the background, to every publisher of the topic as they are announced;
    /// [`SubscriberBuilder::connect`] and [`Subscription::connect`] connect by address.
    ///
    /// `topic` may be a pattern, a [`KeyExpr`](crate::KeyExpr) with wildcards
    /// (`sensors/**`): the subscription then reads every publisher, on any node of the domain,
    /// whose topic the pattern includes, those announced when it starts and those announced
    /// later, and lets go of each when it leaves. Each message names its topic
    /// ([`Message::topic`](crate::Message::topic)). Without discovery, connected to a node's
    /// address, it reads every topic that node lists that the pattern includes, those created
    /// there later too; with neither, [`create`](SubscriberBuilder::create) is
    /// [`Error::PatternNeedsDiscovery`](crate::Error::PatternNeedsDiscovery).
    pub fn subscriber(&self, topic: impl IntoKeyExpr) -> SubscriberBuilder<'_> {
        SubscriberBuilder::new(&self.shared, topic)
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.exporter.take();
        self.shared.stop();
        if let Some(cm) = self.cm.take() {
            let _ = cm.join();
        }
        if let Some(discovery) = self.discovery.take() {
            let _ = discovery.join();
        }
        if let Some(connector) = self.connector.take() {
            let _ = connector.join();
        }
    }
}

/// Starts the stats exporter; a node without one still works (the failure is logged).
fn start_exporter(shared: &Arc<NodeShared>, dir: &Path, interval: Duration) -> Option<stats::Exporter> {
    let name = format!("{}-{:016x}.stats", std::process::id(), shared.id());
    let weak = Arc::downgrade(shared);
    let snapshot = move || weak.upgrade().map(|node| stats_export::snapshot_of(&node));
    match stats::Exporter::start(dir, name, interval, snapshot) {
        Ok(e) => Some(e),
        Err(e) => {
            tracing::warn!(dir = %dir.display(), "no stats file for this node: {e}");
            None
        }
    }
}

/// The shortest [`NodeBuilder::stats_interval`].
const MIN_STATS_INTERVAL: Duration = Duration::from_millis(1);

/// The default bind address of a node: loopback.
pub const DEFAULT_BIND: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);
