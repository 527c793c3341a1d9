//! Discovery: nodes find each other's publishers by themselves.
//!
//! Each node runs one discovery thread (`thread.rs`) owning a UD endpoint. It announces the
//! node (id, epoch, connect address, published topics: an `Announcement`) to a multicast group
//! and/or by unicast to a static list of peers: a `Hello` at start and whenever the local topics
//! change, a `Heartbeat` every [`DiscoveryOptions::heartbeat`] (±10 % jitter), a `Goodbye` on
//! clean shutdown. Heard announcements update the node's `Directory` of peers; a peer silent
//! for `heartbeat × missed_heartbeats` is expired.
//!
//! Subscriptions register in the directory by topic and receive `Sighting`s on a channel when
//! a publisher of their topic appears or disappears (`watch::Watch` turns them into connects
//! and [`crate::SubscriptionEvent::PublisherLost`] events). Local publishers are sighted too.
//!
//! With a domain secret ([`DiscoveryOptions::secret`]) every datagram is sealed and checked
//! (`auth.rs`): only holders of the secret can announce a node, and replayed or stale datagrams
//! are refused. Without one, discovery trusts whatever reaches its port.
//!
//! The thread is separate from the CM thread because each blocks on its own object (the UD
//! endpoint, the CM event channel) with a bounded timeout; merging them would make each wait
//! delay the other's events.

mod auth;
pub(crate) mod thread;
pub(crate) mod watch;

use watch::{Present, Watcher};

use std::collections::{BTreeMap, HashMap};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crossbeam::channel::Receiver;
use parking_lot::Mutex;

use super::NodeId;
use crate::protocol::{AnnounceKind, Announcement, Secret, TopicId};

/// The environment variable naming a file that holds the domain secret, read by
/// [`crate::NodeBuilder::build`] when no secret is given (see [`DiscoveryOptions::secret`]).
pub const SECRET_FILE_ENV: &str = "RDMA_PUBSUB_DOMAIN_SECRET_FILE";

/// Default multicast group of announcements (organisation-local scope).
pub const DEFAULT_GROUP: Ipv4Addr = Ipv4Addr::new(239, 255, 77, 77);
/// Default UD port of announcements (soft: the UDP port; verbs: folded into the Q_Key).
pub const DEFAULT_PORT: u16 = 7477;
internal! {
    /// Default heartbeat interval.
    pub const DEFAULT_HEARTBEAT: Duration = Duration::from_millis(200);
}
internal! {
    /// Default number of missed heartbeats after which a silent peer is considered gone.
    pub const DEFAULT_MISSED_HEARTBEATS: u32 = 5;
}

/// How a node discovers its peers (see [`crate::NodeBuilder::discovery`]): built from
/// [`default`](Self::default) (multicast on [`DEFAULT_GROUP`]:[`DEFAULT_PORT`], domain 0,
/// heartbeat 200 ms, gone after 5 missed), [`disabled`](Self::disabled) or
/// [`unicast`](Self::unicast), then the setters. The node checks the whole set when it is built.
///
/// ```
/// use std::time::Duration;
/// use rdma_pubsub::DiscoveryOptions;
///
/// let options = DiscoveryOptions::default()
///     .domain(3)                                 // apart from domain 0's nodes
///     .heartbeat(Duration::from_millis(100))     // every node of the domain should agree
///     .peers(vec!["10.0.0.7:7477".parse().unwrap()]);
/// assert_eq!(options.domain_port(), rdma_pubsub::node::discovery::DEFAULT_PORT + 3);
/// ```
///
/// Without a [`secret`](Self::secret), announcements are not authenticated: anyone who can
/// send a datagram to the discovery port can announce publishers, claim a node's id and epoch
/// (subscribers then drop the real node and connect where the forger says) or say a node's
/// goodbye. Use discovery without a secret on trusted networks only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiscoveryOptions {
    // Crate-visible so that the node and the discovery thread read them; applications use the
    // setters, whose docs describe each.
    pub(crate) enabled: bool,
    pub(crate) multicast: bool,
    pub(crate) group: Ipv4Addr,
    pub(crate) port: u16,
    pub(crate) domain: u16,
    pub(crate) interface: Option<Ipv4Addr>,
    pub(crate) peers: Vec<SocketAddrV4>,
    pub(crate) heartbeat: Duration,
    pub(crate) missed_heartbeats: u32,
    pub(crate) secret: Option<Secret>,
}

impl Default for DiscoveryOptions {
    fn default() -> Self {
        DiscoveryOptions {
            enabled: true,
            multicast: true,
            group: DEFAULT_GROUP,
            port: DEFAULT_PORT,
            domain: 0,
            interface: None,
            peers: Vec::new(),
            heartbeat: DEFAULT_HEARTBEAT,
            missed_heartbeats: DEFAULT_MISSED_HEARTBEATS,
            secret: None,
        }
    }
}

impl DiscoveryOptions {
    /// Discovery turned off: no announcements are sent or heard, and subscriptions connect
    /// only where [`crate::Subscription::connect`] says.
    pub fn disabled() -> Self {
        DiscoveryOptions::default().enabled(false)
    }

    /// Unicast only, to `peers`, on a free port.
    pub fn unicast(peers: Vec<SocketAddrV4>) -> Self {
        DiscoveryOptions::default().multicast(false).port(0).peers(peers)
    }

    /// Whether discovery runs at all (default true; false is [`disabled`](Self::disabled)).
    pub fn enabled(mut self, enabled: bool) -> Self {
        self.enabled = enabled;
        self
    }

    /// Whether to announce to and listen on the multicast group (default true). When false,
    /// only the unicast [`peers`](Self::peers) are used.
    pub fn multicast(mut self, multicast: bool) -> Self {
        self.multicast = multicast;
        self
    }

    /// The multicast group (default [`DEFAULT_GROUP`]).
    pub fn group(mut self, group: Ipv4Addr) -> Self {
        self.group = group;
        self
    }

    /// The UD port of domain 0 (default [`DEFAULT_PORT`]); domain `d` uses `port + d`. 0 picks a
    /// free port (unicast only). With multicast, only datagrams sent to the group arrive on the
    /// group port: a node hears unicast at its own endpoint, [`crate::Node::discovery_addr`] (a
    /// port of its own on the interface), which is what other nodes list in
    /// [`peers`](Self::peers). Unicast only (`multicast(false)`), that endpoint is on this port
    /// (soft), so peers can list `host:port` in advance; one node per host may use it.
    pub fn port(mut self, port: u16) -> Self {
        self.port = port;
        self
    }

    /// The discovery domain (default 0): nodes find only nodes of their own domain, so that
    /// unrelated applications on one network using the same topic names stay apart (as ROS 2's
    /// domain id does). It is carried in every announcement (others are counted in
    /// [`DiscoveryCounters::other_domain`] and dropped) and moves the UD port to `port + domain`.
    pub fn domain(mut self, domain: u16) -> Self {
        self.domain = domain;
        self
    }

    /// Local interface address of the UD endpoint (`IP_MULTICAST_IF`). Default (`None`): the
    /// node's bind address, or 127.0.0.1 when that is unspecified or IPv6.
    pub fn interface(mut self, interface: impl Into<Option<Ipv4Addr>>) -> Self {
        self.interface = interface.into();
        self
    }

    /// Discovery endpoints (`ip:port`) of peers announced to by unicast, in addition to the
    /// group (default none). When multicast is off a node also answers every peer it hears
    /// from, so one side listing the other suffices.
    pub fn peers(mut self, peers: Vec<SocketAddrV4>) -> Self {
        self.peers = peers;
        self
    }

    /// Heartbeat interval (default 200 ms, 1 ms to 1 h); every node of a domain should use the
    /// same.
    pub fn heartbeat(mut self, heartbeat: Duration) -> Self {
        self.heartbeat = heartbeat;
        self
    }

    /// A peer silent for this many heartbeat intervals is gone (default 5, at least 1).
    pub fn missed_heartbeats(mut self, missed: u32) -> Self {
        self.missed_heartbeats = missed;
        self
    }

    /// The domain secret (default none; [`crate::NodeBuilder::domain_secret`], or the file
    /// named by [`SECRET_FILE_ENV`]). With it every announcement is sealed: it carries a
    /// sequence number, the sender's clock and an HMAC-SHA256 tag, and a node accepts only
    /// datagrams whose tag verifies, whose clock is within 60 s of its own and that it has not
    /// seen before (counted in [`DiscoveryCounters::unauthenticated`],
    /// [`stale`](DiscoveryCounters::stale) and [`replayed`](DiscoveryCounters::replayed)).
    /// Every node of a domain must have the same secret: nodes without it are not heard, and
    /// do not hear this node.
    pub fn secret(mut self, secret: impl Into<Option<Secret>>) -> Self {
        self.secret = secret.into();
        self
    }

    /// Whether discovery runs ([`enabled`](Self::enabled)).
    pub fn is_enabled(&self) -> bool {
        self.enabled
    }

    /// Whether the multicast group is used ([`multicast`](Self::multicast)).
    pub fn is_multicast(&self) -> bool {
        self.multicast
    }

    /// Where announcements to the group go: the [`group`](Self::group) at the
    /// [`domain_port`](Self::domain_port).
    pub fn group_addr(&self) -> SocketAddrV4 {
        SocketAddrV4::new(self.group, self.domain_port())
    }

    /// The unicast peers ([`peers`](Self::peers)).
    pub fn peer_list(&self) -> &[SocketAddrV4] {
        &self.peers
    }

    /// The heartbeat interval ([`heartbeat`](Self::heartbeat)).
    pub fn heartbeat_interval(&self) -> Duration {
        self.heartbeat
    }

    /// The UD port this node uses: `port + domain`, or 0 (a free port) when `port` is 0.
    pub fn domain_port(&self) -> u16 {
        if self.port == 0 {
            0
        } else {
            self.port.saturating_add(self.domain)
        }
    }

    /// How long a silent peer lives.
    pub(crate) fn expiry(&self) -> Duration {
        self.heartbeat.saturating_mul(self.missed_heartbeats)
    }

    pub(crate) fn check(&self) -> crate::Result<()> {
        let bad = |option, detail: &str| Err(crate::Error::InvalidOption { option, detail: detail.into() });
        if !self.enabled {
            return Ok(());
        }
        if self.multicast && !self.group.is_multicast() {
            return bad("discovery group", "not a multicast address");
        }
        if self.multicast && self.port == 0 {
            return bad("discovery port", "multicast needs a fixed port");
        }
        if self.port != 0 && self.port.checked_add(self.domain).is_none() {
            return bad("discovery domain", "port + domain must be a port number (at most 65535)");
        }
        if self.heartbeat < Duration::from_millis(1) || self.heartbeat > Duration::from_secs(3600) {
            return bad("heartbeat", "must be in 1 ms..=1 h");
        }
        if self.missed_heartbeats == 0 {
            return bad("missed_heartbeats", "must be at least 1");
        }
        if !self.multicast && self.peers.is_empty() {
            tracing::debug!("discovery without multicast and without peers: only peers that list this node are found");
        }
        Ok(())
    }
}

/// The secret in the file named by [`SECRET_FILE_ENV`], if that variable is set.
pub(crate) fn secret_from_env() -> crate::Result<Option<Secret>> {
    secret_from_file_named(std::env::var_os(SECRET_FILE_ENV))
}

/// The secret in the file at `path`, if there is a path; an unreadable file, or one that holds
/// no valid secret, is an error naming it.
fn secret_from_file_named(path: Option<std::ffi::OsString>) -> crate::Result<Option<Secret>> {
    let Some(path) = path else { return Ok(None) };
    Secret::from_file(&path).map(Some).map_err(|e| crate::Error::InvalidOption {
        option: SECRET_FILE_ENV,
        detail: format!("reading the domain secret from {}: {e}", std::path::Path::new(&path).display()),
    })
}

/// Why a publisher is no longer considered present.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LostReason {
    /// Its node said goodbye (clean shutdown).
    Goodbye,
    /// Its node missed too many heartbeats (crash, partition).
    Silent,
    /// Its node came back with a new epoch: the old incarnation is gone.
    Restarted,
    /// Its node no longer announces the topic (the publisher was dropped).
    Withdrawn,
}

/// A node known to discovery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerInfo {
    /// Its id.
    pub node: NodeId,
    /// Its epoch.
    pub epoch: u64,
    /// Where subscribers connect to it.
    pub addr: SocketAddr,
    /// The topics it publishes (as announced so far), sorted.
    pub topics: Vec<String>,
}

crate::counters::counter_set! {
    /// Counters of a node's discovery.
    pub struct DiscoveryCounters {
        /// Datagrams sent (every part, to the group and to each unicast peer).
        sent: Total, Datagrams;
        /// Announcements of other nodes of this domain handled (those refused at a bound too).
        received: Total, Datagrams;
        /// Peers expired for missed heartbeats.
        expired: Total, Connections;
        /// Datagrams that could not be sent.
        send_errors: Total, Datagrams;
        /// Announcements of another discovery domain, dropped.
        other_domain: Total, Datagrams;
        /// Announcements dropped because they exceed the directory's bounds (1024 peers, 256
        /// datagrams per announcement, 8192 topics per peer, 65 536 topics in all) or name an
        /// invalid topic.
        refused: Total, Datagrams;
        /// With a domain secret: datagrams without a tag, or with one that does not verify
        /// (forged, altered, plain, or sealed with another secret), dropped.
        unauthenticated: Total, Datagrams;
        /// With a domain secret: authentic datagrams seen before (replayed or duplicated), or of
        /// an older epoch of their node than one already heard, dropped.
        replayed: Total, Datagrams;
        /// With a domain secret: authentic datagrams whose sender clock is more than 60 s from
        /// this node's, dropped.
        stale: Total, Datagrams;
        /// Without a domain secret: sealed datagrams (of nodes that have one), which this node
        /// cannot check, dropped.
        sealed_ignored: Total, Datagrams;
        /// Rounds of the discovery thread that found a full batch of datagrams waiting (a flood,
        /// or a burst): datagrams may have been dropped unread, so peers' silence until then did
        /// not count towards their expiry.
        backlogged: Total, Events;
        /// Datagrams dropped because they did not decode (garbage, unknown version, a topic id
        /// not matching its name).
        bad_datagrams: Total, Datagrams;
    }
}

internal! {
    /// Most peers a node keeps in its directory; announcements of further nodes are refused
    /// (and counted) until known peers leave or expire.
    pub const MAX_PEERS: usize = 1024;
}
internal! {
    /// Most datagrams (parts) one node's announcement may be split into.
    pub const MAX_PARTS: usize = 256;
}
internal! {
    /// Most topics one peer may announce.
    pub const MAX_PEER_TOPICS: usize = 8192;
}
internal! {
    /// Most topics of all peers together. With topic names of at most 200 bytes, the directory
    /// stays within a few tens of MiB whatever is sent to the discovery port.
    pub const MAX_TOTAL_TOPICS: usize = 65_536;
}

/// What a subscription learns about publishers of its topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Sighting {
    /// A node publishes the topic.
    Up { node: NodeId, epoch: u64, addr: SocketAddr },
    /// It no longer does.
    Down { node: NodeId, epoch: u64, addr: SocketAddr, reason: LostReason },
}

/// A peer heard from.
struct Peer {
    epoch: u64,
    addr: SocketAddr,
    /// Topics of each announced part (the union is the topic set).
    parts: Vec<Vec<(String, TopicId)>>,
    last_heard: Instant,
    /// Where its datagrams came from (unicast replies when multicast is off).
    from: Option<SocketAddrV4>,
}

impl Peer {
    /// Topic entries over its parts.
    fn topic_count(&self) -> usize {
        self.parts.iter().map(Vec::len).sum()
    }

    fn topics(&self) -> BTreeMap<TopicId, String> {
        self.parts.iter().flatten().map(|(name, id)| (*id, name.clone())).collect()
    }
}

#[derive(Default)]
struct Inner {
    local: BTreeMap<TopicId, String>,
    peers: HashMap<NodeId, Peer>,
    /// Topic entries over every peer's parts (bounded by [`MAX_TOTAL_TOPICS`]).
    peer_topics: usize,
    watchers: HashMap<TopicId, Vec<Watcher>>,
    next_token: u64,
}

impl Inner {
    fn notify(&mut self, topic: TopicId, sighting: &Sighting) {
        if let Some(list) = self.watchers.get_mut(&topic) {
            list.retain_mut(|w| w.send(sighting));
        }
    }

    /// The publishers of `topic` now: this node (`me`) if it publishes it, and the peers.
    fn publishers_of(&self, topic: TopicId, me: Present) -> Vec<Present> {
        let local = self.local.contains_key(&topic).then_some(me);
        let peers = self
            .peers
            .iter()
            .filter(|(_, peer)| peer.parts.iter().flatten().any(|(_, id)| *id == topic))
            .map(|(&node, peer)| (node, peer.epoch, peer.addr));
        local.into_iter().chain(peers).collect()
    }

    /// Catches up the watchers whose channel overflowed and has been drained since.
    fn catch_up_watchers(&mut self, me: Present) {
        let lagging: Vec<TopicId> = self
            .watchers
            .iter()
            .filter(|(_, list)| list.iter().any(Watcher::ready_to_catch_up))
            .map(|(&topic, _)| topic)
            .collect();
        for topic in lagging {
            let present = self.publishers_of(topic, me);
            if let Some(list) = self.watchers.get_mut(&topic) {
                list.retain_mut(|w| !w.ready_to_catch_up() || w.catch_up(&present));
            }
        }
    }

    fn notify_all(&mut self, topics: &BTreeMap<TopicId, String>, make: impl Fn() -> Sighting) {
        for id in topics.keys() {
            self.notify(*id, &make());
        }
    }
}

/// What an announcement changed, for the discovery thread.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Applied {
    /// A node (or new epoch) not known before said hello: answer promptly.
    pub(crate) newcomer: bool,
}

/// The node's view of who publishes what: local topics, peers, and the subscriptions
/// watching topics.
pub(crate) struct Directory {
    me: NodeId,
    domain: u16,
    epoch: u64,
    addr: SocketAddr,
    enabled: bool,
    inner: Mutex<Inner>,
    /// The local topics changed since the last announcement.
    dirty: AtomicBool,
    pub(crate) counters: DiscoveryCounters,
}

impl Directory {
    pub(crate) fn new(me: NodeId, domain: u16, epoch: u64, addr: SocketAddr, enabled: bool) -> Directory {
        Directory {
            me,
            domain,
            epoch,
            addr,
            enabled,
            inner: Mutex::new(Inner::default()),
            dirty: AtomicBool::new(true),
            counters: DiscoveryCounters::default(),
        }
    }

    /// Whether discovery runs (subscriptions auto-connect only then).
    pub(crate) fn enabled(&self) -> bool {
        self.enabled
    }

    /// A local publisher of `topic` was created.
    pub(crate) fn publisher_added(&self, topic: &str, id: TopicId) {
        let mut inner = self.inner.lock();
        inner.local.insert(id, topic.to_owned());
        let up = Sighting::Up { node: self.me, epoch: self.epoch, addr: self.addr };
        inner.notify(id, &up);
        self.dirty.store(true, Ordering::Release);
    }

    /// The local publisher of `id` closed.
    pub(crate) fn publisher_removed(&self, id: TopicId) {
        let mut inner = self.inner.lock();
        if inner.local.remove(&id).is_some() {
            let down =
                Sighting::Down { node: self.me, epoch: self.epoch, addr: self.addr, reason: LostReason::Withdrawn };
            inner.notify(id, &down);
            self.dirty.store(true, Ordering::Release);
        }
    }

    /// Registers a watcher of `topic`: it is told at once of every publisher known now, then of
    /// every change. Returns its token (for [`unwatch`](Self::unwatch)) and channel.
    pub(crate) fn watch(&self, topic: TopicId) -> (u64, Receiver<Sighting>) {
        let mut inner = self.inner.lock();
        inner.next_token += 1;
        let (mut watcher, rx) = Watcher::new(inner.next_token);
        for (node, epoch, addr) in inner.publishers_of(topic, self.me()) {
            watcher.send(&Sighting::Up { node, epoch, addr });
        }
        let token = watcher.token;
        inner.watchers.entry(topic).or_default().push(watcher);
        (token, rx)
    }

    /// This node as a publisher.
    fn me(&self) -> Present {
        (self.me, self.epoch, self.addr)
    }

    /// Removes a watcher.
    pub(crate) fn unwatch(&self, topic: TopicId, token: u64) {
        let mut inner = self.inner.lock();
        if let Some(list) = inner.watchers.get_mut(&topic) {
            list.retain(|w| w.token != token);
            if list.is_empty() {
                inner.watchers.remove(&topic);
            }
        }
    }

    /// The peers known now.
    pub(crate) fn peers(&self) -> Vec<PeerInfo> {
        let inner = self.inner.lock();
        let mut out: Vec<PeerInfo> = inner
            .peers
            .iter()
            .map(|(&node, p)| PeerInfo {
                node,
                epoch: p.epoch,
                addr: p.addr,
                topics: p.topics().into_values().collect::<std::collections::BTreeSet<_>>().into_iter().collect(),
            })
            .collect();
        out.sort_by_key(|p| p.node);
        out
    }

    /// Takes the "local topics changed" flag.
    pub(crate) fn take_dirty(&self) -> bool {
        self.dirty.swap(false, Ordering::AcqRel)
    }

    /// The local topics to announce.
    pub(crate) fn local_topics(&self) -> Vec<(String, TopicId)> {
        self.inner.lock().local.iter().map(|(id, name)| (name.clone(), *id)).collect()
    }

    /// Where to send unicast answers: the senders of the peers heard from.
    pub(crate) fn learned(&self) -> Vec<SocketAddrV4> {
        self.inner.lock().peers.values().filter_map(|p| p.from).collect()
    }

    /// Applies one decoded announcement of another node received from `from` (one of another
    /// domain is counted and dropped).
    pub(crate) fn apply(&self, a: Announcement, from: SocketAddr, now: Instant) -> Applied {
        let mut applied = Applied::default();
        if a.domain != self.domain {
            self.counters.other_domain.fetch_add(1, Ordering::Relaxed);
            return applied;
        }
        if a.node_id == self.me {
            if a.epoch != self.epoch {
                tracing::warn!(node = self.me, "another node announces this node's id; ignored");
            }
            return applied;
        }
        self.counters.received.fetch_add(1, Ordering::Relaxed);
        let mut addr = a.connect;
        if addr.ip().is_unspecified() {
            // The node listens on every address: reach it where its datagram came from.
            addr.set_ip(from.ip());
        }
        let from = match from {
            SocketAddr::V4(v4) if v4.port() != 0 => Some(v4),
            _ => None,
        };
        let mut inner = self.inner.lock();
        if let Some(old) = inner.peers.get(&a.node_id) {
            if a.epoch < old.epoch {
                return applied; // a late datagram of a previous incarnation
            }
            if a.epoch > old.epoch {
                self.remove_peer(&mut inner, a.node_id, LostReason::Restarted);
            }
        }
        if a.kind == AnnounceKind::Goodbye {
            self.remove_peer(&mut inner, a.node_id, LostReason::Goodbye);
            return applied;
        }
        // Another node id on the same connect address with an older epoch: that node restarted
        // (without a fixed id) and its old incarnation is gone.
        let replaced: Vec<NodeId> = inner
            .peers
            .iter()
            .filter(|(&id, p)| id != a.node_id && p.addr == addr && p.epoch < a.epoch)
            .map(|(&id, _)| id)
            .collect();
        for id in replaced {
            self.remove_peer(&mut inner, id, LostReason::Restarted);
        }
        let is_new = !inner.peers.contains_key(&a.node_id);
        let Some((count_before, count_after)) = Self::topic_counts_within_bounds(&inner, &a, is_new) else {
            self.counters.refused.fetch_add(1, Ordering::Relaxed);
            return applied;
        };
        applied.newcomer = is_new && a.kind == AnnounceKind::Hello;
        inner.peer_topics = inner.peer_topics - count_before + count_after;
        let peer = inner.peers.entry(a.node_id).or_insert_with(|| Peer {
            epoch: a.epoch,
            addr,
            parts: Vec::new(),
            last_heard: now,
            from,
        });
        peer.last_heard = now;
        peer.from = from.or(peer.from);
        let before = peer.topics();
        let parts = usize::from(a.parts);
        peer.parts.resize_with(parts, Vec::new);
        peer.parts.shrink_to(parts);
        peer.parts[usize::from(a.part)] = a.topics;
        let after = peer.topics();
        let (node, epoch) = (a.node_id, peer.epoch);
        for id in after.keys().filter(|id| !before.contains_key(id)) {
            inner.notify(*id, &Sighting::Up { node, epoch, addr });
        }
        for id in before.keys().filter(|id| !after.contains_key(id)) {
            inner.notify(*id, &Sighting::Down { node, epoch, addr, reason: LostReason::Withdrawn });
        }
        applied
    }

    /// Expires peers silent for longer than `expiry`, and catches up watchers that overflowed;
    /// returns the earliest next expiry.
    pub(crate) fn expire(&self, now: Instant, expiry: Duration) -> Option<Instant> {
        let mut inner = self.inner.lock();
        inner.catch_up_watchers(self.me());
        let dead: Vec<NodeId> =
            inner.peers.iter().filter(|(_, p)| now.duration_since(p.last_heard) > expiry).map(|(&id, _)| id).collect();
        for id in dead {
            tracing::debug!(node = self.me, peer = id, "peer missed its heartbeats");
            self.counters.expired.fetch_add(1, Ordering::Relaxed);
            self.remove_peer(&mut inner, id, LostReason::Silent);
        }
        inner.peers.values().map(|p| p.last_heard + expiry).min()
    }

    /// Datagrams may have been dropped before they were read for the last `deaf` (the socket
    /// was flooded): that much of each peer's silence, up to `now`, does not count against it.
    pub(crate) fn hold_expiry(&self, deaf: Duration, now: Instant) {
        for peer in self.inner.lock().peers.values_mut() {
            peer.last_heard = peer.last_heard.checked_add(deaf).map_or(now, |t| t.min(now));
        }
    }

    /// The peer's topic count before and after applying `a`, if that keeps the directory within
    /// its bounds: a part count, topic names and topic counts (the peer's and everyone's) within
    /// the limits, and room for a new peer.
    fn topic_counts_within_bounds(inner: &Inner, a: &Announcement, is_new: bool) -> Option<(usize, usize)> {
        if usize::from(a.parts) > MAX_PARTS
            || a.topics.len() > MAX_PEER_TOPICS
            || a.topics.iter().any(|(name, _)| super::check_topic(name).is_err())
            || (is_new && inner.peers.len() >= MAX_PEERS)
        {
            return None;
        }
        let (part, parts) = (usize::from(a.part), usize::from(a.parts));
        let (before, after) = match inner.peers.get(&a.node_id) {
            Some(p) => {
                let kept: usize =
                    p.parts.iter().take(parts).enumerate().filter(|&(i, _)| i != part).map(|(_, t)| t.len()).sum();
                (p.topic_count(), kept + a.topics.len())
            }
            None => (0, a.topics.len()),
        };
        (after <= MAX_PEER_TOPICS && inner.peer_topics - before + after <= MAX_TOTAL_TOPICS).then_some((before, after))
    }

    fn remove_peer(&self, inner: &mut Inner, node: NodeId, reason: LostReason) {
        if let Some(peer) = inner.peers.remove(&node) {
            inner.peer_topics -= peer.topic_count();
            // Memory a flood of forged peers made the map take is given back once they are gone.
            if inner.peers.capacity() > 4 * inner.peers.len() + 64 {
                inner.peers.shrink_to_fit();
            }
            let (epoch, addr) = (peer.epoch, peer.addr);
            inner.notify_all(&peer.topics(), || Sighting::Down { node, epoch, addr, reason });
        }
    }
}

/// Splits this node's announcement of `kind` into parts that encode to at most `mtu` bytes.
pub(crate) fn announcement_parts(
    dir: &Directory,
    kind: AnnounceKind,
    topics: &[(String, TopicId)],
    mtu: usize,
) -> Result<Vec<Announcement>, crate::protocol::ProtocolError> {
    Announcement::split(kind, dir.domain, dir.me, dir.epoch, dir.addr, topics, mtu)
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) fn directory() -> Directory {
        Directory::new(1, 0, 1, SocketAddr::from(([127, 0, 0, 1], 9)), true)
    }

    pub(super) fn hello(node_id: NodeId, part: u16, parts: u16, topics: Vec<(String, TopicId)>) -> Announcement {
        Announcement {
            kind: AnnounceKind::Hello,
            domain: 0,
            node_id,
            epoch: 1,
            connect: SocketAddr::from(([127, 0, 0, 1], 1000)),
            part,
            parts,
            topics,
        }
    }

    pub(super) fn topics(prefix: &str, n: usize) -> Vec<(String, TopicId)> {
        (0..n).map(|i| format!("{prefix}-{i}")).map(|t| (t.clone(), TopicId::of(&t))).collect()
    }

    pub(super) fn from() -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], 5000))
    }

    #[test]
    fn each_setter_sets_its_option_and_the_getters_read_them() {
        let (group, interface) = (Ipv4Addr::new(239, 1, 2, 3), Ipv4Addr::new(10, 0, 0, 9));
        let peers: Vec<SocketAddrV4> = vec!["10.0.0.7:7000".parse().unwrap()];
        let secret = Secret::new(vec![5; 16]).unwrap();
        let set = DiscoveryOptions::default()
            .enabled(false)
            .multicast(false)
            .group(group)
            .port(7000)
            .domain(4)
            .interface(interface)
            .peers(peers.clone())
            .heartbeat(Duration::from_millis(30))
            .missed_heartbeats(9)
            .secret(secret.clone());
        let expected = DiscoveryOptions {
            enabled: false,
            multicast: false,
            group,
            port: 7000,
            domain: 4,
            interface: Some(interface),
            peers: peers.clone(),
            heartbeat: Duration::from_millis(30),
            missed_heartbeats: 9,
            secret: Some(secret),
        };
        assert_eq!(set, expected);
        assert_eq!(
            (set.is_enabled(), set.is_multicast(), set.group_addr()),
            (false, false, SocketAddrV4::new(group, 7004))
        );
        assert_eq!((set.peer_list(), set.heartbeat_interval()), (&peers[..], Duration::from_millis(30)));
        let unset = set.interface(None).secret(None);
        assert_eq!((unset.interface, unset.secret), (None, None));
        assert!(!DiscoveryOptions::disabled().is_enabled());
        let unicast = DiscoveryOptions::unicast(peers.clone());
        assert_eq!((unicast.is_multicast(), unicast.port, unicast.peer_list()), (false, 0, &peers[..]));
    }

    /// The public docs (`DiscoveryOptions`, `DiscoveryCounters`) state these numbers, since
    /// the constants are internal.
    #[test]
    fn the_documented_bounds_and_defaults_are_the_constants() {
        assert_eq!((MAX_PEERS, MAX_PARTS, MAX_PEER_TOPICS, MAX_TOTAL_TOPICS), (1024, 256, 8192, 65_536));
        assert_eq!(auth::MAX_CLOCK_SKEW, Duration::from_secs(60));
        assert_eq!((DEFAULT_HEARTBEAT, DEFAULT_MISSED_HEARTBEATS), (Duration::from_millis(200), 5));
    }

    /// `received` counts the announcements of other nodes of this domain, not this node's own
    /// nor another domain's (counted as `other_domain`).
    #[test]
    fn only_other_nodes_of_this_domain_count_as_received() {
        let dir = directory();
        let now = Instant::now();
        let counted = |d: &Directory| {
            (d.counters.received.load(Ordering::Relaxed), d.counters.other_domain.load(Ordering::Relaxed))
        };
        dir.apply(hello(1, 0, 1, topics("mine", 1)), from(), now);
        assert_eq!(counted(&dir), (0, 0), "this node's own announcement");
        dir.apply(Announcement { domain: 3, ..hello(2, 0, 1, topics("far", 1)) }, from(), now);
        assert_eq!(counted(&dir), (0, 1), "another domain's");
        dir.apply(hello(2, 0, 1, topics("near", 1)), from(), now);
        assert_eq!(counted(&dir), (1, 1), "another node of this domain");
    }

    #[test]
    fn floods_of_peers_parts_and_topics_are_refused_and_counted() {
        let dir = directory();
        let now = Instant::now();
        let refused = |d: &Directory| d.counters.refused.load(Ordering::Relaxed);
        dir.apply(hello(2, 0, 1, topics("real", 3)), from(), now);
        assert_eq!(dir.peers().len(), 1);

        // Many node ids: no more than MAX_PEERS are kept; the real peer stays.
        for id in 0..(MAX_PEERS as u64 + 500) {
            dir.apply(hello(1000 + id, 0, 1, topics("t", 1)), from(), now);
        }
        assert_eq!(dir.peers().len(), MAX_PEERS);
        assert_eq!(refused(&dir), 501);
        assert!(dir.peers().iter().any(|p| p.node == 2), "the real peer was pushed out");

        // Part counts past the bound, and invalid topic names, are refused whole.
        let before = refused(&dir);
        dir.apply(hello(2, 0, u16::MAX, topics("real", 3)), from(), now);
        dir.apply(hello(2, 0, 1, vec![("x".repeat(70_000), TopicId(9))]), from(), now);
        assert_eq!(refused(&dir), before + 2);
        assert_eq!(dir.inner.lock().peers[&2].parts.len(), 1);

        // One peer's topics past its bound: refused, its earlier parts stand.
        let before = refused(&dir);
        for part in 0..MAX_PARTS as u16 {
            dir.apply(hello(2, part, MAX_PARTS as u16, topics(&format!("p{part}"), 100)), from(), now);
        }
        let kept = dir.inner.lock().peers[&2].topic_count();
        assert!(kept <= MAX_PEER_TOPICS, "{kept} topics kept");
        assert_eq!(refused(&dir) - before, (MAX_PARTS - MAX_PEER_TOPICS / 100) as u64);

        // Everyone's topics past the total bound: refused.
        let inner_total = dir.inner.lock().peer_topics;
        assert!(inner_total <= MAX_TOTAL_TOPICS);
        let big = MAX_PEER_TOPICS / MAX_PARTS;
        for id in 1000..1000 + (MAX_TOTAL_TOPICS / (big * MAX_PARTS)) as u64 + 2 {
            for part in 0..MAX_PARTS as u16 {
                dir.apply(hello(id, part, MAX_PARTS as u16, topics(&format!("n{id}p{part}"), big)), from(), now);
            }
        }
        let total = dir.inner.lock().peer_topics;
        assert!(total <= MAX_TOTAL_TOPICS, "{total} topics over all peers");
        assert!(total > MAX_TOTAL_TOPICS - big, "{total} topics: announcements were refused before the bound");
        let recount: usize = dir.inner.lock().peers.values().map(Peer::topic_count).sum();
        assert_eq!(recount, total, "the running total matches the peers");
    }

    #[test]
    fn the_secret_file_is_read_when_named_and_a_bad_one_is_an_error_naming_it() {
        assert!(matches!(secret_from_file_named(None), Ok(None)));
        let dir = std::env::temp_dir().join(format!("rdma-pubsub-domain-secret-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (good, short, missing) = (dir.join("good"), dir.join("short"), dir.join("missing"));
        std::fs::write(&good, b"a domain secret of 32 bytes, ok\n").unwrap();
        std::fs::write(&short, b"too short\n").unwrap();
        let secret = secret_from_file_named(Some(good.into_os_string())).unwrap();
        assert_eq!(secret, Some(Secret::new(&b"a domain secret of 32 bytes, ok"[..]).unwrap()));
        for bad in [short, missing] {
            match secret_from_file_named(Some(bad.clone().into_os_string())) {
                Err(crate::Error::InvalidOption { option: SECRET_FILE_ENV, detail }) => {
                    assert!(detail.contains(&bad.display().to_string()), "{detail}")
                }
                other => panic!("{}: {other:?}", bad.display()),
            }
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn peers_leaving_give_their_room_and_memory_back() {
        let dir = directory();
        let now = Instant::now();
        for id in 0..MAX_PEERS as u64 {
            dir.apply(hello(10 + id, 0, 1, topics("t", 2)), from(), now);
        }
        let expiry = Duration::from_secs(1);
        dir.expire(now + 2 * expiry, expiry);
        let inner = dir.inner.lock();
        assert_eq!((inner.peers.len(), inner.peer_topics), (0, 0));
        assert!(inner.peers.capacity() <= 64, "capacity {} kept after every peer left", inner.peers.capacity());
        drop(inner);
        dir.apply(hello(5, 0, 1, topics("again", 1)), from(), now + 3 * expiry);
        assert_eq!(dir.peers().len(), 1, "room again once the flood expired");
    }
}
