//! One thread publishes a run of small messages through an `ExclusivePublisher` (no lock per
//! message); a subscriber in another thread reads every one, in order, and the rate is
//! printed. Run: `cargo run --release --example throughput`.

use std::time::{Duration, Instant};

use rdma_pubsub::{DiscoveryOptions, Node, Policy, Start};

/// Messages in the run.
const MESSAGES: u64 = 200_000;

fn main() -> Result<(), rdma_pubsub::Error> {
    let node = || Node::builder().discovery(DiscoveryOptions::disabled()).build();
    let (publishing, subscribing) = (node()?, node()?);
    // Block: lossless, the publisher waits for credit when the subscriber falls a ring behind.
    let mut publisher =
        publishing.publisher("ticks").policy(Policy::Block { timeout: Duration::from_secs(10) }).create()?;
    let mut ticks = subscribing.subscriber("ticks").start(Start::Earliest).create()?;
    ticks.connect_wait(publishing.local_addr(), Duration::from_secs(10))?;

    let reader = std::thread::spawn(move || -> Result<u64, rdma_pubsub::Error> {
        let mut in_order = 0;
        for expected in 1..=MESSAGES {
            let view = ticks.recv_ref(Duration::from_secs(10))?.expect("a message within 10 s");
            let value = u64::from_le_bytes(view.data[..8].try_into().expect("8 bytes"));
            in_order += u64::from(view.seq == expected && value == expected);
        }
        Ok(in_order)
    });

    let start = Instant::now();
    {
        // Held until the end of the run: this thread publishes without a lock per message.
        let mut exclusive = publisher.exclusive()?;
        let mut message = [0u8; 64];
        for value in 1..=MESSAGES {
            message[..8].copy_from_slice(&value.to_le_bytes());
            exclusive.publish(&message)?;
        }
    }
    let in_order = reader.join().expect("the reading thread")?;
    let seconds = start.elapsed().as_secs_f64();
    println!("received {in_order} of {MESSAGES} messages in order");
    println!("{:.2} M messages/s of 64 bytes", MESSAGES as f64 / seconds / 1e6);
    Ok(())
}
