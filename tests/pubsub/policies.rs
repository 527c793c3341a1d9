//! The slow-subscriber policies end to end: Block (and its timeouts), Overwrite, DropSlow.

use super::*;

#[test]
fn block_delivers_a_million_mixed_messages_exactly_once_in_order_to_four_subscribers() {
    let count = scale(1_000_000);
    let pub_node = node();
    let sub_node = node();
    let publisher = pub_node.publisher("bulk").policy(Policy::Block { timeout: WAIT }).create().unwrap();
    let subs: Vec<_> = (0..4).map(|_| subscribe(&sub_node, "bulk", Start::Latest, pub_node.local_addr())).collect();
    wait_subscribers(&publisher, 4);
    let readers: Vec<_> = subs
        .into_iter()
        .map(|mut sub| {
            thread::spawn(move || {
                let deadline = Instant::now() + Duration::from_secs(600);
                let mut bytes = 0u64;
                for expected in 1..=count {
                    let m = recv_until(&mut sub, deadline);
                    assert_eq!(m.seq, expected, "in order, nothing lost or repeated");
                    check(&m, mixed_size);
                    bytes += m.data.len() as u64;
                }
                assert!(sub.try_recv().unwrap().is_none(), "nothing beyond the last message");
                bytes
            })
        })
        .collect();
    let mut total = 0u64;
    for seq in 1..=count {
        let len = mixed_size(seq);
        total += len as u64;
        assert_eq!(publisher.publish(&payload(seq, len)).unwrap(), seq);
    }
    assert!(total > (900 << 20) / (1_000_000 / count), "about 1 GiB in all ({total} bytes)");
    for r in readers {
        assert_eq!(r.join().expect("reader thread"), total);
    }
}

#[test]
fn overwrite_reports_exact_lost_counts() {
    let count = scale(20_000).max(2_000);
    let pub_node = node();
    let sub_node = node();
    let publisher = pub_node.publisher("lossy").policy(Policy::Overwrite).ring_capacity(64 * 1024).create().unwrap();
    let mut sub = subscribe(&sub_node, "lossy", Start::Latest, pub_node.local_addr());
    wait_subscribers(&publisher, 1);
    let size = |seq: u64| 16 + (seq % 200) as usize;
    // The subscriber reads nothing while the publisher laps the ring many times.
    for seq in 1..=count {
        publisher.publish(&payload(seq, size(seq))).unwrap();
    }
    let deadline = Instant::now() + WAIT;
    let (mut delivered, mut lost, mut last) = (0u64, 0u64, 0u64);
    while last < count {
        let m = recv_until(&mut sub, deadline);
        let mut lost_before = 0;
        while let Some(ev) = sub.try_event() {
            if let SubscriptionEvent::Lost { count, .. } = ev {
                lost_before += count;
            }
        }
        assert_eq!(m.seq, last + 1 + lost_before, "the lost count accounts exactly for the gap");
        check(&m, size);
        lost += lost_before;
        delivered += 1;
        last = m.seq;
    }
    assert!(lost > 0, "the ring was overrun");
    assert_eq!(delivered + lost, count);
    assert_eq!(sub.counters().lost(), lost);
}

#[test]
fn drop_slow_disconnects_the_slow_subscriber_and_keeps_the_fast_one() {
    const COUNT: u64 = 5_000;
    let pub_node = node();
    let sub_node = node();
    let publisher = pub_node
        .publisher("dropslow")
        .policy(Policy::DropSlow { grace: Duration::from_millis(500) })
        .ring_capacity(64 * 1024)
        .create()
        .unwrap();
    let mut fast = subscribe(&sub_node, "dropslow", Start::Latest, pub_node.local_addr());
    let mut slow = subscribe(&sub_node, "dropslow", Start::Latest, pub_node.local_addr());
    wait_subscribers(&publisher, 2);
    let size = |_| 100;
    let fast_reader = thread::spawn(move || {
        let deadline = Instant::now() + WAIT;
        for expected in 1..=COUNT {
            let m = recv_until(&mut fast, deadline);
            assert_eq!(m.seq, expected);
            check(&m, size);
        }
        fast
    });
    for seq in 1..=COUNT {
        publisher.publish(&payload(seq, 100)).unwrap();
    }
    let _fast = fast_reader.join().expect("the fast subscriber got everything");
    assert_eq!(publisher.counters().dropped(), 1, "only the slow one was dropped");
    assert_eq!(publisher.subscriber_count(), 1, "the fast one is still connected");
    assert_eq!(publisher.counters().dropped(), 1);
    // The slow subscriber learns why, after the messages it had room for.
    let deadline = Instant::now() + WAIT;
    let reason = loop {
        assert!(Instant::now() < deadline, "the slow subscriber was not told");
        match slow.recv_timeout(Duration::from_millis(50)) {
            Ok(Some(m)) => check(&m, size),
            Ok(None) | Err(Error::Dropped { .. }) => {}
            Err(e) => panic!("unexpected error {e}"),
        }
        if let Some(SubscriptionEvent::Dropped { reason, .. }) =
            std::iter::from_fn(|| slow.try_event()).find(|e| matches!(e, SubscriptionEvent::Dropped { .. }))
        {
            break reason;
        }
    };
    assert!(matches!(reason, DropReason::TooSlow { lag } if lag > 0), "reason: {reason:?}");
}

/// A publisher held back by several subscribers asks the one that will probably ack last for
/// a solicited ack and wakes for that ack alone, not for every ack: far fewer waits than acks,
/// and nothing lost.
#[test]
fn a_publisher_blocked_by_several_subscribers_does_not_wake_for_every_ack() {
    let pub_node = node();
    let sub_node = node();
    let publisher =
        pub_node.publisher("rhythm").policy(Policy::Block { timeout: WAIT }).ring_capacity(64 * 1024).create().unwrap();
    // At least six laps of the ring, even scaled down: each subscriber must have acked a few
    // times for its rhythm to show.
    let count = scale(1500).max(400);
    let readers: Vec<_> = (0..8)
        .map(|_| {
            let mut sub = subscribe(&sub_node, "rhythm", Start::Earliest, pub_node.local_addr());
            thread::spawn(move || {
                let deadline = Instant::now() + WAIT;
                for expected in 1..=count {
                    let m = recv_until(&mut sub, deadline);
                    assert_eq!(m.seq, expected);
                    check(&m, |_| 1024);
                    // A consumer slower than the publisher: the ring stays full.
                    let busy = Instant::now();
                    while busy.elapsed() < Duration::from_micros(100) {
                        std::hint::spin_loop();
                    }
                }
                let c = sub.counters();
                (c.credit_requests(), c.solicited_acks())
            })
        })
        .collect();
    wait_subscribers(&publisher, 8);
    for seq in 1..=count {
        publisher.publish(&payload(seq, 1024)).unwrap();
    }
    let answered: u64 = readers.into_iter().map(|r| r.join().expect("every subscriber got every message").1).sum();
    let c = publisher.counters();
    let (waits, solicited, asked, acks) = (c.waits(), c.solicited_waits(), c.credit_requests(), c.acks());
    eprintln!("waits {waits} (solicited {solicited}), credit requests {asked} (answered {answered}), acks {acks}");
    assert!(solicited > 0 && asked > 0, "the publisher asked for credit and waited for the answer alone");
    assert!(answered > 0, "subscribers answered with solicited acks");
    assert!(waits < acks, "fewer waits ({waits}) than acks ({acks})");
}

#[test]
fn block_times_out_when_a_subscriber_does_not_read() {
    let pub_node = node();
    let sub_node = node();
    let publisher = pub_node
        .publisher("stuck")
        .policy(Policy::Block { timeout: Duration::from_millis(200) })
        .ring_capacity(64 * 1024)
        .create()
        .unwrap();
    let _sub = subscribe(&sub_node, "stuck", Start::Latest, pub_node.local_addr());
    wait_subscribers(&publisher, 1);
    let mut published = 0;
    let err = loop {
        match publisher.publish(&[7u8; 1000]) {
            Ok(_) => published += 1,
            Err(e) => break e,
        }
        assert!(published < 1000, "the ring should fill");
    };
    assert!(matches!(err, Error::Timeout { millis: 200, .. }), "the error names the Block timeout: {err}");
    assert!(published >= 60, "a whole ring was published first ({published})");
}

/// A flush that times out while finishing a message a timed-out publish left partly written
/// reports its own call and timeout, not the Block policy's.
#[test]
fn flush_times_out_with_its_own_timeout_while_finishing_a_partly_written_message() {
    let (pub_node, sub_node) = (node(), node());
    let publisher = pub_node
        .publisher("stuck-flush")
        .policy(Policy::Block { timeout: Duration::from_millis(200) })
        .ring_capacity(64 * 1024)
        .create()
        .unwrap();
    let _sub = subscribe(&sub_node, "stuck-flush", Start::Latest, pub_node.local_addr());
    wait_subscribers(&publisher, 1);
    // Four rings' worth: its first fragments fill the ring, then it waits its Block timeout.
    let partly = publisher.publish(&vec![7u8; 256 * 1024]).unwrap_err();
    assert!(matches!(partly, Error::Timeout { millis: 200, .. }), "{partly}");
    let err = publisher.flush(Duration::from_millis(50)).unwrap_err();
    match err {
        Error::Timeout { what, millis } => {
            assert!(what.starts_with("flush"), "the flush timed out, not a publish: {what}");
            assert_eq!(millis, 50, "the flush's timeout");
        }
        other => panic!("a timeout, not {other}"),
    }
}

#[test]
fn publishers_on_several_threads_take_turns_through_credit_waits_and_fragments() {
    // Two threads share one Block publisher whose 64 KiB ring fills all the time, with
    // messages of up to 40 KiB (fragmented at the 16 KiB record limit): a call waiting for
    // credit in the middle of a message holds the turn, so the other thread's messages never
    // land between its fragments, and nothing is lost or damaged.
    let pub_node = node();
    let sub_node = node();
    let publisher = Arc::new(
        pub_node
            .publisher("turns")
            .policy(Policy::Block { timeout: Duration::from_secs(30) })
            .ring_capacity(64 * 1024)
            .create()
            .unwrap(),
    );
    let mut sub = subscribe(&sub_node, "turns", Start::Latest, pub_node.local_addr());
    wait_subscribers(&publisher, 1);
    // Enough to fill the ring many times over, even scaled down in the emulated guest.
    let per_thread = scale(400).max(16);
    // Message i of thread t: 8 bytes (t, i) then a pattern of a size that varies with i.
    let message = |t: u64, i: u64| {
        let len = 8 + (mix(t << 32 | i) % (40 * 1024)) as usize;
        let mut v = payload(t << 32 | i, len);
        v[..8].copy_from_slice(&(t << 32 | i).to_le_bytes());
        v
    };
    let threads: Vec<_> = (0..2u64)
        .map(|t| {
            let publisher = publisher.clone();
            thread::spawn(move || {
                for i in 0..per_thread {
                    publisher.publish(&message(t, i)).expect("publish");
                }
            })
        })
        .collect();
    // Nothing is consumed until the publisher has waited for credit: the ring is full, and the
    // turn is in use from here on.
    let deadline = Instant::now() + WAIT;
    while publisher.counters().waits() == 0 {
        assert!(Instant::now() < deadline, "the publisher never waited for credit");
        thread::yield_now();
    }
    let mut next = [0u64; 2];
    for _ in 0..2 * per_thread {
        let m = recv_until(&mut sub, deadline);
        let id = u64::from_le_bytes(m.data[..8].try_into().unwrap());
        let (t, i) = (id >> 32, id & 0xffff_ffff);
        assert!(t < 2, "a message of no thread");
        assert_eq!(i, next[t as usize], "thread {t}'s messages arrive in its order");
        assert!(m.data == message(t, i), "message {i} of thread {t} is intact");
        next[t as usize] += 1;
    }
    for t in threads {
        t.join().expect("publishing thread");
    }
    assert_eq!(next, [per_thread, per_thread]);
}
