//! Accepts that do not prove who answers: a node that took over an address (or any node
//! without the domain secret) accepting with no tag, and a genuine accept replayed to a new
//! connect. A subscriber whose node has a domain secret challenges every publisher and refuses
//! both before it READs anything, with a typed error and a count.

use super::*;

use std::sync::mpsc;
use std::thread::JoinHandle;

use rdma_pubsub::{Secret, SubscriptionEvent};

/// A raw-fabric node that accepts every connect request with the same accept data, whatever
/// the request's challenge, until dropped.
struct Impostor {
    addr: SocketAddr,
    stop: mpsc::Sender<()>,
    thread: Option<JoinHandle<()>>,
}

impl Impostor {
    fn start(accept: Vec<u8>) -> Impostor {
        let (addr_tx, addr_rx) = mpsc::channel();
        let (stop, stopped) = mpsc::channel::<()>();
        let thread = std::thread::spawn(move || {
            let fabric = fabric::open(&FabricConfig::new(FabricKind::Soft)).expect("impostor fabric");
            let pd = fabric.alloc_pd().unwrap();
            let cq = fabric.create_cq(64).unwrap();
            let channel = fabric.create_event_channel().unwrap();
            let listener = channel.listen(SocketAddr::from(([127, 0, 0, 1], 0)), 4).unwrap();
            addr_tx.send(listener.local_addr()).unwrap();
            let mut qps = Vec::new();
            let deadline = Instant::now() + 3 * WAIT;
            while stopped.try_recv().is_err() && Instant::now() < deadline {
                if let Ok(Some(CmEvent::ConnectRequest(req))) = channel.get_event(Duration::from_millis(20)) {
                    qps.push(req.accept(&QpInit::new(&pd, &cq), &accept).expect("accept"));
                }
            }
        });
        let addr = addr_rx.recv_timeout(WAIT).expect("the impostor listens");
        Impostor { addr, stop, thread: Some(thread) }
    }
}

impl Drop for Impostor {
    fn drop(&mut self) {
        let _ = self.stop.send(());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn domain_secret() -> Secret {
    Secret::new(b"accepts-test-domain-secret-32-by".to_vec()).unwrap()
}

fn node_in_domain() -> rdma_pubsub::Node {
    rdma_pubsub::Node::builder()
        .fabric(FabricKind::Soft)
        .discovery(rdma_pubsub::DiscoveryOptions::disabled())
        .domain_secret(domain_secret())
        .build()
        .unwrap()
}

/// Connects a subscription of `topic` on a node of the domain to `addr`: the accept must be
/// refused as unauthenticated, with nothing READ, the refusal counted and an event.
fn assert_refused_as_unauthenticated(topic: &str, addr: SocketAddr, what: &str) {
    let node = node_in_domain();
    let mut sub = node.subscriber(topic).auto_connect(false).create().unwrap();
    match sub.connect_wait(addr, WAIT) {
        Err(Error::Unauthenticated { peer, detail }) => {
            assert_eq!(peer, addr);
            assert!(detail.contains(what), "{detail:?} should say {what:?}");
        }
        other => panic!("expected Error::Unauthenticated, got {other:?}"),
    }
    assert_eq!(sub.counters().unauthenticated_accepts(), 1);
    assert_eq!(sub.counters().reads(), 0, "nothing READ from an unauthenticated publisher");
    let events: Vec<_> = std::iter::from_fn(|| sub.try_event()).collect();
    assert!(
        events.iter().all(|e| !matches!(e, SubscriptionEvent::Connected(_))),
        "no Connected for a refused accept: {events:?}"
    );
}

/// A node without the domain secret (here: one that took over an address) accepts without a
/// tag: refused.
#[test]
fn an_accept_without_the_domain_tag_is_refused_before_any_read() {
    let genuine = node_in_domain();
    let _publisher = genuine.publisher("accepts-untagged").create().unwrap();
    let attacker = Attacker::new();
    let (_qp, accept) = attacker.subscribe(genuine.local_addr(), "accepts-untagged");
    assert_eq!(accept.tags, AcceptTags::default(), "no challenge asked, no tag given");
    let impostor = Impostor::start(accept.encode().unwrap());
    assert_refused_as_unauthenticated("accepts-untagged", impostor.addr, "no tag");
}

/// A genuine accept, tagged for the challenge of an earlier connect, replayed to a new one:
/// refused (each connect's challenge is fresh).
#[test]
fn a_genuine_accept_replayed_to_another_connect_is_refused() {
    let genuine = node_in_domain();
    let _publisher = genuine.publisher("accepts-replayed").create().unwrap();
    let mut attacker = Attacker::new();
    attacker.challenge = Some(0x0123_4567_89ab_cdef);
    let (_qp, accept) = attacker.subscribe(genuine.local_addr(), "accepts-replayed");
    assert!(accept.tags.node.is_some(), "the genuine publisher answers a challenge");
    assert_eq!(accept.check_tags(Some(0x0123_4567_89ab_cdef), Some(&domain_secret()), None, None), Ok(()));
    let impostor = Impostor::start(accept.encode().unwrap());
    assert_refused_as_unauthenticated("accepts-replayed", impostor.addr, "does not verify");
}

/// The genuine publisher of the domain is believed: the subscription connects and receives.
#[test]
fn nodes_of_one_domain_authenticate_each_others_accepts() {
    let (a, b) = (node_in_domain(), node_in_domain());
    let publisher = a.publisher("accepts-genuine").create().unwrap();
    let mut sub = b.subscriber("accepts-genuine").start(Start::Earliest).auto_connect(false).create().unwrap();
    sub.connect_wait(a.local_addr(), WAIT).expect("a genuine accept is believed");
    publisher.publish(&payload(1)).unwrap();
    expect_messages(&mut sub, 1, 1);
    assert_eq!(sub.counters().unauthenticated_accepts(), 0);
}
