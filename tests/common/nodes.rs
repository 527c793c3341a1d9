//! Nodes for tests that connect explicitly and expect a cut connection to end a subscription
//! (with discovery, a live publisher would be reconnected by itself).

use rdma_pubsub::node::discovery::DiscoveryOptions;
use rdma_pubsub::{FabricKind, Node};

/// A soft node on loopback without discovery.
pub fn soft_node_without_discovery() -> Node {
    Node::builder().fabric(FabricKind::Soft).discovery(DiscoveryOptions::disabled()).build().expect("node")
}
