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
//!
//! # Discovery (`src/node/discovery/`)
//!
//! Its files: `options.rs` (`DiscoveryOptions`, defaults, the secret file), `counters.rs`,
//! `limits.rs` (the directory's bounds), `sighting.rs` (`Sighting`, `LostReason`), `auth.rs` (the
//! gate and the sealer), `watcher.rs` (the directory's end of a subscription's watch, bounded),
//! `directory.rs` (`Directory`: local topics, peers, watchers), `watch.rs` (a subscription's view:
//! who to connect to, back-off, losses) and `thread.rs` (the discovery thread); `mod.rs` only
//! re-exports.
//!
//! Nodes find each other over UD multicast (`DiscoveryOptions`: group 239.255.77.77, port 7477, the
//! interface of the bind address — loopback for the embedded default —, heartbeat 200 ms, a peer is
//! gone after 5 missed heartbeats), or by unicast to a static list of peer discovery addresses
//! (`DiscoveryOptions::unicast(peers)`) where multicast is unavailable; `disabled()` turns it off.
//!
//! - Announcements (`protocol::Announcement`): Hello at start and whenever local topics change
//!   (answered by the others within a quarter interval so a newcomer learns the domain quickly),
//!   Heartbeat every interval (±10 % jitter), Goodbye twice on clean shutdown. A topic list is split
//!   across as many datagrams as the fabric's UD MTU requires (1024 B on Soft-RoCE). A datagram that
//!   does not decode, has another version or a topic id that does not match its name is counted
//!   (`DiscoveryCounters::bad_datagrams`) and dropped.
//! - The directory (`NodeShared::discovery`) keeps the peers (node id, epoch, connect address,
//!   topics) and, per topic, the subscriptions watching it, each with a channel. A newer epoch of a
//!   known node means it restarted; an older one is ignored.
//! - The directory is bounded whatever arrives on the discovery port: at most `MAX_PEERS` (1,024)
//!   peers, `MAX_PARTS` (256) parts per announcement, `MAX_PEER_TOPICS` (8,192) topics per peer and
//!   `MAX_TOTAL_TOPICS` (65,536) over all peers, topic names as `check_topic` allows (at most 200
//!   bytes). An announcement that would exceed a bound, or names an invalid topic, is dropped whole
//!   and counted (`DiscoveryCounters::refused`); a peer that leaves or expires gives its room back,
//!   and the peer map its memory. So a flood of forged announcements costs at most about 20 MiB
//!   (`hostile::a_discovery_flood_of_ids_parts_and_topics_stays_within_bounded_memory`, asserted
//!   from `/proc/self/status` in a child process; the bounds one by one:
//!   `discovery::directory::tests::floods_of_peers_parts_and_topics_are_refused_and_counted`).
//! - Authentication (`discovery/auth.rs`). Without a domain secret, a node that can send to the
//!   port can claim any node id or epoch: discovery without one is for trusted networks. With one
//!   (`DiscoveryOptions::secret`, `NodeBuilder::domain_secret`, or the file named by
//!   `RDMA_PUBSUB_DOMAIN_SECRET_FILE`; demo `--secret-file`) every datagram is sealed with a
//!   sequence number (per epoch), the sender's clock (ms) and the first 16 bytes of an
//!   HMAC-SHA256 over the whole datagram. A receiver checks the tag before it decodes anything,
//!   then the clock (within `MAX_CLOCK_SKEW`, 60 s) and a replay window per node and epoch (the
//!   highest sequence and a 64-bit bitmap, as IPsec and DTLS keep; kept after the node leaves until
//!   what it sent is stale, at most 2,048 windows), and drops and counts the rest
//!   (`DiscoveryCounters::unauthenticated`, `stale`, `replayed`; a node without the secret counts
//!   sealed datagrams in `sealed_ignored`). A forged Hello with a real publisher's id and a newer
//!   epoch, and replays of a real node's Hello, Heartbeat or Goodbye, change nothing
//!   (`hostile::discovery::a_forged_hello_…`, `…replayed_heartbeats_hellos_and_goodbyes…`).
//!   Protocol version 4.
//! - Floods. The group socket of the soft fabric is bound to the group's address, so unicast to
//!   the port from anywhere never reaches a multicast node (a node hears unicast peers at its own
//!   endpoint, `Node::discovery_addr`). The thread takes up to 64 datagrams per round, then
//!   announces and expires; a round that finds a full batch waiting means the socket may be
//!   dropping datagrams unread (one sender on loopback outpaces a receiver that checks a MAC per
//!   datagram), so the time since the socket was last drained (at most one wait, 20 ms) does not
//!   count against any peer's silence (`backlogged`): a burst holds almost nothing, a sustained
//!   flood cannot expire a live peer (`hostile::discovery::an_unauthenticated_flood_does_not_expire_a_real_peer`, 50 ms
//!   heartbeats × 3), but a peer that dies during a flood is expired only after it. A
//!   subscription's sightings travel on a channel of at most 4,096; one that overflows (a
//!   subscription whose application calls nothing for a while) is caught up from what the
//!   directory holds once drained.
//! - A subscription (`auto_connect`, default on) connects to every publisher of its topic that is
//!   announced, in the background: its `Connector` (`node/subscription/connector.rs`) holds the
//!   watch, and the node's connector thread runs every connector each 20 ms, so the publisher sees
//!   the subscriber before the application calls anything (the subscription's own calls run it too,
//!   at once when discovery has news). The connector opens the queue pair and hands it to the
//!   subscription on its event channel, ahead of the connection's CM events; the subscription posts
//!   its receives when it next runs (a publisher's SEND meanwhile waits on RNR). It retries with
//!   back-off (500 ms to 8 s) while the publisher stays announced. Silence or a restart closes the old connection and
//!   is reported as `SubscriptionEvent::PublisherLost{reason}`; a restarted publisher (new epoch) is
//!   connected again and starts at sequence 1. A reconnection to the same epoch starts at the
//!   earliest retained message and skips what was delivered (dedupe by publisher id, epoch and
//!   sequence; `duplicates` counts the skipped ones), so no message is delivered twice.
//! - Discovery domains (`DiscoveryOptions::domain`, `NodeBuilder::domain`, default 0; `--domain`
//!   in the demo): a node hears only its own domain, so unrelated applications on one network
//!   that use the same topic names stay apart, as ROS 2's domain id keeps them. The domain moves
//!   the UD port to `port + domain` (domains of one host never share a socket port) and is
//!   carried in every announcement; one of another domain that arrives anyway is counted
//!   (`DiscoveryCounters::other_domain`) and dropped
//!   (`discovery::nodes_of_different_domains_never_see_each_other`). Carrying the domain changed
//!   the announcement's layout: protocol version 3.
//!

mod auth;
mod counters;
mod directory;
mod limits;
mod options;
mod sighting;
pub(crate) mod thread;
mod watch;
mod watcher;

pub use counters::DiscoveryCounters;
pub(crate) use directory::Directory;
pub use directory::PeerInfo;
pub use limits::{MAX_PARTS, MAX_PEERS, MAX_PEER_TOPICS, MAX_TOTAL_TOPICS};
pub(crate) use options::secret_from_env;
pub use options::{DiscoveryOptions, DEFAULT_GROUP, DEFAULT_PORT, SECRET_FILE_ENV};
pub use options::{DEFAULT_HEARTBEAT, DEFAULT_MISSED_HEARTBEATS};
pub use sighting::LostReason;
pub(crate) use sighting::Sighting;
pub(crate) use watch::{Lost, Watch};

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::auth::MAX_CLOCK_SKEW;
    use super::*;

    /// The public docs (`DiscoveryOptions`, `DiscoveryCounters`) state these numbers, since
    /// the constants are internal.
    #[test]
    fn the_documented_bounds_and_defaults_are_the_constants() {
        assert_eq!((MAX_PEERS, MAX_PARTS, MAX_PEER_TOPICS, MAX_TOTAL_TOPICS), (1024, 256, 8192, 65_536));
        assert_eq!(MAX_CLOCK_SKEW, Duration::from_secs(60));
        assert_eq!((DEFAULT_HEARTBEAT, DEFAULT_MISSED_HEARTBEATS), (Duration::from_millis(200), 5));
    }
}
