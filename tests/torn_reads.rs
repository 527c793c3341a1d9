//! Torn reads on the real soft NIC: the NIC thread copies ring records straight out of the
//! publisher's registered memory (`writev` from the region) while an `Overwrite` publisher
//! rewrites them on a minimum-size (64 KiB) ring. Every delivered message is checked byte by
//! byte, and the subscriber must actually have met (and re-read) torn records.
//!
//! When a READ tears: the producer rewrites a record payload first, header last (position word
//! last of all), so a READ tears only when it copies the old lap's header of a record whose
//! payload the next lap is rewriting, i.e. when the reader is exactly one lap behind and the
//! copy overlaps the rewrite. Free-running, that window is a few hundred nanoseconds and a
//! lapped reader rarely lands in it (the hammering phase below typically sees no tear at all).
//! So the first phase makes it happen on purpose, every round: the producer rewrites half a
//! record with an in-place claim and holds it there while the subscriber READs it, and the test
//! asserts each such READ was detected as torn, never delivered.

#[path = "common/nodes.rs"]
mod nodes;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use rdma_pubsub::fabric::SameHost;
use rdma_pubsub::{Error, Policy, Subscription, SubscriptionEvent};

/// Bound of the whole test.
const DEADLINE: Duration = Duration::from_secs(20);
/// Rounds of the first phase, each rewriting one record under a READ (two laps each).
const ROUNDS: u64 = 300;
/// Records in one lap of the ring in the rounds.
const LAP: u64 = 8;
/// Messages of the second phase (8 KiB on average: every byte of the 64 KiB ring is rewritten
/// thousands of times).
const HAMMERED: u64 = 30_000;
/// Longest the producer holds a record half-rewritten for the subscriber to READ it.
const HOLD: Duration = Duration::from_secs(2);

/// Payload length of message `seq`: records of exactly 8 KiB (eight per lap, no padding) in
/// the rounds, so each lap rewrites every record in place, payload first and header last;
/// 1..16 KiB while hammering, so records straddle every alignment.
fn size_of(seq: u64) -> usize {
    if seq <= ROUNDS * 2 * LAP {
        RECORD - 32
    } else {
        1024 + (seq.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 40) as usize % (15 * 1024)
    }
}

/// Bytes of a full record of the rounds (header included).
const RECORD: usize = 8192;

/// A self-checking payload: the sequence, the length, then bytes that depend on both and on
/// their index (a torn mix of two messages fails the check).
fn payload(seq: u64) -> Vec<u8> {
    let len = size_of(seq);
    let mut v = Vec::with_capacity(len);
    v.extend_from_slice(&seq.to_le_bytes());
    v.extend_from_slice(&(len as u32).to_le_bytes());
    v.extend((12..len).map(|i| byte_at(seq, i)));
    v
}

fn byte_at(seq: u64, i: usize) -> u8 {
    let x = (seq ^ (i as u64).rotate_left(17)).wrapping_mul(0xff51_afd7_ed55_8ccd);
    (x >> 56) as u8
}

/// Checks a delivered message against what its sequence number implies.
fn check(seq: u64, data: &[u8]) {
    assert_eq!(data.len(), size_of(seq), "length of message {seq}");
    assert_eq!(u64::from_le_bytes(data[..8].try_into().unwrap()), seq, "embedded sequence of message {seq}");
    assert_eq!(u32::from_le_bytes(data[8..12].try_into().unwrap()) as usize, data.len(), "embedded length");
    if let Some(i) = (12..data.len()).find(|&i| data[i] != byte_at(seq, i)) {
        panic!("message {seq} is corrupt at byte {i} of {}", data.len());
    }
}

/// What the subscriber thread saw.
#[derive(Debug, Default)]
struct Seen {
    delivered: u64,
    lost: u64,
    last: u64,
    ended: Option<(u64, bool)>,
    disconnected: bool,
}

impl Seen {
    /// Takes one delivered message (after checking its content) and the events before it.
    fn take(&mut self, sub: &mut Subscription, seq: Option<u64>) {
        let mut lost_before = 0;
        while let Some(ev) = sub.try_event() {
            match ev {
                SubscriptionEvent::Lost { count, .. } => lost_before += count,
                SubscriptionEvent::Ended { final_seq, complete, .. } => self.ended = Some((final_seq, complete)),
                // The publisher's orderly close may be seen as a disconnect when the CM event
                // overtakes the end-of-stream message (reported to the lead as a bug); the
                // accounting below must hold either way.
                SubscriptionEvent::Disconnected { .. } => self.disconnected = true,
                SubscriptionEvent::Connected(_) => {}
                other => panic!("unexpected event {other:?}"),
            }
        }
        self.lost += lost_before;
        if let Some(seq) = seq {
            assert_eq!(seq, self.last + 1 + lost_before, "in order; every gap is reported lost exactly");
            self.last = seq;
            self.delivered += 1;
        } else {
            assert_eq!(lost_before, 0, "a loss is reported just before the next message");
        }
    }
}

/// Signals between the producer (test thread) and the subscriber thread.
#[derive(Default)]
struct Shared {
    /// The round the producer has prepared; `u64::MAX`: free running.
    round: AtomicU64,
    /// Last sequence of the prepared round.
    target: AtomicU64,
    /// Torn re-reads the subscription counted.
    torn: AtomicU64,
    /// Last sequence the subscriber received.
    last: AtomicU64,
    /// Messages the subscriber was told it lost.
    lost: AtomicU64,
    /// The subscriber thread failed.
    failed: AtomicBool,
}

/// The subscriber thread: in each round, READs only once the producer has a record
/// half-rewritten, then receives up to the round's last message; then receives until the end.
fn subscriber(mut sub: Subscription, shared: Arc<Shared>, deadline: Instant) -> (Seen, u64) {
    let mut seen = Seen::default();
    let mut round = 0;
    loop {
        assert!(Instant::now() < deadline, "the subscriber did not finish in time");
        let free = shared.round.load(Ordering::Acquire) == u64::MAX;
        if !free && round == shared.round.load(Ordering::Acquire) {
            // Not calling the subscription: it posts no READ until the next round is ready.
            thread::yield_now();
            continue;
        }
        round += 1;
        let target = if free { u64::MAX } else { shared.target.load(Ordering::Acquire) };
        while seen.last < target {
            if Instant::now() >= deadline {
                let c = sub.counters();
                panic!(
                    "round {round}: stuck at {} of {target} (reads {}, empty {}, torn {}, lost {})",
                    seen.last,
                    c.reads(),
                    c.empty_reads(),
                    c.torn(),
                    c.lost()
                );
            }
            let got = match sub.recv_ref(Duration::from_millis(50)) {
                Ok(Some(m)) => {
                    check(m.seq, m.data);
                    Some(m.seq)
                }
                Ok(None) => None,
                Err(Error::NotConnected { .. }) => {
                    seen.take(&mut sub, None);
                    let torn = sub.counters().torn();
                    return (seen, torn);
                }
                Err(e) => {
                    shared.failed.store(true, Ordering::Release);
                    panic!("subscription failed: {e}");
                }
            };
            seen.take(&mut sub, got);
            if got.is_some() {
                // Only with a message: a torn re-read is complete (control block read, resync
                // done) once a message after it was delivered; a timeout may fall in between.
                shared.torn.store(sub.counters().torn(), Ordering::Release);
            }
            shared.lost.store(seen.lost, Ordering::Release);
            shared.last.store(seen.last, Ordering::Release);
        }
    }
}

#[test]
fn overwritten_records_are_never_delivered_torn() {
    let pub_node = nodes::soft_node_without_discovery();
    // The subscriber READs over the network path (the NIC thread copies from the region): on
    // the same host it would read the ring in place, where no READ tears (what a copy raced by
    // an overwrite does there is the wire crate's `ring::sim_tests::in_place`).
    let sub_node = nodes::soft_node_with(SameHost::Off);
    let publisher =
        pub_node.publisher("torn").policy(Policy::Overwrite).ring_capacity(64 * 1024).create().expect("publisher");
    // Busy polling: while receiving, the subscriber READs back to back.
    let mut sub = sub_node.subscriber("torn").busy_poll(true).batch(64 * 1024).create().expect("subscription");
    sub.connect_wait(pub_node.local_addr(), Duration::from_secs(10)).expect("connected");
    let deadline = Instant::now() + DEADLINE;
    publisher.wait_for_subscribers(1, DEADLINE).expect("the subscriber was accepted");
    let shared = Arc::new(Shared::default());
    let reader = {
        let shared = shared.clone();
        thread::spawn(move || subscriber(sub, shared, deadline))
    };
    let failed = || shared.failed.load(Ordering::Acquire);

    // Phase 1, rounds: the subscriber has consumed everything up to the end of a lap and READs
    // nothing. The producer writes one lap, then claims the next record, which sits over the
    // first one the subscriber has not READ yet, and rewrites half of its payload (the header is
    // still the old lap's). Only then may the subscriber READ: it finds that record torn,
    // re-reads the control block, learns it was lapped, and continues from the head (losing
    // exactly that message). The producer holds the record half-rewritten until the subscriber
    // reported the torn re-read (bounded by HOLD), commits it, and completes that lap.
    let mut published = 0u64;
    let mut held_until_torn = 0u64;
    for round in 1..=ROUNDS {
        // The subscriber finished the previous round: it is caught up and READs nothing now.
        while shared.last.load(Ordering::Acquire) < published {
            assert!(!failed() && Instant::now() < deadline, "round {round} did not start in time");
            thread::yield_now();
        }
        for _ in 0..LAP {
            published = publisher.publish(&payload(published + 1)).expect("an Overwrite publish never fails");
        }
        let data = payload(published + 1);
        let torn_before = shared.torn.load(Ordering::Acquire);
        let mut loan = publisher.loan(data.len()).expect("an Overwrite loan never fails");
        let half = data.len() / 2;
        loan[half..].copy_from_slice(&data[half..]);
        shared.target.store(loan.seq() + LAP - 1, Ordering::Release);
        shared.round.store(round, Ordering::Release);
        let hold = Instant::now() + HOLD;
        while shared.torn.load(Ordering::Acquire) == torn_before && Instant::now() < hold && !failed() {
            thread::yield_now();
        }
        held_until_torn += u64::from(shared.torn.load(Ordering::Acquire) > torn_before);
        loan[..half].copy_from_slice(&data[..half]);
        published = loan.send().expect("an Overwrite publish never fails");
        // Complete the lap: the subscriber's last READ of the round then ends exactly at the
        // end of the data area, so its next READ (next round) is of records, not of the
        // control block.
        for _ in 1..LAP {
            published = publisher.publish(&payload(published + 1)).expect("an Overwrite publish never fails");
        }
    }
    // Phase 2, hammering: the producer rewrites the ring as fast as it can while the subscriber
    // READs back to back (it is lapped most of the time).
    while shared.last.load(Ordering::Acquire) < published {
        assert!(!failed() && Instant::now() < deadline, "the last round did not end in time");
        thread::yield_now();
    }
    let rounds_lost = shared.lost.load(Ordering::Acquire);
    shared.round.store(u64::MAX, Ordering::Release);
    let phase2_torn = shared.torn.load(Ordering::Acquire);
    while published < ROUNDS * 2 * LAP + HAMMERED && !failed() {
        assert!(Instant::now() < deadline, "hammering took too long");
        published = publisher.publish(&payload(published + 1)).expect("an Overwrite publish never fails");
    }
    // Dropping the publisher ends the stream: the subscriber drains and sees `Ended`.
    drop(publisher);
    let (seen, torn) = reader.join().expect("subscriber thread");
    eprintln!(
        "published {published}; rounds {ROUNDS}, torn under a held rewrite {held_until_torn}; \
         torn in all {torn} ({} while hammering); delivered {}, lost {}",
        torn - phase2_torn,
        seen.delivered,
        seen.lost
    );
    assert_eq!(held_until_torn, ROUNDS, "every record rewritten under a READ was met torn");
    assert!(
        // Complete only when nothing was lost.
        seen.ended == Some((published, seen.lost == 0)) || (seen.ended.is_none() && seen.disconnected),
        "the stream ends after the last message: {seen:?}"
    );
    assert_eq!(seen.delivered + seen.lost, published, "every message delivered or reported lost");
    assert!(rounds_lost == ROUNDS, "each round lost exactly the record rewritten under the READ ({rounds_lost})");
}
