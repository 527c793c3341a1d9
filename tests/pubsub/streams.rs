//! Streams of messages: starts, checksums, several publishers, the end of a stream, large messages, many subscribers, READ buffers and the data path.

use super::*;

#[test]
fn late_join_from_latest_and_from_earliest() {
    let pub_node = node();
    let sub_node = node();
    let publisher = pub_node.publisher("late").create().unwrap();
    let size = |seq: u64| seq as usize * 10;
    for seq in 1..=10 {
        publisher.publish(&payload(seq, size(seq))).unwrap();
    }
    let mut earliest = subscribe(&sub_node, "late", Start::Earliest, pub_node.local_addr());
    let mut latest = subscribe(&sub_node, "late", Start::Latest, pub_node.local_addr());
    wait_subscribers(&publisher, 2);
    for seq in 11..=20 {
        publisher.publish(&payload(seq, size(seq))).unwrap();
    }
    let deadline = Instant::now() + WAIT;
    for expected in 1..=20 {
        let m = recv_until(&mut earliest, deadline);
        assert_eq!(m.seq, expected);
        check(&m, size);
    }
    for expected in 11..=20 {
        let m = recv_until(&mut latest, deadline);
        assert_eq!(m.seq, expected, "latest starts after what was published before it joined");
        check(&m, size);
    }
}

/// The publisher picks the record checksum function and each subscriber learns it from the
/// accept private data: a subscriber checking with another function would take every record
/// for torn and deliver nothing.
#[test]
fn each_checksum_function_carries_messages_end_to_end() {
    let pub_node = node();
    let sub_node = node();
    let size = |seq: u64| (mix(seq) % 300_000) as usize + 1;
    for (i, checksum) in Checksum::ALL.into_iter().enumerate() {
        let topic = format!("checksum-{i}");
        let publisher = pub_node.publisher(&topic).checksum(checksum).create().unwrap();
        assert_eq!(publisher.checksum(), checksum);
        let mut sub = subscribe(&sub_node, &topic, Start::Earliest, pub_node.local_addr());
        wait_subscribers(&publisher, 1);
        let deadline = Instant::now() + WAIT;
        for seq in 1..=50 {
            publisher.publish(&payload(seq, size(seq))).unwrap();
            let m = recv_until(&mut sub, deadline);
            assert_eq!(m.seq, seq, "{checksum:?}");
            check(&m, size);
        }
        assert_eq!(sub.counters().torn(), 0, "{checksum:?}: no record failed its check");
    }
    let default = pub_node.publisher("checksum-default").create().unwrap();
    assert_eq!(default.checksum(), Checksum::fastest_here(), "by default, the faster function here");
}

#[test]
fn two_publishers_on_one_topic_are_merged_in_order_per_publisher() {
    let a = node();
    let b = node();
    let sub_node = node();
    let pa = a.publisher("shared").create().unwrap();
    let pb = b.publisher("shared").create().unwrap();
    let mut sub = sub_node.subscriber("shared").create().unwrap();
    let ia = sub.connect_wait(a.local_addr(), WAIT).unwrap();
    let ib = sub.connect_wait(b.local_addr(), WAIT).unwrap();
    assert_ne!(ia.id, ib.id);
    wait_subscribers(&pa, 1);
    wait_subscribers(&pb, 1);
    for seq in 1..=500u64 {
        pa.publish(&payload(seq, 64)).unwrap();
        pb.publish(&payload(seq, 32)).unwrap();
    }
    let deadline = Instant::now() + WAIT;
    let (mut next_a, mut next_b) = (1, 1);
    while next_a <= 500 || next_b <= 500 {
        let m = recv_until(&mut sub, deadline);
        if m.publisher.id == ia.id {
            assert_eq!(m.seq, next_a);
            check(&m, |_| 64);
            next_a += 1;
        } else {
            assert_eq!(m.publisher.id, ib.id);
            assert_eq!(m.seq, next_b);
            check(&m, |_| 32);
            next_b += 1;
        }
    }
}

#[test]
fn a_dropped_publisher_ends_the_stream_after_its_last_message() {
    let pub_node = node_without_discovery();
    let sub_node = node_without_discovery();
    let publisher = pub_node.publisher("ending").create().unwrap();
    let mut sub = subscribe(&sub_node, "ending", Start::Latest, pub_node.local_addr());
    wait_subscribers(&publisher, 1);
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = stop.clone();
    let reader = thread::spawn(move || {
        let deadline = Instant::now() + WAIT;
        let mut got = Vec::new();
        loop {
            assert!(Instant::now() < deadline, "the stream did not end");
            match sub.recv_timeout(Duration::from_millis(100)) {
                Ok(Some(m)) => got.push(m.seq),
                Ok(None) => {}
                Err(Error::NotConnected { .. }) => break,
                Err(e) => panic!("unexpected error {e}"),
            }
        }
        stop2.store(true, Ordering::Release);
        let events: Vec<_> = std::iter::from_fn(|| sub.try_event()).collect();
        (got, events)
    });
    for seq in 1..=100 {
        publisher.publish(&payload(seq, 256)).unwrap();
    }
    drop(publisher);
    let (got, events) = reader.join().unwrap();
    assert!(stop.load(Ordering::Acquire));
    assert_eq!(got, (1..=100).collect::<Vec<_>>());
    assert!(
        events.iter().any(|e| matches!(e, SubscriptionEvent::Ended { final_seq: 100, complete: true, .. })),
        "events: {events:?}"
    );
}

/// A publisher closed and created again on the same node keeps its id and epoch; a
/// subscription that read the first gets every message of the second (none taken for a
/// duplicate of the first's), numbered after the first's.
#[test]
fn a_publisher_created_again_on_its_node_is_read_in_full() {
    let pub_node = node_without_discovery();
    let sub_node = node_without_discovery();
    let addr = pub_node.local_addr();
    let first = pub_node.publisher("again").create().unwrap();
    let mut sub = subscribe(&sub_node, "again", Start::Earliest, addr);
    wait_subscribers(&first, 1);
    for i in 1..=5 {
        first.publish(&payload(i, 48)).unwrap();
    }
    let deadline = Instant::now() + WAIT;
    let got: Vec<Message> = (0..5).map(|_| recv_until(&mut sub, deadline)).collect();
    assert_eq!(got.iter().map(|m| m.seq).collect::<Vec<_>>(), [1, 2, 3, 4, 5]);
    let info = got[0].publisher;
    drop(first);
    loop {
        assert!(Instant::now() < deadline, "the first publisher's stream did not end");
        match sub.recv_timeout(Duration::from_millis(100)) {
            Ok(m) => assert!(m.is_none(), "nothing after the first publisher's last: {m:?}"),
            Err(Error::NotConnected { .. }) => break,
            Err(e) => panic!("unexpected error {e}"),
        }
    }
    let second = pub_node.publisher("again").create().unwrap();
    sub.connect_wait(addr, WAIT).expect("connected again");
    wait_subscribers(&second, 1);
    for i in 101..=105 {
        second.publish(&payload(i, 48)).unwrap();
    }
    let again: Vec<Message> = (0..5).map(|_| recv_until(&mut sub, deadline)).collect();
    assert_eq!(
        again.iter().map(|m| m.data.clone()).collect::<Vec<_>>(),
        (101..=105).map(|i| payload(i, 48)).collect::<Vec<_>>()
    );
    assert_eq!((again[0].publisher.id, again[0].publisher.epoch), (info.id, info.epoch));
    assert!(
        again.windows(2).all(|w| w[1].seq == w[0].seq + 1) && again[0].seq > 5,
        "{:?}",
        again.iter().map(|m| m.seq).collect::<Vec<_>>()
    );
    assert_eq!(sub.counters().duplicates(), 0);
}

#[test]
fn a_sixteen_mib_message_passes_through_a_one_mib_ring() {
    let pub_node = node();
    let sub_node = node();
    let publisher = pub_node.publisher("huge").ring_capacity(1 << 20).create().unwrap();
    let mut sub = subscribe(&sub_node, "huge", Start::Latest, pub_node.local_addr());
    wait_subscribers(&publisher, 1);
    let size = |seq: u64| if seq == 2 { 16 << 20 } else { 1000 };
    let reader = thread::spawn(move || {
        let deadline = Instant::now() + WAIT;
        for expected in 1..=3 {
            let m = recv_until(&mut sub, deadline);
            assert_eq!(m.seq, expected);
            check(&m, size);
        }
    });
    for seq in 1..=3 {
        publisher.publish(&payload(seq, size(seq))).unwrap();
    }
    reader.join().unwrap();
}

#[test]
fn read_buffers_grow_with_the_records_read_not_with_the_ring() {
    let pub_node = node();
    let sub_node = node();
    // A 16 MiB ring allows records of 4 MiB; the subscription's two READ buffers start at the
    // batch size (256 KiB) and grow only when a record needs more.
    let publisher = pub_node.publisher("grow").ring_capacity(16 << 20).create().unwrap();
    let mut sub = subscribe(&sub_node, "grow", Start::Latest, pub_node.local_addr());
    wait_subscribers(&publisher, 1);
    let held = |sub: &rdma_pubsub::Subscription| sub.counters().read_buffer_bytes();
    let batch: u64 = 256 << 10; // the subscription's default batch (SubscriberBuilder::batch)
    assert_eq!(held(&sub), 2 * batch, "two READ buffers of the batch size to start with");
    let big = 3 << 20;
    let size = move |seq: u64| if seq == 101 { big } else { 1000 };
    let deadline = Instant::now() + WAIT;
    let exchange = |seqs: std::ops::RangeInclusive<u64>, sub: &mut rdma_pubsub::Subscription| {
        for seq in seqs.clone() {
            publisher.publish(&payload(seq, size(seq))).unwrap();
        }
        for expected in seqs {
            let m = recv_until(sub, deadline);
            assert_eq!(m.seq, expected);
            check(&m, size);
        }
    };
    exchange(1..=100, &mut sub);
    assert_eq!(held(&sub), 2 * batch, "small messages need no larger buffer");
    exchange(101..=102, &mut sub);
    let grown = held(&sub);
    assert!(grown > 2 * batch && grown >= big as u64, "a buffer grew to hold the 3 MiB record: {grown}");
    assert!(grown <= 2 * ((4 << 20) + 64), "never past what the ring's largest record needs: {grown}");
    drop(sub);
}

#[test]
fn sixty_four_subscribers_on_one_publisher() {
    let pub_node = node();
    let sub_node = node();
    let publisher = pub_node.publisher("wide").create().unwrap();
    let mut subs: Vec<_> =
        (0..64).map(|_| subscribe(&sub_node, "wide", Start::Latest, pub_node.local_addr())).collect();
    wait_subscribers(&publisher, 64);
    for seq in 1..=200 {
        publisher.publish(&payload(seq, 128)).unwrap();
    }
    let deadline = Instant::now() + WAIT;
    for sub in &mut subs {
        for expected in 1..=200 {
            let m = recv_until(sub, deadline);
            assert_eq!(m.seq, expected);
            check(&m, |_| 128);
        }
    }
}

#[test]
fn an_orderly_end_is_reported_once_and_never_as_a_disconnect() {
    let pub_node = node();
    let sub_node = node();
    for round in 0..40 {
        let topic = format!("orderly-{round}");
        let publisher = pub_node.publisher(&topic).create().unwrap();
        let mut sub = sub_node.subscriber(&topic).busy_poll(true).auto_connect(false).create().unwrap();
        sub.connect_wait(pub_node.local_addr(), WAIT).unwrap();
        wait_subscribers(&publisher, 1);
        let reader = thread::spawn(move || {
            let deadline = Instant::now() + WAIT;
            let mut events = Vec::new();
            let mut got = 0;
            loop {
                assert!(Instant::now() < deadline, "the stream did not end");
                match sub.recv_timeout(Duration::from_millis(20)) {
                    Ok(Some(m)) => {
                        got += 1;
                        assert_eq!(m.seq, got);
                    }
                    Ok(None) => {}
                    Err(Error::NotConnected { .. }) => break,
                    Err(e) => panic!("unexpected error {e}"),
                }
                events.extend(std::iter::from_fn(|| sub.try_event()));
            }
            events.extend(std::iter::from_fn(|| sub.try_event()));
            (got, events)
        });
        for seq in 1..=100 {
            publisher.publish(&payload(seq, 64)).unwrap();
        }
        // A busy-polling subscriber that caught up acknowledges everything (it does not park).
        publisher.flush(Duration::from_secs(5)).expect("every subscriber acknowledged the tail");
        drop(publisher);
        let (got, events) = reader.join().unwrap();
        assert_eq!(got, 100);
        let ended = events.iter().filter(|e| matches!(e, SubscriptionEvent::Ended { complete: true, .. })).count();
        let failed = events.iter().filter(|e| matches!(e, SubscriptionEvent::Disconnected { .. })).count();
        assert_eq!((ended, failed), (1, 0), "round {round}: {events:?}");
    }
}

/// Publishes messages of `size_of(seq)` bytes, seq 1..=`count`, into a 16 MiB ring before
/// anyone subscribes, then subscribes from the earliest (so the subscriber starts behind the
/// whole stream) and receives them all, checking each; returns the subscription.
fn receive_a_stream_from_behind(topic: &str, count: u64, size_of: impl Fn(u64) -> usize) -> rdma_pubsub::Subscription {
    let (pub_node, sub_node) = (node(), node());
    let publisher = pub_node.publisher(topic).ring_capacity(16 << 20).create().expect("publisher");
    for seq in 1..=count {
        publisher.publish(&payload(seq, size_of(seq))).expect("publish");
    }
    let mut sub = sub_node.subscriber(topic).start(Start::Earliest).create().expect("subscribe");
    sub.connect_wait(pub_node.local_addr(), WAIT).expect("connect");
    let deadline = Instant::now() + WAIT;
    for seq in 1..=count {
        let m = recv_until(&mut sub, deadline);
        assert_eq!(m.seq, seq, "in order, each once");
        check(&m, &size_of);
    }
    sub
}

/// Behind a stream of records larger than the batch (256 KiB), the subscriber keeps a second
/// READ on the wire behind the first, planned from the header the first ends with: the
/// publisher's NIC serves them back to back. Every message arrives in order, and no READ is
/// wasted on a wrong guess while the sizes stay the same.
#[test]
fn behind_large_records_a_second_read_travels_behind_the_first() {
    let sub = receive_a_stream_from_behind("behind-large", 24, |_| 300 << 10);
    let c = sub.counters();
    if c.in_place_connects() == 0 {
        assert!(c.reads_behind() > 0, "READs planned behind the one in flight: {c:?}");
        // A probe, the first record, then one READ per record.
        assert!(c.reads() <= 24 + 3, "no READ wasted: {c:?}");
    } else {
        assert_eq!(c.reads_behind(), 0, "read in place: no READ at all");
    }
}

/// A subscriber that caught up guesses nothing: large messages published one at a time, each
/// once the previous one arrived, cost no READ of a record not written yet (each such READ
/// would move a whole record of stale bytes ahead of the next message).
#[test]
fn a_subscriber_that_caught_up_posts_no_read_behind() {
    let (pub_node, sub_node) = (node(), node());
    let publisher = pub_node.publisher("behind-caught-up").ring_capacity(16 << 20).create().expect("publisher");
    let mut sub = sub_node.subscriber("behind-caught-up").start(Start::Earliest).create().expect("subscribe");
    sub.connect_wait(pub_node.local_addr(), WAIT).expect("connect");
    let deadline = Instant::now() + WAIT;
    for seq in 1..=12 {
        publisher.publish(&payload(seq, 300 << 10)).expect("publish");
        let m = recv_until(&mut sub, deadline);
        assert_eq!(m.seq, seq);
        check(&m, |_| 300 << 10);
    }
    let c = sub.counters();
    assert_eq!(c.reads_behind(), 0, "{c:?}");
}

/// Records no larger than the batch are READ several at a time, one READ in flight: nothing
/// is guessed.
#[test]
fn records_within_the_batch_are_read_without_a_second_read_in_flight() {
    let sub = receive_a_stream_from_behind("behind-small", 40, |_| 64 << 10);
    let c = sub.counters();
    assert_eq!(c.reads_behind(), 0, "{c:?}");
    if c.in_place_connects() == 0 {
        // Three 64 KiB records (and the next header) per 256 KiB READ.
        assert!(c.reads() <= 40 / 3 + 4, "{c:?}");
    }
}

/// The second READ guesses that the next record is as large as the last: when sizes change it
/// is short, long or stale, and every message still arrives once, in order, intact.
#[test]
fn reads_planned_behind_on_a_wrong_guess_lose_and_repeat_nothing() {
    let size_of = |seq: u64| [300 << 10, 420 << 10, 270 << 10, 270 << 10, 700 << 10][(seq % 5) as usize] + seq as usize;
    receive_a_stream_from_behind("behind-guess", 30, size_of);
}

/// A READ whose headers show more written data after it is followed by the next READ before
/// its records are validated and its messages handed out, so the next batch travels while the
/// subscriber checks this one and the caller works on it (over the network path; on the same
/// host the ring is read in place).
#[test]
fn the_next_read_is_in_flight_while_a_message_is_delivered() {
    let (pub_node, sub_node) = (node(), node());
    let publisher = pub_node.publisher("pipelined").create().expect("publisher");
    // Two messages that one minimum-size READ (4 KiB) cannot hold together.
    for seq in 1..=2 {
        publisher.publish(&payload(seq, 3000)).expect("publish");
    }
    let mut sub = sub_node.subscriber("pipelined").start(Start::Earliest).batch(4096).create().expect("subscribe");
    sub.connect_wait(pub_node.local_addr(), WAIT).expect("connect");
    let first = recv_until(&mut sub, Instant::now() + WAIT);
    assert_eq!(first.seq, 1);
    check(&first, |_| 3000);
    if sub.counters().in_place_connects() == 0 {
        assert_eq!(sub.counters().reads(), 2, "the second READ was posted before delivery");
        // It went out as soon as the headers showed the second record, before the first was
        // validated.
        assert_eq!(sub.counters().reads_ahead(), 1);
    } else {
        // On the same host the ring is read in place: there is no READ to send ahead.
        assert_eq!(sub.counters().reads_ahead(), 0);
    }
    let second = recv_until(&mut sub, Instant::now() + WAIT);
    check(&second, |_| 3000);
}

#[test]
fn a_subscriber_reads_through_the_path_its_node_chose_and_counts_it() {
    let pub_node = node_without_discovery();
    let sub_node = node_without_discovery();
    let publisher = pub_node.publisher("path").create().unwrap();
    let mut sub = sub_node.subscriber("path").create().unwrap();
    let info = sub.connect_wait(pub_node.local_addr(), WAIT).expect("connect");
    assert_eq!(info.data_path, expected_data_path());
    let (shared, network) = match expected_data_path() {
        DataPath::SharedMemory => (1, 0),
        DataPath::Network => (0, 1),
    };
    assert_eq!(sub.counters().shared_memory_connects(), shared);
    assert_eq!(sub.counters().network_connects(), network);
    publisher.publish(&payload(1, 100)).unwrap();
    let m = sub.recv_timeout(WAIT).unwrap().expect("a message");
    assert_eq!(m.data, payload(1, 100));
    assert_eq!(m.publisher.data_path, info.data_path);
}

/// On the same host a subscription reads its publisher's ring in place (counted), parking or
/// busy-polling, and gets every message, in order, byte for byte; over the network it READs.
#[test]
fn a_same_host_subscription_reads_the_ring_in_place_and_gets_every_message_in_order() {
    const MESSAGES: u64 = 20_000;
    for busy_poll in [false, true] {
        let pub_node = node_without_discovery();
        let sub_node = node_without_discovery();
        let publisher = pub_node.publisher("in-place").ring_capacity(64 * 1024).create().unwrap();
        let mut sub = sub_node.subscriber("in-place").busy_poll(busy_poll).create().unwrap();
        sub.connect_wait(pub_node.local_addr(), WAIT).expect("connect");
        publisher.wait_for_subscribers(1, WAIT).expect("accepted");
        let in_place = u64::from(expected_data_path() == DataPath::SharedMemory);
        assert_eq!(sub.counters().in_place_connects(), in_place, "busy_poll {busy_poll}");
        let writer = thread::spawn(move || {
            for seq in 1..=MESSAGES {
                // Bursts, and pauses until the subscriber consumed everything (it acks once idle):
                // the subscriber both keeps up and waits.
                if seq % 5000 == 0 {
                    publisher.flush(WAIT).expect("the subscriber acknowledged the tail");
                }
                assert_eq!(publisher.publish(&payload(seq, (seq % 300) as usize)).unwrap(), seq);
            }
            publisher
        });
        let deadline = Instant::now() + WAIT;
        for seq in 1..=MESSAGES {
            let m = recv_until(&mut sub, deadline);
            assert_eq!(m.seq, seq, "busy_poll {busy_poll}: in order");
            check(&m, |s| (s % 300) as usize);
        }
        drop(writer.join().unwrap());
        let c = sub.counters();
        assert_eq!((c.lost(), c.torn()), (0, 0), "busy_poll {busy_poll}");
        if in_place == 1 {
            assert_eq!(c.reads_ahead(), 0, "busy_poll {busy_poll}: no READ was posted");
        }
    }
}

/// Records carry no checksum while every subscriber reads the ring in place, and carry one
/// again, the retained ones completed before the accept, as soon as a subscriber that READs
/// (over the network) is accepted: it gets every retained message from the earliest; once it
/// leaves, records go without a checksum again.
#[test]
fn records_carry_a_checksum_exactly_while_a_subscriber_reads_them() {
    let pub_node = node_without_discovery();
    let sub_node = node_without_discovery();
    let publisher = pub_node.publisher("checksums").ring_capacity(1 << 20).create().unwrap();
    let mut in_place = sub_node.subscriber("checksums").create().unwrap();
    in_place.connect_wait(pub_node.local_addr(), WAIT).expect("connect");
    let deadline = Instant::now() + WAIT;
    let unchecked = || publisher.counters().unchecked_records();
    let mut published = 0u64;
    let mut publish_and_take = |sub: &mut rdma_pubsub::Subscription, count: u64| {
        for _ in 0..count {
            published = publisher.publish(&payload(published + 1, 200)).unwrap();
            assert_eq!(recv_until(sub, deadline).seq, published);
        }
        published
    };
    if in_place.counters().in_place_connects() == 0 {
        // Over the network every subscriber READs: every record carries its checksum.
        publish_and_take(&mut in_place, 100);
        assert_eq!(unchecked(), 0);
        return;
    }
    // Once the publisher heard that its one subscriber reads in place, records go unchecked.
    while unchecked() == 0 {
        assert!(Instant::now() < deadline, "the publisher never wrote a record without a checksum");
        publish_and_take(&mut in_place, 1);
    }
    let before_reader = publish_and_take(&mut in_place, 100);
    let unchecked_before = unchecked();
    assert!(unchecked_before >= 100);

    // A subscriber that READs joins at the earliest message: every retained record validates.
    let network_node = nodes::soft_node_with(SameHost::Off);
    let mut reading = network_node.subscriber("checksums").start(Start::Earliest).create().unwrap();
    reading.connect_wait(pub_node.local_addr(), WAIT).expect("connect over the network");
    assert_eq!(reading.counters().in_place_connects(), 0);
    for seq in 1..=before_reader {
        let m = recv_until(&mut reading, deadline);
        assert_eq!(m.seq, seq, "every retained message, in order");
        check(&m, |_| 200);
    }
    let with_reader = publish_and_take(&mut in_place, 100);
    for seq in before_reader + 1..=with_reader {
        assert_eq!(recv_until(&mut reading, deadline).seq, seq);
    }
    assert_eq!(unchecked(), unchecked_before, "every record written while it READs has a checksum");
    assert_eq!(reading.counters().torn(), 0);

    // It leaves: records go unchecked again.
    drop(reading);
    drop(network_node);
    while publisher.counters().subscribers() != 1 {
        assert!(Instant::now() < deadline, "the READing subscriber was never removed");
        std::thread::yield_now();
    }
    publish_and_take(&mut in_place, 100);
    assert_eq!(unchecked(), unchecked_before + 100, "records without a checksum again");
}

/// A parked subscriber is woken by its publisher's doorbell. One that READs the ring (network,
/// verbs) gets the new records with the doorbell and takes its message from them without a
/// READ: one wake-up per message, not its own and then the publisher's NIC for the READ. One
/// that reads the ring in place (soft, same host) gets a bare doorbell and reads the ring. With
/// no spin a subscriber parks whenever it finds the ring empty (an empty READ, the doorbell
/// request, one more READ), which a bounded receive with nothing published gives it time for.
#[test]
fn a_parked_subscriber_that_reads_takes_its_message_from_the_doorbell() {
    let (pub_node, sub_node) = (node_without_discovery(), node_without_discovery());
    let publisher = pub_node.publisher("bell-records").create().expect("publisher");
    let mut sub = sub_node.subscriber("bell-records").spin(Duration::ZERO).create().expect("subscribe");
    sub.connect_wait(pub_node.local_addr(), WAIT).expect("connect");
    wait_subscribers(&publisher, 1);
    // The emulated verbs guest is about 100 times slower: longer idle, fewer messages.
    let (count, idle) = match fabric_kind() {
        FabricKind::Verbs => (scale(20).max(4), Duration::from_millis(500)),
        _ => (20, Duration::from_millis(20)),
    };
    // The READs of the connection's start (a whole batch) are not the parked feed's.
    let mut read0 = 0;
    for seq in 1..=count {
        assert!(sub.recv_timeout(idle).expect("recv").is_none(), "nothing was published");
        if seq == 1 {
            read0 = sub.counters().read_bytes();
        }
        publisher.publish(&payload(seq, 64)).expect("publish");
        let m = sub.recv_timeout(WAIT).expect("recv").expect("the message");
        assert_eq!(m.seq, seq);
        check(&m, |_| 64);
    }
    let c = sub.counters();
    let (doorbells, taken, sent) = (c.doorbells(), c.doorbell_records(), publisher.counters().doorbells_with_records());
    let read_bytes = c.read_bytes() - read0;
    let in_place = c.in_place_connects() == 1;
    drop(sub);
    drop(publisher);
    assert!(doorbells * 2 >= count, "{doorbells} doorbells for {count} messages after a park each");
    if in_place {
        assert_eq!((taken, sent), (0, 0), "a subscriber reading in place gets bare doorbells");
    } else {
        // A doorbell whose records a READ in flight overtook only wakes the subscriber.
        assert!(taken * 2 >= count, "{taken} of {count} messages came with their doorbell ({doorbells} doorbells)");
        assert!(sent >= taken, "{sent} doorbells sent with records, {taken} taken");
        // Records up to the doorbell's tail leave the feed caught up: it probes the ring (a
        // page) before it parks again, rather than READing a whole batch (256 KiB) of stale
        // bytes as a feed behind would.
        assert!(read_bytes < count * 64 * 1024, "{read_bytes} bytes READ for {count} messages");
    }
}
