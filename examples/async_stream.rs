//! The subscription as an async `Stream` (feature `async`), with its events read while
//! streaming. Run: `cargo run --example async_stream --features async`.

use std::future::poll_fn;
use std::pin::Pin;
use std::time::Duration;

use futures_core::Stream;
use rdma_pubsub::{DiscoveryOptions, Node, Start};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The stream is woken through tokio's reactor: a runtime with its I/O driver.
    let runtime = tokio::runtime::Builder::new_current_thread().enable_io().build()?;
    runtime.block_on(async {
        let node = || Node::builder().discovery(DiscoveryOptions::disabled()).build();
        let (publishing, subscribing) = (node()?, node()?);
        let publisher = publishing.publisher("ticks").create()?;
        let mut ticks = subscribing.subscriber("ticks").start(Start::Earliest).create()?;
        ticks.connect_wait(publishing.local_addr(), Duration::from_secs(10))?;
        for tick in 0..3u8 {
            publisher.publish(&[tick])?;
        }
        // Closing blocks (up to its timeout) for the subscriber to read: off the runtime's thread.
        let closing = std::thread::spawn(move || publisher.close(Duration::from_secs(5)));
        let mut stream = ticks.stream();
        // Without discovery the stream ends with the end of its only publisher's stream.
        while let Some(message) = poll_fn(|cx| Pin::new(&mut stream).poll_next(cx)).await {
            let m = message?;
            println!("tick {} from publisher {:016x}", m.data[0], m.publisher.id);
            while let Some(event) = stream.try_event() {
                println!("event: {event:?}");
            }
        }
        while let Some(event) = stream.try_event() {
            println!("event: {event:?}");
        }
        closing.join().expect("the closing thread")?;
        Ok(())
    })
}
