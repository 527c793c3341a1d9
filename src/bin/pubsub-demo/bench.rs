//! `bench`: a throughput and latency matrix in one process, a publisher node and a subscriber
//! node. For each (size, subscriber count):
//!
//! 1. throughput: the publisher publishes as fast as the policy lets it, up to `--messages`
//!    or 60 % of `--seconds`; the rate is messages / time until every subscriber has the last
//!    one; `mb_per_sec` is the publisher's payload goodput (each message counted once);
//! 2. latency: one message at a time, the next when every subscriber has the previous one, for
//!    the rest of `--seconds` (at least 200, at most 10 000 messages); each message carries its send time and
//!    each subscriber records now − send time (same process, same clock) in an HDR histogram.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use rdma_pubsub::{Checksum, DiscoveryOptions, Node, PublisherOptions, Start, SubscriptionEvent, SubscriptionOptions};

use crate::cli::{checksum_name, BenchArgs, PolicyArg};
use crate::{payload, placement, procinfo, Fail};

/// Latency messages per point even when its time is up.
const MIN_LATENCY_SAMPLES: u64 = 200;

/// One point of the matrix.
struct Point {
    size: u64,
    subscribers: u64,
    policy: PolicyArg,
    checksum: Checksum,
    msgs_per_sec: f64,
    mb_per_sec: f64,
    p50_us: f64,
    p99_us: f64,
    p999_us: f64,
    max_us: f64,
    /// Messages lost (Overwrite) or not delivered (a subscriber dropped), over subscribers.
    lost: u64,
    damaged: u64,
    /// Times the publisher waited for credit, per message of the throughput run.
    waits_per_msg: f64,
    /// Acks the publisher received, per message of the throughput run.
    acks_per_msg: f64,
    /// Doorbells the publisher sent, per message of the throughput run.
    doorbells_per_msg: f64,
    /// CPU time of the publishing thread per message of the throughput run, µs.
    pub_cpu_us: f64,
    /// The CPUs the publishing thread was allowed during the point.
    publisher_cpus: String,
    /// The CPUs the subscriber threads were allowed (each reads its own; they agree).
    subscriber_cpus: String,
}

/// What one subscriber thread returns.
struct SubResult {
    /// The CPUs the thread was allowed.
    cpus: String,
    latency: Histogram<u64>,
    lost: u64,
    damaged: u64,
}

/// Runs the matrix.
pub fn run(args: &BenchArgs) -> Result<(), Fail> {
    // With a pinned publisher, every thread but the publishing one goes to the other CPUs:
    // the nodes' threads and the subscriber threads inherit the CPUs of the main thread, which
    // moves to its own CPU only to publish.
    let placement = args.pin_publisher.map(placement::Placement::new).transpose().map_err(Fail::Usage)?;
    if let Some(p) = &placement {
        p.enter_others().map_err(Fail::Usage)?;
    }
    let placement_note = match &placement {
        Some(p) => format!(
            "# threads: publisher = the main thread, alone on CPU {}; every other thread on CPUs {} (--pin-publisher):\n\
             # one thread per subscriber; per node a CM thread, a stats thread and the fabric's own threads (soft: a NIC thread).",
            p.cpu, p.others_list
        ),
        None => format!(
            "# threads: publisher = the main thread; one thread per subscriber; per node a CM thread, a stats\n\
             # thread and the fabric's own threads (soft: a NIC thread). None is pinned: the kernel places them\n\
             # on the allowed CPUs {}; pin the run with `taskset -c <cpus> pubsub-demo bench ...`, and give the\n\
             # publisher a CPU of its own with --pin-publisher <cpu>.",
            procinfo::cpus_allowed()
        ),
    };
    // Discovery off: the subscribers connect explicitly, and concurrent runs never mix.
    let pub_node = args.fabric.node(SocketAddr::new(args.bind, 0), DiscoveryOptions::disabled())?;
    let sub_node = args.fabric.node(SocketAddr::new(args.bind, 0), DiscoveryOptions::disabled())?;
    let note = format!(
        "# pubsub-demo bench: {} fabric ({}), policy {}, publisher node {}, subscriber node {}\n\
         {placement_note}\n\
         # mb_per_sec = publisher payload goodput (a message counted once, whatever the subscriber count);\n\
         # latency = one message in flight at a time, send time to receipt by each subscriber.",
        pub_node.fabric().kind(),
        pub_node.fabric().device_name(),
        args.policy.name(),
        pub_node.local_addr(),
        sub_node.local_addr(),
    );
    if args.json {
        eprintln!("{note}");
    } else {
        println!("{note}");
        println!(
            "{:>9} {:>5} {:<9} {:<8} {:>11} {:>10} {:>9} {:>9} {:>9} {:>9} {:>7} {:>9} {:>8}",
            "size",
            "subs",
            "policy",
            "checksum",
            "msgs/s",
            "MB/s",
            "p50 us",
            "p99 us",
            "p99.9 us",
            "max us",
            "lost",
            "waits/msg",
            "acks/msg"
        );
    }
    let mut points = Vec::new();
    let mut damaged = 0;
    for &size in &args.sizes {
        for &subs in &args.subscribers {
            let p = measure(&pub_node, &sub_node, args, placement.as_ref(), size, subs)?;
            if !args.json {
                println!(
                    "{:>9} {:>5} {:<9} {:<8} {:>11.0} {:>10.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>7} {:>9.2} {:>8.2} {:>8.2} {:>10.2}",
                    p.size,
                    p.subscribers,
                    p.policy.name(),
                    checksum_name(p.checksum),
                    p.msgs_per_sec,
                    p.mb_per_sec,
                    p.p50_us,
                    p.p99_us,
                    p.p999_us,
                    p.max_us,
                    p.lost,
                    p.waits_per_msg,
                    p.acks_per_msg,
                    p.doorbells_per_msg,
                    p.pub_cpu_us
                );
            }
            damaged += p.damaged;
            points.push(p);
        }
    }
    if args.json {
        let objects: Vec<String> = points
            .iter()
            .map(|p| {
                format!(
                    "{{\"size\":{},\"subscribers\":{},\"policy\":\"{}\",\"checksum\":\"{}\",\"msgs_per_sec\":{:.1},\"mb_per_sec\":{:.3},\"p50_us\":{:.2},\"p99_us\":{:.2},\"p999_us\":{:.2},\"max_us\":{:.2},\"waits_per_msg\":{:.3},\"acks_per_msg\":{:.3},\"doorbells_per_msg\":{:.3},\"pub_cpu_us\":{:.3},\"publisher_cpus\":\"{}\",\"subscriber_cpus\":\"{}\"}}",
                    p.size, p.subscribers, p.policy.name(), checksum_name(p.checksum), p.msgs_per_sec, p.mb_per_sec, p.p50_us, p.p99_us, p.p999_us, p.max_us, p.waits_per_msg, p.acks_per_msg, p.doorbells_per_msg, p.pub_cpu_us, p.publisher_cpus, p.subscriber_cpus
                )
            })
            .collect();
        println!("[\n  {}\n]", objects.join(",\n  "));
    }
    if let Some(p) = &placement {
        p.leave().map_err(Fail::Usage)?;
    }
    if damaged > 0 {
        eprintln!("pubsub-demo bench: {damaged} damaged messages");
        return Err(Fail::Check);
    }
    Ok(())
}

fn measure(
    pub_node: &Node,
    sub_node: &Node,
    args: &BenchArgs,
    placement: Option<&placement::Placement>,
    size: u64,
    subs: u64,
) -> Result<Point, Fail> {
    if let Some(p) = placement {
        p.enter_others().map_err(Fail::Usage)?;
    }
    let topic = format!("bench-{size}-{subs}");
    let size = size as usize;
    let ring_capacity = (size * 16).next_power_of_two().clamp(1 << 20, 64 << 20);
    let publisher = pub_node.publisher_with(
        &topic,
        PublisherOptions {
            policy: args.policy.policy(),
            ring_capacity,
            checksum: args.checksum.checksum(),
            ..Default::default()
        },
    )?;
    let stream = payload::stream_of(&topic);
    let base = Instant::now();
    let progress: Arc<Vec<AtomicU64>> = Arc::new((0..subs).map(|_| AtomicU64::new(0)).collect());
    let mut threads: Vec<JoinHandle<SubResult>> = Vec::new();
    for i in 0..subs as usize {
        let mut sub = sub_node.subscribe_with(
            &topic,
            SubscriptionOptions { start: Start::Earliest, busy_poll: args.busy_poll, ..Default::default() },
        )?;
        sub.connect_wait(pub_node.local_addr(), Duration::from_secs(10))?;
        let progress = progress.clone();
        threads.push(
            thread::Builder::new()
                .name(format!("bench-sub-{i}"))
                .spawn(move || receive(sub, stream, base, &progress[i]))
                .map_err(|e| Fail::Usage(format!("cannot start a thread: {e}")))?,
        );
    }
    if let Some(p) = placement {
        p.enter_publisher().map_err(Fail::Usage)?;
    }
    let publisher_cpus = placement::thread_cpus();
    let deadline = Instant::now() + Duration::from_secs_f64(args.seconds.max(0.1));
    let mut buf = vec![0u8; size];
    payload::fill(&mut buf, stream, 0, 0);
    let all_have = |seq: u64| progress.iter().all(|p| p.load(Ordering::Acquire) >= seq);

    // Throughput.
    let throughput_end = Instant::now() + Duration::from_secs_f64(args.seconds.max(0.1) * 0.6);
    let counted = |c: &std::sync::atomic::AtomicU64| c.load(Ordering::Relaxed);
    let (waits0, acks0) = (counted(&publisher.counters().waits), counted(&publisher.counters().acks));
    let doorbells0 = counted(&publisher.counters().doorbells);
    let cpu0 = procinfo::thread_cpu();
    let start = Instant::now();
    let mut seq = 0u64;
    while seq < args.messages.max(1) && (seq == 0 || Instant::now() < throughput_end) {
        seq += 1;
        payload::write_header(&mut buf, stream, seq, 0);
        publisher.publish(&buf)?;
    }
    let published = seq;
    let pub_cpu_us = (procinfo::thread_cpu() - cpu0).as_secs_f64() * 1e6 / published as f64;
    let per_message = |now: u64, before: u64| (now - before) as f64 / published as f64;
    let waits_per_msg = per_message(counted(&publisher.counters().waits), waits0);
    let acks_per_msg = per_message(counted(&publisher.counters().acks), acks0);
    let doorbells_per_msg = per_message(counted(&publisher.counters().doorbells), doorbells0);
    let wait_end = Instant::now() + Duration::from_secs(30);
    while !all_have(published) && Instant::now() < wait_end {
        thread::yield_now();
    }
    let secs = start.elapsed().as_secs_f64();

    // Latency.
    let latency_count = args.messages.clamp(1, 10_000);
    for i in 0..latency_count {
        // At least MIN_LATENCY_SAMPLES, then until the point's time is up.
        if i >= MIN_LATENCY_SAMPLES && Instant::now() >= deadline {
            break;
        }
        seq += 1;
        payload::write_header(&mut buf, stream, seq, base.elapsed().as_nanos() as u64 + 1);
        publisher.publish(&buf)?;
        let until = Instant::now() + Duration::from_secs(1);
        while !all_have(seq) && Instant::now() < until {
            thread::yield_now();
        }
    }
    let _ = publisher.flush(Duration::from_secs(5));
    let checksum = publisher.checksum();
    drop(publisher);
    let mut latency = Histogram::<u64>::new_with_bounds(1, 3_600_000_000_000, 3).expect("valid histogram bounds");
    let (mut lost, mut damaged) = (0, 0);
    let mut subscriber_cpus = String::new();
    for t in threads {
        let r = t.join().map_err(|_| Fail::Usage("a subscriber thread panicked".into()))?;
        if subscriber_cpus.is_empty() {
            subscriber_cpus = r.cpus;
        } else if subscriber_cpus != r.cpus {
            subscriber_cpus = "mixed".into();
        }
        let _ = latency.add(&r.latency);
        lost += r.lost;
        damaged += r.damaged;
    }
    let q = |v: f64| latency.value_at_quantile(v) as f64 / 1e3;
    let msgs_per_sec = published as f64 / secs;
    Ok(Point {
        size: size as u64,
        subscribers: subs,
        policy: args.policy,
        checksum,
        msgs_per_sec,
        mb_per_sec: msgs_per_sec * size as f64 / 1e6,
        p50_us: q(0.5),
        p99_us: q(0.99),
        p999_us: q(0.999),
        max_us: latency.max() as f64 / 1e3,
        lost,
        damaged,
        waits_per_msg,
        acks_per_msg,
        doorbells_per_msg,
        pub_cpu_us,
        publisher_cpus,
        subscriber_cpus,
    })
}

/// A subscriber thread: receives until the stream ends, publishing its progress (the last
/// sequence seen) and recording the latency of stamped messages.
fn receive(mut sub: rdma_pubsub::Subscription, stream: u32, base: Instant, progress: &AtomicU64) -> SubResult {
    let mut r = SubResult {
        cpus: placement::thread_cpus(),
        latency: Histogram::new_with_bounds(1, 3_600_000_000_000, 3).expect("valid histogram bounds"),
        lost: 0,
        damaged: 0,
    };
    let mut last_message = Instant::now();
    let mut next = 1;
    loop {
        match sub.recv_ref(Duration::from_millis(100)) {
            Ok(Some(m)) => {
                let now = base.elapsed().as_nanos() as u64;
                last_message = Instant::now();
                match payload::header(m.data, stream) {
                    Ok(h) if h.seq == m.seq => {
                        if h.stamp_ns != 0 {
                            let _ = r.latency.record(now.saturating_sub(h.stamp_ns - 1).max(1));
                        }
                    }
                    _ => r.damaged += 1,
                }
                r.lost += m.seq.saturating_sub(next);
                next = m.seq + 1;
                progress.store(m.seq, Ordering::Release);
            }
            Ok(None) if last_message.elapsed() > Duration::from_secs(10) => break,
            Ok(None) => {}
            Err(_) => break,
        }
        while let Some(e) = sub.try_event() {
            if let SubscriptionEvent::Dropped { .. } = e {
                // Let the publisher stop waiting for this subscriber.
                progress.store(u64::MAX, Ordering::Release);
            }
        }
    }
    progress.store(u64::MAX, Ordering::Release);
    r
}
