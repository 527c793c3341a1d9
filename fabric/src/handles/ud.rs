//! Unreliable-datagram endpoints: multicast groups and unicast, within the MTU.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::time::Duration;

use super::device::{Fabric, ProtectionDomain};
use crate::error::{Error, Result};
use crate::provider::UdOps;
use crate::types::{Datagram, UdInit};

impl Fabric {
    /// Creates an unreliable-datagram endpoint for multicast.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `recv_depth` is 0 or above the device's `max_qp_wr`, or
    /// `pd` is of another provider; [`Error::MulticastUnavailable`] when the interface cannot
    /// carry multicast; [`Error::Os`] (with the local address, [`Error::os_local`]) when the
    /// sockets or queue pairs cannot be created or bound.
    pub fn create_ud(&self, pd: &ProtectionDomain, init: &UdInit) -> Result<UdEndpoint> {
        if init.recv_depth == 0 || init.recv_depth > self.attributes().max_qp_wr {
            return Err(Error::invalid("create_ud", format!("recv_depth {} is out of range", init.recv_depth)));
        }
        Ok(UdEndpoint { ops: self.ops.create_ud(&pd.ops, init)? })
    }
}

/// An unreliable-datagram endpoint for multicast announcements.
pub struct UdEndpoint {
    ops: Box<dyn UdOps>,
}

impl UdEndpoint {
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
        self.ops.join(group)
    }
    /// Leaves a multicast group.
    ///
    /// # Errors
    /// [`Error::Os`] when the endpoint is not a member of `group` (`EADDRNOTAVAIL`) or the
    /// system refuses.
    pub fn leave(&self, group: Ipv4Addr) -> Result<()> {
        self.ops.leave(group)
    }
    /// Sends `payload` to a group; larger than the MTU is an error.
    ///
    /// # Errors
    /// [`Error::PayloadTooLarge`] above the [`mtu`](Self::mtu); [`Error::InvalidArgument`]
    /// (verbs) before the group is joined; [`Error::Os`] or [`Error::Timeout`] (verbs) when the
    /// datagram cannot be sent.
    pub fn send_to(&self, group: Ipv4Addr, payload: &[u8]) -> Result<()> {
        self.check_mtu(payload)?;
        self.ops.send_to(group, payload)
    }
    /// Sends `payload` to one endpoint by unicast; larger than the MTU is an error.
    ///
    /// # Errors
    /// [`Error::PayloadTooLarge`] above the [`mtu`](Self::mtu); [`Error::Os`] when the
    /// datagram cannot be sent, or (verbs) the peer's address not resolved; [`Error::Timeout`]
    /// (verbs) when resolving or sending takes too long.
    pub fn send_unicast(&self, to: SocketAddrV4, payload: &[u8]) -> Result<()> {
        self.check_mtu(payload)?;
        self.ops.send_unicast(to, payload)
    }
    /// Waits up to `timeout` for a datagram.
    ///
    /// # Errors
    /// [`Error::Os`] when receiving fails; [`Error::Closed`] (verbs) when the endpoint is being
    /// destroyed. A timeout is `Ok(None)`.
    pub fn recv(&self, timeout: Duration) -> Result<Option<Datagram>> {
        self.ops.recv(timeout)
    }
    /// The largest payload.
    pub fn mtu(&self) -> usize {
        self.ops.mtu()
    }
    /// Where unicast reaches this endpoint.
    pub fn local_addr(&self) -> SocketAddr {
        self.ops.local_addr()
    }
    fn check_mtu(&self, payload: &[u8]) -> Result<()> {
        if payload.len() > self.mtu() {
            return Err(Error::PayloadTooLarge { len: payload.len(), mtu: self.mtu() });
        }
        Ok(())
    }
}
