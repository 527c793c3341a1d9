//! Attacks on discovery: forged and flooded announcements on the group port.

use super::*;

/// Resident memory the discovery flood may add (the directory's bounds allow about 20 MiB).
const FLOOD_RSS_SLACK_KIB: u64 = 96 * 1024;

/// A flood of forged announcements on the discovery port: thousands of node ids, part counts
/// of 65,535, long topic lists. The directory keeps at most `MAX_PEERS` peers and
/// `MAX_TOTAL_TOPICS` topics, refuses (and counts) the rest, and memory stays bounded. Runs
/// alone in a child process: resident memory is process-wide.
#[test]
fn a_discovery_flood_of_ids_parts_and_topics_stays_within_bounded_memory() {
    use rdma_pubsub::node::discovery::{MAX_PEERS, MAX_TOTAL_TOPICS};
    use rdma_pubsub::protocol::{AnnounceKind, Announcement, ANNOUNCE_MTU};
    use rdma_pubsub::DiscoveryOptions;
    use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};

    let path = "discovery::a_discovery_flood_of_ids_parts_and_topics_stays_within_bounded_memory";
    if !isolate::in_child_process(path, Duration::from_secs(120)) {
        return;
    }
    let pid = std::process::id();
    let options = DiscoveryOptions {
        group: Ipv4Addr::new(239, 194, (pid % 251) as u8, 7),
        port: 20000 + (pid % 11_000) as u16,
        // Nothing forged expires while the flood lasts: the bounds, not expiry, must hold it.
        missed_heartbeats: 600,
        ..Default::default()
    };
    let node = rdma_pubsub::Node::builder().fabric(FabricKind::Soft).discovery(options.clone()).build().expect("node");
    let before = resources::Usage::now();
    let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::DGRAM, None).expect("socket");
    sock.bind(&SocketAddr::from((Ipv4Addr::LOCALHOST, 0)).into()).expect("bind");
    sock.set_multicast_if_v4(&Ipv4Addr::LOCALHOST).expect("IP_MULTICAST_IF");
    let sock: UdpSocket = sock.into();
    let to = SocketAddrV4::new(options.group, options.port);
    let connect = SocketAddr::from((Ipv4Addr::LOCALHOST, 1));
    let forged = |node_id: u64, part: u16, parts: u16, topics: usize| {
        let topics = (0..topics)
            .map(|i| format!("{node_id:016x}-{part:03}-{i}-{}", "t".repeat(170)))
            .map(|t| (t.clone(), TopicId::of(&t)))
            .collect();
        let a = Announcement { kind: AnnounceKind::Hello, domain: 0, node_id, epoch: 1, connect, part, parts, topics };
        let bytes = a.encode().expect("encode");
        assert!(bytes.len() <= ANNOUNCE_MTU, "a forged datagram of {} bytes would not be delivered", bytes.len());
        bytes
    };
    let counters = node.discovery_counters();
    let deadline = Instant::now() + Duration::from_secs(60);
    // Until nine in ten of the `sent` datagrams were handled (some may be lost on the way).
    let wait_handled = |sent: u64| {
        while counters.received.load(Ordering::Relaxed) * 10 < sent * 9 {
            assert!(Instant::now() < deadline, "the flood was not handled: {counters:?} of {sent}");
            std::thread::yield_now();
        }
    };
    let mut sent = 0u64;
    let mut send = |datagram: Vec<u8>| {
        sock.send_to(&datagram, to).expect("send");
        sent += 1;
        // Batches small enough for the socket buffer: each is handled before the next is sent.
        if sent % 100 == 0 {
            wait_handled(sent);
        }
    };
    // Peers announcing 256 parts of 4 long topics each, more than the directory keeps in all;
    // node ids claiming 65,535 parts each; more node ids than the directory keeps.
    for peer in 0..80u64 {
        for part in 0..256u16 {
            send(forged(3_000_000 + peer, part, 256, 4));
        }
    }
    for i in 0..3000u64 {
        send(forged(1_000_000 + i, 0, u16::MAX, 1));
    }
    for i in 0..(MAX_PEERS as u64 + 200) {
        send(forged(2_000_000 + i, 0, 1, 1));
    }
    wait_handled(sent);
    let after = resources::Usage::now();
    let peers = node.peers();
    let topics: usize = peers.iter().map(|p| p.topics.len()).sum();
    eprintln!("{sent} forged datagrams: {before:?} -> {after:?}, {} peers, {topics} topics, {counters:?}", peers.len());
    assert!(peers.len() <= MAX_PEERS && topics <= MAX_TOTAL_TOPICS, "{} peers, {topics} topics", peers.len());
    // Up to a tenth of the datagrams may be lost on the way (the loop waits for nine in ten).
    assert!(counters.refused.load(Ordering::Relaxed) >= 2500, "the flood was refused: {counters:?}");
    assert!(topics >= MAX_TOTAL_TOPICS * 9 / 10, "the directory filled up to its bound: {topics} topics");
    assert!(after.rss_kib <= before.rss_kib + FLOOD_RSS_SLACK_KIB, "memory grew: {before:?} -> {after:?}");
}
