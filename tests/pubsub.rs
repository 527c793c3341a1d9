//! End-to-end publish/subscribe on the soft fabric over loopback: delivery guarantees of each
//! slow-subscriber policy, late joins, several publishers, stream end, fragmentation, rejects.
//!
//! Every wait is bounded; payloads are a deterministic function of (sequence, size) so a
//! subscriber checks each byte without the publisher keeping copies.
//!
//! The same tests run on the verbs provider inside the Soft-RoCE guest
//! (`scripts/verbs-vm-tests.sh`): `RDMA_PUBSUB_TEST_FABRIC=verbs` selects it, `RXE_IP` the
//! address to bind, and `RDMA_PUBSUB_TEST_SCALE=N` divides the message counts of the bulk tests
//! (the guest is emulated and about 100 times slower).
//!
//! On soft, `RDMA_PUBSUB_TEST_SAME_HOST=off` turns the same-host path off (`scripts/test.sh`
//! runs this file both ways): with it on (the default), every subscriber reads its
//! publisher's ring through shared memory.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use rdma_pubsub::fabric::{self, CmEvent, DataPath, FabricConfig, FabricKind, QpInit, SameHost};
use rdma_pubsub::{
    Checksum, DropReason, Error, LossReason, Message, Node, Policy, RejectCode, Start, SubscriptionEvent,
};
use rdma_wire::protocol::{ConnectData, ConnectFlags, PolicySet, RejectData, StartAt, TopicId, PROTOCOL_VERSION};

const WAIT: Duration = Duration::from_secs(30);

/// The provider under test: soft unless `RDMA_PUBSUB_TEST_FABRIC` says otherwise.
fn fabric_kind() -> FabricKind {
    std::env::var("RDMA_PUBSUB_TEST_FABRIC").ok().and_then(|v| v.parse().ok()).unwrap_or(FabricKind::Soft)
}

/// Divides the message counts of the bulk tests (1 on soft).
fn scale(count: u64) -> u64 {
    let divisor = std::env::var("RDMA_PUBSUB_TEST_SCALE").ok().and_then(|v| v.parse::<u64>().ok()).unwrap_or(1);
    (count / divisor.max(1)).max(1)
}

fn bind_addr() -> SocketAddr {
    let ip = match fabric_kind() {
        FabricKind::Verbs => std::env::var("RXE_IP").unwrap_or_else(|_| "10.0.2.15".into()),
        _ => "127.0.0.1".into(),
    };
    SocketAddr::new(ip.parse().expect("RXE_IP is an IP address"), 0)
}

#[path = "common/nodes.rs"]
mod nodes;
#[path = "../fabric/tests/common/unused_addr.rs"]
mod unused_addr;

use nodes::same_host_under_test as same_host;

/// How a subscriber of this process reads a publisher of this process.
fn expected_data_path() -> DataPath {
    match (fabric_kind(), same_host()) {
        (FabricKind::Soft, SameHost::Auto) => DataPath::SharedMemory,
        _ => DataPath::Network,
    }
}

/// A node builder for the provider, address and same-host setting under test.
fn builder() -> rdma_pubsub::NodeBuilder {
    Node::builder().fabric(fabric_kind()).bind(bind_addr()).same_host(same_host())
}

fn node() -> Node {
    builder().build().expect("node")
}

/// xorshift64*: the payload and size generator.
fn mix(mut x: u64) -> u64 {
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    x.wrapping_mul(0x2545_f491_4f6c_dd1d)
}

/// The payload of message `seq` with `len` bytes.
fn payload(seq: u64, len: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(len + 8);
    let mut x = mix(seq.wrapping_add(0x9e37_79b9_7f4a_7c15));
    while v.len() < len {
        x = mix(x);
        v.extend_from_slice(&x.to_le_bytes());
    }
    v.truncate(len);
    v
}

/// Checks a delivered message against what its sequence implies.
fn check(m: &Message, size_of: impl Fn(u64) -> usize) {
    let len = size_of(m.seq);
    assert_eq!(m.data.len(), len, "length of message {}", m.seq);
    assert!(m.data == payload(m.seq, len), "content of message {}", m.seq);
}

/// The mixed size distribution: most under 1 KiB, some up to 64 KiB, a few of 4 MiB.
fn mixed_size(seq: u64) -> usize {
    let r = mix(seq ^ 0x5151);
    if seq % 25_000 == 7 {
        4 << 20
    } else if r % 1000 < 11 {
        1024 + (r >> 20) as usize % (63 * 1024)
    } else {
        (r >> 32) as usize % 1024
    }
}

fn recv_until(sub: &mut rdma_pubsub::Subscription, deadline: Instant) -> Message {
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(!left.is_zero(), "timed out waiting for a message");
        if let Some(m) = sub.recv_timeout(left).expect("recv") {
            return m;
        }
    }
}

fn subscribe(sub_node: &Node, topic: &str, start: Start, addr: SocketAddr) -> rdma_pubsub::Subscription {
    let mut sub = sub_node.subscriber(topic).start(start).create().expect("subscription");
    sub.connect_wait(addr, WAIT).expect("connected");
    sub
}

fn wait_subscribers<T: ?Sized + rdma_pubsub::MessageType>(p: &rdma_pubsub::Publisher<T>, n: usize) {
    p.wait_for_subscribers(n, WAIT).expect("subscribers did not arrive");
}

/// A node of the fabric under test without discovery: only explicit connects reach publishers.
fn node_without_discovery() -> Node {
    builder().discovery(rdma_pubsub::DiscoveryOptions::disabled()).build().expect("node")
}

#[path = "pubsub/api.rs"]
mod api;
#[path = "pubsub/connect_data.rs"]
mod connect_data;
#[path = "pubsub/exclusive.rs"]
mod exclusive;
#[path = "pubsub/outcomes.rs"]
mod outcomes;
#[path = "pubsub/policies.rs"]
mod policies;
#[path = "pubsub/streams.rs"]
mod streams;
