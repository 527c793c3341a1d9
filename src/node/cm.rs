//! The node's connection-manager thread: answers connect requests for local publishers,
//! routes every other connection event to the publisher or subscription that owns it, and
//! services the local publishers every `SERVICE_INTERVAL`.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Instant;

use crate::fabric::{CmEvent, ConnId, ConnectionEvent, Error as FabricError, Listener};

use super::discovery::watch::Lost;
use super::subscription::OpenedFeed;
use super::{publisher, NodeShared, Route, RECHECK_INTERVAL};

/// An event delivered to a subscription.
#[derive(Debug)]
pub(crate) enum FeedEvent {
    /// An event of one of its connections (established, rejected, unreachable, gone).
    Connection(ConnectionEvent),
    /// A connection opened for the subscription by its connector (ahead of its CM events).
    Opened(Box<OpenedFeed>),
    /// Discovery says a publisher of the topic is gone.
    PublisherLost(Lost),
    /// The connector could not open a connection discovery made due.
    ConnectFailed { addr: SocketAddr, detail: String },
}

/// The thread body: runs until the node stops, then closes the listener.
pub(crate) fn run(node: Arc<NodeShared>, listener: Listener) {
    let mut next_service = Instant::now() + publisher::SERVICE_INTERVAL;
    while !node.stop.load(Ordering::Acquire) {
        let now = Instant::now();
        if now >= next_service {
            service_publishers(&node);
            next_service = now + publisher::SERVICE_INTERVAL;
        }
        let wait = next_service.saturating_duration_since(now).min(RECHECK_INTERVAL);
        match node.channel.get_event(wait) {
            Ok(Some(event)) => dispatch(&node, event),
            Ok(None) => {}
            Err(FabricError::Closed) => break,
            Err(e) => {
                tracing::warn!(node = node.id, "CM event channel: {e}");
                std::thread::sleep(RECHECK_INTERVAL);
            }
        }
    }
    drop(listener);
}

/// Services every live local publisher (see `PublisherShared::service`), without holding
/// the publisher table while doing so.
fn service_publishers(node: &NodeShared) {
    let live: Vec<Arc<publisher::PublisherShared>> =
        node.publishers.lock().values().filter_map(Weak::upgrade).collect();
    for p in live {
        p.service();
    }
}

fn route(node: &NodeShared, conn: ConnId, remove: bool) -> Option<Route> {
    let mut routes = node.routes.lock();
    if remove {
        routes.remove(&conn)
    } else {
        routes.get(&conn).cloned()
    }
}

fn dispatch(node: &Arc<NodeShared>, event: CmEvent) {
    let event = match event.into_connection_event() {
        Ok(event) => event,
        Err(request) => return publisher::handle_connect_request(node, request),
    };
    let Some(conn) = event.conn() else { return };
    // Only an established connection keeps its route; every other event ends it.
    let established = matches!(event, ConnectionEvent::Established { .. });
    match route(node, conn, !established) {
        Some(Route::Feed(tx)) => {
            let _ = tx.send(FeedEvent::Connection(event));
        }
        Some(Route::Subscriber(p)) => {
            let Some(p) = p.upgrade() else { return };
            match event {
                ConnectionEvent::Established { .. } => p.on_established(conn),
                ConnectionEvent::Disconnected { .. } => p.on_disconnected(conn),
                // A publisher's side of a connection is never refused or unreachable.
                _ => {}
            }
        }
        None if established => tracing::debug!(conn, "established event for an unknown connection"),
        None => {}
    }
}
