//! The open connections and listening sockets of a device, by id: where the NIC thread finds
//! the connection or listener an event is for, and where the connection manager and the fault
//! injector find theirs.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;

use super::conn::{Conn, NicCmEvent};
use super::events::EventQueue;
use crate::fabric::provider::ConnId;

/// A listening socket and the channel its requests go to.
pub(crate) struct ListenerEntry {
    pub(crate) sock: std::net::TcpListener,
    pub(crate) channel: Arc<EventQueue<NicCmEvent>>,
}

/// The open connections and listening sockets of a device.
#[derive(Default)]
pub(crate) struct Connections {
    /// Open connections, by id (a connection's poll token).
    pub(crate) open: Mutex<HashMap<ConnId, Arc<Conn>>>,
    /// Listening sockets, by id (their poll token is the id with `LISTENER_BIT` set).
    pub(crate) listeners: Mutex<HashMap<u64, Arc<ListenerEntry>>>,
}
