//! What a subscription delivers: a [`Message`] (or a borrowed [`MessageRef`]) and the
//! [`PublisherInfo`] of who published it.

use std::net::SocketAddr;

use crate::reasons::PolicyKind;
use rdma_fabric::DataPath;
use rdma_wire::Topic;

/// Who published a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PublisherInfo {
    /// The publisher's id (stable for a node and topic).
    pub id: u64,
    /// Its node's epoch: a restarted node has a larger one.
    pub epoch: u64,
    /// Its node's address.
    pub addr: SocketAddr,
    /// Its slow-subscriber policy.
    pub policy: PolicyKind,
    /// How this subscription's READs reach the publisher's ring: shared memory when both run
    /// on this host (soft fabric, [`rdma_fabric::SameHost::Auto`]), else the network.
    pub data_path: DataPath,
}

/// A delivered message: its payload `data` (raw bytes, `Vec<u8>`, by default; the decoded
/// value on a typed subscription) and where it came from: its publisher and topic (on a
/// pattern subscription, the topic that matched).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message<D = Vec<u8>> {
    /// Who published it.
    pub publisher: PublisherInfo,
    /// Its topic: a handle shared by every message of its publisher (a reference count, not a
    /// string allocated per message).
    pub topic: Topic,
    /// Its sequence number in that publisher's stream (1, 2, ...; a publisher created again
    /// on its node goes on after its predecessor's last, so (publisher id, epoch, seq) names
    /// one message).
    pub seq: u64,
    /// The payload.
    pub data: D,
}

/// A delivered message borrowed from the subscription's READ buffer (zero copy). Valid until
/// the next call on the subscription.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MessageRef<'a> {
    /// Who published it.
    pub publisher: PublisherInfo,
    /// Its topic, borrowed from the subscription.
    pub topic: &'a Topic,
    /// Its sequence number in that publisher's stream.
    pub seq: u64,
    /// The payload.
    pub data: &'a [u8],
}
