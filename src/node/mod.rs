//! The embedded broker: a [`Node`] opens the fabric, listens for subscribers, runs the
//! connection-manager thread and creates publishers and subscriptions.
//!
//! Threads: one CM thread per node (accepts subscribers of local publishers, routes connection
//! events to subscriptions), one discovery thread (announces the node's publishers over UD
//! multicast or unicast, hears the other nodes', tells subscriptions: see [`discovery`]) and,
//! with discovery, one connector thread (opens the subscriptions' connections to the
//! publishers discovery announces, without any call of the application). Data
//! never passes through them: a publisher's thread writes its ring and handles acks inline; a
//! subscription's thread posts READs and polls its own CQ.
//!
//! Files: one type and its impl per file, or one folder when a type's parts carry their own
//! state. Files of one folder may refer to each other; folders side by side may not form a
//! cycle (`scripts/layers.py`): `publisher/` and `subscription/` never name each other, and
//! both may use `discovery/` and the files of this folder.
//!
//! | files | what |
//! |---|---|
//! | `identity`, `topic`, `wr_id`, `single_writer`, `message_type`, `ack_clock`, `pacing`, `spin_permit` | ids and epochs, the topic check, work-request ids, single-writer counting, the message codec, ack rhythm, READ pacing, the process's spin permits and a subscription's hold on one (`PollPermit`) |
//! | `shared` | `NodeShared`: the fabric objects and the tables the threads work from (local publishers, connection routes to a `PublisherShared` or a subscription's `FeedSender`, the subscriptions' connectors), called directly |
//! | `discovery/` | announcing and hearing publishers; each subscription's view of its topic |
//! | `publisher/` | `Publisher` over `PublisherShared` (`shared.rs`, whole: publishing, credit, control traffic, accepting), `Loan`, `Liveness`, the flow-control rules |
//! | `subscription/` | `Subscription` (`mod.rs`, whole) taking turns over its `Feed`s (`feed.rs`: one publisher's stream, posted, completed, parsed and acked), the `Connector` and its thread, events, the async stream |
//! | `cm`, `stats_registry`, `stats_export` | the CM thread; the counters exported and the stats snapshot |
//! | `mod` (this file) | `Node`, `NodeBuilder`, the threads' start, re-exports |
//!
//! ## What happens on each failure, and the test that shows it
//!
//! | failure | what the user sees | test |
//! |---|---|---|
//! | a subscriber's connection is cut mid-READ | the victim: an intact gap-free prefix, one `Disconnected`, then `Closed` (or, with discovery, a reconnection); the other subscribers lose nothing; the publisher never errors | `faults::a_subscriber_connection_cut_mid_read_surfaces_and_spares_the_others` |
//! | the publisher's side of connections is cut while acks flow | every subscriber gets `Disconnected`; the publisher drops them and keeps publishing; a new subscriber joins | `faults::publisher_side_cuts_mid_ack_surface_to_every_subscriber_and_publishing_goes_on` |
//! | a subscriber process is SIGKILLed | the publisher drops it and continues; survivors lose nothing | `faults::a_subscriber_process_killed_mid_stream_is_dropped_and_the_others_lose_nothing` |
//! | a publisher process is SIGKILLed mid-write (fragmented messages) | an intact prefix, never a partial message, then `Disconnected` and `Closed`; with discovery, `PublisherLost{Silent}` and a reconnection when it restarts, without duplicates | `faults::a_publisher_process_killed_mid_write_leaves_an_intact_prefix_and_a_disconnect`, `discovery::a_crashed_publisher_is_detected_and_its_restart_reconnected` |
//! | a READ races a rewrite of the record | the checksum fails, the record is re-read; never delivered damaged | `torn_reads::overwritten_records_are_never_delivered_torn` |
//! | a hostile peer READs outside the ring, with a forged or another region's rkey | `RemoteAccessError` at the attacker, no byte moves; other subscribers unaffected | `hostile::reads_outside_the_ring_or_with_foreign_keys_are_refused` |
//! | a peer guesses rkeys on one connection (raw wire) | the first refusal puts the responder's QP in error: later requests refused, its receives flushed | `hostile::nic::after_a_remote_access_error_the_responder_refuses_the_connections_requests` |
//! | a peer pipelines READs beyond its responder resources, or never reads its answers (raw wire) | cut and counted; the responder's memory stays bounded; other peers are served | `hostile::nic::a_read_flood_beyond_the_responder_resources_is_cut_and_memory_stays_bounded`, `hostile::nic::a_peer_that_never_reads_its_answers_is_paused_then_cut_with_bounded_memory` |
//! | a flood of TCP connections that never complete the CM handshake | at most 64 pending per source, the rest closed at once and counted; other sources connect | `hostile::nic::a_handshake_flood_from_one_source_is_capped_counted_and_spares_other_sources` |
//! | a hostile peer acks positions not published, or sends garbage | refused and counted (`bad_acks`), no credit granted | `hostile::acks_for_unpublished_positions_are_refused_counted_and_grant_no_credit` |
//! | bad or foreign connect private data | rejected with a reason, counted | `pubsub::bad_private_data_is_rejected_with_a_reason_and_counted` |
//! | a subscriber without the topic's credential, or replaying a captured connect | `Unauthorized`, counted; no accept data, so no rkey | `hostile::access::*` |
//! | a publisher advertising or claiming records larger than the subscriber reads | `RecordTooLarge` naming both sizes; READ buffers and memory stay within the subscriber's limit | `hostile::limits::*` |
//! | junk datagrams on the discovery group | counted, dropped, discovery goes on | `discovery::junk_datagrams_are_counted_and_dropped` |
//! | a network partition (a host's link down, then up) | the others continue; all report `PublisherLost{Silent}`, reconnect and catch up | `multihost::three_namespaced_hosts_discover_each_other_and_survive_a_link_cut` |
//! | bytes from the network, arbitrary | no decoder panics; the reader delivers only checksum-valid records | `hostile::` proptests, `fuzz/` (8 targets, 1,000,000 runs each) |
//!
//!
//! # Threat model
//!
//! The attacker is on the same network: it can send any datagram to the discovery port, open TCP
//! connections to a node's CM port, complete the connect handshake, and then speak the fabric
//! protocol as it likes (raw frames on soft). It may listen on the discovery group. It does not
//! run as the same user on the same host (such a process can read the node's memory anyway).
//!
//! ## What is trusted, by mode
//!
//! | mode | trusted | not trusted |
//! |---|---|---|
//! | no secrets (the default) | every host that can reach the discovery port (it may announce any node id, epoch, address and topics) and the CM port (it may subscribe to any topic and READ its ring) | nothing: use it on trusted networks only |
//! | domain secret (`NodeBuilder::domain_secret`, `RDMA_PUBSUB_DOMAIN_SECRET_FILE`, `--secret-file`) | holders of the domain secret, for what they announce (any holder can announce any node id) | everyone else on the discovery port: their datagrams fail the tag and are dropped and counted (`unauthenticated`); captured datagrams of real nodes replayed later are dropped (`replayed`, `stale`) |
//! | topic credential (`PublisherBuilder::credential`) | subscribers that hold the topic's secret | everyone else on the CM port: `Unauthorized` before any accept data (so no rkey) leaves the publisher; a captured connect request replayed is refused (nonce seen, or time out of the 30 s window) |
//!
//! In every mode, whatever a peer sends is bounded before it is used, no queue grows with what a
//! peer sends, and the soft NIC keeps the limits hardware has.
//!
//! Not protected, in any mode: confidentiality (announcements, accept data with the rkey, and the
//! messages themselves travel unencrypted: soft's TCP, RoCE's UDP); an on-path attacker that
//! modifies or injects into an established connection (the fabric has no integrity of its own
//! beyond RC's sequence numbers); a captured connect request used once before the genuine one
//! arrives; floods of the link itself. Clocks of hosts must agree within 60 s (discovery) and 30 s
//! (credentials).
//!
//! ## Each bound and the test that shows it
//!
//! | attack | bound | test |
//! |---|---|---|
//! | a forged Hello reusing a real publisher's node id with a newer epoch | with a domain secret: dropped, counted; the real publisher stays and keeps delivering | `hostile::discovery::a_forged_hello_with_a_real_publishers_id_and_a_newer_epoch_is_dropped_and_counted` |
//! | replayed Hello, Heartbeat or Goodbye of a real node | 64-entry replay window per node and epoch (kept until the peer's datagrams are stale), 60 s clock window | `hostile::discovery::replayed_heartbeats_hellos_and_goodbyes_of_a_real_node_are_dropped_and_counted` |
//! | a flood of node ids, parts and topics | `MAX_PEERS` 1,024, `MAX_PARTS`, `MAX_PEER_TOPICS`, `MAX_TOTAL_TOPICS` 65,536; refused and counted; RSS asserted in a child process | `hostile::discovery::a_discovery_flood_of_ids_parts_and_topics_stays_within_bounded_memory` |
//! | a datagram flood that would hide real heartbeats | datagrams read in batches of 64; a round that finds a full batch waiting does not count the time since the socket was last drained (`backlogged`) | `hostile::discovery::an_unauthenticated_flood_does_not_expire_a_real_peer` |
//! | unicast to the group port from anywhere | a multicast endpoint binds the group address: unicast never reaches it | `discovery::unicast_to_the_group_port_does_not_reach_a_multicast_node` |
//! | an application that never takes its subscription's events (while peers make them: lost messages, publishers coming and going) | at most `MAX_EVENTS` (1,024) held; the oldest dropped and counted (`events_dropped`) | `node::subscription::events::tests::a_full_queue_drops_and_counts_the_oldest` |
//! | a subscription that stops reading its discovery updates | its queue is bounded (4,096), then it catches up with the difference | `node::discovery::watch::tests::a_subscription_that_does_not_drain_gets_a_bounded_queue_then_catches_up` |
//! | subscribing without the credential, with a wrong one, or replaying a captured connect | `Unauthorized`, counted in `rejected_unauthorized` (stats file, `pubsub-demo stat`); the replay set holds at most 4,096 nonces and refuses rather than grows | `hostile::access::*` |
//! | a publisher advertising, or a record claiming, more than the subscriber reads | READ buffers bounded by `SubscriberBuilder::max_record_payload` (16 MiB); `RecordTooLarge` naming both sizes; RSS asserted in a child process | `hostile::limits::*` |
//! | a record that never validates | `recv_timeout` still returns on time | `hostile::limits::a_record_that_never_validates_does_not_hold_recv_past_its_timeout` |
//! | subscribers that post no receives and ask for doorbells (SENDs wait on RNR forever) | 4 control send slots per subscriber: others still get doorbells and `Ended { complete: true }` | `hostile::node::subscribers_that_take_no_sends_pin_only_their_own_control_slots` |
//! | silent subscribers holding a `Block` publisher | dropped after `idle_timeout` (default 30 s) with `DropReason::Idle` | `hostile::node::silent_subscribers_holding_a_blocked_publisher_are_dropped_after_the_idle_timeout` |
//! | a flood of control SENDs at an idle publisher | the CM thread's service tick drains the CQ and reposts receives every 20 ms | `hostile::node::an_idle_publishers_receive_queue_is_refilled_without_its_application` |
//! | READs outside the ring, with forged or foreign rkeys | `RemoteAccessError`, nothing moves | `hostile::reads_outside_the_ring_or_with_foreign_keys_are_refused` |
//! | forged acks, garbage control messages | refused, counted (`bad_acks`), no credit | `hostile::acks_for_unpublished_positions_are_refused_counted_and_grant_no_credit` |
//! | a peer pipelines READs beyond the responder resources it was granted (raw wire) | READ depths negotiated in the connect (initiator depth 16, responder resources 16 by default, as RDMA-CM's); the responder cuts a peer that exceeds them, counted; RSS asserted in a child process | `hostile::nic::a_read_flood_beyond_the_responder_resources_is_cut_and_memory_stays_bounded` |
//! | a peer that never reads its answers | 1 MiB of queued answer frames per connection (`OUT_CAP`); the NIC stops reading that peer, and cuts it after 2 s without progress, counted | `hostile::nic::a_peer_that_never_reads_its_answers_is_paused_then_cut_with_bounded_memory` |
//! | rkey guessing on one connection | the first remote access error moves the responder's queue pair to the error state: later requests are refused; the publisher removes the subscriber (a probe after 250 ms of silence fails on it) | `hostile::nic::after_a_remote_access_error_the_responder_refuses_the_connections_requests`, `hostile::node::a_subscriber_whose_queue_pair_failed_is_removed_and_holds_nothing_back`, conformance `remote_access_error_fails_the_responders_queue_pair` |
//! | a flood of connections that never finish the handshake | 64 pending per source IP, 1,024 in all, 5 s handshake timeout; the rest closed at once and counted | `hostile::nic::a_handshake_flood_from_one_source_is_capped_counted_and_spares_other_sources` |
//! | streams to the data port of queue pairs connected by hand: floods, silence, malformed or forged hellos | the same handshake limits and timeout; a stream reads one 56-byte hello and no more until it is bound; a hello out of bounds, of another peer or for no queue pair in RTR is closed and counted (`rejected_hellos`) | `fabric::soft::hand_tests::*`, `fabric::soft::hello::tests::*` |
//! | the READ buffer of a READ in flight read from safe code | `ReadBuffer::complete` is `unsafe`, taking the READ's completion (its one caller, the subscription, states why it holds) | compile-time |
//! | `ibv_dereg_mr` failing | the buffer is leaked (never freed while it may still be registered) and counted | `fabric::verbs::mr::tests::a_failed_deregistration_leaks_the_memory_and_counts_it` |
//! | a stats directory another user controls, or a link planted as its temporary file | per-user directory created 0700, refused if it is a link, another user's or writable by others; temporaries `O_EXCL \| O_NOFOLLOW` | `stats::tests::the_directory_is_created_private_and_refused_when_others_control_it`, `stats::tests::a_link_planted_as_the_temporary_file_is_not_followed` |
//! | arbitrary bytes in any decoder | no panic; fuzz targets over every format (sealed announcements and credential proofs included) | `hostile::` proptests, `fuzz/` |
//!

mod ack_clock;
mod cm;
pub mod discovery;
mod identity;
mod message_type;
mod pacing;
mod publisher;
mod shared;
mod single_writer;
mod spin_permit;
mod stats_export;
mod stats_registry;
mod subscription;
mod topic;
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
pub use publisher::{Loan, Policy, Publisher, PublisherBuilder, PublisherCounters};
pub use shared::NodeCounters;
#[cfg(feature = "async")]
pub use subscription::MessageStream;
pub use subscription::{
    Message, MessageRef, PublisherInfo, Start, SubscriberBuilder, Subscription, SubscriptionCounters,
    SubscriptionEvent, MAX_EVENTS,
};
pub use topic::IntoTopic;

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
    /// How often the stats file is rewritten (default 100 ms, at least 1 ms).
    pub fn stats_interval(mut self, interval: Duration) -> Self {
        self.stats_interval = interval.max(Duration::from_millis(1));
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
    /// holds no valid secret.
    pub fn build(mut self) -> Result<Node> {
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
        let shared = Arc::new(NodeShared::new((id, epoch, addr), (fabric, pd, channel), directory));
        let disc_setup =
            if self.discovery.enabled { Some(discovery::thread::setup(&shared, &self.discovery)?) } else { None };
        let discovery_addr = disc_setup.as_ref().map(|s| s.ud.local_addr());
        let thread_shared = shared.clone();
        let cm = std::thread::Builder::new()
            .name(format!("pubsub-cm-{}", addr.port()))
            .spawn(move || cm::run(thread_shared, listener))
            .map_err(|e| fabric::Error::os("spawn CM thread", None, e))?;
        let mut node = Node { shared, cm: Some(cm), discovery: None, connector: None, discovery_addr, exporter: None };
        if let Some(setup) = disc_setup {
            let thread_shared = node.shared.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("pubsub-conn-{}", addr.port()))
                .spawn(move || subscription::run_connectors(thread_shared))
                .map_err(|e| fabric::Error::os("spawn connector thread", None, e))?;
            node.connector = Some(spawned);
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
/// it accepts no new subscribers and its subscriptions connect to no new publishers;
/// publishers and subscriptions already created keep working until they are dropped.
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
    /// Opens the subscriptions' connections to discovered publishers (with discovery).
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
    pub fn subscriber(&self, topic: impl IntoTopic) -> SubscriberBuilder<'_> {
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

/// The default bind address of a node: loopback.
pub const DEFAULT_BIND: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);
