//! Typed publish/subscribe: a `Publisher<Quote>` and a `Subscription<Quote>` on two nodes of
//! this process, connected by address (no discovery). Run: `cargo run --example typed`.

use std::time::Duration;

use rdma_pubsub::{DiscoveryOptions, Node, Start};

/// Any `Serialize + Deserialize` type is a message type.
#[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
struct Quote {
    symbol: String,
    price: f64,
}

fn main() -> Result<(), rdma_pubsub::Error> {
    let node = || Node::builder().discovery(DiscoveryOptions::disabled()).build();
    let (publishing, subscribing) = (node()?, node()?);
    let publisher = publishing.publisher("quotes").typed::<Quote>().create()?;
    let mut quotes = subscribing.subscriber("quotes").start(Start::Earliest).typed::<Quote>().create()?;
    quotes.connect_wait(publishing.local_addr(), Duration::from_secs(10))?;

    for (i, symbol) in ["ABC", "DEF", "GHI"].into_iter().enumerate() {
        publisher.publish(&Quote { symbol: symbol.into(), price: 10.0 + i as f64 })?;
    }
    // Close the publisher (it waits up to 5 s for this subscriber to read everything) while
    // the subscription reads: without discovery, the end of its only stream ends `iter`.
    let closing = std::thread::spawn(move || publisher.close(Duration::from_secs(5)));
    for message in quotes.iter() {
        let m = message?;
        println!("quote {}: {} at {}", m.seq, m.data.symbol, m.data.price);
    }
    closing.join().expect("the closing thread")?;
    while let Some(event) = quotes.try_event() {
        println!("event: {event:?}");
    }
    Ok(())
}
