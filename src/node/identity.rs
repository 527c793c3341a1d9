//! Who is who: a node's id and epoch, and the id of a publisher (a node and a topic).

use rdma_wire::protocol::TopicId;

/// Identifies a node (random at start).
pub type NodeId = u64;

/// A new epoch: the wall clock in microseconds (at least 1), so that a restarted node has a
/// larger one.
pub(crate) fn epoch_now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_micros() as u64).unwrap_or(1).max(1)
}

/// The id of the publisher of `topic` on node `node` (stable across restarts of a node with a
/// fixed id).
pub(crate) fn publisher_id(node: NodeId, topic: TopicId) -> u64 {
    node ^ topic.0.rotate_left(29)
}
