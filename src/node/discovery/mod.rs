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
