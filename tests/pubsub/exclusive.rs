//! The single-threaded handle, `ExclusivePublisher`: what it publishes, and that the node's CM
//! thread never waits for it, nor for a loan held long.

use super::*;

/// Polls `done` until it holds, failing after [`WAIT`].
fn poll_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        thread::yield_now();
    }
}

#[test]
fn an_exclusive_publisher_delivers_every_message_in_order_waiting_for_credit_as_publish_does() {
    let pub_node = node();
    let sub_node = node();
    // A 1 MiB ring: message 7 (4 MiB) passes fragment by fragment as credit comes back.
    let mut publisher = pub_node
        .publisher("exclusive-stream")
        .ring_capacity(1 << 20)
        .policy(Policy::Block { timeout: WAIT })
        .create()
        .unwrap();
    let mut sub = subscribe(&sub_node, "exclusive-stream", Start::Latest, pub_node.local_addr());
    wait_subscribers(&publisher, 1);
    let count = scale(3_000);
    let reader = thread::spawn(move || {
        let deadline = Instant::now() + WAIT * 2;
        for seq in 1..=count {
            let m = recv_until(&mut sub, deadline);
            assert_eq!(m.seq, seq, "in order, none lost");
            check(&m, mixed_size);
        }
    });
    let mut exclusive = publisher.exclusive().unwrap();
    for seq in 1..=count {
        assert_eq!(exclusive.next_seq(), seq);
        assert_eq!(exclusive.publish(&payload(seq, mixed_size(seq))).unwrap(), seq);
    }
    drop(exclusive);
    reader.join().expect("every message arrived intact");
    assert!(publisher.counters().waits() > 0, "the 4 MiB message waited for credit");
    assert_eq!(publisher.next_seq(), count + 1);
}

#[test]
fn an_exclusive_typed_publisher_encodes_each_value() {
    #[derive(serde::Serialize, serde::Deserialize, Debug, PartialEq)]
    struct Tick {
        symbol: String,
        seq: u64,
    }
    let pub_node = node();
    let sub_node = node();
    let mut publisher = pub_node.publisher("exclusive-typed").typed::<Tick>().create().unwrap();
    let mut sub =
        sub_node.subscriber("exclusive-typed").connect(pub_node.local_addr()).typed::<Tick>().create().unwrap();
    wait_subscribers(&publisher, 1);
    let mut exclusive = publisher.exclusive().unwrap();
    for seq in 1..=50 {
        // Lengths that differ from one value to the next: the reused buffer is resized.
        let tick = Tick { symbol: "X".repeat(seq as usize % 7), seq };
        assert_eq!(exclusive.publish(&tick).unwrap(), seq);
    }
    drop(exclusive);
    for seq in 1..=50 {
        let m = sub.recv_timeout(WAIT).unwrap().expect("a tick");
        assert_eq!(m.data, Tick { symbol: "X".repeat(seq as usize % 7), seq });
    }
}

#[test]
fn a_connect_to_a_held_publisher_waits_for_its_next_message_while_the_cm_thread_serves_others() {
    let pub_node = node_without_discovery();
    let mut held = pub_node.publisher("exclusive-held").create().unwrap();
    let free = pub_node.publisher("exclusive-free").create().unwrap();
    let addr = pub_node.local_addr();
    let mut exclusive = held.exclusive().unwrap();
    let early = thread::spawn(move || {
        let sub_node = node_without_discovery();
        let mut sub = subscribe(&sub_node, "exclusive-held", Start::Latest, addr);
        let m = sub.recv_timeout(WAIT).expect("recv").expect("the message published after the connect");
        (sub_node, m.seq, m.data)
    });
    // The connect found the state held: the CM thread left it to the handle and went on.
    poll_until("the connect is deferred", || exclusive.counters().deferred_events() == 1);
    let other_node = node_without_discovery();
    let _other = subscribe(&other_node, "exclusive-free", Start::Latest, addr);
    wait_subscribers(&free, 1);
    assert_eq!(exclusive.counters().accepted(), 0, "not answered while the handle publishes nothing");
    // Its next message accepts the subscriber first, so the subscriber (Latest) gets it.
    assert_eq!(exclusive.publish(b"first").unwrap(), 1);
    assert_eq!(exclusive.counters().accepted(), 1);
    let (_sub_node, seq, data) = early.join().expect("subscriber");
    assert_eq!((seq, data), (1, b"first".to_vec()));
}

#[test]
fn a_disconnect_from_a_held_publisher_is_handled_at_its_next_message() {
    let pub_node = node_without_discovery();
    let sub_node = node_without_discovery();
    let mut publisher = pub_node.publisher("exclusive-gone").create().unwrap();
    let sub = subscribe(&sub_node, "exclusive-gone", Start::Latest, pub_node.local_addr());
    wait_subscribers(&publisher, 1);
    let mut exclusive = publisher.exclusive().unwrap();
    drop(sub);
    poll_until("the disconnect is deferred", || exclusive.counters().deferred_events() == 1);
    assert_eq!(exclusive.counters().subscribers(), 1, "still counted while the handle publishes nothing");
    exclusive.publish(b"after").unwrap();
    assert_eq!(exclusive.counters().subscribers(), 0);
}

#[test]
fn a_subscriber_connects_while_an_exclusive_publisher_publishes_without_pause() {
    let pub_node = node_without_discovery();
    let mut publisher = pub_node.publisher("exclusive-busy").create().unwrap();
    let addr = pub_node.local_addr();
    let mut exclusive = publisher.exclusive().unwrap();
    let (connected, subscriber) = std::sync::mpsc::channel();
    // The subscriber receives from the moment it is connected: the publisher, which goes on
    // publishing until it hears of the connect, must never wait on it for longer than this
    // thread takes to be scheduled (a whole ring of ticks is published in about a millisecond).
    let joining = thread::spawn(move || {
        let sub_node = node_without_discovery();
        let mut sub = subscribe(&sub_node, "exclusive-busy", Start::Latest, addr);
        connected.send(()).unwrap();
        let deadline = Instant::now() + WAIT;
        loop {
            let m = recv_until(&mut sub, deadline);
            if m.data == b"seen" {
                return m.seq;
            }
        }
    });
    // The CM thread gets the lock between two messages (or leaves the connect to the next one).
    let deadline = Instant::now() + WAIT;
    loop {
        assert!(Instant::now() < deadline, "the subscriber never connected");
        exclusive.publish(b"tick").unwrap();
        if subscriber.try_recv().is_ok() {
            break;
        }
    }
    assert_eq!(exclusive.counters().accepted(), 1);
    let seq = exclusive.publish(b"seen").unwrap();
    drop(exclusive);
    assert_eq!(joining.join().expect("subscriber"), seq);
}

#[test]
fn a_loan_held_long_leaves_its_connects_to_the_service_tick_and_stalls_no_other_topic() {
    let pub_node = node_without_discovery();
    let held = pub_node.publisher("loan-held").create().unwrap();
    let free = pub_node.publisher("loan-free").create().unwrap();
    let addr = pub_node.local_addr();
    let loan = held.loan(8).unwrap();
    let early = thread::spawn(move || {
        let sub_node = node_without_discovery();
        let sub = subscribe(&sub_node, "loan-held", Start::Latest, addr);
        (sub_node, sub)
    });
    poll_until("the connect is deferred", || held.counters().deferred_events() == 1);
    let other_node = node_without_discovery();
    let _other = subscribe(&other_node, "loan-free", Start::Latest, addr);
    wait_subscribers(&free, 1);
    assert_eq!(loan.send().unwrap(), 1);
    // Once the loan is gone, the next service tick accepts the waiting subscriber.
    let (_sub_node, mut sub) = early.join().expect("subscriber");
    wait_subscribers(&held, 1);
    assert_eq!(held.publish(b"after").unwrap(), 2);
    let m = sub.recv_timeout(WAIT).unwrap().expect("the message after its connect");
    assert_eq!((m.seq, m.data), (2, b"after".to_vec()));
}
