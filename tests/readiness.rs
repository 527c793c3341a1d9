//! A subscription driven by an event loop through its readiness descriptor
//! (`Subscription::ready_fd` and `prepare_wait`), on the soft fabric over loopback, with the
//! same-host path on and off: a publish and a refused connection make the descriptor readable,
//! and a quiet subscription leaves it unreadable. Every wait is a `poll(2)` with a timeout.

#[path = "common/nodes.rs"]
mod nodes;

use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use rdma_pubsub::fabric::SameHost;
use rdma_pubsub::{Node, RejectCode, Secret, Subscription, SubscriptionEvent};

use nodes::soft_node_with;

const WAIT: Duration = Duration::from_secs(10);
/// How long a quiet subscription's descriptor must stay unreadable.
const QUIET: Duration = Duration::from_millis(200);

/// Whether `sub`'s descriptor polls readable within `timeout`.
fn readable_within(sub: &Subscription, timeout: Duration) -> bool {
    let fd = sub.ready_fd().expect("ready_fd");
    let mut fds = [PollFd::new(fd.as_fd(), PollFlags::POLLIN)];
    let millis = PollTimeout::try_from(timeout).expect("a timeout poll(2) takes");
    poll(&mut fds, millis).expect("poll") > 0
}

/// Drives `sub` as an event loop does until its feeds are parked: taking what is there,
/// arming, and waiting for the descriptor, until a wait of [`QUIET`] times out. Returns the
/// messages taken. Panics after [`WAIT`].
fn drive_until_quiet(sub: &mut Subscription) -> Vec<Vec<u8>> {
    let deadline = Instant::now() + WAIT;
    let mut taken = Vec::new();
    loop {
        assert!(Instant::now() < deadline, "the subscription did not go quiet within {WAIT:?}");
        while let Some(m) = sub.try_recv().expect("try_recv") {
            taken.push(m.data);
        }
        while sub.try_event().is_some() {}
        if !sub.prepare_wait().expect("prepare_wait") && !readable_within(sub, QUIET) {
            return taken;
        }
    }
}

/// Two nodes, a publisher on the first, its subscription on the second, connected.
fn connected(topic: &str, same_host: SameHost) -> (Node, Node, rdma_pubsub::Publisher, Subscription) {
    let (a, b) = (soft_node_with(same_host), soft_node_with(same_host));
    let publisher = a.publisher(topic).create().expect("publisher");
    let mut sub = b.subscriber(topic).create().expect("subscribe");
    sub.connect_wait(a.local_addr(), WAIT).expect("connect");
    (a, b, publisher, sub)
}

fn a_publish_makes_the_descriptor_readable(same_host: SameHost) {
    let (_a, _b, publisher, mut sub) = connected("ready-publish", same_host);
    assert!(drive_until_quiet(&mut sub).is_empty(), "nothing was published yet");
    publisher.publish(b"wake up").expect("publish");
    assert!(readable_within(&sub, WAIT), "a publish made the parked subscription's descriptor readable");
    let deadline = Instant::now() + WAIT;
    let message = loop {
        if let Some(m) = sub.try_recv().expect("try_recv") {
            break m;
        }
        if !sub.prepare_wait().expect("prepare_wait") {
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(readable_within(&sub, left), "the message arrives within {WAIT:?}");
        }
    };
    assert_eq!(message.data, b"wake up");
}

#[test]
fn a_publish_makes_the_descriptor_readable_on_the_same_host_path() {
    a_publish_makes_the_descriptor_readable(SameHost::Auto);
}

#[test]
fn a_publish_makes_the_descriptor_readable_over_the_network_path() {
    a_publish_makes_the_descriptor_readable(SameHost::Off);
}

#[test]
fn a_quiet_subscription_leaves_the_descriptor_unreadable() {
    for same_host in [SameHost::Auto, SameHost::Off] {
        let (_a, _b, publisher, mut sub) = connected("ready-quiet", same_host);
        for i in 0..3u8 {
            publisher.publish(&[i; 64]).expect("publish");
        }
        let mut taken = drive_until_quiet(&mut sub);
        // Published before the wait began: every message arrives while it is driven.
        while taken.len() < 3 {
            assert!(readable_within(&sub, WAIT), "the rest of the messages arrive");
            taken.extend(drive_until_quiet(&mut sub));
        }
        assert_eq!(taken, (0..3u8).map(|i| vec![i; 64]).collect::<Vec<_>>());
        // Armed and parked: nothing makes the descriptor readable. (A `try_recv` now would
        // READ the parked feed once more, its doorbell recheck, and that READ's completion
        // would wake the loop once.)
        for _ in 0..3 {
            assert!(!readable_within(&sub, QUIET), "no readiness while nothing happens ({same_host:?})");
        }
    }
}

#[test]
fn a_refused_credential_makes_the_descriptor_readable() {
    let (a, b) = (soft_node_with(SameHost::Auto), soft_node_with(SameHost::Auto));
    let secret = Secret::new(b"the publisher's secret".to_vec()).expect("secret");
    let wrong = Secret::new(b"not the publisher's secret".to_vec()).expect("secret");
    let _publisher = a.publisher("ready-refused").credential(secret).create().expect("publisher");
    let mut sub = b.subscriber("ready-refused").credential(wrong).auto_connect(false).create().expect("subscribe");
    sub.connect(a.local_addr()).expect("connect");
    let deadline = Instant::now() + WAIT;
    let event = loop {
        if let Some(event) = sub.try_event() {
            break event;
        }
        // No publisher yet and no discovery: `try_recv` says so; the event is on its way.
        if !sub.prepare_wait().expect("prepare_wait") {
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(readable_within(&sub, left), "the refusal makes the descriptor readable within {WAIT:?}");
        }
    };
    match event {
        SubscriptionEvent::Rejected { reason, .. } => assert_eq!(reason, RejectCode::Unauthorized),
        other => panic!("expected a refusal, got {other:?}"),
    }
}
