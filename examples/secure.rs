//! A discovery domain sealed with a secret, and a topic that only holders of its credential
//! may read: the right credential receives, a wrong one is refused at the receive call. Run:
//! `cargo run --example secure`.

use std::net::Ipv4Addr;
use std::time::Duration;

use rdma_pubsub::{DiscoveryOptions, Error, Node, Secret};

fn main() -> Result<(), Error> {
    // In production: `Secret::from_file(path)` (or `RDMA_PUBSUB_DOMAIN_SECRET_FILE`), at least
    // 16 bytes each, distributed out of band.
    let domain_secret = Secret::new(b"domain secret of this example".to_vec())?;
    let credential = Secret::new(b"credential of the topic payroll".to_vec())?;
    let wrong = Secret::new(b"a guess at the topic credential".to_vec())?;
    // A discovery group and port of this run's own, so that it hears no other program.
    let pid = std::process::id();
    let discovery = DiscoveryOptions::default()
        .group(Ipv4Addr::new(239, 194, (pid % 251) as u8, 1))
        .port(30000 + (pid % 5000) as u16);
    let node = || Node::builder().discovery(discovery.clone()).domain_secret(domain_secret.clone()).build();
    let (publishing, subscribing) = (node()?, node()?);

    let publisher = publishing.publisher("payroll").credential(credential.clone()).create()?;
    let mut allowed = subscribing.subscriber("payroll").credential(credential).create()?;
    // Discovery connects it by itself.
    publisher.wait_for_subscribers(1, Duration::from_secs(20))?;
    publisher.publish(b"salaries")?;
    let m = allowed.recv_timeout(Duration::from_secs(10))?.expect("a message within 10 s");
    println!("with the credential: received {:?}", String::from_utf8_lossy(&m.data));

    let mut refused = subscribing.subscriber("payroll").credential(wrong).create()?;
    match refused.recv_timeout(Duration::from_secs(20)) {
        Err(e @ Error::Rejected { .. }) => println!("with a wrong credential: {e}"),
        other => panic!("a wrong credential must be refused, got {other:?}"),
    }
    println!("publisher refused {} subscriber(s) without the credential", publisher.counters().rejected_unauthorized());
    Ok(())
}
