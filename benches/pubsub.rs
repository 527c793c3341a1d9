//! Publish/subscribe benchmarks on the soft fabric over loopback.
//!
//! - `pubsub_goodput/subs<N>/<size>`: one publisher (Block) on one node, N subscribers on
//!   another, each in its own thread; an iteration is one message, timed until every
//!   subscriber has the last one. Criterion's throughput is the publisher's payload goodput.
//! - `raw_read/<size>`: the fabric's READ goodput at the same sizes, measured as
//!   `benches/fabric.rs` does (two soft fabrics, one RC connection, up to 16 READs of `size`
//!   outstanding within an 8 MiB window): the ceiling pub/sub goodput is compared with.
//! - `publisher_cpu_overwrite/subs<N>/<size>`: the same fan-out with an `Overwrite` publisher,
//!   which never waits for credit: its CPU time per message is the publisher's own work (write,
//!   checksum, acks, doorbells), without the cost of blocking on slower subscribers.
//! - After the run, a summary: pub/sub goodput ÷ raw READ goodput per size and subscriber
//!   count, and the publisher thread's CPU time per message (`/proc/thread-self/schedstat`)
//!   with N subscribers ÷ with 1, under `Block` and under `Overwrite`, with the publisher's
//!   credit waits per message.
//! - Then the goodput ratio with one subscriber split into its two factors, from the CPU time
//!   of every thread of the process (NIC threads included): goodput = CPUs busy ÷ CPU time per
//!   byte, so ratio = (raw CPU per byte ÷ pub/sub CPU per byte) × (pub/sub CPUs busy ÷ raw
//!   CPUs busy). The first factor is the work pub/sub adds (the publisher's copy and checksum,
//!   the subscriber's validation); the second is how well the threads keep the CPUs busy.
//!
//! Run: `taskset -c 0,1 cargo bench --bench pubsub`. Each point measures ~2 s.

#[path = "common/read_pair.rs"]
mod read_pair;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use criterion::{criterion_group, BenchmarkId, Criterion, Throughput};
use rdma_pubsub::fabric::FabricKind;
use rdma_pubsub::{Node, Policy, Publisher, PublisherOptions, Start, SubscriptionOptions};
use read_pair::{ReadPair, MAX_OUTSTANDING, WINDOW_BYTES};

const SIZES: [usize; 4] = [64, 1 << 10, 64 << 10, 1 << 20];
const SUBSCRIBERS: [usize; 3] = [1, 4, 16];
const WAIT: Duration = Duration::from_secs(30);

/// Totals of one benchmark point.
#[derive(Default, Clone, Copy)]
struct Totals {
    /// Payload bytes moved.
    bytes: u64,
    /// Wall time.
    wall: Duration,
    /// CPU time of the publishing (or READ-posting) thread.
    cpu: Duration,
    /// CPU time of every thread of the process.
    process_cpu: Duration,
    /// Messages (or READs).
    messages: u64,
    /// The publisher's credit waits.
    waits: u64,
}

impl Totals {
    /// Threads kept busy on average (process CPU time ÷ wall time).
    fn busy_cpus(&self) -> f64 {
        self.process_cpu.as_secs_f64() / self.wall.as_secs_f64().max(1e-9)
    }
    /// Process CPU time per payload byte, in seconds.
    fn cpu_per_byte(&self) -> f64 {
        self.process_cpu.as_secs_f64() / self.bytes.max(1) as f64
    }
    fn goodput(&self) -> f64 {
        self.bytes as f64 / self.wall.as_secs_f64().max(1e-9)
    }
    fn cpu_per_message(&self) -> Duration {
        self.cpu / self.messages.max(1) as u32
    }
}

static TOTALS: Mutex<BTreeMap<(&'static str, usize, usize), Totals>> = Mutex::new(BTreeMap::new());

fn record(kind: &'static str, subs: usize, size: usize, t: Totals) {
    let mut all = TOTALS.lock().expect("totals");
    let e = all.entry((kind, subs, size)).or_default();
    e.bytes += t.bytes;
    e.wall += t.wall;
    e.cpu += t.cpu;
    e.process_cpu += t.process_cpu;
    e.messages += t.messages;
    e.waits += t.waits;
}

/// CPU time of the calling thread (nanosecond resolution from schedstat).
fn thread_cpu() -> Duration {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|v| v.parse().ok()))
        .map(Duration::from_nanos)
        .unwrap_or_default()
}

/// CPU time of every thread of the process (the sum of their schedstat run times; threads
/// that exited are not counted, and none exits during a measurement).
fn process_cpu() -> Duration {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else { return Duration::ZERO };
    let ns: u64 = tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next().and_then(|v| v.parse::<u64>().ok()))
        .sum();
    Duration::from_nanos(ns)
}

fn node() -> Node {
    Node::builder()
        .fabric(FabricKind::Soft)
        .bind(SocketAddr::from(([127, 0, 0, 1], 0)))
        .stats_dir(None)
        .build()
        .expect("node")
}

/// One publisher and `subs` subscriber threads that report the last sequence they received.
struct Fanout {
    publisher: Option<Publisher>,
    progress: Arc<Vec<AtomicU64>>,
    threads: Vec<JoinHandle<()>>,
    buf: Vec<u8>,
    next: u64,
    // Declared last: dropped after the publisher and the subscriptions.
    _nodes: (Node, Node),
}

impl Fanout {
    fn new(subs: usize, size: usize, policy: Policy) -> Fanout {
        let (pub_node, sub_node) = (node(), node());
        let ring_capacity = (size * 16).next_power_of_two().clamp(1 << 20, 64 << 20);
        let publisher = pub_node
            .publisher_with("bench", PublisherOptions { policy, ring_capacity, ..Default::default() })
            .expect("publisher");
        let progress: Arc<Vec<AtomicU64>> = Arc::new((0..subs).map(|_| AtomicU64::new(0)).collect());
        let threads = (0..subs)
            .map(|i| {
                let mut sub = sub_node
                    .subscribe_with("bench", SubscriptionOptions { start: Start::Earliest, ..Default::default() })
                    .expect("subscription");
                sub.connect_wait(pub_node.local_addr(), WAIT).expect("connect");
                let progress = progress.clone();
                thread::spawn(move || loop {
                    match sub.recv_ref(Duration::from_millis(100)) {
                        Ok(Some(m)) => progress[i].store(m.seq, Ordering::Release),
                        Ok(None) => {}
                        Err(_) => return,
                    }
                })
            })
            .collect();
        Fanout {
            publisher: Some(publisher),
            progress,
            threads,
            buf: vec![0xa5; size],
            next: 1,
            _nodes: (pub_node, sub_node),
        }
    }

    /// Publishes `count` messages; returns the time until every subscriber has them (under
    /// `Overwrite`, until each has the last one) and records the totals under `kind`.
    fn run(&mut self, count: u64, subs: usize, kind: &'static str) -> Duration {
        let publisher = self.publisher.as_ref().expect("publisher");
        let waits = publisher.counters().waits.load(Ordering::Relaxed);
        let process = process_cpu();
        let cpu = thread_cpu();
        let start = Instant::now();
        for _ in 0..count {
            publisher.publish(&self.buf).expect("publish");
        }
        let cpu = thread_cpu() - cpu;
        self.next += count;
        let last = self.next - 1;
        let deadline = Instant::now() + WAIT;
        while self.progress.iter().any(|p| p.load(Ordering::Acquire) < last) {
            assert!(Instant::now() < deadline, "subscribers did not receive everything within {WAIT:?}");
            thread::yield_now();
        }
        let wall = start.elapsed();
        let process_cpu = process_cpu() - process;
        let waits = publisher.counters().waits.load(Ordering::Relaxed) - waits;
        let size = self.buf.len();
        let bytes = count * size as u64;
        record(kind, subs, size, Totals { bytes, wall, cpu, process_cpu, messages: count, waits });
        wall
    }
}

impl Drop for Fanout {
    fn drop(&mut self) {
        // Dropping the publisher ends the stream: the subscriber threads return.
        self.publisher.take();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

fn pubsub_goodput(c: &mut Criterion) {
    let mut group = c.benchmark_group("pubsub_goodput");
    group.sample_size(10).warm_up_time(Duration::from_millis(500)).measurement_time(Duration::from_secs(2));
    for size in SIZES {
        group.throughput(Throughput::Bytes(size as u64));
        for subs in SUBSCRIBERS {
            let mut fanout = Fanout::new(subs, size, Policy::Block { timeout: WAIT });
            group.bench_with_input(BenchmarkId::new(format!("subs{subs}"), size), &size, |b, _| {
                b.iter_custom(|iters| fanout.run(iters, subs, "pubsub"))
            });
        }
    }
    group.finish();
}

fn publisher_cpu_overwrite(c: &mut Criterion) {
    let mut group = c.benchmark_group("publisher_cpu_overwrite");
    group.sample_size(10).warm_up_time(Duration::from_millis(500)).measurement_time(Duration::from_secs(1));
    for size in SIZES {
        group.throughput(Throughput::Bytes(size as u64));
        for subs in [1, 16] {
            let mut fanout = Fanout::new(subs, size, Policy::Overwrite);
            group.bench_with_input(BenchmarkId::new(format!("subs{subs}"), size), &size, |b, _| {
                b.iter_custom(|iters| fanout.run(iters, subs, "overwrite"))
            });
        }
    }
    group.finish();
}

fn raw_read(c: &mut Criterion) {
    let pair = ReadPair::new();
    let mut group = c.benchmark_group("raw_read");
    group.sample_size(10).warm_up_time(Duration::from_millis(500)).measurement_time(Duration::from_secs(2));
    for size in SIZES {
        let depth = MAX_OUTSTANDING.min(WINDOW_BYTES / size);
        group.throughput(Throughput::Bytes(size as u64));
        group.bench_with_input(BenchmarkId::from_parameter(size), &size, |b, &size| {
            b.iter_custom(|iters| {
                let process = process_cpu();
                let wall = pair.reads(iters, size, depth, Duration::ZERO);
                let process_cpu = process_cpu() - process;
                let bytes = iters * size as u64;
                let t = Totals { bytes, wall, process_cpu, messages: iters, ..Totals::default() };
                record("raw_read", 0, size, t);
                wall
            })
        });
    }
    group.finish();
}

/// Prints the ratios the benchmark exists for.
fn summary() {
    let all = TOTALS.lock().expect("totals");
    println!("\nsummary (totals over warm-up and measurement; CPUs allowed: {})", cpus_allowed());
    println!(
        "{:>8} {:>5} {:>12} {:>12} {:>8} {:>12} {:>10} {:>10} {:>14} {:>10}",
        "size",
        "subs",
        "pubsub MB/s",
        "READ MB/s",
        "ratio",
        "pub CPU/msg",
        "cpu ×1sub",
        "waits/msg",
        "ovw CPU/msg",
        "ovw ×1sub"
    );
    // (µs per message, ÷ the same with 1 subscriber), or dashes where that point was not run.
    let vs = |kind: &'static str, subs: usize, size: usize| -> (String, String) {
        let cpu = |n| all.get(&(kind, n, size)).map(|t: &Totals| t.cpu_per_message().as_secs_f64());
        match (cpu(subs), cpu(1)) {
            (Some(c), Some(one)) => (format!("{:.2}us", c * 1e6), format!("{:.2}", c / one.max(1e-12))),
            _ => ("-".into(), "-".into()),
        }
    };
    for size in SIZES {
        let raw = all.get(&("raw_read", 0, size)).map(Totals::goodput).unwrap_or(0.0);
        for subs in SUBSCRIBERS {
            let Some(t) = all.get(&("pubsub", subs, size)) else { continue };
            let (cpu, vs_one) = vs("pubsub", subs, size);
            let (ovw, ovw_vs_one) = vs("overwrite", subs, size);
            println!(
                "{:>8} {:>5} {:>12.1} {:>12.1} {:>8.2} {:>12} {:>10} {:>10.2} {:>14} {:>10}",
                size,
                subs,
                t.goodput() / 1e6,
                raw / 1e6,
                t.goodput() / raw.max(1e-9),
                cpu,
                vs_one,
                t.waits as f64 / t.messages.max(1) as f64,
                ovw,
                ovw_vs_one
            );
        }
    }
    println!("\ngoodput ratio with 1 subscriber = work factor × busy factor (CPU time of all threads)");
    println!(
        "{:>8} {:>14} {:>14} {:>8} {:>10} {:>10} {:>8} {:>8}",
        "size", "pubsub us/MiB", "READ us/MiB", "work", "pubsub CPUs", "READ CPUs", "busy", "ratio"
    );
    for size in SIZES {
        let (Some(p), Some(r)) = (all.get(&("pubsub", 1, size)), all.get(&("raw_read", 0, size))) else { continue };
        let work = r.cpu_per_byte() / p.cpu_per_byte().max(1e-18);
        let busy = p.busy_cpus() / r.busy_cpus().max(1e-9);
        println!(
            "{:>8} {:>14.1} {:>14.1} {:>8.2} {:>10.2} {:>10.2} {:>8.2} {:>8.2}",
            size,
            p.cpu_per_byte() * 1e6 * (1 << 20) as f64,
            r.cpu_per_byte() * 1e6 * (1 << 20) as f64,
            work,
            p.busy_cpus(),
            r.busy_cpus(),
            busy,
            work * busy
        );
    }
}

fn cpus_allowed() -> String {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:").map(|v| v.trim().to_owned())))
        .unwrap_or_else(|| "unknown".into())
}

criterion_group!(benches, raw_read, pubsub_goodput, publisher_cpu_overwrite);

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
    summary();
}
