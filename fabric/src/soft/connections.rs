//! The open connections and listening sockets of a device, by id: where the NIC thread finds
//! the connection or listener an event is for, and where the connection manager and the fault
//! injector find theirs. Queue pairs connected by hand are found by number too, and arrive at
//! the device's data port.

use std::collections::HashMap;
use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;

use parking_lot::Mutex;

use super::conn::{Conn, NicCmEvent};
use super::events::EventQueue;
use crate::provider::ConnId;

/// A listening socket and the channel its requests go to.
pub(crate) struct ListenerEntry {
    pub(crate) sock: std::net::TcpListener,
    pub(crate) channel: Arc<EventQueue<NicCmEvent>>,
}

/// The device's data port: where the peers of queue pairs connected by hand dial their
/// streams (made with the first such queue pair).
pub(crate) struct DataPort {
    pub(crate) sock: TcpListener,
    pub(crate) addr: SocketAddr,
}

/// The open connections and listening sockets of a device.
#[derive(Default)]
pub(crate) struct Connections {
    /// Open connections, by id (a connection's poll token).
    pub(crate) open: Mutex<HashMap<ConnId, Arc<Conn>>>,
    /// Listening sockets, by id (their poll token is the id with `LISTENER_BIT` set).
    pub(crate) listeners: Mutex<HashMap<u64, Arc<ListenerEntry>>>,
    /// The connections of queue pairs connected by hand, by queue pair number (from their
    /// creation until their connection is removed).
    pub(crate) by_hand: Mutex<HashMap<u32, ConnId>>,
    /// The data port, once made.
    pub(crate) data_port: Mutex<Option<Arc<DataPort>>>,
}

impl Connections {
    /// The open connection of the queue pair connected by hand numbered `qp_num`.
    pub(crate) fn by_qp_num(&self, qp_num: u32) -> Option<Arc<Conn>> {
        let id = self.by_hand.lock().get(&qp_num).copied()?;
        self.open.lock().get(&id).cloned()
    }
}
