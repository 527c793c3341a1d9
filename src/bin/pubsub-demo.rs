//! `pubsub-demo`: with no arguments, an embedded demo on the soft fabric over loopback —
//! several publishers and subscribers on a few topics in one process, live progress, a
//! summary table — that exits 0 only if every message arrived intact.

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use rdma_pubsub::{FabricKind, Node, Policy, PublisherOptions, Start, SubscriptionEvent, SubscriptionOptions};

#[derive(Parser, Debug)]
#[command(name = "pubsub-demo", version, about = "rdma-pubsub demo: pub/sub over RDMA (or its soft emulation)")]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    /// Fabric provider: auto, soft or verbs.
    #[arg(long, global = true, default_value = "soft")]
    fabric: FabricKind,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// The embedded demo (the default).
    Demo {
        /// How long publishers run, in seconds.
        #[arg(long, default_value_t = 6)]
        seconds: u64,
    },
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()))
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let result = match cli.command.unwrap_or(Command::Demo { seconds: 6 }) {
        Command::Demo { seconds } => demo(cli.fabric, Duration::from_secs(seconds.clamp(1, 60))),
    };
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("pubsub-demo: {e}");
            ExitCode::from(2)
        }
    }
}

/// The payload of message `seq` on stream `stream`: `len` bytes, checkable from (stream, seq).
fn payload(stream: u64, seq: u64, len: usize) -> Vec<u8> {
    let mut x = (stream << 40) ^ seq ^ 0x9e37_79b9_7f4a_7c15;
    let mut v = Vec::with_capacity(len + 8);
    while v.len() < len {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        v.extend_from_slice(&x.wrapping_mul(0x2545_f491_4f6c_dd1d).to_le_bytes());
    }
    v.truncate(len);
    v
}

/// One topic of the demo.
struct TopicPlan {
    name: &'static str,
    policy: Policy,
    size: fn(u64) -> usize,
}

/// What a subscriber counted.
#[derive(Default)]
struct Tally {
    delivered: AtomicU64,
    bytes: AtomicU64,
    lost: AtomicU64,
    corrupt: AtomicU64,
    out_of_order: AtomicU64,
    lag: AtomicU64,
}

struct SubReport {
    label: String,
    topic: &'static str,
    policy: Policy,
    tally: Arc<Tally>,
}

fn demo(fabric: FabricKind, run_for: Duration) -> Result<bool, Box<dyn std::error::Error>> {
    let topics = [
        TopicPlan {
            name: "prices",
            policy: Policy::Block { timeout: Duration::from_secs(5) },
            size: |s| 32 + (s % 200) as usize,
        },
        TopicPlan { name: "frames", policy: Policy::Block { timeout: Duration::from_secs(5) }, size: |_| 64 * 1024 },
        TopicPlan { name: "telemetry", policy: Policy::Overwrite, size: |s| 16 + (s % 48) as usize },
    ];
    let nodes: Vec<Node> = (0..3).map(|_| Node::builder().fabric(fabric).build()).collect::<Result<_, _>>()?;
    println!(
        "rdma-pubsub demo on the {} fabric ({}): 3 nodes",
        nodes[0].fabric().kind(),
        nodes[0].fabric().device_name()
    );
    for (i, n) in nodes.iter().enumerate() {
        println!("  node {i} at {}", n.local_addr());
    }
    // Publishers live on nodes 0 and 1; subscribers on nodes 1 and 2.
    let mut publishers = Vec::new();
    for (t, plan) in topics.iter().enumerate() {
        let host = t % 2;
        let p = nodes[host].publisher_with(
            plan.name,
            PublisherOptions { policy: plan.policy, ring_capacity: 1 << 20, ..Default::default() },
        )?;
        println!("  publisher of {:<10} on node {host} ({:?})", plan.name, plan.policy);
        publishers.push((t, host, p));
    }
    let stop = Arc::new(AtomicBool::new(false));
    let mut reports = Vec::new();
    let mut readers = Vec::new();
    for (t, plan) in topics.iter().enumerate() {
        let publisher_node = t % 2;
        for sub_node in [1usize, 2] {
            if sub_node == publisher_node {
                continue;
            }
            let mut sub = nodes[sub_node]
                .subscribe_with(plan.name, SubscriptionOptions { start: Start::Earliest, ..Default::default() })?;
            sub.connect_wait(nodes[publisher_node].local_addr(), Duration::from_secs(5))?;
            let tally = Arc::new(Tally::default());
            reports.push(SubReport {
                label: format!("node {sub_node}"),
                topic: plan.name,
                policy: plan.policy,
                tally: tally.clone(),
            });
            let (stop, size, stream) = (stop.clone(), plan.size, t as u64);
            readers.push(thread::spawn(move || {
                let mut next = 1u64;
                loop {
                    match sub.recv_timeout(Duration::from_millis(50)) {
                        Ok(Some(m)) => {
                            let lost: u64 = std::iter::from_fn(|| sub.try_event())
                                .map(|e| if let SubscriptionEvent::Lost { count, .. } = e { count } else { 0 })
                                .sum();
                            tally.lost.fetch_add(lost, Ordering::Relaxed);
                            if m.seq != next + lost {
                                tally.out_of_order.fetch_add(1, Ordering::Relaxed);
                            }
                            next = m.seq + 1;
                            if m.data != payload(stream, m.seq, size(m.seq)) {
                                tally.corrupt.fetch_add(1, Ordering::Relaxed);
                            }
                            tally.delivered.fetch_add(1, Ordering::Relaxed);
                            tally.bytes.fetch_add(m.data.len() as u64, Ordering::Relaxed);
                        }
                        Ok(None) => {
                            if stop.load(Ordering::Acquire) {
                                return;
                            }
                        }
                        Err(rdma_pubsub::Error::Closed(_)) => return,
                        Err(e) => {
                            eprintln!("subscriber failed: {e}");
                            return;
                        }
                    }
                }
            }));
        }
    }
    let published: Vec<Arc<AtomicU64>> = topics.iter().map(|_| Arc::new(AtomicU64::new(0))).collect();
    let start = Instant::now();
    let mut writers = Vec::new();
    for (t, _host, p) in publishers {
        let (count, size, deadline) = (published[t].clone(), topics[t].size, start + run_for);
        writers.push(thread::spawn(move || -> Result<(), rdma_pubsub::Error> {
            let mut seq = 1u64;
            while Instant::now() < deadline {
                p.publish(&payload(t as u64, seq, size(seq)))?;
                count.store(seq, Ordering::Relaxed);
                seq += 1;
                if t == 2 && seq % 64 == 0 {
                    thread::yield_now();
                }
            }
            p.flush(Duration::from_secs(5))
        }));
    }
    let mut last: Vec<u64> = vec![0; reports.len()];
    while writers.iter().any(|w| !w.is_finished()) {
        thread::sleep(Duration::from_millis(1000));
        let line: Vec<String> = reports
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let bytes = r.tally.bytes.load(Ordering::Relaxed);
                let rate = (bytes - last[i]) as f64 / 1e6;
                last[i] = bytes;
                let t = topics.iter().position(|p| p.name == r.topic).unwrap_or(0);
                let lag = published[t]
                    .load(Ordering::Relaxed)
                    .saturating_sub(r.tally.delivered.load(Ordering::Relaxed) + r.tally.lost.load(Ordering::Relaxed));
                r.tally.lag.store(lag, Ordering::Relaxed);
                format!("{}@{} {:>7.1} MB/s lag {:>5}", r.topic, r.label, rate, lag)
            })
            .collect();
        println!("[{:>4.1}s] {}", start.elapsed().as_secs_f64(), line.join(" | "));
    }
    let mut ok = true;
    for w in writers {
        if let Err(e) = w.join().map_err(|_| "publisher thread panicked")? {
            println!("publisher failed: {e}");
            ok = false;
        }
    }
    // Let the subscribers drain what was flushed, bounded.
    let drain_deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < drain_deadline
        && reports.iter().any(|r| {
            let t = topics.iter().position(|p| p.name == r.topic).unwrap_or(0);
            r.tally.delivered.load(Ordering::Relaxed) + r.tally.lost.load(Ordering::Relaxed)
                < published[t].load(Ordering::Relaxed)
        })
    {
        thread::sleep(Duration::from_millis(20));
    }
    stop.store(true, Ordering::Release);
    for r in readers {
        let _ = r.join();
    }
    let secs = start.elapsed().as_secs_f64();
    println!();
    println!(
        "{:<10} {:<8} {:<10} {:>10} {:>10} {:>8} {:>9} {:>8} {:>6}",
        "topic", "sub", "policy", "published", "delivered", "lost", "MB", "corrupt", "result"
    );
    for r in &reports {
        let t = topics.iter().position(|p| p.name == r.topic).unwrap_or(0);
        let published = published[t].load(Ordering::Relaxed);
        let d = r.tally.delivered.load(Ordering::Relaxed);
        let lost = r.tally.lost.load(Ordering::Relaxed);
        let corrupt = r.tally.corrupt.load(Ordering::Relaxed) + r.tally.out_of_order.load(Ordering::Relaxed);
        let complete = match r.policy {
            Policy::Overwrite => d + lost == published,
            _ => d == published && lost == 0,
        };
        let good = complete && corrupt == 0;
        ok &= good;
        let policy = match r.policy {
            Policy::Block { .. } => "block",
            Policy::DropSlow { .. } => "drop-slow",
            Policy::Overwrite => "overwrite",
        };
        println!(
            "{:<10} {:<8} {:<10} {:>10} {:>10} {:>8} {:>9.1} {:>8} {:>6}",
            r.topic,
            r.label,
            policy,
            published,
            d,
            lost,
            r.tally.bytes.load(Ordering::Relaxed) as f64 / 1e6,
            corrupt,
            if good { "ok" } else { "FAIL" }
        );
    }
    println!(
        "\n{} in {secs:.1} s",
        if ok { "every message arrived intact" } else { "SOME MESSAGES WERE LOST OR DAMAGED" }
    );
    Ok(ok)
}
