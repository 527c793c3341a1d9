//! Unreliable-datagram endpoints: multicast groups and unicast, within the MTU.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::time::Duration;

use crate::error::{Error, Result};
use crate::soft::SoftUd;
use crate::types::Datagram;
#[cfg(feature = "verbs")]
use crate::verbs;

/// A provider's UD endpoint (boxed: the handle stays small).
enum UdFlavor {
    /// A soft endpoint (UDP sockets).
    Soft(Box<SoftUd>),
    /// A verbs endpoint (UD queue pairs).
    #[cfg(feature = "verbs")]
    Verbs(Box<verbs::UdEndpoint>),
}

/// An unreliable-datagram endpoint for multicast announcements.
pub struct UdEndpoint {
    flavor: UdFlavor,
}

impl UdEndpoint {
    /// Wraps a soft endpoint.
    pub(super) fn from_soft(endpoint: SoftUd) -> Self {
        UdEndpoint { flavor: UdFlavor::Soft(Box::new(endpoint)) }
    }
    /// Wraps a verbs endpoint.
    #[cfg(feature = "verbs")]
    pub(super) fn from_verbs(endpoint: verbs::UdEndpoint) -> Self {
        UdEndpoint { flavor: UdFlavor::Verbs(Box::new(endpoint)) }
    }
    /// Joins a multicast group.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `group` is not a multicast address;
    /// [`Error::MulticastUnavailable`] when the interface cannot join it; [`Error::Os`] for other
    /// failures of the system.
    pub fn join(&self, group: Ipv4Addr) -> Result<()> {
        if !group.is_multicast() {
            return Err(Error::invalid("join multicast", format!("{group} is not a multicast address")));
        }
        dispatch!(UdFlavor, &self.flavor, endpoint => endpoint.join(group))
    }
    /// Leaves a multicast group.
    ///
    /// # Errors
    /// [`Error::Os`] when the endpoint is not a member of `group` (`EADDRNOTAVAIL`) or the
    /// system refuses.
    pub fn leave(&self, group: Ipv4Addr) -> Result<()> {
        dispatch!(UdFlavor, &self.flavor, endpoint => endpoint.leave(group))
    }
    /// Sends `payload` to a group; larger than the MTU is an error.
    ///
    /// # Errors
    /// [`Error::PayloadTooLarge`] above the [`mtu`](Self::mtu); [`Error::InvalidArgument`]
    /// (verbs) before the group is joined; [`Error::Os`] or [`Error::Timeout`] (verbs) when the
    /// datagram cannot be sent.
    pub fn send_to(&self, group: Ipv4Addr, payload: &[u8]) -> Result<()> {
        self.check_mtu(payload)?;
        dispatch!(UdFlavor, &self.flavor, endpoint => endpoint.send_to(group, payload))
    }
    /// Sends `payload` to one endpoint by unicast; larger than the MTU is an error.
    ///
    /// # Errors
    /// [`Error::PayloadTooLarge`] above the [`mtu`](Self::mtu); [`Error::Os`] when the
    /// datagram cannot be sent, or (verbs) the peer's address not resolved; [`Error::Timeout`]
    /// (verbs) when resolving or sending takes too long.
    pub fn send_unicast(&self, to: SocketAddrV4, payload: &[u8]) -> Result<()> {
        self.check_mtu(payload)?;
        dispatch!(UdFlavor, &self.flavor, endpoint => endpoint.send_unicast(to, payload))
    }
    /// Waits up to `timeout` for a datagram.
    ///
    /// # Errors
    /// [`Error::Os`] when receiving fails; [`Error::Closed`] (verbs) when the endpoint is being
    /// destroyed. A timeout is `Ok(None)`.
    pub fn recv(&self, timeout: Duration) -> Result<Option<Datagram>> {
        dispatch!(UdFlavor, &self.flavor, endpoint => endpoint.recv(timeout))
    }
    /// The largest payload.
    pub fn mtu(&self) -> usize {
        dispatch!(UdFlavor, &self.flavor, endpoint => endpoint.mtu())
    }
    /// Where unicast reaches this endpoint.
    pub fn local_addr(&self) -> SocketAddr {
        dispatch!(UdFlavor, &self.flavor, endpoint => endpoint.local_addr())
    }
    fn check_mtu(&self, payload: &[u8]) -> Result<()> {
        if payload.len() > self.mtu() {
            return Err(Error::PayloadTooLarge { len: payload.len(), mtu: self.mtu() });
        }
        Ok(())
    }
}
