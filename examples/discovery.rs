//! Two processes that find each other by discovery: this program publishes, and runs itself
//! again as the subscriber, which connects by itself to the publisher discovery announces.
//! Run: `cargo run --example discovery`.

use std::net::Ipv4Addr;
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

use rdma_pubsub::{DiscoveryOptions, Error, Node, Start};

/// Messages published.
const MESSAGES: u64 = 3;
/// The bound of every wait.
const WAIT: Duration = Duration::from_secs(20);

fn main() -> Result<ExitCode, Error> {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("subscriber") => subscriber(&args[2], &args[3]),
        _ => publisher(),
    }
}

/// Discovery on a group and port of this run's own (so it hears no other program).
fn discovery(group: Ipv4Addr, port: u16) -> DiscoveryOptions {
    DiscoveryOptions::default().group(group).port(port)
}

fn publisher() -> Result<ExitCode, Error> {
    let pid = std::process::id();
    let (group, port) = (Ipv4Addr::new(239, 195, (pid % 251) as u8, 1), 35000 + (pid % 5000) as u16);
    let node = Node::builder().discovery(discovery(group, port)).build()?;
    let publisher = node.publisher("sensors").create()?;
    let exe = std::env::current_exe().expect("this program's path");
    let mut child = Command::new(exe)
        .args(["subscriber", &group.to_string(), &port.to_string()])
        .spawn()
        .expect("the subscriber process starts");
    let published = publisher.wait_for_subscribers(1, WAIT).and_then(|_| {
        println!("publisher: a subscriber connected");
        (0..MESSAGES).try_for_each(|i| publisher.publish(format!("reading {i}").as_bytes()).map(drop))
    });
    if let Err(e) = published {
        let _ = child.kill();
        let _ = child.wait();
        return Err(e);
    }
    // The subscriber exits once it has read them all (bounded: killed after WAIT).
    let deadline = Instant::now() + WAIT;
    let status = loop {
        if let Some(status) = child.try_wait().expect("waiting for the subscriber") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            break child.wait().expect("the killed subscriber");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    println!("publisher: the subscriber exited with {status}");
    Ok(if status.success() { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

fn subscriber(group: &str, port: &str) -> Result<ExitCode, Error> {
    let group: Ipv4Addr = group.parse().expect("a group address");
    let port: u16 = port.parse().expect("a port");
    let node = Node::builder().discovery(discovery(group, port)).build()?;
    // No address: discovery finds the publisher and the subscription connects by itself.
    let mut readings = node.subscriber("sensors").start(Start::Earliest).create()?;
    for _ in 0..MESSAGES {
        let Some(m) = readings.recv_timeout(WAIT)? else {
            println!("subscriber: nothing within {WAIT:?}");
            return Ok(ExitCode::FAILURE);
        };
        println!("subscriber: {} from {}", String::from_utf8_lossy(&m.data), m.publisher.addr);
    }
    Ok(ExitCode::SUCCESS)
}
