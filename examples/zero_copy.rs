//! Zero copy on both sides: a `Loan` writes a message in place in the publisher's ring, and
//! `recv_ref` lends the subscriber the bytes where its READ landed them. Run:
//! `cargo run --example zero_copy`.

use std::time::Duration;

use rdma_pubsub::{DiscoveryOptions, Node, Start};

fn main() -> Result<(), rdma_pubsub::Error> {
    let node = || Node::builder().discovery(DiscoveryOptions::disabled()).build();
    let (publishing, subscribing) = (node()?, node()?);
    let publisher = publishing.publisher("frames").create()?;
    let mut frames = subscribing.subscriber("frames").start(Start::Earliest).create()?;
    frames.connect_wait(publishing.local_addr(), Duration::from_secs(10))?;

    for frame in 0..3u8 {
        // At most one ring record (a quarter of the ring by default); zeroed.
        let mut loan = publisher.loan(16)?;
        loan[0] = frame;
        loan[1..6].copy_from_slice(b"frame");
        let seq = loan.send()?;
        println!("published frame {frame} as message {seq}");
    }
    for _ in 0..3 {
        // Borrowed until the next call on `frames`: no copy, no allocation.
        let view = frames.recv_ref(Duration::from_secs(10))?.expect("a frame within 10 s");
        println!("received message {}: frame {} ({} bytes)", view.seq, view.data[0], view.data.len());
    }
    Ok(())
}
