//! Attacks on the node's fairness: control-slot starvation, silent subscribers, huge records.

#[allow(unused_imports)]
use super::*;

/// Reads `sub` until the stream ends (bounded by [`WAIT`]); returns its events.
fn read_to_the_end(sub: &mut Subscription) -> Vec<rdma_pubsub::SubscriptionEvent> {
    let deadline = Instant::now() + WAIT;
    loop {
        assert!(Instant::now() < deadline, "the stream did not end within {WAIT:?}");
        match sub.recv_timeout(Duration::from_millis(100)) {
            Ok(_) => {}
            Err(Error::NotConnected { .. }) => break,
            Err(e) => panic!("unexpected error {e}"),
        }
    }
    std::iter::from_fn(|| sub.try_event()).collect()
}

/// Subscribers that post no receives and ask for doorbells: every doorbell to one of them
/// waits on RNR forever (they ask for infinite RNR retries) and pins the control send slot it
/// uses. Each pins only its own slots: a well-behaved subscriber still gets its doorbells and,
/// when the publisher goes, `Ended { complete: true }`. (With the 64 send slots the publisher
/// once shared between all its subscribers, 70 such subscribers took them all.)
#[test]
fn subscribers_that_take_no_sends_pin_only_their_own_control_slots() {
    // Over the network path, where the attacker's SEND completes only once the publisher's NIC
    // has placed it: each request is in the publisher's queue before the message that passes
    // it is published, so each attacker gets exactly one doorbell.
    let pub_node = nodes::soft_node_with(rdma_pubsub::fabric::SameHost::Off);
    let publisher = pub_node
        .publisher("pinned")
        .ring_capacity(64 * 1024)
        .linger(Duration::from_millis(200))
        // Slots alone must protect the others: the attackers are not dropped as idle here.
        .idle_timeout(Duration::MAX)
        .create()
        .unwrap();
    let sub_node = nodes::soft_node_without_discovery();
    let mut good = sub_node.subscriber("pinned").create().unwrap();
    good.connect_wait(pub_node.local_addr(), WAIT).unwrap();
    let attacker = Attacker::new();
    let infinite = rdma_pubsub::fabric::RNR_RETRY_INFINITE;
    let attackers: Vec<QueuePair> =
        (0..70).map(|_| attacker.subscribe_asking_rnr_retry(pub_node.local_addr(), "pinned", infinite).0).collect();
    wait_subscribers(&publisher, 71);
    for (seq, qp) in (1..).zip(&attackers) {
        let tail = publisher.counters().position();
        attacker.send(qp, &Control::DoorbellRequest { armed: true, position: tail }.encode().unwrap());
        publisher.publish(&payload(seq)).unwrap();
        expect_messages(&mut good, seq, seq);
    }
    let pinned = publisher.counters().doorbells();
    assert_eq!(pinned, 70, "one doorbell to each attacker, each pinning a slot");
    // The good subscriber parks (asks for a doorbell), and the publisher still has a slot to
    // ring it with when the next message passes its position.
    let requests = good.counters().doorbell_requests();
    let reader = std::thread::spawn(move || {
        expect_messages(&mut good, 71, 71);
        good
    });
    let deadline = Instant::now() + WAIT;
    let parked = || {
        let stats = sub_node.stats();
        let mut subs = stats.of_kind(rdma_pubsub::stats::Kind::Subscription);
        subs.any(|s| s.get("doorbell_requests") > requests)
    };
    while !parked() {
        assert!(Instant::now() < deadline, "the good subscriber never parked");
        std::thread::yield_now();
    }
    publisher.publish(&payload(71)).unwrap();
    let mut good = reader.join().unwrap();
    while publisher.counters().doorbells() < 71 {
        assert!(Instant::now() < deadline, "no doorbell for the good subscriber: {:?}", publisher.counters());
        std::thread::yield_now();
    }
    // The publisher goes: the good subscriber is told the stream ended, complete.
    drop(publisher);
    let events = read_to_the_end(&mut good);
    assert!(
        events.iter().any(|e| matches!(e, rdma_pubsub::SubscriptionEvent::Ended { final_seq: 71, complete: true, .. })),
        "events: {events:?}"
    );
    drop(attackers);
}

/// Silent, fully handshaken subscribers under `Block`: they never ack, so they hold the
/// publisher a ring behind. After `idle_timeout` of silence while holding it, each is dropped
/// with `DropReason::Idle`, and the publisher goes on serving the good subscriber.
#[test]
fn silent_subscribers_holding_a_blocked_publisher_are_dropped_after_the_idle_timeout() {
    let pub_node = nodes::soft_node_without_discovery();
    let publisher = pub_node
        .publisher("silent")
        .policy(Policy::Block { timeout: WAIT })
        .ring_capacity(64 * 1024)
        // Long enough that the good subscriber, starved of CPU on a loaded machine, is not idle.
        .idle_timeout(Duration::from_secs(1))
        .create()
        .unwrap();
    let sub_node = nodes::soft_node_without_discovery();
    let good = sub_node.subscriber("silent").create().unwrap();
    let attacker = Attacker::new();
    let silent: Vec<_> = (0..8).map(|_| attacker.subscribe(pub_node.local_addr(), "silent")).collect();
    let mut good = good;
    good.connect_wait(pub_node.local_addr(), WAIT).unwrap();
    wait_subscribers(&publisher, 9);
    let reader = std::thread::spawn(move || {
        expect_messages(&mut good, 1, 2000);
        good
    });
    // 2000 messages of 64 to 263 bytes: several rings. Without the timeout the silent ones
    // hold the publisher until its Block timeout.
    for seq in 1..=2000 {
        publisher.publish(&payload(seq)).unwrap_or_else(|e| panic!("message {seq}: {e}"));
    }
    // Kept until the end: its own leaving would take the count to 0.
    let _good = reader.join().unwrap();
    assert_eq!(publisher.counters().dropped(), 8, "{:?}", publisher.counters());
    assert_eq!(publisher.subscriber_count(), 1);
    drop(silent);
}

/// A subscriber floods an idle publisher (the application publishes nothing) with control
/// messages, many more than the receives its shared receive queue holds. The node's service
/// tick drains the publisher's completions and reposts the receives: every message is taken
/// (and refused, counted), none waits on RNR, and the good subscriber is served afterwards.
#[test]
fn an_idle_publishers_receive_queue_is_refilled_without_its_application() {
    let pub_node = nodes::soft_node_with(rdma_pubsub::fabric::SameHost::Off);
    // Two subscribers: 8 receives in the shared queue.
    let publisher = pub_node.publisher("refilled").max_subscribers(2).create().unwrap();
    let sub_node = nodes::soft_node_without_discovery();
    let mut good = sub_node.subscriber("refilled").create().unwrap();
    good.connect_wait(pub_node.local_addr(), WAIT).unwrap();
    let attacker = Attacker::new();
    // Infinite RNR retries: a SEND that finds no receive waits for one instead of failing.
    let infinite = rdma_pubsub::fabric::RNR_RETRY_INFINITE;
    let (qp, _accept) = attacker.subscribe_asking_rnr_retry(pub_node.local_addr(), "refilled", infinite);
    wait_subscribers(&publisher, 2);
    let garbage = vec![0xff; 40];
    for _ in 0..200 {
        // Each SEND completes only once a receive took it.
        attacker.send(&qp, &garbage);
    }
    let deadline = Instant::now() + WAIT;
    while publisher.counters().bad_acks() < 200 {
        assert!(Instant::now() < deadline, "{:?}", publisher.counters());
        std::thread::yield_now();
    }
    for seq in 1..=10 {
        publisher.publish(&payload(seq)).unwrap();
    }
    expect_messages(&mut good, 1, 10);
    drop(qp);
}

/// A subscriber that guesses an rkey puts its queue pair at the publisher in the error state
/// (as hardware does), then stays connected and silent. Once it holds the publisher back, the
/// publisher probes it (a `CreditWanted`: with a single subscriber nothing else would be sent to
/// it); the probe fails on the failed queue pair and the subscriber is removed, long before
/// the idle timeout (never, here) or the `Block` timeout.
#[test]
fn a_subscriber_whose_queue_pair_failed_is_removed_and_holds_nothing_back() {
    let pub_node = nodes::soft_node_without_discovery();
    let publisher = pub_node
        .publisher("guessed")
        .policy(Policy::Block { timeout: WAIT })
        .ring_capacity(64 * 1024)
        .idle_timeout(Duration::MAX)
        .create()
        .unwrap();
    let attacker = Attacker::new();
    let (qp, accept) = attacker.subscribe(pub_node.local_addr(), "guessed");
    wait_subscribers(&publisher, 1);
    let guess = SendOp::RdmaRead(RemoteAddr { addr: accept.ring.addr, rkey: accept.ring.rkey ^ 0x5a5a_5a5a });
    qp.post_send(&SendRequest::new(7, guess, &[attacker.buf.sge(0, 8)])).unwrap();
    assert_eq!(attacker.completion().status, WcStatus::RemoteAccessError);
    // Several rings' worth of messages.
    for seq in 1..=2000 {
        publisher.publish(&payload(seq)).unwrap_or_else(|e| panic!("message {seq}: {e}"));
    }
    assert_eq!(publisher.subscriber_count(), 0, "the attacker was removed");
    assert_eq!(publisher.counters().dropped(), 0, "removed, not dropped as idle or slow");
    drop(qp);
}

/// `flush` waits for every subscriber to consume, and a silent one never does: it is dropped
/// after the idle timeout there too (the service tick skips a publisher in a call), and a
/// too-short idle timeout is refused up front.
#[test]
fn flush_drops_an_idle_subscriber_and_a_too_short_idle_timeout_is_refused() {
    let pub_node = nodes::soft_node_without_discovery();
    assert!(matches!(
        pub_node.publisher("flushed").idle_timeout(Duration::ZERO).create(),
        Err(Error::InvalidOption { option: "idle_timeout", .. })
    ));
    let publisher = pub_node.publisher("flushed").idle_timeout(Duration::from_millis(500)).create().unwrap();
    let attacker = Attacker::new();
    let (qp, _accept) = attacker.subscribe(pub_node.local_addr(), "flushed");
    wait_subscribers(&publisher, 1);
    publisher.publish(&payload(1)).unwrap();
    publisher.flush(WAIT).expect("flush ends once the idle subscriber is dropped");
    assert_eq!(publisher.counters().dropped(), 1);
    drop(qp);
}
