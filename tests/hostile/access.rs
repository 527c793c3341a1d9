//! Attacks on topic access: subscribers without (or with a wrong) credential, replayed and
//! stale connect requests. A publisher with a credential rejects them with
//! `RejectCode::Unauthorized` before they learn anything of its ring, and counts them.

use super::*;

use rdma_pubsub::fabric::CmEvent as Cm;
use rdma_pubsub::stats::Kind;
use rdma_wire::protocol::{RejectCode, RejectData, Secret, MAX_CLOCK_SKEW};

fn credential() -> Secret {
    Secret::new(&b"the access tests' topic secret, 32+ bytes"[..]).unwrap()
}

fn credentialed_publisher(node: &rdma_pubsub::Node, topic: &str) -> Publisher {
    node.publisher(topic).credential(credential()).ring_capacity(64 * 1024).create().unwrap()
}

/// A subscription to `topic` from its earliest message, proving `credential` when given.
fn subscription(node: &rdma_pubsub::Node, topic: &str, credential: Option<Secret>) -> Subscription {
    let builder = node.subscriber(topic).start(Start::Earliest);
    match credential {
        Some(secret) => builder.credential(secret),
        None => builder,
    }
    .create()
    .unwrap()
}

fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64
}

/// A connect request for `topic`, proven with `secret` at `time` with `nonce` when given.
fn connect_data(topic: &str, proof: Option<(&Secret, u64, u64)>) -> Vec<u8> {
    let data = connect_request(topic);
    let data = match proof {
        Some((secret, nonce, time)) => data.with_proof(secret, nonce, time).unwrap(),
        None => data,
    };
    data.encode().unwrap()
}

/// What the publisher's node answered a raw connect request with.
enum Answer {
    /// Accepted: the connection and the accept data (the ring's address and rkey).
    Accepted(QueuePair, AcceptData),
    /// Rejected, with the reject private data (which must not be accept data).
    Rejected(RejectData),
}

/// Sends `private_data` as a connect request from the attacker and waits for the answer.
fn connect_raw(attacker: &Attacker, addr: SocketAddr, private_data: &[u8]) -> Answer {
    let qp = attacker.channel.connect(addr, &QpInit::new(&attacker.pd, &attacker.cq), private_data, WAIT).unwrap();
    let deadline = Instant::now() + WAIT;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(!left.is_zero(), "no answer to the connect request within {WAIT:?}");
        match attacker.channel.get_event(left).expect("get_event") {
            Some(Cm::Established { conn, private_data }) if conn == qp.conn_id() => {
                return Answer::Accepted(qp, AcceptData::decode(&private_data).expect("accept data"));
            }
            Some(Cm::Rejected { conn, private_data, .. }) if conn == qp.conn_id() => {
                assert!(AcceptData::decode(&private_data).is_err(), "a reject carries no accept data");
                return Answer::Rejected(RejectData::decode(&private_data).expect("reject data"));
            }
            // Earlier connections of this attacker going away.
            Some(Cm::Disconnected { conn }) if conn != qp.conn_id() => {}
            None => {}
            other => panic!("expected an answer to the connect, got {other:?}"),
        }
    }
}

/// Asserts that `answer` is an Unauthorized rejection whose detail contains `why`.
fn assert_unauthorized(answer: Answer, why: &str) {
    match answer {
        Answer::Rejected(r) => {
            assert_eq!(r.reason, RejectCode::Unauthorized, "{why}: {r:?}");
            assert!(r.detail.contains(why), "the detail names the reason ({why}): {:?}", r.detail);
        }
        Answer::Accepted(_, a) => panic!("{why}: accepted, and the ring's rkey {:#x} went out", a.ring.rkey),
    }
}

#[test]
fn subscribers_without_or_with_a_wrong_credential_are_rejected_counted_and_exported() {
    let pub_node = nodes::soft_node_without_discovery();
    let publisher = credentialed_publisher(&pub_node, "credentialed");
    let sub_node = nodes::soft_node_without_discovery();
    let subscribe = |credential: Option<Secret>| subscription(&sub_node, "credentialed", credential);
    let wrong = Secret::new(&b"another secret of at least 16 bytes"[..]).unwrap();
    for (who, credential, why) in [("no credential", None, "no proof"), ("a wrong one", Some(wrong), "does not verify")]
    {
        let mut sub = subscribe(credential);
        match sub.connect_wait(pub_node.local_addr(), WAIT) {
            Err(Error::Rejected { reason: rdma_pubsub::RejectCode::Unauthorized, detail, .. }) => {
                assert!(detail.contains(why), "{who}: the detail names the reason: {detail:?}")
            }
            other => panic!("{who}: expected Rejected(Unauthorized), got {other:?}"),
        }
        assert!(sub.publishers().is_empty(), "{who}: no publisher connected");
    }
    let mut good = subscribe(Some(credential()));
    good.connect_wait(pub_node.local_addr(), WAIT).unwrap();
    for seq in 1..=5 {
        publisher.publish(&payload(seq)).unwrap();
    }
    expect_messages(&mut good, 1, 5);

    let counters = publisher.counters();
    assert_eq!(counters.rejected_unauthorized(), 2);
    assert_eq!(counters.accepted(), 1);
    assert_eq!(pub_node.counters().rejected_connects(), 2);
    // Exported: the stats file's publisher line (what `pubsub-demo stat` shows) carries it.
    let snapshot = pub_node.stats();
    let section = snapshot.of_kind(Kind::Publisher).find(|s| s.topic.as_deref() == Some("credentialed")).unwrap();
    assert_eq!(section.get("rejected_unauthorized"), 2);
    assert!(snapshot.render().contains(" rejected_unauthorized=2 "), "{}", snapshot.render());
}

/// Credentials are mutual: a publisher without one serves subscribers without one, and a
/// subscriber with one refuses a publisher that cannot prove it holds it (anyone could publish
/// on the topic otherwise), before it READs anything.
#[test]
fn a_publisher_without_a_credential_serves_open_subscribers_and_credentialed_ones_refuse_it() {
    let pub_node = nodes::soft_node_without_discovery();
    let publisher = pub_node.publisher("open").create().unwrap();
    let sub_node = nodes::soft_node_without_discovery();
    let mut sub = subscription(&sub_node, "open", None);
    sub.connect_wait(pub_node.local_addr(), WAIT).unwrap();
    let seq = publisher.publish(&payload(publisher.next_seq())).unwrap();
    expect_messages(&mut sub, 1, seq);

    let mut guarded = subscription(&sub_node, "open", Some(credential()));
    match guarded.connect_wait(pub_node.local_addr(), WAIT) {
        Err(Error::Unauthenticated { peer, detail }) => {
            assert_eq!(peer, pub_node.local_addr());
            assert!(detail.contains("credential"), "{detail}");
        }
        other => panic!("expected Error::Unauthenticated, got {other:?}"),
    }
    assert_eq!(guarded.counters().reads(), 0);
    assert_eq!(guarded.counters().unauthenticated_accepts(), 1);
    assert_eq!(publisher.counters().rejected_unauthorized(), 0);
}

#[test]
fn replayed_stale_and_forged_connect_requests_are_rejected_and_never_get_the_ring() {
    let pub_node = nodes::soft_node_without_discovery();
    let publisher = credentialed_publisher(&pub_node, "guarded-ring");
    let addr = pub_node.local_addr();
    let attacker = Attacker::new();
    let secret = credential();

    // A legitimate subscriber's request, as captured on the wire by the attacker: the first use
    // (the subscriber's own) is accepted.
    let captured = connect_data("guarded-ring", Some((&secret, 0x5eed_5eed, now_ms())));
    let Answer::Accepted(_qp, accept) = connect_raw(&attacker, addr, &captured) else {
        panic!("the legitimate request was refused");
    };
    assert_eq!(accept.topic, TopicId::of("guarded-ring"));
    wait_subscribers(&publisher, 1);

    // The same bytes again (same nonce): a replay.
    assert_unauthorized(connect_raw(&attacker, addr, &captured), "replayed");
    // A fresh nonce but a time outside the skew allowance, either way.
    let skew_ms = MAX_CLOCK_SKEW.as_millis() as u64;
    for time in [now_ms() - 2 * skew_ms, now_ms() + 2 * skew_ms] {
        assert_unauthorized(
            connect_raw(&attacker, addr, &connect_data("guarded-ring", Some((&secret, 7, time)))),
            "off",
        );
    }
    // No proof, a proof made with another secret, and the captured proof moved to another
    // subscriber's request.
    assert_unauthorized(connect_raw(&attacker, addr, &connect_data("guarded-ring", None)), "no proof");
    let guessed = Secret::new(&b"a guessed secret, 16 bytes or more"[..]).unwrap();
    let forged = connect_data("guarded-ring", Some((&guessed, 8, now_ms())));
    assert_unauthorized(connect_raw(&attacker, addr, &forged), "does not verify");
    let mut moved = ConnectData::decode(&captured).unwrap();
    moved.node_id ^= 1;
    assert_unauthorized(connect_raw(&attacker, addr, &moved.encode().unwrap()), "does not verify");

    // Counted, and none of them became a subscriber.
    assert_eq!(publisher.counters().rejected_unauthorized(), 6);
    assert_eq!(publisher.counters().accepted(), 1);
    assert_eq!(publisher.subscriber_count(), 1);
}

#[test]
fn a_holder_of_one_topics_credential_cannot_fill_the_nonce_set_of_another_topic() {
    let pub_node = nodes::soft_node_without_discovery();
    let addr = pub_node.local_addr();
    let alpha = Secret::new(&b"topic alpha's credential, 16+ bytes"[..]).unwrap();
    let bravo = Secret::new(&b"topic bravo's credential, 16+ bytes"[..]).unwrap();
    // Alpha takes one subscriber: every further valid proof is refused for another reason.
    let alpha_pub = pub_node
        .publisher("alpha")
        .credential(alpha.clone())
        .max_subscribers(1)
        .ring_capacity(64 << 10)
        .create()
        .unwrap();
    let bravo_pub = pub_node.publisher("bravo").credential(bravo.clone()).ring_capacity(64 << 10).create().unwrap();
    // The holder of alpha's credential sends more valid proofs, each with a fresh nonce, than
    // a node-wide set of nonces could hold (4,096): none of them may cost bravo anything.
    let attacker = Attacker::new();
    let mut held = Vec::new();
    let (mut accepted, mut refused) = (0, 0);
    for nonce in 0..4_200u64 {
        match connect_raw(&attacker, addr, &connect_data("alpha", Some((&alpha, nonce, now_ms())))) {
            Answer::Accepted(qp, _) => {
                accepted += 1;
                held.push(qp);
            }
            Answer::Rejected(r) => {
                refused += 1;
                assert!(matches!(r.reason, RejectCode::TooManySubscribers | RejectCode::Unauthorized), "{r:?}");
            }
        }
    }
    assert_eq!((accepted, accepted + refused), (1, 4_200), "alpha takes one subscriber");
    // Bravo's legitimate subscriber is accepted and served.
    let sub_node = nodes::soft_node_without_discovery();
    let mut sub = subscription(&sub_node, "bravo", Some(bravo));
    sub.connect_wait(addr, WAIT).expect("bravo's subscriber is accepted after the flood of alpha's proofs");
    let seq = bravo_pub.publish(&payload(1)).unwrap();
    expect_messages(&mut sub, 1, seq);
    assert_eq!(bravo_pub.counters().rejected_unauthorized(), 0);
    assert_eq!(alpha_pub.counters().accepted(), 1);
}
