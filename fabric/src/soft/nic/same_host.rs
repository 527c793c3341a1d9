//! What the NIC thread tells the same-host streams of its device: whether a connection is
//! open, what a peer's connection is given of a region, and a connection's inbox.

use std::cell::RefCell;
use std::os::fd::OwnedFd;

use crate::provider::ConnId;
use crate::soft::connections::Connections;
use crate::soft::device::{DeviceState, SoftCounters};
use crate::soft::shm::{self, Endpoint, Owner};

/// The device's state and connections, as the same-host streams see them.
pub(super) struct StreamOwner<'a> {
    pub(super) device: &'a DeviceState,
    pub(super) conns: &'a Connections,
    /// Connections whose region request was refused during this event (their timers are
    /// set by the NIC thread afterwards).
    pub(super) refused: RefCell<Vec<ConnId>>,
}

impl Owner for StreamOwner<'_> {
    fn endpoint(&self) -> &Endpoint {
        self.device.shm.as_ref().expect("same-host events come only from a device with an endpoint")
    }
    fn conn_open(&self, conn: ConnId) -> bool {
        self.conns.open.lock().contains_key(&conn)
    }
    /// The region's memory object (read-only unless it and the queue pair grant remote write)
    /// and where it is, if it exists, is in the protection domain of the connection's queue
    /// pair, and it and the queue pair grant remote access.
    fn grant(&self, conn: ConnId, rkey: u32) -> Option<(OwnedFd, shm::Answer)> {
        let c = self.conns.open.lock().get(&conn).cloned()?;
        let (pd, allowed, live) = {
            let mut st = c.st.lock();
            let qp = st.qp.as_ref()?;
            let (pd, allowed) = (qp.pd, qp.remote_access);
            (pd, allowed, c.responder_slot(&mut st)?)
        };
        self.device.regions.grant(rkey, pd, allowed, live)
    }
    fn refused_region(&self, conn: ConnId) {
        self.refused.borrow_mut().push(conn);
    }
    fn refused_peer(&self) {
        SoftCounters::bump(&self.device.counters.refused_same_host_peers);
    }
    fn open_inbox(&self, conn: ConnId) -> Option<([OwnedFd; 5], shm::Answer)> {
        let c = self.conns.open.lock().get(&conn).cloned()?;
        let (fds, live) = c.open_inbox()?;
        Some((fds, shm::Answer { granted: true, conn_slot: live.index, conn_word: live.word, ..Default::default() }))
    }
}
