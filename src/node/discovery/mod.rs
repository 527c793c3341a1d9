//! Discovery: nodes find each other's publishers by themselves.
//!
//! Each node runs one discovery thread (`thread.rs`) owning a UD endpoint. It announces the
//! node (id, epoch, connect address, published topics: an `Announcement`) to a multicast group
//! and/or by unicast to a static list of peers: a `Hello` at start and whenever the local topics
//! change, a `Heartbeat` every [`DiscoveryOptions::heartbeat`] (±10 % jitter), a `Goodbye` on
//! clean shutdown. Heard announcements update the node's `Directory` of peers; a peer silent
//! for `heartbeat × missed_heartbeats` is expired.
//!
//! Subscriptions register in the directory by topic (or by pattern: a key expression with
//! wildcards, told of every topic it includes, matched by `KeyExpr::includes` when a topic is
//! announced or withdrawn) and receive `Sighting`s on a channel when a publisher (a node and a
//! topic) of their topic appears or disappears (`watch::Watch` turns them into connects
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
//! # Defaults
//!
//! Multicast group 239.255.77.77, port 7477 (moved to `port + domain`), the interface of the
//! node's bind address (loopback for the embedded default), heartbeat 200 ms, a peer gone after
//! 5 missed heartbeats; or unicast to a static list of peers' discovery endpoints
//! ([`DiscoveryOptions::unicast`], where multicast does not pass); [`DiscoveryOptions::disabled`]
//! turns it off. A newcomer's Hello is answered within a quarter interval, so it learns the
//! domain quickly. A topic list is split across as many datagrams as the fabric's UD MTU
//! requires (1024 B on Soft-RoCE). A datagram that does not decode, has another version or a
//! topic id that does not match its name is counted (`bad_datagrams`) and dropped.
//!
//! # Bounds
//!
//! The directory is bounded whatever arrives on the port: at most [`MAX_PEERS`] (1,024) peers,
//! [`MAX_PARTS`] (256) parts per announcement, [`MAX_PEER_TOPICS`] (8,192) topics per peer and
//! [`MAX_TOTAL_TOPICS`] (65,536) over all peers, topic names as `node/topic.rs` allows (at most
//! 200 bytes). An announcement that would exceed a bound, or names an invalid topic, is
//! dropped whole and counted (`refused`); a peer that leaves or expires gives its room back. A
//! flood of forged announcements so costs at most about 20 MiB. A newer epoch of a known node
//! means it restarted; an older one is ignored. A subscription's sightings travel on a channel
//! of at most 4,096; one that overflows (its application calls nothing for a while, or a
//! pattern matched more publishers at once) is caught up from the directory once drained.
//! Matching costs about 0.3 µs per pattern watch per topic an announcement changes (with
//! 10,000 topics known: 0.38 ms per announcement of a 100-topic part with one pattern watch,
//! 0.44 ms with 100; a new pattern watch tries every topic known, 27 ms for 10,000:
//! `directory::tests::match_cost_per_announcement_with_10_000_topics_known`, ignored, a
//! measurement).
//!
//! # Authentication
//!
//! With a domain secret ([`DiscoveryOptions::secret`], `NodeBuilder::domain_secret`, or the
//! file named by `RDMA_PUBSUB_DOMAIN_SECRET_FILE`) every datagram is sealed with a sequence
//! number (per epoch), the sender's clock (ms) and the first 16 bytes of an HMAC-SHA256 over
//! the whole datagram (`Announcement::seal` in `rdma_wire::protocol`). A receiver checks the
//! tag before it decodes anything, then the clock (within 60 s) and a replay window per node
//! and epoch (the highest sequence and a 64-bit bitmap, as IPsec and DTLS keep; kept after the
//! node leaves until what it sent is stale, at most 2,048 windows), and drops and counts the
//! rest (`unauthenticated`, `stale`, `replayed`; a node without the secret counts sealed
//! datagrams in `sealed_ignored`). Any holder of the secret can still announce any node id.
//!
//! # Floods
//!
//! The soft fabric's group socket is bound to the group's address, so unicast to the port
//! never reaches a multicast node (a node hears unicast peers at its own endpoint,
//! `Node::discovery_addr`). The thread takes up to 64 datagrams per round, then announces and
//! expires; a round that finds a full batch waiting means the socket may be dropping datagrams
//! unread, so the time since the socket was last drained does not count against any peer's
//! silence (`backlogged`): a sustained flood cannot expire a live peer, but a peer that dies
//! during a flood is expired only after it.
//!
//! # Domains
//!
//! A node hears only its own domain ([`DiscoveryOptions::domain`], `NodeBuilder::domain`,
//! default 0), so unrelated applications on one network that use the same topic names stay
//! apart, as ROS 2's domain id keeps them. The domain moves the UD port to `port + domain`
//! (domains of one host never share a socket port) and is carried in every announcement; one
//! of another domain that arrives anyway is counted (`other_domain`) and dropped.
//!
//! # Connecting
//!
//! A subscription (`auto_connect`, default on) connects to every announced publisher of its
//! topic in the background: its `Connector` holds the watch, and the node's connector thread
//! runs every connector each 20 ms (the subscription's own calls run it too). It retries with
//! back-off (500 ms to 8 s) while the publisher stays announced. Silence or a restart closes
//! the old connection and is reported as `PublisherLost{reason}`; a restarted publisher (new
//! epoch) is connected again and starts at sequence 1; a reconnection to the same epoch starts
//! at the earliest retained message and skips what was delivered (`duplicates`).

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
