//! The connection manager: event channels, listening, connecting, and the events and connect
//! requests a channel delivers.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use super::device::Fabric;
use super::qp::{QpInit, QueuePair};
use crate::cm_event::CmEventOf;
use crate::error::{Error, Result};
use crate::provider::{CmChannelOps, ConnRequestOps, ListenerOps};
use crate::types::{ConnId, MAX_ACCEPT_PRIVATE_DATA, MAX_CONNECT_PRIVATE_DATA, MAX_REJECT_PRIVATE_DATA};

impl Fabric {
    /// Creates a connection-manager event channel.
    ///
    /// # Errors
    /// [`Error::Os`] when the system refuses one (verbs: `rdma_create_event_channel`).
    pub fn create_event_channel(&self) -> Result<EventChannel> {
        Ok(EventChannel { ops: self.ops.create_event_channel()? })
    }
}

/// A connection-manager event channel. Cheap to clone.
#[derive(Clone)]
pub struct EventChannel {
    ops: Arc<dyn CmChannelOps>,
}

impl EventChannel {
    /// Listens on `addr` (port 0 picks one); connect requests arrive on this channel.
    ///
    /// # Errors
    /// [`Error::AddrInUse`] when another listener has `addr`; [`Error::Os`] naming the local
    /// address ([`Error::os_local`]) when it cannot be bound or listened on (not an address of
    /// this host, no permission).
    pub fn listen(&self, addr: SocketAddr, backlog: u32) -> Result<Listener> {
        Ok(Listener { ops: self.ops.listen(addr, backlog)? })
    }
    /// Starts connecting to `addr` with `private_data` (at most 56 bytes). The queue pair is
    /// returned at once; `Established`, `Rejected` or `Unreachable` follows on this channel.
    ///
    /// # Errors
    /// [`Error::PrivateDataTooLong`] over 56 bytes; [`Error::InvalidArgument`] for queue
    /// capacities, SGE counts, `rnr_retry` or READ depths outside the device's limits, or objects
    /// of another provider; [`Error::Os`] naming the peer when the connection cannot be started.
    /// An unreachable peer or a refusal arrives later as an event ([`CmEvent::Unreachable`],
    /// [`CmEvent::Rejected`]).
    pub fn connect(
        &self,
        addr: SocketAddr,
        init: &QpInit<'_>,
        private_data: &[u8],
        timeout: Duration,
    ) -> Result<QueuePair> {
        if private_data.len() > MAX_CONNECT_PRIVATE_DATA {
            return Err(Error::PrivateDataTooLong {
                what: "connect",
                len: private_data.len(),
                max: MAX_CONNECT_PRIVATE_DATA,
            });
        }
        let attributes = init.pd.fabric().attributes().clone();
        let init = init.checked_attr("connect")?;
        Ok(QueuePair::new(self.ops.connect(addr, init, private_data, timeout)?, attributes))
    }
    /// Waits up to `timeout` for the next event.
    ///
    /// # Errors
    /// [`Error::Os`] when reading the event channel fails (verbs: `rdma_get_cm_event`). A
    /// timeout is `Ok(None)`.
    pub fn get_event(&self, timeout: Duration) -> Result<Option<CmEvent>> {
        let event = self.ops.get_event(timeout)?;
        Ok(event.map(|e| e.map_request(|ops| ConnectRequest { ops: Some(ops) })))
    }
}

/// A listening id; dropping it stops listening.
pub struct Listener {
    ops: Box<dyn ListenerOps>,
}

impl Listener {
    /// The bound address.
    pub fn local_addr(&self) -> SocketAddr {
        self.ops.local_addr()
    }
}

/// A connection-manager event, as [`EventChannel::get_event`] delivers it.
pub type CmEvent = CmEventOf<ConnectRequest>;

/// An incoming connect request. Dropping it unanswered rejects it.
pub struct ConnectRequest {
    ops: Option<Box<dyn ConnRequestOps>>,
}

impl std::fmt::Debug for ConnectRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnectRequest").field("conn", &self.conn_id()).field("peer", &self.peer_addr()).finish()
    }
}

impl ConnectRequest {
    fn inner(&self) -> &dyn ConnRequestOps {
        self.ops.as_deref().expect("a ConnectRequest is answered only by consuming it")
    }
    /// The id later events about this connection carry.
    pub fn conn_id(&self) -> ConnId {
        self.inner().conn_id()
    }
    /// The requester's private data.
    pub fn private_data(&self) -> &[u8] {
        self.inner().private_data()
    }
    /// The requester's address.
    pub fn peer_addr(&self) -> SocketAddr {
        self.inner().peer_addr()
    }
    /// Creates the queue pair and accepts with `private_data` (at most 196 bytes).
    ///
    /// # Errors
    /// [`Error::PrivateDataTooLong`] over 196 bytes; [`Error::InvalidArgument`] for a `init`
    /// outside the device's limits or of another provider; [`Error::NotConnected`] when the
    /// requester went away meanwhile; [`Error::Os`] naming the peer when the accept cannot be sent.
    pub fn accept(mut self, init: &QpInit<'_>, private_data: &[u8]) -> Result<QueuePair> {
        if private_data.len() > MAX_ACCEPT_PRIVATE_DATA {
            return Err(Error::PrivateDataTooLong {
                what: "accept",
                len: private_data.len(),
                max: MAX_ACCEPT_PRIVATE_DATA,
            });
        }
        let attributes = init.pd.fabric().attributes().clone();
        let init = init.checked_attr("accept")?;
        let ops = self.ops.take().expect("unanswered");
        Ok(QueuePair::new(ops.accept(init, private_data)?, attributes))
    }
    /// Rejects with `private_data` (at most 148 bytes).
    ///
    /// # Errors
    /// [`Error::PrivateDataTooLong`] over 148 bytes; [`Error::Os`] naming the peer when the
    /// reject cannot be sent.
    pub fn reject(mut self, private_data: &[u8]) -> Result<()> {
        if private_data.len() > MAX_REJECT_PRIVATE_DATA {
            return Err(Error::PrivateDataTooLong {
                what: "reject",
                len: private_data.len(),
                max: MAX_REJECT_PRIVATE_DATA,
            });
        }
        self.ops.take().expect("unanswered").reject(private_data)
    }
}

impl Drop for ConnectRequest {
    fn drop(&mut self) {
        if let Some(ops) = self.ops.take() {
            if let Err(e) = ops.reject(&[]) {
                tracing::debug!("rejecting a dropped connect request failed: {e}");
            }
        }
    }
}
