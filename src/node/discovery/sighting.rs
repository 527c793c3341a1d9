//! What discovery tells a subscription of the publishers of its topics: a [`Sighting`] of one
//! that appeared or went, and why it went ([`LostReason`]).

use std::net::SocketAddr;

use rdma_wire::Topic;

use crate::node::identity::NodeId;

/// Why a publisher is no longer considered present.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LostReason {
    /// Its node said goodbye (clean shutdown).
    Goodbye,
    /// Its node missed too many heartbeats (crash, partition).
    Silent,
    /// Its node came back with a new epoch: the old incarnation is gone.
    Restarted,
    /// Its node no longer announces the topic (the publisher was dropped).
    Withdrawn,
}

/// What a subscription learns about publishers of its topics (one, or those its pattern
/// includes): a publisher is a node and a topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Sighting {
    /// A node publishes the topic.
    Up { node: NodeId, epoch: u64, addr: SocketAddr, topic: Topic },
    /// It no longer does.
    Down { node: NodeId, epoch: u64, addr: SocketAddr, topic: Topic, reason: LostReason },
}

/// A publisher present: its node, epoch, address and topic.
pub(super) type Present = (NodeId, u64, SocketAddr, Topic);
