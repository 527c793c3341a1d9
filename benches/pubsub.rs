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
//! - Paced publisher CPU (summary only): the publisher's CPU time per message with 1 and with
//!   16 subscribers at the same rate, in alternating rounds, the publishing thread alone on the
//!   first allowed CPU and every other thread on the others. Without pacing, 16 subscribers sharing the CPUs run the
//!   whole pipeline several times slower, and a publisher that idles between messages pays
//!   more CPU time for each (on these VMs a mostly idle vCPU wakes with cold caches): 1 MiB
//!   messages paced at 140/s cost one subscriber's publisher 260-313 µs each, against 100-120
//!   µs unpaced. The rate is 70 % of what 16 subscribers sustain with that placement, measured
//!   first. Messages go out in bursts (100 a second, at most a quarter ring each, so that the
//!   publisher does not wait for credit inside one) with a sleep between; the publisher's CPU
//!   time is counted over the bursts, not the sleeps.
//! - `idle_poll_round`: one round of a busy-polling subscription's loop on an idle topic whose
//!   ring it reads in place (same host): an iteration is one empty read. What a round costs
//!   besides the read (events, completions, clocks, counters) delays every message a polling
//!   subscriber finds.
//! - After the run, a summary: pub/sub goodput ÷ raw READ goodput per size and subscriber
//!   count, and the publisher thread's CPU time per message (`CLOCK_THREAD_CPUTIME_ID`)
//!   with N subscribers ÷ with 1, under `Block` and under `Overwrite`, with the publisher's
//!   credit waits per message; and the paced ratio, 16 subscribers ÷ 1.
//! - Then the goodput ratio with one subscriber split into its two factors, from the CPU time
//!   of every thread of the process (NIC threads included): goodput = CPUs busy ÷ CPU time per
//!   byte, so ratio = (raw CPU per byte ÷ pub/sub CPU per byte) × (pub/sub CPUs busy ÷ raw
//!   CPUs busy). The first factor is the work pub/sub adds (the publisher's copy and checksum,
//!   the subscriber's validation); the second is how well the threads keep the CPUs busy.
//!
//! Run: `taskset -c 0,1 cargo bench --bench pubsub`. Each point measures ~2 s.

#[path = "../demo/src/placement.rs"]
mod placement;
#[path = "../fabric/benches/common/read_pair.rs"]
mod read_pair;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use criterion::{criterion_group, BenchmarkId, Criterion, Throughput};
use nix::time::{clock_gettime, ClockId};
use placement::Placement;
use rdma_pubsub::fabric::FabricKind;
use rdma_pubsub::{DiscoveryOptions, Node, Policy, Publisher, Start};
use read_pair::{ReadPair, MAX_OUTSTANDING, WINDOW_BYTES};

const SIZES: [usize; 4] = [64, 1 << 10, 64 << 10, 1 << 20];
const SUBSCRIBERS: [usize; 3] = [1, 4, 16];
const WAIT: Duration = Duration::from_secs(30);
/// Bursts per second of a paced publisher.
const PACE_BURSTS_PER_SEC: f64 = 100.0;
/// Share of the rate 16 subscribers sustain that the paced measurement publishes at.
const PACE_SHARE: f64 = 0.7;

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

/// CPU time of the calling thread, up to now (`CLOCK_THREAD_CPUTIME_ID`; schedstat lags by
/// up to a scheduler tick, too coarse for one burst).
fn thread_cpu() -> Duration {
    clock_gettime(ClockId::CLOCK_THREAD_CPUTIME_ID).map(Duration::from).unwrap_or_default()
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
        // The subscriptions connect by address: with discovery on, the subscribers of one
        // fan-out would also find the publisher of another alive at the same time.
        .discovery(DiscoveryOptions::disabled())
        .build()
        .expect("node")
}

/// One publisher and `subs` subscriber threads that report the last sequence they received.
struct Fanout {
    publisher: Option<Publisher>,
    ring_capacity: usize,
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
        let publisher =
            pub_node.publisher("bench").policy(policy).ring_capacity(ring_capacity).create().expect("publisher");
        let progress: Arc<Vec<AtomicU64>> = Arc::new((0..subs).map(|_| AtomicU64::new(0)).collect());
        let threads = (0..subs)
            .map(|i| {
                let mut sub = sub_node.subscriber("bench").start(Start::Earliest).create().expect("subscription");
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
            ring_capacity,
            progress,
            threads,
            buf: vec![0xa5; size],
            next: 1,
            _nodes: (pub_node, sub_node),
        }
    }

    /// Publishes `count` messages, as fast as the policy lets it or at `pace` messages a
    /// second; returns the time until every subscriber has them (under `Overwrite`, until each
    /// has the last one) and records the totals under `kind`.
    fn run(&mut self, count: u64, subs: usize, kind: &'static str, pace: Option<f64>) -> Duration {
        let publisher = self.publisher.as_ref().expect("publisher");
        let waits = publisher.counters().waits();
        let process = process_cpu();
        let start = Instant::now();
        // Paced: bursts of at most a quarter ring (the publisher never waits for credit inside
        // one), a sleep between them; the publisher's CPU time is counted over the bursts only.
        let burst = match pace {
            None => count,
            Some(rate) => {
                let quarter_ring = self.ring_capacity / 4 / self.buf.len().max(1);
                ((rate / PACE_BURSTS_PER_SEC) as u64).clamp(1, quarter_ring.max(1) as u64)
            }
        };
        let mut cpu = Duration::ZERO;
        let mut sent = 0;
        while sent < count {
            let n = burst.min(count - sent);
            let before = thread_cpu();
            for _ in 0..n {
                publisher.publish(&self.buf).expect("publish");
            }
            cpu += thread_cpu() - before;
            sent += n;
            if let Some(rate) = pace {
                let due = start + Duration::from_secs_f64(sent as f64 / rate);
                if let Some(early) = due.checked_duration_since(Instant::now()) {
                    thread::sleep(early);
                }
            }
        }
        self.next += count;
        let last = self.next - 1;
        let deadline = Instant::now() + WAIT;
        while self.progress.iter().any(|p| p.load(Ordering::Acquire) < last) {
            assert!(Instant::now() < deadline, "subscribers did not receive everything within {WAIT:?}");
            thread::yield_now();
        }
        let wall = start.elapsed();
        let process_cpu = process_cpu() - process;
        let waits = publisher.counters().waits() - waits;
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
                b.iter_custom(|iters| fanout.run(iters, subs, "pubsub", None))
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
                b.iter_custom(|iters| fanout.run(iters, subs, "overwrite", None))
            });
        }
    }
    group.finish();
}

/// A fan-out whose threads run on the CPUs other than the publisher's; the caller stays there.
fn placed_fanout(placement: &Placement, subs: usize, size: usize) -> Fanout {
    placement.enter_others().expect("place the fan-out's threads");
    Fanout::new(subs, size, Policy::Block { timeout: WAIT })
}

impl Fanout {
    /// Messages a second this fan-out sustains, publishing for about `time` (not recorded).
    fn sustained_rate(&mut self, time: Duration) -> f64 {
        let publisher = self.publisher.as_ref().expect("publisher");
        let start = Instant::now();
        let mut count = 0;
        while start.elapsed() < time {
            publisher.publish(&self.buf).expect("publish");
            count += 1;
        }
        self.next += count;
        let deadline = Instant::now() + WAIT;
        while self.progress.iter().any(|p| p.load(Ordering::Acquire) < self.next - 1) {
            assert!(Instant::now() < deadline, "subscribers did not receive everything within {WAIT:?}");
            thread::yield_now();
        }
        count as f64 / start.elapsed().as_secs_f64()
    }
}

/// Rounds of the paced measurement, alternating 1 and 16 subscribers (so that a drift of the
/// host's load falls on both alike), after one round each not counted.
const PACE_ROUNDS: usize = 6;
/// Length of one paced round.
const PACE_ROUND: Duration = Duration::from_millis(500);

/// Not a criterion measurement: criterion would time the two counts one after the other, and
/// only the CPU time per message matters here. Reported in the summary.
fn publisher_cpu_paced(_: &mut Criterion) {
    // Criterion's name filter, applied by hand: `cargo bench --bench pubsub -- raw_read` skips it.
    let filters: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with('-')).collect();
    if !filters.is_empty() && !filters.iter().any(|f| "publisher_cpu_paced".contains(f.as_str())) {
        return;
    }
    let Some(placement) = Placement::new(None).ok() else {
        eprintln!("publisher_cpu_paced needs two allowed CPUs: skipped");
        return;
    };
    for size in SIZES {
        let mut sixteen = placed_fanout(&placement, 16, size);
        let mut one = placed_fanout(&placement, 1, size);
        placement.enter_publisher().expect("pin the publisher");
        assert_eq!(placement::thread_cpus(), placement.cpu.to_string(), "the publishing thread is pinned");
        PACED_PLACEMENT.lock().expect("placement").replace((placement.cpu, placement.others_list.clone()));
        let rate = sixteen.sustained_rate(Duration::from_millis(500)) * PACE_SHARE;
        PACED_RATES.lock().expect("rates").insert(size, rate);
        let per_round = ((rate * PACE_ROUND.as_secs_f64()) as u64).max(1);
        for round in 0..=PACE_ROUNDS {
            let kind = if round == 0 { "paced warm-up" } else { "paced" };
            one.run(per_round, 1, kind, Some(rate));
            sixteen.run(per_round, 16, kind, Some(rate));
        }
        placement.enter_others().expect("place the next fan-out's threads");
    }
    placement.leave().expect("restore the allowed CPUs");
}

/// The publisher's CPU and the others' in the paced measurement.
static PACED_PLACEMENT: Mutex<Option<(usize, String)>> = Mutex::new(None);

/// The rate each size was paced at (messages a second).
static PACED_RATES: Mutex<BTreeMap<usize, f64>> = Mutex::new(BTreeMap::new());

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
    let rates = PACED_RATES.lock().expect("rates");
    if !rates.is_empty() {
        let (cpu, others) = PACED_PLACEMENT.lock().expect("placement").clone().unwrap_or_default();
        println!(
            "\npublisher CPU per message at the same rate (publisher_cpu_paced): publisher alone on CPU {cpu}, \
             every other thread on CPUs {others}"
        );
        println!("{:>8} {:>10} {:>12} {:>12} {:>10}", "size", "msgs/s", "1 sub", "16 subs", "16 ÷ 1");
        for (size, rate) in rates.iter() {
            let cpu = |n| all.get(&("paced", n, *size)).map(|t: &Totals| t.cpu_per_message().as_secs_f64());
            if let (Some(one), Some(sixteen)) = (cpu(1), cpu(16)) {
                println!(
                    "{:>8} {:>10.0} {:>10.2}us {:>10.2}us {:>10.2}",
                    size,
                    rate,
                    one * 1e6,
                    sixteen * 1e6,
                    sixteen / one.max(1e-12)
                );
            }
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

fn idle_poll_round(c: &mut Criterion) {
    let (pub_node, sub_node) = (node(), node());
    let publisher = pub_node.publisher("idle-poll").create().expect("publisher");
    let mut sub = sub_node.subscriber("idle-poll").busy_poll(true).create().expect("subscribe");
    sub.connect_wait(pub_node.local_addr(), Duration::from_secs(10)).expect("connect");
    publisher.publish(b"first").expect("publish");
    sub.recv_timeout(Duration::from_secs(10)).expect("recv").expect("the first message");
    assert!(sub.counters().in_place_connects() == 1, "the ring is read in place");
    let mut group = c.benchmark_group("idle_poll_round");
    group.sample_size(20).warm_up_time(Duration::from_millis(300)).measurement_time(Duration::from_secs(1));
    group.bench_function("in_place", |b| {
        b.iter_custom(|iters| {
            let (start, reads0) = (Instant::now(), sub.counters().empty_reads());
            while sub.counters().empty_reads() - reads0 < iters {
                assert!(sub.recv_ref(Duration::from_micros(20)).expect("recv").is_none(), "the topic is idle");
            }
            start.elapsed().mul_f64(iters as f64 / (sub.counters().empty_reads() - reads0) as f64)
        })
    });
    group.finish();
}

criterion_group!(benches, raw_read, idle_poll_round, pubsub_goodput, publisher_cpu_overwrite, publisher_cpu_paced);

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
    summary();
}
