//! The embedded demo: three nodes in one process, three topics with different policies and
//! message sizes, live progress from the nodes' counters, and a summary table. Succeeds only if
//! every message arrived intact (under Overwrite: every message arrived intact or was reported
//! lost).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use rdma_pubsub::stats::Kind;
use rdma_pubsub::{DiscoveryOptions, Node, Policy, Start, SubscriptionEvent};

use crate::cli::{policy_name, DemoArgs};
use crate::payload;
use crate::Fail;

/// One topic of the demo.
struct TopicPlan {
    name: &'static str,
    policy: Policy,
    /// Size of message `seq`.
    size: fn(u64) -> usize,
    /// The sizes, for people.
    sizes: &'static str,
    /// The node publishing it.
    publisher: usize,
    /// The nodes subscribing to it.
    subscribers: &'static [usize],
}

/// Telemetry messages per burst, and the time between bursts: 20,000 messages a second.
const TELEMETRY_BURST: u64 = 64;
const TELEMETRY_BURST_EVERY: Duration = Duration::from_micros(3200);

const TOPICS: [TopicPlan; 3] = [
    TopicPlan {
        name: "prices",
        policy: Policy::Block { timeout: Duration::from_secs(5) },
        size: |s| 24 + (s % 200) as usize,
        sizes: "24-223 B",
        publisher: 0,
        subscribers: &[1, 2],
    },
    TopicPlan {
        name: "frames",
        policy: Policy::Block { timeout: Duration::from_secs(5) },
        size: |_| 64 * 1024,
        sizes: "64 KiB",
        publisher: 1,
        subscribers: &[2],
    },
    TopicPlan {
        name: "telemetry",
        policy: Policy::Overwrite,
        size: |s| 24 + (s % 40) as usize,
        sizes: "24-63 B",
        publisher: 0,
        subscribers: &[1, 2],
    },
];

/// What a subscriber's checks found (its counts of delivery come from the node's counters).
#[derive(Default)]
struct Checks {
    delivered: AtomicU64,
    bytes: AtomicU64,
    lost: AtomicU64,
    /// Wrong content, length or sequence.
    damaged: AtomicU64,
}

struct Reader {
    topic: usize,
    node: usize,
    checks: Arc<Checks>,
}

/// Runs the demo.
pub fn run(args: &DemoArgs) -> Result<(), Fail> {
    let run_for = Duration::from_secs(args.seconds);
    // Discovery off: the subscriptions connect explicitly, and concurrent runs never mix.
    let nodes: Vec<Node> = (0..3)
        .map(|_| args.fabric.node("127.0.0.1:0".parse().expect("literal address"), DiscoveryOptions::disabled()))
        .collect::<Result<_, _>>()?;
    println!(
        "rdma-pubsub demo: 3 nodes on the {} fabric ({}), {} s of publishing",
        nodes[0].fabric().kind(),
        nodes[0].fabric().device_name(),
        run_for.as_secs()
    );
    for (i, n) in nodes.iter().enumerate() {
        let stats = n.stats_path().map(|p| p.display().to_string()).unwrap_or_else(|| "none".into());
        println!("  node {i}  {:<21}  stats {stats}", n.local_addr());
    }
    println!("  (watch the counters from another terminal: pubsub-demo stat)\n");
    println!("  {:<10} {:<9} {:>9} {:>9}  subscribers", "topic", "policy", "publisher", "size");
    let mut publishers = Vec::new();
    for plan in &TOPICS {
        let builder = nodes[plan.publisher].publisher(plan.name).policy(plan.policy).ring_capacity(1 << 20);
        publishers.push(builder.create()?);
        let subs: Vec<String> = plan.subscribers.iter().map(|n| format!("node {n}")).collect();
        println!(
            "  {:<10} {:<9} {:>9} {:>9}  {}",
            plan.name,
            policy_name(plan.policy),
            format!("node {}", plan.publisher),
            plan.sizes,
            subs.join(", ")
        );
    }
    println!();

    let mut readers = Vec::new();
    let mut threads = Vec::new();
    for (t, plan) in TOPICS.iter().enumerate() {
        for &n in plan.subscribers {
            let mut sub = nodes[n].subscriber(plan.name).start(Start::Earliest).create()?;
            sub.connect_wait(nodes[plan.publisher].local_addr(), Duration::from_secs(5))?;
            let checks = Arc::new(Checks::default());
            readers.push(Reader { topic: t, node: n, checks: checks.clone() });
            let (size, stream) = (plan.size, payload::stream_of(plan.name));
            threads.push(thread::spawn(move || read_topic(sub, size, stream, &checks)));
        }
    }

    let start = Instant::now();
    let writers: Vec<_> = publishers
        .into_iter()
        .enumerate()
        .map(|(t, p)| {
            let (size, stream, deadline) = (TOPICS[t].size, payload::stream_of(TOPICS[t].name), start + run_for);
            thread::spawn(move || -> Result<u64, rdma_pubsub::Error> {
                let mut buf = Vec::new();
                let mut seq = 1u64;
                while Instant::now() < deadline {
                    buf.resize(size(seq), 0);
                    payload::fill(&mut buf, stream, seq, 0);
                    p.publish(&buf)?;
                    seq += 1;
                    if TOPICS[t].policy == Policy::Overwrite && seq % TELEMETRY_BURST == 0 {
                        // Telemetry is a trickle next to the others: bursts at a fixed rate.
                        let due = start + TELEMETRY_BURST_EVERY * (seq / TELEMETRY_BURST) as u32;
                        if let Some(wait) = due.checked_duration_since(Instant::now()) {
                            thread::sleep(wait);
                        }
                    }
                }
                p.flush(Duration::from_secs(5))?;
                // Dropping the publisher ends its stream: the subscribers see Ended.
                Ok(seq - 1)
            })
        })
        .collect();

    println!("  {:>5}  {:<10} {:<7} {:>10} {:>9} {:>8}", "time", "topic", "sub", "delivered", "MB/s", "lag");
    let mut last_bytes = vec![0u64; readers.len()];
    let mut last_tick = start;
    while writers.iter().any(|w| !w.is_finished()) {
        thread::sleep(Duration::from_millis(50));
        if last_tick.elapsed() < Duration::from_secs(1) {
            continue;
        }
        if writers.iter().all(|w| w.is_finished()) {
            break;
        }
        let secs = last_tick.elapsed().as_secs_f64();
        last_tick = Instant::now();
        let view = View::take(&nodes);
        for (i, r) in readers.iter().enumerate() {
            let (delivered, bytes, lost) = view.subscription(r.node, TOPICS[r.topic].name);
            let published = view.published(TOPICS[r.topic].publisher, TOPICS[r.topic].name);
            let rate = (bytes - last_bytes[i].min(bytes)) as f64 / secs / 1e6;
            last_bytes[i] = bytes;
            println!(
                "  {:>4.1}s  {:<10} {:<7} {:>10} {:>9.1} {:>8}",
                start.elapsed().as_secs_f64(),
                TOPICS[r.topic].name,
                format!("node {}", r.node),
                delivered,
                rate,
                published.saturating_sub(delivered + lost)
            );
        }
    }
    let mut ok = true;
    let mut published = Vec::new();
    for w in writers {
        match w.join() {
            Ok(Ok(n)) => published.push(n),
            Ok(Err(e)) => {
                println!("a publisher failed: {e}");
                published.push(0);
                ok = false;
            }
            Err(_) => return Err(Fail::Usage("a publisher thread panicked".into())),
        }
    }
    // The publishers are gone: the stream ends tell the readers to stop.
    for t in threads {
        if t.join().is_err() {
            return Err(Fail::Usage("a subscriber thread panicked".into()));
        }
    }
    let secs = start.elapsed().as_secs_f64();
    println!(
        "\n  {:<10} {:<7} {:<9} {:>10} {:>10} {:>8} {:>9} {:>8}  result",
        "topic", "sub", "policy", "published", "delivered", "lost", "MB", "damaged"
    );
    for r in &readers {
        let plan = &TOPICS[r.topic];
        let published = published[r.topic];
        let delivered = r.checks.delivered.load(Ordering::Relaxed);
        let lost = r.checks.lost.load(Ordering::Relaxed);
        let damaged = r.checks.damaged.load(Ordering::Relaxed);
        let bytes = r.checks.bytes.load(Ordering::Relaxed);
        let complete = match plan.policy {
            Policy::Overwrite => delivered + lost == published,
            _ => delivered == published && lost == 0,
        };
        let good = complete && damaged == 0 && published > 0;
        ok &= good;
        println!(
            "  {:<10} {:<7} {:<9} {:>10} {:>10} {:>8} {:>9.1} {:>8}  {}",
            plan.name,
            format!("node {}", r.node),
            policy_name(plan.policy),
            published,
            delivered,
            lost,
            bytes as f64 / 1e6,
            damaged,
            if good { "ok" } else { "FAIL" }
        );
    }
    println!(
        "\n{} in {secs:.1} s",
        if ok { "every message arrived intact" } else { "SOME MESSAGES WERE LOST OR DAMAGED" }
    );
    if ok {
        Ok(())
    } else {
        Err(Fail::Check)
    }
}

/// Receives until the publisher ends its stream (or 10 s pass without a message), checking
/// every message.
fn read_topic(mut sub: rdma_pubsub::Subscription, size: fn(u64) -> usize, stream: u32, checks: &Checks) {
    let mut next = 1u64;
    let mut last_message = Instant::now();
    loop {
        // (sequence, whether length and content are right, length) of the next message.
        let outcome = sub.recv_ref(Duration::from_millis(100)).map(|m| {
            m.map(|m| {
                let intact =
                    m.data.len() == size(m.seq) && payload::check(m.data, stream).is_ok_and(|h| h.seq == m.seq);
                (m.seq, intact, m.data.len() as u64)
            })
        });
        let lost: u64 = std::iter::from_fn(|| sub.try_event())
            .map(|e| if let SubscriptionEvent::Lost { count, .. } = e { count } else { 0 })
            .sum();
        checks.lost.fetch_add(lost, Ordering::Relaxed);
        match outcome {
            Ok(Some((seq, intact, len))) => {
                last_message = Instant::now();
                if !intact || seq != next + lost {
                    checks.damaged.fetch_add(1, Ordering::Relaxed);
                }
                next = seq + 1;
                checks.delivered.fetch_add(1, Ordering::Relaxed);
                checks.bytes.fetch_add(len, Ordering::Relaxed);
            }
            Ok(None) if last_message.elapsed() > Duration::from_secs(10) => return,
            Ok(None) => {}
            Err(rdma_pubsub::Error::Closed(_) | rdma_pubsub::Error::NotConnected { .. }) => return,
            Err(e) => {
                println!("a subscriber failed: {e}");
                checks.damaged.fetch_add(1, Ordering::Relaxed);
                return;
            }
        }
    }
}

/// The nodes' counters at one moment.
struct View {
    snapshots: Vec<rdma_pubsub::stats::Snapshot>,
}

impl View {
    fn take(nodes: &[Node]) -> View {
        View { snapshots: nodes.iter().map(Node::stats).collect() }
    }
    fn published(&self, node: usize, topic: &str) -> u64 {
        self.snapshots[node]
            .of_kind(Kind::Publisher)
            .find(|s| s.topic.as_deref() == Some(topic))
            .map_or(0, |s| s.get("published"))
    }
    /// (delivered, bytes, lost) of `node`'s subscription to `topic`.
    fn subscription(&self, node: usize, topic: &str) -> (u64, u64, u64) {
        self.snapshots[node]
            .of_kind(Kind::Subscription)
            .find(|s| s.topic.as_deref() == Some(topic))
            .map_or((0, 0, 0), |s| (s.get("delivered"), s.get("bytes"), s.get("lost")))
    }
}
