//! READ pacing of a caught-up subscriber fed a trickle of small messages, on the network path
//! (where every READ is a request the publisher's NIC thread serves). Same-host feeds are not
//! paced: a READ there is a copy by the subscriber's own thread (see
//! `node::spin_permit::tests::a_same_host_trickle_is_read_at_once_not_paced`). In its own test binary (cargo runs test binaries one after another): its
//! message cadence must not be stretched by the bulk tests of `tests/pubsub.rs` beside it.

#[path = "common/nodes.rs"]
mod nodes;

use rdma_pubsub::fabric::SameHost;
use std::thread;
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(30);

/// A caught-up subscriber fed a trickle of small messages paces its READs (up to 50 µs apart)
/// so that each brings a batch, instead of READing back to back for a message or two each.
#[test]
fn a_subscriber_fed_a_trickle_paces_its_reads() {
    let network = || nodes::soft_node_with(SameHost::Off);
    let (pub_node, sub_node) = (network(), network());
    let publisher = pub_node.publisher("trickle").create().expect("publisher");
    let mut sub = sub_node.subscriber("trickle").create().expect("subscribe");
    sub.connect_wait(pub_node.local_addr(), WAIT).expect("connect");
    publisher.wait_for_subscribers(1, WAIT).expect("the subscriber was accepted");
    let deadline = Instant::now() + WAIT;
    let count = 3000u64;
    let feeder = thread::spawn(move || {
        // One small message about every 10 µs (busy-waiting: the cadence, not a synchronisation).
        for seq in 1..=count {
            let next = Instant::now() + Duration::from_micros(10);
            publisher.publish(&seq.to_le_bytes().repeat(8)).expect("publish");
            while Instant::now() < next {
                std::hint::spin_loop();
            }
        }
        publisher
    });
    for seq in 1..=count {
        let m = loop {
            assert!(Instant::now() < deadline, "message {seq} did not arrive in time");
            if let Some(m) = sub.recv_timeout(Duration::from_millis(100)).expect("recv") {
                break m;
            }
        };
        assert_eq!((m.seq, m.data), (seq, seq.to_le_bytes().repeat(8)));
    }
    let publisher = feeder.join().expect("feeder");
    let reads = sub.counters().reads();
    // The subscription leaves first: the publisher then has nobody to wait for on drop.
    drop(sub);
    drop(publisher);
    // Back to back, a READ brings one or two of these messages (about 3,900 READs measured
    // without pacing); paced, several (about 450).
    assert!(reads * 3 < count, "{reads} READs for {count} messages");
}
