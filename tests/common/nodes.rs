//! Nodes for tests that connect explicitly and expect a cut connection to end a subscription
//! (with discovery, a live publisher would be reconnected by itself).

use std::net::{Ipv4Addr, SocketAddr};

use rdma_pubsub::fabric::SameHost;
use rdma_pubsub::node::discovery::DiscoveryOptions;
use rdma_pubsub::{FabricKind, Node};

/// The same-host setting under test: auto unless `RDMA_PUBSUB_TEST_SAME_HOST` says otherwise
/// (`scripts/test.sh` runs the end-to-end suites both ways).
#[allow(dead_code)]
pub fn same_host_under_test() -> SameHost {
    std::env::var("RDMA_PUBSUB_TEST_SAME_HOST").ok().and_then(|v| v.parse().ok()).unwrap_or(SameHost::Auto)
}

/// A soft node on loopback without discovery, with the same-host setting under test.
#[allow(dead_code)]
pub fn soft_node_without_discovery() -> Node {
    soft_node_with(same_host_under_test())
}

/// A soft node on loopback without discovery, with the same-host path as given.
#[allow(dead_code)]
pub fn soft_node_with(same_host: SameHost) -> Node {
    Node::builder()
        .fabric(FabricKind::Soft)
        .same_host(same_host)
        .discovery(DiscoveryOptions::disabled())
        .build()
        .expect("node")
}

/// The provider under test: soft unless `RDMA_PUBSUB_TEST_FABRIC` says otherwise (the
/// Soft-RoCE guest of `scripts/verbs-vm-tests.sh` sets it to verbs).
#[allow(dead_code)]
pub fn fabric_kind() -> FabricKind {
    std::env::var("RDMA_PUBSUB_TEST_FABRIC").ok().and_then(|v| v.parse().ok()).unwrap_or(FabricKind::Soft)
}

/// Loopback on soft; the rxe device's address (`RXE_IP`) on verbs.
#[allow(dead_code)]
pub fn bind_addr() -> SocketAddr {
    let ip = match fabric_kind() {
        FabricKind::Verbs => std::env::var("RXE_IP").unwrap_or_else(|_| "10.0.2.15".into()),
        _ => "127.0.0.1".into(),
    };
    SocketAddr::new(ip.parse().expect("RXE_IP is an IP address"), 0)
}

/// A discovery domain of its own for test number `index` of a suite: a multicast group
/// `239.<suite_octet>.<pid>.<index + 1>` and a port from `port_base`, `stride` ports apart per
/// process, so that the tests of a suite, suites, and processes running at once do not hear
/// each other.
#[allow(dead_code)]
pub fn test_domain(suite_octet: u8, port_base: u16, stride: u16, index: u16) -> DiscoveryOptions {
    let pid = std::process::id();
    let port = port_base + ((pid % 700) as u16 * stride + index) % 12000;
    let group = Ipv4Addr::new(239, suite_octet, (pid % 251) as u8, index as u8 + 1);
    DiscoveryOptions::default().group(group).port(port)
}
