//! How a node discovers its peers ([`DiscoveryOptions`]), the defaults, and where the domain
//! secret comes from when the application gives none ([`SECRET_FILE_ENV`]).

use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::Duration;

use rdma_wire::protocol::Secret;

/// The environment variable naming a file that holds the domain secret, read by
/// [`crate::NodeBuilder::build`] when no secret is given (see [`DiscoveryOptions::secret`]).
pub const SECRET_FILE_ENV: &str = "RDMA_PUBSUB_DOMAIN_SECRET_FILE";

/// Default multicast group of announcements (organisation-local scope).
pub const DEFAULT_GROUP: Ipv4Addr = Ipv4Addr::new(239, 255, 77, 77);
/// Default UD port of announcements (soft: the UDP port; verbs: folded into the Q_Key).
pub const DEFAULT_PORT: u16 = 7477;
/// Default heartbeat interval.
pub const DEFAULT_HEARTBEAT: Duration = Duration::from_millis(200);
/// Default number of missed heartbeats after which a silent peer is considered gone.
pub const DEFAULT_MISSED_HEARTBEATS: u32 = 5;

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
    /// [`DiscoveryCounters::other_domain`](super::DiscoveryCounters::other_domain) and dropped) and moves the UD port to `port + domain`.
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
    /// seen before (counted in [`DiscoveryCounters::unauthenticated`](super::DiscoveryCounters::unauthenticated),
    /// [`stale`](super::DiscoveryCounters::stale) and [`replayed`](super::DiscoveryCounters::replayed)).
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
        detail: format!("reading the domain secret: {e}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
