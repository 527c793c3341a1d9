//! Where the CM thread sends what it hears, without knowing the types above it: the local
//! publishers it answers connect requests for and services, and the owner of each connection
//! it routes events to. Publishers and subscriptions implement these traits; the node holds
//! them as trait objects. None of this is on a per-message path (CM events, connects, the
//! service tick), so a virtual call here costs nothing measurable.

use std::sync::{Arc, Weak};

use rdma_fabric::{ConnId, ConnectRequest, ConnectionEvent};
use rdma_wire::protocol::ConnectData;

/// A publisher of this node, as the CM thread sees it.
pub(crate) trait LocalPublisher: Send + Sync {
    /// Receives reposted and idle subscribers found while the application publishes nothing
    /// (every `SERVICE_INTERVAL`).
    fn service(&self);
    /// Answers a subscriber's connect request for this publisher's topic (`data` decoded from
    /// it): accepts or rejects it.
    fn answer_connect(self: Arc<Self>, req: ConnectRequest, data: &ConnectData);
    /// A subscriber's connection is up.
    fn on_established(&self, conn: ConnId);
    /// A subscriber's connection is gone.
    fn on_disconnected(&self, conn: ConnId);
}

/// Takes the CM events of a subscription's connections.
pub(crate) trait ConnectionEventSink: Send + Sync {
    /// Hands `event` over (dropped when the subscription is gone).
    fn deliver(&self, event: ConnectionEvent);
}

/// The owner of a connection, for routing its CM events.
#[derive(Clone)]
pub(crate) enum Route {
    /// A subscriber connected to a local publisher.
    Subscriber(Weak<dyn LocalPublisher>),
    /// A local subscription's connection to a publisher.
    Feed(Arc<dyn ConnectionEventSink>),
}
