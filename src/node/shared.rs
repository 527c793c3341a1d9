//! What a node's parts share: the fabric objects, the tables the CM and connector threads
//! work from, the discovery directory, the stats registry and the node's counters. Its
//! tables hold the publishers and subscriptions above it as trait objects ([`super::route`],
//! [`BackgroundConnector`]), so this file names no type of the layers that use it.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Weak;
use std::time::Duration;

use parking_lot::Mutex;

use rdma_fabric::{ConnId, ConnectRequest, EventChannel, Fabric, ProtectionDomain};
use rdma_wire::protocol::{RejectCode, RejectData, ReplayGuard, TopicId};

use super::discovery::Directory;
use super::identity::NodeId;
use super::route::{LocalPublisher, Route};
use super::stats_registry::Registry;

/// The longest a node thread or a blocking call waits before it checks again what it waits
/// for and whether the node is stopping (also the period of the CM and connector threads' work).
pub(crate) const RECHECK_INTERVAL: Duration = Duration::from_millis(20);

/// What the node's parts share.
pub(crate) struct NodeShared {
    pub(crate) id: NodeId,
    pub(crate) epoch: u64,
    pub(crate) addr: SocketAddr,
    pub(crate) fabric: Fabric,
    pub(crate) pd: ProtectionDomain,
    pub(crate) channel: EventChannel,
    /// Local publishers by topic, for incoming connect requests.
    pub(crate) publishers: Mutex<HashMap<TopicId, Weak<dyn LocalPublisher>>>,
    /// Where events of each connection go.
    pub(crate) routes: Mutex<HashMap<ConnId, Route>>,
    /// The connectors of the subscriptions that connect by themselves (discovery), run by the
    /// connector thread.
    pub(crate) connectors: Mutex<Vec<Weak<dyn BackgroundConnector>>>,
    pub(crate) stop: AtomicBool,
    pub(crate) counters: NodeCounters,
    /// Publishers and subscriptions whose counters are exported.
    pub(crate) stats: Registry,
    /// Local and discovered publishers, and the subscriptions watching them.
    pub(crate) discovery: Directory,
    /// The nonces of the credential proofs accepted lately (by the CM thread).
    pub(crate) replay: Mutex<ReplayGuard>,
}

impl NodeShared {
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

/// A subscription's connector, as the node's connector thread runs it: it opens the
/// connections discovery makes due, without any call of the application.
pub(crate) trait BackgroundConnector: Send + Sync {
    /// Applies discovery's news and opens the connections due, unless the subscription is
    /// doing so itself right now.
    fn run_in_background(&self, node: &NodeShared);
}

crate::counters::counter_set! {
    /// Counters of a node, readable while it runs.
    pub struct NodeCounters {
        /// Connect requests refused (bad private data, unknown topic, limits).
        rejected_connects: Total, Connections;
    }
}
