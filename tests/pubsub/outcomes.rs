//! What a user meets at the receive call (#29): `Closed` only for the subscription's own node
//! or its own close, at once, for every call; without discovery the end of the last stream
//! ends the iteration; a drop or a refusal by the only publisher is the receive's error;
//! nothing published is silently lost at a clean end; `Ended.complete` after a loss.

use super::*;

/// Runs `f` on a thread and fails the test if it does not return within `WAIT` (a hang is a
/// failure, not a stuck test run).
fn bounded<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(WAIT).unwrap_or_else(|_| panic!("{what} did not return within {WAIT:?}"))
}

/// The count of messages the `Lost` events say were lost, and whether they say why.
fn lost_of(events: &[SubscriptionEvent], why: LossReason) -> u64 {
    events
        .iter()
        .map(|e| match e {
            SubscriptionEvent::Lost { count, reason, .. } if *reason == why => *count,
            _ => 0,
        })
        .sum()
}

/// Reproduces a hang: the subscription's node dropped while a message published with `Ok` was
/// unread, then the publisher (linger 100 ms) dropped: `recv` parked forever.
#[test]
fn recv_after_the_subscriptions_node_is_dropped_is_closed_at_once() {
    let pub_node = node_without_discovery();
    let sub_node = node_without_discovery();
    let publisher = pub_node.publisher("outcome-node-dropped").linger(Duration::from_millis(100)).create().unwrap();
    let mut sub = subscribe(&sub_node, "outcome-node-dropped", Start::Earliest, pub_node.local_addr());
    publisher.publish(b"unread").unwrap();
    drop(sub_node);
    drop(publisher);
    let (mut sub, outcome) = bounded("recv", move || {
        let r = sub.recv();
        (sub, r)
    });
    assert!(matches!(outcome, Err(Error::Closed(_))), "{outcome:?}");
    // Every call, at once.
    assert!(matches!(sub.try_recv(), Err(Error::Closed(_))));
    assert!(matches!(sub.recv_timeout(Duration::MAX), Err(Error::Closed(_))));
    assert!(matches!(sub.recv_ref(Duration::MAX), Err(Error::Closed(_))));
    assert!(matches!(sub.connect(pub_node.local_addr()), Err(Error::Closed(_))));
    assert_eq!(sub.iter().count(), 0, "the iteration ends");
}

/// Reproduces a hang: `connect_wait(addr, Duration::MAX)` after the subscription's node was
/// dropped never returned (and with a timeout, it said `Timeout`).
#[test]
fn connect_wait_after_the_node_is_dropped_is_closed_at_once_even_without_a_timeout() {
    let pub_node = node_without_discovery();
    let sub_node = node_without_discovery();
    let _publisher = pub_node.publisher("outcome-connect-closed").create().unwrap();
    let mut sub = sub_node.subscriber("outcome-connect-closed").create().unwrap();
    drop(sub_node);
    let addr = pub_node.local_addr();
    let outcome = bounded("connect_wait", move || sub.connect_wait(addr, Duration::MAX));
    assert!(matches!(outcome, Err(Error::Closed(_))), "{outcome:?}");
}

#[test]
fn close_makes_every_call_closed_and_disconnects() {
    let pub_node = node_without_discovery();
    let sub_node = node_without_discovery();
    let publisher = pub_node.publisher("outcome-close").create().unwrap();
    let mut sub = subscribe(&sub_node, "outcome-close", Start::Earliest, pub_node.local_addr());
    wait_subscribers(&publisher, 1);
    sub.close();
    let started = Instant::now();
    assert!(matches!(sub.recv(), Err(Error::Closed(_))));
    assert!(matches!(sub.try_recv(), Err(Error::Closed(_))));
    assert!(matches!(sub.connect(pub_node.local_addr()), Err(Error::Closed(_))));
    assert!(matches!(sub.connect_wait(pub_node.local_addr(), Duration::MAX), Err(Error::Closed(_))));
    assert_eq!(sub.iter().count(), 0, "the iteration ends");
    assert!(started.elapsed() < WAIT, "at once");
    let deadline = Instant::now() + WAIT;
    while publisher.subscriber_count() > 0 {
        assert!(Instant::now() < deadline, "the publisher still serves the closed subscription");
        thread::yield_now();
    }
}

#[test]
fn without_discovery_the_end_of_the_last_stream_ends_the_iteration_and_recv_says_not_connected() {
    let pub_node = node_without_discovery();
    let sub_node = node_without_discovery();
    let publisher = pub_node.publisher("outcome-last-end").create().unwrap();
    let sub = subscribe(&sub_node, "outcome-last-end", Start::Earliest, pub_node.local_addr());
    for i in 0..3u8 {
        publisher.publish(&[i]).unwrap();
    }
    // Read while the publisher closes (its linger waits for this reader).
    let reader = thread::spawn(move || {
        let mut sub = sub;
        let got: Vec<_> = sub.iter().map(|m| m.expect("a message").data).collect();
        (sub, got)
    });
    drop(publisher);
    let (mut sub, got) = bounded("iter", move || reader.join().expect("reader"));
    assert_eq!(got, [[0], [1], [2]]);
    assert!(matches!(sub.recv(), Err(Error::NotConnected { discovery: false, .. })));
    let events: Vec<_> = std::iter::from_fn(|| sub.try_event()).collect();
    assert!(
        events.iter().any(|e| matches!(e, SubscriptionEvent::Ended { final_seq: 3, complete: true, .. })),
        "{events:?}"
    );
}

/// A publisher whose linger ends before its subscriber READ what it published: each message
/// published with `Ok` is delivered or reported lost (`Lost { PublisherClosed }`, then
/// `Ended { complete: false }`), never silently dropped.
#[test]
fn a_message_not_read_before_the_publishers_linger_ended_is_reported_lost() {
    let pub_node = node_without_discovery();
    let sub_node = node_without_discovery();
    let publisher = pub_node.publisher("outcome-linger").linger(Duration::ZERO).create().unwrap();
    let mut sub = subscribe(&sub_node, "outcome-linger", Start::Earliest, pub_node.local_addr());
    for i in 0..3u8 {
        publisher.publish(&[i]).unwrap();
    }
    drop(publisher);
    drop(pub_node);
    let (mut sub, got) = bounded("iter", move || {
        let got: Vec<_> = sub.iter().map(|m| m.expect("a message").data).collect();
        (sub, got)
    });
    let events: Vec<_> = std::iter::from_fn(|| sub.try_event()).collect();
    let lost = lost_of(&events, LossReason::PublisherClosed);
    assert_eq!(got.len() as u64 + lost, 3, "delivered {got:?}, events {events:?}");
    let complete = lost == 0;
    assert!(
        events
            .iter()
            .any(|e| matches!(e, SubscriptionEvent::Ended { final_seq: 3, complete: c, .. } if *c == complete)),
        "{events:?}"
    );
}

/// `Ended.complete` said `true` after `Lost` under Overwrite.
#[test]
fn an_end_after_an_overwrite_loss_is_not_complete() {
    let pub_node = node_without_discovery();
    let sub_node = node_without_discovery();
    let publisher = pub_node
        .publisher("outcome-overwritten")
        .policy(Policy::Overwrite)
        .ring_capacity(64 * 1024)
        .linger(WAIT)
        .create()
        .unwrap();
    let sub = subscribe(&sub_node, "outcome-overwritten", Start::Earliest, pub_node.local_addr());
    wait_subscribers(&publisher, 1);
    // Ten rings' worth while the subscriber reads nothing.
    for seq in 1..=640 {
        publisher.publish(&payload(seq, 1000)).unwrap();
    }
    let reader = thread::spawn(move || {
        let mut sub = sub;
        let got = sub.iter().inspect(|m| assert!(m.is_ok(), "{m:?}")).count() as u64;
        (sub, got)
    });
    drop(publisher);
    let (mut sub, got) = bounded("iter", move || reader.join().expect("reader"));
    let events: Vec<_> = std::iter::from_fn(|| sub.try_event()).collect();
    let lost = lost_of(&events, LossReason::Overwritten);
    assert!(lost > 0, "the subscriber was overrun: {events:?}");
    assert_eq!(got + lost, 640, "every message delivered or counted lost: {events:?}");
    assert!(
        events.iter().any(|e| matches!(e, SubscriptionEvent::Ended { final_seq: 640, complete: false, .. })),
        "{events:?}"
    );
}

/// A subscriber dropped by its only publisher (DropSlow) is told so by `recv`, naming the
/// publisher, at once and on every call: not "every publisher has gone".
#[test]
fn a_drop_by_the_only_publisher_is_the_error_of_every_receive_call() {
    let pub_node = node_without_discovery();
    let sub_node = node_without_discovery();
    let publisher = pub_node
        .publisher("outcome-dropped")
        .policy(Policy::DropSlow { grace: Duration::from_millis(20) })
        .ring_capacity(64 * 1024)
        .create()
        .unwrap();
    let mut sub = subscribe(&sub_node, "outcome-dropped", Start::Earliest, pub_node.local_addr());
    wait_subscribers(&publisher, 1);
    let deadline = Instant::now() + WAIT;
    let mut seq = 0;
    while publisher.counters().dropped() == 0 {
        assert!(Instant::now() < deadline, "the slow subscriber was not dropped");
        seq += 1;
        publisher.publish(&payload(seq, 1000)).unwrap();
    }
    let (mut sub, outcome) = bounded("recv", move || loop {
        match sub.recv() {
            Ok(_) => {}
            Err(e) => return (sub, e),
        }
    });
    let id = publisher.id();
    assert!(
        matches!(outcome, Error::Dropped { peer, publisher, reason: DropReason::TooSlow { .. } }
            if peer == pub_node.local_addr() && publisher == id),
        "{outcome:?}"
    );
    let started = Instant::now();
    assert!(matches!(sub.recv_timeout(WAIT), Err(Error::Dropped { .. })));
    assert!(matches!(sub.try_recv(), Err(Error::Dropped { .. })));
    let items: Vec<_> = sub.iter().collect();
    assert!(matches!(items.as_slice(), [Err(Error::Dropped { .. })]), "yielded once, then the end: {items:?}");
    assert!(started.elapsed() < WAIT, "none of them waited");
}

/// A wrong credential, without discovery: the refusal is the error of the receive calls.
#[test]
fn a_refusal_by_the_only_publisher_is_the_error_of_recv() {
    let pub_node = node_without_discovery();
    let sub_node = node_without_discovery();
    let right = rdma_pubsub::Secret::new(vec![1; 32]).unwrap();
    let wrong = rdma_pubsub::Secret::new(vec![2; 32]).unwrap();
    let _publisher = pub_node.publisher("outcome-refused").credential(right).create().unwrap();
    let mut sub =
        sub_node.subscriber("outcome-refused").credential(wrong).connect(pub_node.local_addr()).create().unwrap();
    let (mut sub, outcome) = bounded("recv", move || {
        let r = sub.recv();
        (sub, r)
    });
    assert!(
        matches!(&outcome, Err(Error::Rejected { peer, reason: RejectCode::Unauthorized, .. }) if *peer == pub_node.local_addr()),
        "{outcome:?}"
    );
    assert!(matches!(sub.try_recv(), Err(Error::Rejected { .. })));
}

/// `Publisher<String>` into `Subscription<Vec<u64>>` decoded "hello" as `[104, 101, 108, 108,
/// 111]`: the subscription now refuses the publisher's type at connect, naming both, and the
/// receive call says so. A raw subscription reads it.
#[test]
fn a_subscription_of_another_type_is_refused_naming_both_types_and_raw_reads_anything() {
    let pub_node = node_without_discovery();
    let sub_node = node_without_discovery();
    let publisher = pub_node.publisher("outcome-typed").typed::<String>().create().unwrap();
    let mut numbers = sub_node
        .subscriber("outcome-typed")
        .start(Start::Earliest)
        .connect(pub_node.local_addr())
        .typed::<Vec<u64>>()
        .create()
        .unwrap();
    publisher.publish(&"hello".to_string()).unwrap();
    let (mut numbers, outcome) = bounded("recv", move || {
        let r = numbers.recv();
        (numbers, r)
    });
    match outcome {
        Err(Error::Rejected { peer, reason: RejectCode::TypeMismatch, detail }) => {
            assert_eq!(peer, pub_node.local_addr());
            assert!(detail.contains("String") && detail.contains("Vec<u64>"), "names both types: {detail}");
        }
        other => panic!("expected a TypeMismatch refusal, got {other:?}"),
    }
    assert!(matches!(numbers.try_event(), Some(SubscriptionEvent::Rejected { reason: RejectCode::TypeMismatch, .. })));
    // The same type reads it; so does a raw subscription.
    let mut strings = sub_node
        .subscriber("outcome-typed")
        .start(Start::Earliest)
        .connect(pub_node.local_addr())
        .typed::<String>()
        .create()
        .unwrap();
    let m = strings.recv_timeout(WAIT).unwrap().expect("the string");
    assert_eq!(m.data, "hello");
    let mut raw = subscribe(&sub_node, "outcome-typed", Start::Earliest, pub_node.local_addr());
    let m = raw.recv_timeout(WAIT).unwrap().expect("the bytes");
    assert_eq!(m.data, b"\x05hello", "bincode's length, then the bytes");
}

/// A schema id the application gives stands for the type on both sides.
#[test]
fn a_schema_id_stands_for_the_type_on_both_sides() {
    let pub_node = node_without_discovery();
    let sub_node = node_without_discovery();
    let publisher = pub_node.publisher("outcome-schema").typed::<(u32, u32)>().schema_id(7).create().unwrap();
    publisher.publish(&(1, 2)).unwrap();
    let subscriber = |id: u64| {
        sub_node
            .subscriber("outcome-schema")
            .start(Start::Earliest)
            .connect(pub_node.local_addr())
            .typed::<(u32, u32)>()
            .schema_id(id)
            .create()
            .unwrap()
    };
    let mut same = subscriber(7);
    assert_eq!(same.recv_timeout(WAIT).unwrap().expect("a message").data, (1, 2));
    let mut other = subscriber(8);
    let refused = bounded("recv", move || other.recv());
    assert!(matches!(refused, Err(Error::Rejected { reason: RejectCode::TypeMismatch, .. })), "{refused:?}");
}
