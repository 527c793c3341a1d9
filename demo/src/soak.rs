//! `soak`: one publisher (Block) to many subscribers on the soft fabric for a while, every
//! message checked; then subscribe/unsubscribe cycles. Fails on any loss or damage, on more
//! than 5 % growth of resident memory, or on any growth of open descriptors or threads. Growth
//! is measured after a warm-up: in the run from its first fifth (at most 5 s) to its end, in
//! the cycles from cycle min([`WARM_CYCLES`], half) to the last (after the closed connections
//! are torn down).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use rdma_pubsub::{DiscoveryOptions, FabricKind, Node, Policy, Start};

use crate::cli::SoakArgs;
use crate::procinfo::{self, Usage};
use crate::{payload, Fail};

/// Largest resident-memory growth allowed, percent.
const MAX_RSS_GROWTH: f64 = 5.0;

/// Subscribe/unsubscribe cycles run before the baseline of their growth check (at most half
/// of them). Resident memory rises during the first ~20 cycles without any leak: glibc raises
/// its mmap threshold when the first large blocks are freed, so the next 256 KiB READ buffers
/// come from the heap, which grows once to hold them. Measured: flat from cycle 20 to 10,000.
const WARM_CYCLES: u64 = 1000;

#[derive(Default)]
struct Checks {
    delivered: AtomicU64,
    damaged: AtomicU64,
    /// Sequence gaps.
    missing: AtomicU64,
}

/// A soft node on loopback without discovery: the subscribers connect explicitly, and
/// concurrent runs never mix.
fn node() -> Result<Node, Fail> {
    Ok(Node::builder()
        .fabric(FabricKind::Soft)
        .bind("127.0.0.1:0".parse().expect("literal address"))
        .discovery(DiscoveryOptions::disabled())
        .build()?)
}

/// Runs the soak.
pub fn run(args: &SoakArgs) -> Result<(), Fail> {
    let pub_node = node()?;
    let sub_node = node()?;
    let size = args.size as usize;
    println!(
        "soak: 1 publisher (block) -> {} subscribers, {} B messages, {} s, then {} subscribe/unsubscribe cycles (soft fabric, CPUs {})",
        args.subscribers,
        size,
        args.seconds,
        args.cycles,
        procinfo::cpus_allowed()
    );
    let policy = Policy::Block { timeout: Duration::from_secs(10) };
    let publisher = pub_node.publisher("soak").policy(policy).ring_capacity(4 << 20).create()?;
    let stream = payload::stream_of("soak");
    let mut readers = Vec::new();
    let mut all_checks = Vec::new();
    for _ in 0..args.subscribers {
        let mut sub = sub_node.subscriber("soak").start(Start::Earliest).create()?;
        sub.connect_wait(pub_node.local_addr(), Duration::from_secs(10))?;
        let checks = Arc::new(Checks::default());
        all_checks.push(checks.clone());
        readers.push(thread::spawn(move || read_all(sub, stream, size, &checks)));
    }
    let stop = Arc::new(AtomicBool::new(false));
    let publisher_stop = stop.clone();
    let writer = thread::spawn(move || -> Result<u64, rdma_pubsub::Error> {
        let mut buf = vec![0u8; size];
        let mut seq = 0;
        while !publisher_stop.load(Ordering::Relaxed) {
            seq += 1;
            payload::fill(&mut buf, stream, seq, 0);
            publisher.publish(&buf)?;
        }
        publisher.flush(Duration::from_secs(10))?;
        Ok(seq)
    });
    let start = Instant::now();
    let run_for = Duration::from_secs(args.seconds.max(1));
    let warm_up = (run_for / 5).min(Duration::from_secs(5));
    while start.elapsed() < warm_up && !writer.is_finished() {
        thread::sleep(Duration::from_millis(20));
    }
    let before = procinfo::usage();
    let mut last_report = Instant::now();
    while start.elapsed() < run_for && !writer.is_finished() {
        thread::sleep(Duration::from_millis(20));
        if last_report.elapsed() >= Duration::from_secs(5) {
            last_report = Instant::now();
            let d: Vec<u64> = all_checks.iter().map(|c| c.delivered.load(Ordering::Relaxed)).collect();
            let u = procinfo::usage();
            println!(
                "  [{:>4.0}s] delivered min {} max {}  rss {} KiB fds {} threads {}",
                start.elapsed().as_secs_f64(),
                d.iter().min().unwrap_or(&0),
                d.iter().max().unwrap_or(&0),
                u.rss_kib,
                u.fds,
                u.threads
            );
        }
    }
    let after = procinfo::usage();
    stop.store(true, Ordering::Relaxed);
    let published = match writer.join() {
        Ok(Ok(n)) => n,
        Ok(Err(e)) => return Err(Fail::Usage(format!("the publisher failed: {e}"))),
        Err(_) => return Err(Fail::Usage("the publisher thread panicked".into())),
    };
    for r in readers {
        r.join().map_err(|_| Fail::Usage("a subscriber thread panicked".into()))?;
    }
    let secs = start.elapsed().as_secs_f64();
    let mut ok = true;
    let mut lost_total = 0;
    let mut damaged_total = 0;
    for c in &all_checks {
        let delivered = c.delivered.load(Ordering::Relaxed);
        lost_total += published.saturating_sub(delivered) + c.missing.load(Ordering::Relaxed);
        damaged_total += c.damaged.load(Ordering::Relaxed);
    }
    ok &= lost_total == 0 && damaged_total == 0;
    println!(
        "run: published {published} messages in {secs:.1} s ({:.0} msg/s) to {} subscribers: lost {lost_total}, damaged {damaged_total}",
        published as f64 / secs,
        args.subscribers
    );
    ok &= report("run (after warm-up -> end)", before, after);

    // Subscribe/unsubscribe cycles, one message each.
    let publisher = pub_node.publisher("cycles").policy(policy).ring_capacity(1 << 20).create()?;
    let cycle_stream = payload::stream_of("cycles");
    let warm = WARM_CYCLES.min(args.cycles / 2);
    let mut baseline = procinfo::usage();
    let cycles_start = Instant::now();
    let mut buf = vec![0u8; size];
    for i in 0..args.cycles {
        if i == warm {
            baseline = settle(baseline, Duration::ZERO);
        }
        let mut sub = sub_node.subscriber("cycles").create()?;
        sub.connect_wait(pub_node.local_addr(), Duration::from_secs(10))?;
        let seq = publisher.next_seq();
        payload::fill(&mut buf, cycle_stream, seq, 0);
        publisher.publish(&buf)?;
        match sub.recv_timeout(Duration::from_secs(10))? {
            Some(m) if payload::check(&m.data, cycle_stream).is_ok_and(|h| h.seq == m.seq) => {}
            Some(_) => {
                println!("cycle {i}: the message arrived damaged");
                ok = false;
            }
            None => {
                println!("cycle {i}: the message did not arrive within 10 s");
                ok = false;
            }
        }
    }
    // Closed connections are torn down asynchronously: wait (bounded) for their threads and
    // descriptors to go.
    let end = settle(baseline, Duration::from_secs(5));
    println!(
        "cycles: {} subscribe/unsubscribe cycles in {:.1} s ({:.0}/s)",
        args.cycles,
        cycles_start.elapsed().as_secs_f64(),
        args.cycles as f64 / cycles_start.elapsed().as_secs_f64()
    );
    ok &= report(&format!("cycles (after {warm} -> after {})", args.cycles), baseline, end);
    drop(publisher);
    println!("{}", if ok { "ok: no loss, no growth" } else { "FAIL" });
    if ok {
        Ok(())
    } else {
        Err(Fail::Check)
    }
}

/// Reads until fds and threads are back to `baseline` or `within` passes.
fn settle(baseline: Usage, within: Duration) -> Usage {
    let deadline = Instant::now() + within;
    loop {
        let u = procinfo::usage();
        if (u.fds <= baseline.fds && u.threads <= baseline.threads) || Instant::now() >= deadline {
            return u;
        }
        thread::sleep(Duration::from_millis(10));
    }
}

/// Prints growth from `a` to `b`; whether it is within limits.
fn report(what: &str, a: Usage, b: Usage) -> bool {
    let rss = (b.rss_kib as f64 - a.rss_kib as f64) * 100.0 / a.rss_kib.max(1) as f64;
    let ok = rss <= MAX_RSS_GROWTH && b.fds <= a.fds && b.threads <= a.threads;
    println!(
        "  {what}: rss {} -> {} KiB ({rss:+.1} %), fds {} -> {}, threads {} -> {}  {}",
        a.rss_kib,
        b.rss_kib,
        a.fds,
        b.fds,
        a.threads,
        b.threads,
        if ok { "ok" } else { "GROWTH" }
    );
    ok
}

/// Receives until the stream ends, checking every message.
fn read_all(mut sub: rdma_pubsub::Subscription, stream: u32, size: usize, checks: &Checks) {
    let mut next = 1;
    let mut last_message = Instant::now();
    loop {
        match sub.recv_ref(Duration::from_millis(100)) {
            Ok(Some(m)) => {
                last_message = Instant::now();
                let intact = m.data.len() == size && payload::check(m.data, stream).is_ok_and(|h| h.seq == m.seq);
                if !intact {
                    checks.damaged.fetch_add(1, Ordering::Relaxed);
                }
                if m.seq != next {
                    checks.missing.fetch_add(m.seq.abs_diff(next), Ordering::Relaxed);
                }
                next = m.seq + 1;
                checks.delivered.fetch_add(1, Ordering::Relaxed);
            }
            Ok(None) if last_message.elapsed() > Duration::from_secs(15) => return,
            Ok(None) => {}
            Err(_) => return,
        }
    }
}
