//! The connection manager: event channels, listening, connecting, and the events and connect
//! requests a channel delivers.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use super::qp::{QpInit, QpInitFlavor, QueuePair};
use crate::cm_event::CmEventOf;
use crate::error::{Error, Result};
use crate::soft::{SoftChannel, SoftConnRequest, SoftListener};
use crate::types::{ConnId, MAX_ACCEPT_PRIVATE_DATA, MAX_CONNECT_PRIVATE_DATA, MAX_REJECT_PRIVATE_DATA};
#[cfg(feature = "verbs")]
use crate::verbs;

/// A provider's event channel.
#[derive(Clone)]
enum ChannelFlavor {
    /// A soft event channel.
    Soft(Arc<SoftChannel>),
    /// A verbs event channel.
    #[cfg(feature = "verbs")]
    Verbs(Arc<verbs::Channel>),
}

/// A connection-manager event channel. Cheap to clone.
#[derive(Clone)]
pub struct EventChannel {
    flavor: ChannelFlavor,
}

/// The error of `verb` given a [`QpInit`] of another provider than the channel's or request's.
#[cfg(feature = "verbs")]
fn mismatch(verb: &'static str) -> Error {
    Error::ProviderMismatch { verb, object: "protection domain" }
}

impl EventChannel {
    /// Wraps a soft event channel.
    pub(super) fn from_soft(channel: SoftChannel) -> Self {
        EventChannel { flavor: ChannelFlavor::Soft(Arc::new(channel)) }
    }
    /// Wraps a verbs event channel.
    #[cfg(feature = "verbs")]
    pub(super) fn from_verbs(channel: verbs::Channel) -> Self {
        EventChannel { flavor: ChannelFlavor::Verbs(Arc::new(channel)) }
    }
    /// Listens on `addr` (port 0 picks one); connect requests arrive on this channel.
    ///
    /// # Errors
    /// [`Error::AddrInUse`] when another listener has `addr`; [`Error::Os`] naming the local
    /// address ([`Error::os_local`]) when it cannot be bound or listened on (not an address of
    /// this host, no permission).
    pub fn listen(&self, addr: SocketAddr, backlog: u32) -> Result<Listener> {
        let flavor = match &self.flavor {
            ChannelFlavor::Soft(channel) => ListenerFlavor::Soft(channel.listen(addr, backlog)?),
            #[cfg(feature = "verbs")]
            ChannelFlavor::Verbs(channel) => ListenerFlavor::Verbs(channel.listen(addr, backlog)?),
        };
        Ok(Listener { flavor })
    }
    /// Starts connecting to `addr` with `private_data` (at most 56 bytes). The queue pair is
    /// returned at once; `Established`, `Rejected` or `Unreachable` follows on this channel.
    ///
    /// # Errors
    /// [`Error::PrivateDataTooLong`] over 56 bytes; [`Error::InvalidArgument`] for queue
    /// capacities, SGE counts, `rnr_retry` or READ depths outside the device's limits;
    /// [`Error::ProviderMismatch`] or [`Error::DeviceMismatch`] for objects of another provider or
    /// device; [`Error::Os`] naming the peer when the connection cannot be started. An
    /// unreachable peer or a refusal arrives later as an event ([`CmEvent::Unreachable`],
    /// [`CmEvent::Rejected`]).
    pub fn connect(
        &self,
        addr: SocketAddr,
        init: &QpInit<'_>,
        private_data: &[u8],
        timeout: Duration,
    ) -> Result<QueuePair> {
        const VERB: &str = "connect";
        if private_data.len() > MAX_CONNECT_PRIVATE_DATA {
            return Err(Error::PrivateDataTooLong {
                what: VERB,
                len: private_data.len(),
                max: MAX_CONNECT_PRIVATE_DATA,
            });
        }
        let attributes = init.pd.fabric().attributes().clone();
        match (&self.flavor, init.checked_attr(VERB)?) {
            (ChannelFlavor::Soft(channel), QpInitFlavor::Soft(init)) => {
                Ok(QueuePair::from_soft(channel.connect(addr, init, private_data, timeout)?, attributes))
            }
            #[cfg(feature = "verbs")]
            (ChannelFlavor::Verbs(channel), QpInitFlavor::Verbs(init)) => {
                Ok(QueuePair::from_verbs(channel.connect(addr, init, private_data, timeout)?, attributes))
            }
            #[cfg(feature = "verbs")]
            _ => Err(mismatch(VERB)),
        }
    }
    /// Waits up to `timeout` for the next event.
    ///
    /// # Errors
    /// [`Error::Os`] when reading the event channel fails (verbs: `rdma_get_cm_event`). A
    /// timeout is `Ok(None)`.
    pub fn get_event(&self, timeout: Duration) -> Result<Option<CmEvent>> {
        let wrap = |flavor| ConnectRequest { flavor: Some(flavor) };
        Ok(match &self.flavor {
            ChannelFlavor::Soft(channel) => {
                channel.get_event(timeout)?.map(|e| e.map_request(|r| wrap(ConnRequestFlavor::Soft(r))))
            }
            #[cfg(feature = "verbs")]
            ChannelFlavor::Verbs(channel) => {
                channel.get_event(timeout)?.map(|e| e.map_request(|r| wrap(ConnRequestFlavor::Verbs(r))))
            }
        })
    }
}

/// A provider's listening id.
enum ListenerFlavor {
    /// A soft listening socket.
    Soft(SoftListener),
    /// A verbs listening CM id.
    #[cfg(feature = "verbs")]
    Verbs(verbs::Listener),
}

/// A listening id; dropping it stops listening.
pub struct Listener {
    flavor: ListenerFlavor,
}

impl Listener {
    /// The bound address.
    pub fn local_addr(&self) -> SocketAddr {
        dispatch!(ListenerFlavor, &self.flavor, listener => listener.local_addr())
    }
}

/// A connection-manager event, as [`EventChannel::get_event`] delivers it.
pub type CmEvent = CmEventOf<ConnectRequest>;

/// A provider's connect request.
enum ConnRequestFlavor {
    /// A soft connect request.
    Soft(SoftConnRequest),
    /// A verbs connect request.
    #[cfg(feature = "verbs")]
    Verbs(verbs::ConnRequest),
}

/// An incoming connect request. Dropping it unanswered rejects it.
pub struct ConnectRequest {
    /// The provider's request, until it is answered.
    flavor: Option<ConnRequestFlavor>,
}

impl std::fmt::Debug for ConnectRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnectRequest").field("conn", &self.conn_id()).field("peer", &self.peer_addr()).finish()
    }
}

impl ConnectRequest {
    /// The provider's request, not answered yet (answering consumes the handle).
    fn unanswered(&self) -> &ConnRequestFlavor {
        self.flavor.as_ref().expect("a ConnectRequest is answered only by consuming it")
    }
    /// The id later events about this connection carry.
    pub fn conn_id(&self) -> ConnId {
        dispatch!(ConnRequestFlavor, self.unanswered(), request => request.conn_id())
    }
    /// The requester's private data.
    pub fn private_data(&self) -> &[u8] {
        dispatch!(ConnRequestFlavor, self.unanswered(), request => request.private_data())
    }
    /// The requester's address.
    pub fn peer_addr(&self) -> SocketAddr {
        dispatch!(ConnRequestFlavor, self.unanswered(), request => request.peer_addr())
    }
    /// Creates the queue pair and accepts with `private_data` (at most 196 bytes).
    ///
    /// # Errors
    /// [`Error::PrivateDataTooLong`] over 196 bytes; [`Error::InvalidArgument`] for a `init`
    /// outside the device's limits; [`Error::ProviderMismatch`] or [`Error::DeviceMismatch`] for
    /// objects of another provider or device; [`Error::NotConnected`] when the requester went
    /// away meanwhile; [`Error::Os`] naming the peer when the accept cannot be sent.
    pub fn accept(mut self, init: &QpInit<'_>, private_data: &[u8]) -> Result<QueuePair> {
        const VERB: &str = "accept";
        if private_data.len() > MAX_ACCEPT_PRIVATE_DATA {
            return Err(Error::PrivateDataTooLong {
                what: VERB,
                len: private_data.len(),
                max: MAX_ACCEPT_PRIVATE_DATA,
            });
        }
        let attributes = init.pd.fabric().attributes().clone();
        let init = init.checked_attr(VERB)?;
        match (self.flavor.take().expect("unanswered"), init) {
            (ConnRequestFlavor::Soft(request), QpInitFlavor::Soft(init)) => {
                Ok(QueuePair::from_soft(request.accept(init, private_data)?, attributes))
            }
            #[cfg(feature = "verbs")]
            (ConnRequestFlavor::Verbs(request), QpInitFlavor::Verbs(init)) => {
                Ok(QueuePair::from_verbs(request.accept(init, private_data)?, attributes))
            }
            #[cfg(feature = "verbs")]
            (request, _) => {
                // Still unanswered: dropping the handle rejects it.
                self.flavor = Some(request);
                Err(mismatch(VERB))
            }
        }
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
        let request = self.flavor.take().expect("unanswered");
        dispatch!(ConnRequestFlavor, request, request => request.reject(private_data))
    }
}

impl Drop for ConnectRequest {
    fn drop(&mut self) {
        if let Some(request) = self.flavor.take() {
            if let Err(e) = dispatch!(ConnRequestFlavor, request, request => request.reject(&[])) {
                tracing::debug!("rejecting a dropped connect request failed: {e}");
            }
        }
    }
}
