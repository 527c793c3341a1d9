//! The three slow-subscriber policies, each with a subscriber that reads nothing while the
//! publisher writes four rings' worth, then reads: what the publisher and the subscriber see.
//! Run: `cargo run --example policies`.

use std::time::Duration;

use rdma_pubsub::{DiscoveryOptions, Error, Node, Policy, Start, Subscription, SubscriptionEvent};

/// Ring bytes of each publisher: small, so that a slow subscriber is soon a whole ring behind.
const RING: usize = 64 * 1024;
/// Messages published, of 1 KiB: four rings.
const MESSAGES: u64 = 256;

fn main() -> Result<(), Error> {
    let node = || Node::builder().discovery(DiscoveryOptions::disabled()).build();
    let (publishing, subscribing) = (node()?, node()?);
    let policies = [
        ("block", Policy::Block { timeout: Duration::from_millis(100) }),
        ("drop-slow", Policy::DropSlow { grace: Duration::from_millis(50) }),
        ("overwrite", Policy::Overwrite),
    ];
    for (topic, policy) in policies {
        println!("== {policy:?}");
        let publisher = publishing.publisher(topic).policy(policy).ring_capacity(RING).create()?;
        let mut slow = subscribing.subscriber(topic).start(Start::Earliest).create()?;
        slow.connect_wait(publishing.local_addr(), Duration::from_secs(10))?;
        // The subscription reads nothing meanwhile (its reads and acks happen in its calls).
        let mut published = 0;
        for _ in 0..MESSAGES {
            match publisher.publish(&[7u8; 1024]) {
                Ok(_) => published += 1,
                Err(e @ Error::Timeout { .. }) => {
                    println!("publisher: message {} not published: {e}", published + 1);
                    break;
                }
                Err(e) => return Err(e),
            }
        }
        println!("publisher: published {published}, dropped {} subscriber(s)", publisher.counters().dropped());
        read_what_is_left(&mut slow, published)?;
    }
    Ok(())
}

/// Reads until the last message published arrives, the subscription is refused, or a second
/// passes with nothing new; prints what it received and its events.
fn read_what_is_left(sub: &mut Subscription, published: u64) -> Result<(), Error> {
    let mut received = 0;
    loop {
        match sub.recv_timeout(Duration::from_secs(1)) {
            Ok(Some(m)) => {
                received += 1;
                if m.seq == published {
                    break;
                }
            }
            Ok(None) => break,
            Err(e @ Error::Dropped { .. }) => {
                println!("subscriber: recv says {e}");
                break;
            }
            Err(e) => return Err(e),
        }
    }
    println!("subscriber: received {received} of {published}");
    while let Some(event) = sub.try_event() {
        match event {
            SubscriptionEvent::Lost { count, reason, .. } => println!("subscriber: lost {count} ({reason:?})"),
            SubscriptionEvent::Dropped { reason, .. } => println!("subscriber: dropped ({reason:?})"),
            _ => {}
        }
    }
    Ok(())
}
