//! What a subscription with discovery meets at the receive call (#29): a refusal by every
//! publisher it knows is the receive's error, at once; publishers that come and go are events,
//! `recv` waits for the next one and `try_recv` says there is none now.

use super::*;
use rdma_pubsub::{Error, RejectCode};

/// Runs `f` on a thread and fails the test if it does not return within `WAIT` (a hang is a
/// failure, not a stuck test run).
fn bounded<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(WAIT).unwrap_or_else(|_| panic!("{what} did not return within {WAIT:?}"))
}

/// Reproduces a hang: with discovery and the wrong credential, `recv` blocked forever, even
/// after the publisher exited; only `try_event` showed the refusal.
#[test]
fn a_wrong_credential_is_the_error_of_recv_and_it_does_not_block() {
    let options = domain(20);
    let pub_node = node_with(options.clone());
    let sub_node = node_with(options);
    let right = Secret::new(vec![1; 32]).expect("secret");
    let wrong = Secret::new(vec![2; 32]).expect("secret");
    let publisher = pub_node.publisher("outcome-credential").credential(right).create().expect("publisher");
    let mut sub = sub_node.subscriber("outcome-credential").credential(wrong).create().expect("subscription");
    let addr = pub_node.local_addr();
    let (mut sub, first) = bounded("recv", move || {
        let r = sub.recv();
        (sub, r)
    });
    assert!(
        matches!(&first, Err(Error::Rejected { peer, reason: RejectCode::Unauthorized, .. }) if *peer == addr),
        "{first:?}"
    );
    // The iterator yields it and ends.
    let (mut sub, items) = bounded("iter", move || {
        let items: Vec<_> = sub.iter().collect();
        (sub, items)
    });
    assert!(matches!(items.as_slice(), [Err(Error::Rejected { .. })]), "{items:?}");
    // The publisher exits: the refusal still stands (nothing accepted the subscription since).
    drop(publisher);
    let after = bounded("recv after the publisher's exit", move || sub.recv());
    assert!(matches!(after, Err(Error::Rejected { reason: RejectCode::Unauthorized, .. })), "{after:?}");
}

#[test]
fn a_clean_publisher_exit_is_an_event_and_the_iteration_goes_on_with_the_next_publisher() {
    let options = domain(21);
    let pub_node = node_with(options.clone());
    let sub_node = node_with(options.clone());
    let mut sub = sub_node.subscriber("outcome-restart").start(Start::Earliest).create().expect("subscription");
    let first = pub_node.publisher("outcome-restart").create().expect("publisher");
    first.wait_for_subscribers(1, WAIT).expect("the subscription connected by itself");
    first.publish(b"one").expect("publish");
    let m = sub.recv_timeout(WAIT).expect("recv").expect("the first message");
    assert_eq!(m.data, b"one");
    drop(first);
    // The end is an event; the subscription waits for the next publisher: no error.
    let deadline = Instant::now() + WAIT;
    loop {
        assert!(Instant::now() < deadline, "no Ended event");
        let r = sub.recv_timeout(Duration::from_millis(20));
        assert!(matches!(r, Ok(None)), "{r:?}");
        if std::iter::from_fn(|| sub.try_event()).any(|e| matches!(e, SubscriptionEvent::Ended { .. })) {
            break;
        }
    }
    // No publisher now: `try_recv` says so, typed.
    let deadline = Instant::now() + WAIT;
    loop {
        assert!(Instant::now() < deadline, "try_recv never said there is no publisher now");
        match sub.try_recv() {
            Err(Error::NotConnected { discovery: true, .. }) => break,
            Ok(None) => std::thread::yield_now(),
            other => panic!("{other:?}"),
        }
    }
    // A restart: a new node (a new epoch) publishes the topic; the iteration goes on.
    drop(pub_node);
    let restarted = node_with(options);
    let second = restarted.publisher("outcome-restart").create().expect("publisher again");
    let reader = std::thread::spawn(move || {
        let next = sub.iter().next().expect("the iteration goes on").expect("a message");
        next.data
    });
    second.wait_for_subscribers(1, WAIT).expect("the subscription came back by itself");
    second.publish(b"two").expect("publish");
    let data = bounded("the next message", move || reader.join().expect("reader"));
    assert_eq!(data, b"two");
}
