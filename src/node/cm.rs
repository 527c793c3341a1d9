//! The node's connection-manager thread: answers connect requests for local publishers and
//! for the node's topic listing, routes every other connection event to the publisher,
//! subscription or listing connection that owns it, and services the local publishers every
//! `SERVICE_INTERVAL`.

use std::sync::Arc;
use std::time::Instant;

use rdma_fabric::{CmEvent, ConnId, ConnectRequest, ConnectionEvent, Error as FabricError, Listener};
use rdma_wire::protocol::{ConnectData, ConnectFlags, ProtocolError, RejectCode};

use super::publisher::SERVICE_INTERVAL;
use super::shared::{NodeShared, Route, RECHECK_INTERVAL};

/// The thread body: runs until the node stops, then closes the listener.
pub(crate) fn run(node: Arc<NodeShared>, listener: Listener) {
    let mut next_service = Instant::now() + SERVICE_INTERVAL;
    while !node.stopping() {
        let now = Instant::now();
        if now >= next_service {
            service_publishers(&node);
            next_service = now + SERVICE_INTERVAL;
        }
        let wait = next_service.saturating_duration_since(now).min(RECHECK_INTERVAL);
        match node.channel().get_event(wait) {
            Ok(Some(event)) => dispatch(&node, event),
            Ok(None) => {}
            Err(FabricError::Closed) => break,
            Err(e) => {
                tracing::warn!(node = node.id(), "CM event channel: {e}");
                std::thread::sleep(RECHECK_INTERVAL);
            }
        }
    }
    drop(listener);
}

/// Services every live local publisher (see `PublisherShared::service`), without holding
/// the publisher table while doing so.
fn service_publishers(node: &NodeShared) {
    for p in node.live_publishers() {
        p.service();
    }
}

/// The route of `conn`: taken out of the table when the connection ends (`remove`).
fn route(node: &NodeShared, conn: ConnId, remove: bool) -> Option<Route> {
    let mut routes = node.routes();
    if remove {
        routes.remove(&conn)
    } else {
        routes.get(&conn).cloned()
    }
}

/// Hands a CM event to the owner of its connection (a connect request to its topic's publisher).
fn dispatch(node: &Arc<NodeShared>, event: CmEvent) {
    let event = match event.into_connection_event() {
        Ok(event) => event,
        Err(request) => return handle_connect_request(node, request),
    };
    let Some(conn) = event.conn() else { return };
    // Only an established connection keeps its route; every other event ends it.
    let established = matches!(event, ConnectionEvent::Established { .. });
    match route(node, conn, !established) {
        Some(Route::Feed(events)) => events.connection_event(event),
        // The connector is gone when its end of the channel is: nothing to tell.
        Some(Route::Listing(events)) => drop(events.send(event)),
        // Its route was taken out with any event but `Established`: the connection ended.
        Some(Route::ListingServed) if !established => node.listing().disconnected(conn),
        Some(Route::ListingServed) => {}
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

/// Routes a connect request to the local publisher of its topic, or to the topic listing when
/// it asks for that.
fn handle_connect_request(node: &NodeShared, req: ConnectRequest) {
    let data = match ConnectData::decode(req.private_data()) {
        Ok(d) => d,
        Err(e) => {
            let reason = if matches!(e, ProtocolError::VersionMismatch { .. }) {
                RejectCode::VersionMismatch
            } else {
                RejectCode::Malformed
            };
            node.reject_connect(req, reason, &e.to_string());
            return;
        }
    };
    if data.flags.contains(ConnectFlags::LISTING) {
        return node.listing().accept(node, req, &data);
    }
    match node.publisher_of(data.topic) {
        Some(p) => p.accept(req, &data),
        None => node.reject_connect(req, RejectCode::UnknownTopic, "no publisher of that topic on this node"),
    }
}
