//! Attacks on discovery: forged and flooded announcements on the group port, and replays of
//! captured ones, against nodes with and without a domain secret.

use super::*;

use std::net::{Ipv4Addr, UdpSocket};

use rdma_pubsub::node::discovery::DiscoveryCounters;
use rdma_pubsub::{DiscoveryOptions, Node, PeerInfo};
use rdma_wire::protocol::{AnnounceKind, Announcement, Secret, ANNOUNCE_TAG_LEN, SEALED_HEADER_LEN};

/// The domain secret of the tests' nodes.
fn secret() -> Secret {
    Secret::new(&b"hostile-discovery test domain secret"[..]).expect("a valid secret")
}

/// The multicast group and port of test number `index` (distinct per test and per process),
/// with the domain secret.
fn sealed_domain(index: u8) -> DiscoveryOptions {
    let pid = std::process::id();
    DiscoveryOptions::default()
        .group(Ipv4Addr::new(239, 195, (pid % 251) as u8, index))
        .port(20000 + ((pid % 700) as u16 * 16 + u16::from(index)) % 12000)
        .secret(secret())
}

fn discovering_node(options: &DiscoveryOptions) -> Node {
    rdma_pubsub::Node::builder().fabric(FabricKind::Soft).discovery(options.clone()).build().expect("node")
}

/// A node with the fixed id `id` (a restart of it is the same node with a new epoch).
fn node_with_id(options: &DiscoveryOptions, id: u64) -> Node {
    let builder = rdma_pubsub::Node::builder().fabric(FabricKind::Soft).node_id(id);
    builder.discovery(options.clone()).build().expect("node")
}

/// What `node` knows of the node `id`, waiting up to [`WAIT`] for it to be known.
fn wait_for_peer(node: &Node, id: u64) -> PeerInfo {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(p) = node.peers().into_iter().find(|p| p.node == id) {
            return p;
        }
        assert!(Instant::now() < deadline, "node {id:x} was never discovered: {:?}", node.discovery_counters());
        std::thread::yield_now();
    }
}

/// Waits up to [`WAIT`] for `counter` of `counters` to reach `at_least`.
fn wait_count(counters: &DiscoveryCounters, what: &str, at_least: u64, counter: impl Fn(&DiscoveryCounters) -> u64) {
    let deadline = Instant::now() + WAIT;
    while counter(counters) < at_least {
        assert!(Instant::now() < deadline, "{what} did not reach {at_least}: {counters:?}");
        std::thread::yield_now();
    }
}

/// A socket on loopback sending to the group through loopback, as an attacker on the host.
fn attacker_socket() -> UdpSocket {
    let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::DGRAM, None).expect("socket");
    sock.bind(&SocketAddr::from((Ipv4Addr::LOCALHOST, 0)).into()).expect("bind");
    sock.set_multicast_if_v4(&Ipv4Addr::LOCALHOST).expect("IP_MULTICAST_IF");
    sock.into()
}

/// A member socket of the test's group, as an attacker listening to learn ids and epochs.
fn eavesdropper(options: &DiscoveryOptions) -> UdpSocket {
    let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::DGRAM, None).expect("socket");
    sock.set_reuse_address(true).expect("SO_REUSEADDR");
    sock.set_reuse_port(true).expect("SO_REUSEPORT");
    sock.bind(&SocketAddr::from(options.group_addr()).into()).expect("bind the group");
    sock.join_multicast_v4(options.group_addr().ip(), &Ipv4Addr::LOCALHOST).expect("join");
    sock.set_read_timeout(Some(WAIT)).expect("SO_RCVTIMEO");
    sock.into()
}

/// The next sealed datagram of `node` heard by `ear` that `keep` wants, with the announcement
/// inside (read without the secret: sealing authenticates, it does not hide).
fn capture(ear: &UdpSocket, node: u64, keep: impl Fn(&Announcement) -> bool) -> (Vec<u8>, Announcement) {
    let mut buf = vec![0u8; 2048];
    let deadline = Instant::now() + WAIT;
    loop {
        assert!(Instant::now() < deadline, "no datagram of node {node:x} was heard");
        let (n, _) = ear.recv_from(&mut buf).expect("a datagram on the group");
        let bytes = buf[..n].to_vec();
        if !Announcement::is_sealed(&bytes) {
            continue;
        }
        let inner = &bytes[SEALED_HEADER_LEN..n - ANNOUNCE_TAG_LEN];
        if let Ok(a) = Announcement::decode(inner) {
            if a.node_id == node && keep(&a) {
                return (bytes, a);
            }
        }
    }
}

/// Resident memory the discovery flood may add (the directory's bounds allow about 20 MiB).
const FLOOD_RSS_SLACK_KIB: u64 = 96 * 1024;

/// A flood of forged announcements on the discovery port: thousands of node ids, part counts
/// of 65,535, long topic lists. The directory keeps at most `MAX_PEERS` peers and
/// `MAX_TOTAL_TOPICS` topics, refuses (and counts) the rest, and memory stays bounded. Runs
/// alone in a child process: resident memory is process-wide.
#[test]
fn a_discovery_flood_of_ids_parts_and_topics_stays_within_bounded_memory() {
    use rdma_pubsub::node::discovery::{MAX_PEERS, MAX_TOTAL_TOPICS};
    use rdma_pubsub::DiscoveryOptions;
    use rdma_wire::protocol::{AnnounceKind, Announcement, ANNOUNCE_MTU};
    use std::net::{Ipv4Addr, UdpSocket};

    let path = "discovery::a_discovery_flood_of_ids_parts_and_topics_stays_within_bounded_memory";
    if !isolate::in_child_process(path, Duration::from_secs(120)) {
        return;
    }
    let pid = std::process::id();
    let options = DiscoveryOptions::default()
        .group(Ipv4Addr::new(239, 194, (pid % 251) as u8, 7))
        .port(20000 + (pid % 11_000) as u16)
        // Nothing forged expires while the flood lasts: the bounds, not expiry, must hold it.
        .missed_heartbeats(600);
    let node = rdma_pubsub::Node::builder().fabric(FabricKind::Soft).discovery(options.clone()).build().expect("node");
    let before = resources::Usage::now();
    let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::DGRAM, None).expect("socket");
    sock.bind(&SocketAddr::from((Ipv4Addr::LOCALHOST, 0)).into()).expect("bind");
    sock.set_multicast_if_v4(&Ipv4Addr::LOCALHOST).expect("IP_MULTICAST_IF");
    let sock: UdpSocket = sock.into();
    let to = options.group_addr();
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
        while counters.received() * 10 < sent * 9 {
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
    assert!(counters.refused() >= 2500, "the flood was refused: {counters:?}");
    assert!(topics >= MAX_TOTAL_TOPICS * 9 / 10, "the directory filled up to its bound: {topics} topics");
    assert!(after.rss_kib <= before.rss_kib + FLOOD_RSS_SLACK_KIB, "memory grew: {before:?} -> {after:?}");
}

/// The attack of the issue, with a domain secret: an attacker listens on the group, learns a
/// real publisher's node id and epoch, and announces that node with a newer epoch and its own
/// address (plain, sealed with another secret, and as a captured datagram whose announcement
/// it replaced). Without a secret, subscribers took that for a restart: they dropped the real
/// publisher within milliseconds and connected to the forger. With one, every forgery is
/// dropped and counted, and the subscriber keeps receiving from the real publisher.
#[test]
fn a_forged_hello_with_a_real_publishers_id_and_a_newer_epoch_is_dropped_and_counted() {
    let options = sealed_domain(4);
    let ear = eavesdropper(&options);
    let pub_node = discovering_node(&options);
    let publisher = pub_node.publisher("guarded").ring_capacity(64 * 1024).create().expect("publisher");
    let sub_node = discovering_node(&options);
    let mut sub = sub_node.subscriber("guarded").start(Start::Earliest).create().expect("subscribe");
    for seq in 1..=10 {
        publisher.publish(&payload(seq)).expect("publish");
    }
    // Receiving drives the subscription: it connects by discovery.
    expect_messages(&mut sub, 1, 10);

    // What the attacker learned by listening.
    let (captured, heard) = capture(&ear, pub_node.id(), |a| !a.topics.is_empty());
    assert_eq!((heard.node_id, heard.epoch), (pub_node.id(), pub_node.epoch()));
    let forger = std::net::TcpListener::bind("127.0.0.1:0").expect("the forger's address");
    forger.set_nonblocking(true).expect("O_NONBLOCK");
    let forged = Announcement {
        kind: AnnounceKind::Hello,
        epoch: heard.epoch + 1,
        connect: forger.local_addr().expect("address"),
        ..heard
    };
    let mut replaced = captured[..SEALED_HEADER_LEN].to_vec();
    replaced.extend_from_slice(&forged.encode().expect("encode"));
    replaced.extend_from_slice(&captured[captured.len() - ANNOUNCE_TAG_LEN..]);
    let other_secret = Secret::new(vec![7; 32]).expect("secret");
    let forgeries = [forged.encode().expect("encode"), forged.seal(&other_secret, 1, 0).expect("seal"), replaced];
    let sock = attacker_socket();
    for f in &forgeries {
        sock.send_to(f, options.group_addr()).expect("send the forgery");
    }
    let counters = sub_node.discovery_counters();
    wait_count(counters, "unauthenticated datagrams", forgeries.len() as u64, |c| c.unauthenticated());

    // The subscriber still receives from the real publisher, which its node still knows.
    for seq in 11..=20 {
        publisher.publish(&payload(seq)).expect("publish");
    }
    expect_messages(&mut sub, 11, 20);
    let known = sub_node.peers().into_iter().find(|p| p.node == pub_node.id()).expect("the publisher's node");
    assert_eq!((known.epoch, known.addr), (pub_node.epoch(), pub_node.local_addr()), "{known:?}");
    while let Some(event) = sub.try_event() {
        assert!(!matches!(event, rdma_pubsub::SubscriptionEvent::PublisherLost { .. }), "{event:?}");
    }
    assert!(forger.accept().is_err(), "the subscriber connected to the forger");
}

/// Captured datagrams of a real node sent again: its hello and heartbeat while it runs, the
/// same after it said goodbye (which would bring back a node that is gone), and its goodbye
/// after it restarted with the same id (which would evict the new incarnation). Each is
/// refused by the replay window of its node and epoch and counted, and the directory keeps
/// exactly what the real node said.
#[test]
fn replayed_heartbeats_hellos_and_goodbyes_of_a_real_node_are_dropped_and_counted() {
    let options = sealed_domain(5);
    let ear = eavesdropper(&options);
    let victim = discovering_node(&options);
    let counters = victim.discovery_counters();
    let replayed = |c: &DiscoveryCounters| c.replayed();
    let id = rand::random::<u64>() | 1;
    let sock = attacker_socket();
    let replay = |datagrams: &[&Vec<u8>], expected: u64| {
        for d in datagrams {
            sock.send_to(d, options.group_addr()).expect("replay");
        }
        wait_count(counters, "replayed datagrams", expected, replayed);
    };

    let first = node_with_id(&options, id);
    assert_eq!(wait_for_peer(&victim, id).epoch, first.epoch());
    let (hello, _) = capture(&ear, id, |a| a.kind == AnnounceKind::Hello);
    let (heartbeat, _) = capture(&ear, id, |a| a.kind == AnnounceKind::Heartbeat);
    replay(&[&hello, &heartbeat], 2);
    assert_eq!(victim.peers().iter().map(|p| (p.node, p.epoch)).collect::<Vec<_>>(), vec![(id, first.epoch())]);

    let first_epoch = first.epoch();
    drop(first);
    let (goodbye, _) = capture(&ear, id, |a| a.kind == AnnounceKind::Goodbye);
    let deadline = Instant::now() + WAIT;
    while !victim.peers().is_empty() {
        assert!(Instant::now() < deadline, "the goodbye was not heard: {:?}", victim.peers());
        std::thread::yield_now();
    }
    replay(&[&hello, &heartbeat], 4);
    assert!(victim.peers().is_empty(), "a replay brought back a node that left: {:?}", victim.peers());

    let second = node_with_id(&options, id);
    assert_eq!(wait_for_peer(&victim, id).epoch, second.epoch());
    assert!(second.epoch() > first_epoch);
    let (second_heartbeat, _) = capture(&ear, id, |a| a.kind == AnnounceKind::Heartbeat && a.epoch == second.epoch());
    replay(&[&goodbye, &second_heartbeat], 6);
    assert_eq!(victim.peers().iter().map(|p| (p.node, p.epoch)).collect::<Vec<_>>(), vec![(id, second.epoch())]);
    assert_eq!(counters.unauthenticated(), 0, "every replay carried a valid tag");
}

/// How long the unauthenticated flood lasts.
const FLOOD: Duration = Duration::from_secs(3);

/// Datagrams that carry no valid tag, cycling through the cheap and the costly to refuse:
/// garbage, plain announcements claiming `victim_of`'s id, and datagrams that look sealed
/// (right version and kind, full MTU) with a tag made up.
fn unauthenticated_datagrams(claimed: &Announcement) -> Vec<Vec<u8>> {
    let plain = Announcement { epoch: claimed.epoch + 1, ..claimed.clone() }.encode().expect("encode");
    let mut forged_seal = claimed.seal(&Secret::new(vec![0x5a; 32]).expect("secret"), 1, 0).expect("seal");
    forged_seal.resize(1024 - ANNOUNCE_TAG_LEN, 0);
    forged_seal.extend_from_slice(&[0xa5; ANNOUNCE_TAG_LEN]);
    let garbage: Vec<u8> = (0..700u32).map(|i| (i * 7919 % 251) as u8).collect();
    vec![garbage, plain, forged_seal]
}

/// A flood of unauthenticated datagrams, sent as fast as one thread can for [`FLOOD`], at a node
/// whose only peer heartbeats every 50 ms and is gone after 5 missed (250 ms: 150 ms expired
/// the peer once in a full `scripts/test.sh` run on 2 busy vCPUs, a scheduling gap rather than the
/// flood; the flood lasts twelve times longer). One sender on
/// loopback outpaces a receiver that checks a MAC per datagram, so the socket drops datagrams,
/// heartbeats among them; the node sees that it is flooded (full batches waiting) and does not
/// count the silence against its peer: the real peer is never expired, during the flood or
/// after it.
#[test]
fn an_unauthenticated_flood_does_not_expire_a_real_peer() {
    let options = sealed_domain(3).heartbeat(Duration::from_millis(50)).missed_heartbeats(5);
    let victim = discovering_node(&options);
    let real = discovering_node(&options);
    let known = wait_for_peer(&victim, real.id());
    let counters = victim.discovery_counters();
    let claimed = Announcement {
        kind: AnnounceKind::Heartbeat,
        domain: 0,
        node_id: real.id(),
        epoch: real.epoch(),
        connect: real.local_addr(),
        part: 0,
        parts: 1,
        topics: Vec::new(),
    };
    let datagrams = unauthenticated_datagrams(&claimed);
    let sock = attacker_socket();
    let to = options.group_addr();
    let (start, mut sent) = (Instant::now(), 0u64);
    while start.elapsed() < FLOOD {
        for d in &datagrams {
            if sock.send_to(d, to).is_ok() {
                sent += 1;
            }
        }
    }
    eprintln!("{sent} datagrams in {FLOOD:?}: {counters:?}");
    assert!(counters.unauthenticated() >= 10_000, "the flood reached the node: {counters:?}");
    assert!(counters.backlogged() > 0, "the flood filled the node's batches: {counters:?}");
    // Past the flood, for longer than the peer's allowance (6 heartbeats heard: 300 ms).
    let heard = counters.received();
    wait_count(counters, "heartbeats after the flood", heard + 6, |c| c.received());
    assert_eq!(counters.expired(), 0, "the real peer expired: {counters:?}");
    assert_eq!(victim.peers(), vec![PeerInfo { topics: Vec::new(), ..known }], "the real peer, as it announced itself");
}

/// An attacker replays a node's genuine announcements a few seconds after the node left, with
/// the node's address taken over. A node that starts afterwards never heard the node, so no
/// replay window protects it: the first datagram of a sender must be fresh within
/// `FIRST_SIGHT_SKEW` (3 s), so these are refused as stale, counted, and nothing connects to
/// the taken-over address.
#[test]
fn announcements_replayed_after_their_node_left_do_not_misdirect_a_new_subscriber() {
    let options = sealed_domain(6);
    let taken_over = std::net::TcpListener::bind("127.0.0.1:0").expect("the taken-over address");
    taken_over.set_nonblocking(true).expect("O_NONBLOCK");
    let gone = Announcement {
        kind: AnnounceKind::Heartbeat,
        domain: 0,
        node_id: rand::random::<u64>() | 1,
        epoch: 1,
        connect: taken_over.local_addr().expect("address"),
        part: 0,
        parts: 1,
        topics: vec![("replayed".into(), rdma_wire::protocol::TopicId::of("replayed"))],
    };
    // What the node sent about 6 s ago, sealed with the domain secret as it sealed it then.
    let sent_6s_ago =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64 - 6_000;
    let captured: Vec<Vec<u8>> =
        (1..=16).map(|seq| gone.seal(&secret(), seq, sent_6s_ago + seq * 10).expect("seal")).collect();

    let sub_node = discovering_node(&options);
    let mut sub = sub_node.subscriber("replayed").create().expect("subscription");
    let sock = attacker_socket();
    for d in &captured {
        sock.send_to(d, options.group_addr()).expect("replay");
    }
    let counters = sub_node.discovery_counters();
    wait_count(counters, "stale datagrams", captured.len() as u64, |c| c.stale());
    assert!(sub_node.peers().iter().all(|p| p.node != gone.node_id), "the replayed node was listed");
    let nothing = sub.try_recv();
    assert!(matches!(nothing, Err(Error::NotConnected { discovery: true, .. })), "nothing to receive: {nothing:?}");
    assert!(taken_over.accept().is_err(), "the subscriber connected to the taken-over address");
}
