//! A hostile node serving a pattern subscription's listing connection: its listing region
//! holds whatever it likes (garbage under a good checksum, a length past its region, a name
//! that is no topic, another node's listing), or its accept advertises a region larger than a
//! listing. The subscription fails that listing with a reason (`ListingFailed`, counted in
//! `listing_failures`), connects to nothing, and never panics nor allocates past 64 KiB. And a
//! hostile subscriber: a listing connection reaches no memory but the listing, and a node
//! serves a bounded number of them.

use super::*;

use std::sync::mpsc;
use std::thread::JoinHandle;

use rdma_pubsub::SubscriptionEvent;
use rdma_wire::protocol::{
    ListedTopic, ListingAccept, RejectCode, RejectData, TopicListing, LISTING_HEADER_LEN, LISTING_REGION_LEN,
};

/// A raw-fabric node that accepts every connect request as a listing connection, with a
/// listing region holding `region` and an accept saying it is `region_len` bytes long, until
/// dropped.
struct ListingForger {
    addr: SocketAddr,
    stop: mpsc::Sender<()>,
    thread: Option<JoinHandle<()>>,
}

impl ListingForger {
    fn start(region: Vec<u8>, region_len: u32) -> ListingForger {
        ListingForger::answering(region, region_len, None)
    }

    /// A forger that refuses every connect with `reject` (reject private data) when given.
    fn answering(region: Vec<u8>, region_len: u32, reject: Option<Vec<u8>>) -> ListingForger {
        let (addr_tx, addr_rx) = mpsc::channel();
        let (stop, stopped) = mpsc::channel::<()>();
        let thread = std::thread::spawn(move || {
            let fabric = fabric::open(&FabricConfig::new(FabricKind::Soft)).expect("forger fabric");
            let pd = fabric.alloc_pd().unwrap();
            let cq = fabric.create_cq(64).unwrap();
            let mr = pd.register(LISTING_REGION_LEN, Access::REMOTE_READ).unwrap();
            mr.buffer().write(0, &region[..region.len().min(LISTING_REGION_LEN)]).unwrap();
            let channel = fabric.create_event_channel().unwrap();
            let listener = channel.listen(SocketAddr::from(([127, 0, 0, 1], 0)), 4).unwrap();
            addr_tx.send(listener.local_addr()).unwrap();
            let accept =
                ListingAccept { node_id: 7, epoch: 1, region: mr.remote(), region_len, tag: None }.encode().unwrap();
            let mut qps = Vec::new();
            let deadline = Instant::now() + 3 * WAIT;
            while stopped.try_recv().is_err() && Instant::now() < deadline {
                if let Ok(Some(CmEvent::ConnectRequest(req))) = channel.get_event(Duration::from_millis(20)) {
                    match &reject {
                        Some(reject) => req.reject(reject).expect("reject"),
                        None => qps.push(req.accept(&QpInit::new(&pd, &cq), &accept).expect("accept")),
                    }
                }
            }
        });
        let addr = addr_rx.recv_timeout(WAIT).expect("the forger listens");
        ListingForger { addr, stop, thread: Some(thread) }
    }
}

impl Drop for ListingForger {
    fn drop(&mut self) {
        let _ = self.stop.send(());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Region bytes whose header and checksum hold over `body` (what a hostile node writes).
fn region_of(generation: u64, body: &[u8]) -> Vec<u8> {
    let mut out = generation.to_le_bytes().to_vec();
    out.extend_from_slice(&(body.len() as u32).to_le_bytes());
    let crc = Checksum::Crc32c.of_pair(&out, body);
    out.extend_from_slice(&crc.to_le_bytes());
    out.extend_from_slice(body);
    out
}

/// A listing of node 7 (the forger's id) holding `names`.
fn listing_of(node_id: u64, names: &[&str]) -> Vec<u8> {
    let topics = names.iter().map(|n| ListedTopic { name: (*n).to_owned(), instance: 1 });
    TopicListing::fitted(node_id, 1, 1, topics).encode_region().unwrap()
}

/// Connects a pattern subscription to a forger serving `region` (advertised `region_len` bytes
/// long): its listing must fail with a detail containing `what`, counted, with nothing
/// connected.
fn assert_listing_fails(region: Vec<u8>, region_len: u32, what: &str) {
    assert_forger_fails(ListingForger::start(region, region_len), what);
}

/// As [`assert_listing_fails`], for `forger`.
fn assert_forger_fails(forger: ListingForger, what: &str) {
    let node = nodes::soft_node_without_discovery();
    let mut sub = node.subscriber("forged/**").connect(forger.addr).create().expect("subscription");
    let deadline = Instant::now() + WAIT;
    let detail = loop {
        assert!(Instant::now() < deadline, "timed out waiting for the listing to fail ({what})");
        match sub.recv_timeout(Duration::from_millis(20)) {
            Ok(None) | Err(Error::NotConnected { .. }) => {}
            other => panic!("a forged listing delivered {other:?}"),
        }
        match sub.try_event() {
            Some(SubscriptionEvent::ListingFailed { addr, detail }) => {
                assert_eq!(addr, forger.addr);
                break detail;
            }
            Some(other) => panic!("a forged listing made {other:?}"),
            None => {}
        }
    };
    assert!(detail.contains(what), "{detail:?} should say {what:?}");
    assert_eq!(sub.counters().listing_failures(), 1);
    assert!(sub.matched_topics().is_empty(), "{:?}", sub.matched_topics());
    assert!(sub.publishers().is_empty());
}

const FULL: u32 = LISTING_REGION_LEN as u32;

#[test]
fn garbage_under_a_good_checksum_fails_the_listing() {
    assert_listing_fails(region_of(1, b"\x05\x08\xff\xff\xff\xff"), FULL, "malformed");
}

#[test]
fn a_listing_claiming_more_topics_than_its_bytes_fails() {
    let mut body = vec![rdma_wire::protocol::PROTOCOL_VERSION, 8, 7, 1, 1, 0];
    body.extend_from_slice(&[0xfc, 0xff, 0xff, 0xff, 0x7f]);
    assert_listing_fails(region_of(1, &body), FULL, "malformed");
}

#[test]
fn a_length_past_the_region_never_validates_and_fails() {
    let mut region = region_of(1, b"");
    region[8..12].copy_from_slice(&(FULL).to_le_bytes());
    assert_listing_fails(region, FULL, "did not validate");
}

#[test]
fn a_listed_name_that_is_no_topic_fails_the_listing() {
    assert_listing_fails(listing_of(7, &["forged/ok", "forged/*"]), FULL, "names no topic");
}

#[test]
fn another_nodes_listing_fails() {
    assert_listing_fails(listing_of(8, &["forged/ok"]), FULL, "is of node");
}

#[test]
fn an_accept_advertising_a_region_larger_than_a_listing_fails() {
    assert_listing_fails(listing_of(7, &["forged/ok"]), FULL + 1, "unusable");
}

#[test]
fn a_header_only_region_with_a_torn_checksum_fails_after_its_retries() {
    let mut region = listing_of(7, &["forged/ok"]);
    region[LISTING_HEADER_LEN] ^= 0xff;
    assert_listing_fails(region, FULL, "did not validate");
}

/// A node of an older version does not know the listing flag: it refuses the connect as
/// malformed (as its decoder does any unknown flag), and the subscription says why.
#[test]
fn a_node_of_an_older_version_refusing_the_listing_flag_is_told_apart() {
    let old_node_detail = "connect private data: malformed: unknown connect flags 0x02";
    let reject = RejectData::new(RejectCode::Malformed, old_node_detail).encode().unwrap();
    let forger = ListingForger::answering(Vec::new(), FULL, Some(reject));
    assert_forger_fails(forger, "older version");
}

/// A listing request, as a pattern subscription sends it.
fn listing_request() -> Vec<u8> {
    ConnectData { flags: ConnectFlags::LISTING, topic: TopicId(0), ..connect_request("unused") }.encode().unwrap()
}

impl Attacker {
    /// Opens a listing connection to `addr`: its queue pair and the node's answer.
    fn list(&self, addr: SocketAddr) -> (QueuePair, CmEvent) {
        let qp =
            self.channel.connect(addr, &QpInit::new(&self.pd, &self.cq), &listing_request(), WAIT).expect("connect");
        loop {
            match self.channel.get_event(WAIT).expect("get_event") {
                Some(event @ (CmEvent::Established { .. } | CmEvent::Rejected { .. }))
                    if event.conn() == Some(qp.conn_id()) =>
                {
                    return (qp, event);
                }
                // Earlier connections of this attacker going away.
                Some(CmEvent::Disconnected { .. }) => {}
                other => panic!("expected the listing's answer, got {other:?}"),
            }
        }
    }

    /// READs `len` bytes at `remote` over `qp`; the completion's status.
    fn read_over(&self, qp: &QueuePair, remote: RemoteAddr, len: usize) -> WcStatus {
        qp.post_send(&SendRequest::new(1, SendOp::RdmaRead(remote), &[self.buf.sge(0, len)])).expect("post READ");
        self.completion().status
    }
}

/// A listing connection reaches the listing and nothing else of the node: a READ of a
/// publisher's ring over it (with the ring's own rkey) is a remote access error.
#[test]
fn a_listing_connection_reaches_no_memory_but_the_listing() {
    let node = nodes::soft_node_without_discovery();
    let _publisher = node.publisher("guarded/ring").ring_capacity(64 * 1024).create().unwrap();
    let attacker = Attacker::new();
    let (_ring_qp, ring) = attacker.subscribe(node.local_addr(), "guarded/ring");
    let (qp, answer) = attacker.list(node.local_addr());
    let CmEvent::Established { private_data, .. } = answer else { panic!("the listing is refused: {answer:?}") };
    let accept = ListingAccept::decode(&private_data).expect("a listing accept");
    assert_eq!(attacker.read_over(&qp, accept.region, accept.region_len as usize), WcStatus::Success);
    let mut read = vec![0u8; accept.region_len as usize];
    attacker.buf.buffer().read(0, &mut read).unwrap();
    let listing = TopicListing::decode_region(&read).expect("the node's listing");
    assert_eq!(listing.topics.iter().map(|t| t.name.as_str()).collect::<Vec<_>>(), ["guarded/ring"]);
    assert_eq!(attacker.read_over(&qp, ring.ring, 64), WcStatus::RemoteAccessError, "the ring is not reachable");
}

/// A node serves at most 256 listing connections at once: past it a listing connect is refused
/// (`TooManySubscribers`, counted), and once they go one is served again.
#[test]
fn a_node_serves_a_bounded_number_of_listing_connections() {
    const MAX_LISTING_CONNECTIONS: usize = 256;
    let node = nodes::soft_node_without_discovery();
    let attacker = Attacker::new();
    let mut held = Vec::new();
    for i in 0..MAX_LISTING_CONNECTIONS {
        match attacker.list(node.local_addr()) {
            (qp, CmEvent::Established { .. }) => held.push(qp),
            (_, other) => panic!("listing connection {i} refused: {other:?}"),
        }
    }
    let (_qp, refused) = attacker.list(node.local_addr());
    let CmEvent::Rejected { private_data, .. } = refused else { panic!("one past the bound: {refused:?}") };
    assert_eq!(RejectData::decode(&private_data).unwrap().reason, RejectCode::TooManySubscribers);
    assert_eq!(node.counters().rejected_connects(), 1);
    drop(held);
    let deadline = Instant::now() + WAIT;
    loop {
        match attacker.list(node.local_addr()) {
            (_qp, CmEvent::Established { .. }) => break,
            (_, CmEvent::Rejected { .. }) => assert!(Instant::now() < deadline, "never served again"),
            (_, other) => panic!("{other:?}"),
        }
    }
}
