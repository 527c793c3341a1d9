//! `bench`: a throughput and latency matrix, a publisher node and its subscribers: threads of
//! this process on a second node, or (`--separate-processes`) processes of their own, each with
//! its node (see [`processes`]). For each (size, subscriber count):
//!
//! 1. throughput: the publisher publishes as fast as the policy lets it, up to `--messages`
//!    or 60 % of `--seconds` (the clock is read every 1024 messages); the last message is
//!    marked; the rate is messages / time until every subscriber has the last one;
//!    `mb_per_sec` is the publisher's payload goodput (each message counted once);
//!    `pub_cpu_us` is the publishing thread's CPU time per message, `sub_cpu_us` the CPU time
//!    of the receiving threads (from each one's first message to the marked last one) over the
//!    messages they received, summed over subscribers;
//! 2. latency: one message at a time, the next when every subscriber has the previous one, for
//!    the rest of `--seconds` (at least 200, at most 10 000 messages; `--latency-gap` pauses
//!    between a receipt and the next publish); each message carries its
//!    send time on `CLOCK_MONOTONIC` (one clock for every process of the host) and each
//!    subscriber records receipt time − send time in an HDR histogram.
//!
//! Before the table it prints the machine's own limits, measured by the tool (see [`limits`];
//! `--no-limits` skips them): memcpy of each message size, and one TCP stream over `--bind`.

mod limits;
mod plot;
mod processes;
mod receive;

use std::fs::File;
use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use rdma_pubsub::{Checksum, DiscoveryOptions, ExclusivePublisher, Node, Publisher, PublisherCounters, Start};

use crate::cli::{checksum_name, BenchArgs, PolicyArg};
use crate::{cli, payload, placement, procinfo, Fail};

/// Latency messages per point even when its time is up.
const MIN_LATENCY_SAMPLES: u64 = 200;

/// The name of each subscriber thread: this, then its index.
const SUBSCRIBER_THREAD: &str = "bench-sub-";

/// Messages the publisher publishes between two readings of the clock in the throughput run.
const CLOCK_EVERY: u64 = 1024;
/// Longest the publishing thread parks at a time while it waits for a latency message's receipt
/// with `--latency-gap` (a report unparks it before that).
const PARK_CAP: Duration = Duration::from_millis(1);

/// The table's columns: name and width (negative: left-aligned), in the order of [`row`].
const COLUMNS: [(&str, i32); 19] = [
    ("size", 9),
    ("subs", 5),
    ("policy", -9),
    ("checksum", -8),
    ("msgs/s", 11),
    ("MB/s", 10),
    ("p50_us", 9),
    ("p99_us", 9),
    ("p99.9_us", 9),
    ("max_us", 9),
    ("lost", 7),
    ("waits/msg", 9),
    ("acks/msg", 8),
    ("doorbells/msg", 13),
    ("pub_cpu_us", 10),
    ("sub_cpu_us", 10),
    ("other_cpu_us", 12),
    ("lat_doorbells/msg", 17),
    ("lat_bell_records/msg", 20),
];

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
    /// CPU time of the receiving threads (or processes) in the throughput run per message
    /// delivered, summed over subscribers, µs.
    sub_cpu_us: f64,
    /// CPU time of this process's other threads (the soft fabric's NIC threads, the nodes' CM
    /// and stats threads) per message of the throughput run, µs.
    other_cpu_us: f64,
    /// Doorbells the publisher sent, per message of the latency run (about 1 when the
    /// subscribers park between messages).
    lat_doorbells_per_msg: f64,
    /// Of those, the doorbells that carried the new records (the subscriber took them without
    /// a READ), per message of the latency run.
    lat_doorbell_records_per_msg: f64,
    /// The CPUs the publishing thread was allowed during the point.
    publisher_cpus: String,
    /// The CPUs the subscriber threads were allowed (each reads its own; they agree).
    subscriber_cpus: String,
}

/// What one subscriber (thread or process) counted.
struct SubResult {
    /// The CPUs the thread was allowed.
    cpus: String,
    latency: Histogram<u64>,
    lost: u64,
    damaged: u64,
    /// CPU time of its receiving thread in the throughput run.
    cpu: Duration,
    /// Messages it received in that time.
    msgs: u64,
}

/// An empty latency histogram (1 ns to 1 h, 3 significant digits).
fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000_000, 3).expect("valid histogram bounds")
}

/// The subscribers of one point: threads of this process or processes of their own.
enum Subscribers {
    /// Threads, each publishing the last sequence it has in its atomic.
    Threads { progress: Arc<Vec<AtomicU64>>, threads: Vec<JoinHandle<SubResult>> },
    /// Processes.
    Processes(processes::Group),
}

impl Subscribers {
    /// Waits up to `timeout` until every subscriber has message `seq`: `Ok(false)` when the
    /// time is up. Processes: an error when one dies or hangs, or (`strict`) when the time is up.
    /// Threads: spinning, or with `asleep` parked (each latency report unparks this thread), so
    /// that the subscribers' threads and the NIC threads have the CPUs to themselves.
    fn wait_all(&mut self, seq: u64, timeout: Duration, strict: bool, asleep: bool) -> Result<bool, Fail> {
        match self {
            Subscribers::Threads { progress, .. } => {
                let until = Instant::now() + timeout;
                loop {
                    if progress.iter().all(|p| p.load(Ordering::Acquire) >= seq) {
                        return Ok(true);
                    }
                    let now = Instant::now();
                    if now >= until {
                        return Ok(false);
                    }
                    if asleep {
                        thread::park_timeout((until - now).min(PARK_CAP));
                    } else {
                        thread::yield_now();
                    }
                }
            }
            Subscribers::Processes(group) => group.wait_all(seq, timeout, strict),
        }
    }

    /// The publisher's error `fail`, naming the subscriber process that caused it if one did.
    fn blame(&mut self, fail: Fail) -> Fail {
        match self {
            Subscribers::Threads { .. } => fail,
            Subscribers::Processes(group) => group.blame(fail),
        }
    }

    /// After the publisher has gone: what each subscriber counted.
    fn finish(self) -> Result<Vec<SubResult>, Fail> {
        match self {
            Subscribers::Threads { threads, .. } => threads
                .into_iter()
                .map(|t| t.join().map_err(|_| Fail::Usage("a subscriber thread panicked".into())))
                .collect(),
            Subscribers::Processes(group) => group.finish(),
        }
    }
}

/// The table row of a point, aligned under [`COLUMNS`].
fn row(p: &Point) -> String {
    let fields = [
        p.size.to_string(),
        p.subscribers.to_string(),
        p.policy.name().to_string(),
        checksum_name(p.checksum).to_string(),
        format!("{:.0}", p.msgs_per_sec),
        format!("{:.1}", p.mb_per_sec),
        format!("{:.1}", p.p50_us),
        format!("{:.1}", p.p99_us),
        format!("{:.1}", p.p999_us),
        format!("{:.1}", p.max_us),
        p.lost.to_string(),
        format!("{:.2}", p.waits_per_msg),
        format!("{:.2}", p.acks_per_msg),
        format!("{:.2}", p.doorbells_per_msg),
        format!("{:.3}", p.pub_cpu_us),
        format!("{:.3}", p.sub_cpu_us),
        format!("{:.3}", p.other_cpu_us),
        format!("{:.2}", p.lat_doorbells_per_msg),
        format!("{:.2}", p.lat_doorbell_records_per_msg),
    ];
    aligned(fields.iter().map(String::as_str))
}

/// `fields` padded to the widths of [`COLUMNS`], one space apart.
fn aligned<'a>(fields: impl Iterator<Item = &'a str>) -> String {
    let cells: Vec<String> = fields
        .zip(COLUMNS)
        .map(|(f, (_, w))| {
            let width = w.unsigned_abs() as usize;
            if w < 0 {
                format!("{f:<width$}")
            } else {
                format!("{f:>width$}")
            }
        })
        .collect();
    cells.join(" ").trim_end().to_owned()
}

/// The `--plot` file, created before the run and removed again unless the chart was written.
struct PlotFile {
    path: PathBuf,
    file: File,
    written: bool,
}

impl PlotFile {
    fn create(path: &Path) -> Result<PlotFile, Fail> {
        let file = File::create(path).map_err(|e| {
            Fail::Usage(format!("--plot {}: cannot create the file: {e}; choose another path", path.display()))
        })?;
        Ok(PlotFile { path: path.to_owned(), file, written: false })
    }

    fn write(&mut self, svg: &str) -> Result<(), Fail> {
        self.file
            .write_all(svg.as_bytes())
            .map_err(|e| Fail::Usage(format!("--plot {}: cannot write the file: {e}", self.path.display())))?;
        self.written = true;
        Ok(())
    }
}

impl Drop for PlotFile {
    fn drop(&mut self) {
        if !self.written {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// Runs the matrix.
pub fn run(args: &BenchArgs) -> Result<(), Fail> {
    if let Some(addr) = args.subscriber_of {
        return processes::run_child(args, addr, args.subscriber_index);
    }
    // The plot file is created first: a path that cannot be written fails before the run.
    let mut plot_file = match &args.plot {
        Some(path) => Some(PlotFile::create(path)?),
        None => None,
    };
    // With a pinned publisher, every thread but the publishing one goes to the other CPUs:
    // the nodes' threads and the subscriber threads inherit the CPUs of the main thread, which
    // moves to its own CPU only to publish.
    let placement = args.pin_publisher.map(placement::Placement::new).transpose().map_err(Fail::Usage)?;
    if let Some(p) = &placement {
        p.enter_others().map_err(Fail::Usage)?;
    }
    let subscribers_note = if args.separate_processes {
        "one process per subscriber (--separate-processes), each with its node"
    } else {
        "one thread per subscriber"
    };
    let placement_note = match &placement {
        Some(p) => format!(
            "# threads: publisher = the main thread, alone on CPU {}; every other thread on CPUs {} (--pin-publisher):\n\
             # {subscribers_note};\n\
             # per node a CM thread, a stats thread and the fabric's own threads (soft: a NIC thread).",
            p.cpu, p.others_list
        ),
        None => format!(
            "# threads: publisher = the main thread; {subscribers_note};\n\
             # per node a CM thread, a stats thread and the fabric's own threads (soft: a NIC thread).\n\
             # None is pinned: the kernel places them on the allowed CPUs {}; pin the run with\n\
             # `taskset -c <cpus> pubsub-demo bench ...`, and give the publisher a CPU of its own with --pin-publisher <cpu>.",
            procinfo::cpus_allowed()
        ),
    };
    // Discovery off: the subscribers connect explicitly, and concurrent runs never mix.
    let pub_node = args.fabric.node(SocketAddr::new(args.bind, 0), DiscoveryOptions::disabled())?;
    // Subscriber processes build their own nodes.
    let sub_node = match args.separate_processes {
        false => Some(args.fabric.node(SocketAddr::new(args.bind, 0), DiscoveryOptions::disabled())?),
        true => None,
    };
    let sub_where = match &sub_node {
        Some(n) => format!("subscriber node {}", n.local_addr()),
        None => "subscriber nodes in the subscriber processes".into(),
    };
    let note = format!(
        "# pubsub-demo bench: {} fabric ({}), policy {}, publisher node {}, {sub_where}\n\
         {placement_note}\n\
         # mb_per_sec = publisher payload goodput (a message counted once, whatever the subscriber count);\n\
         # latency = one message in flight at a time, send time to receipt by each subscriber;\n\
         # pub_cpu_us = the publishing thread's CPU time per message; sub_cpu_us = the receiving threads'\n\
         # CPU time over the messages they received (throughput run); other_cpu_us = the CPU time of this\n\
         # process's other threads (soft: the NIC threads; the nodes' CM and stats threads) per message\n\
         # (with --separate-processes, of the publisher's process only).",
        pub_node.fabric().kind(),
        pub_node.fabric().device_name(),
        args.policy.name(),
        pub_node.local_addr(),
    );
    // The machine's own limits, beside the figures (measured on the CPUs every thread but the
    // publishing one runs on, with --pin-publisher).
    let note = match args.no_limits {
        true => note,
        false => format!("{note}\n{}", limits::Limits::measure(&args.sizes, args.bind).note(args.bind)),
    };
    if args.json {
        eprintln!("{note}");
    } else {
        println!("{note}");
        println!("{}", aligned(COLUMNS.iter().map(|(name, _)| *name)));
    }
    let mut points = Vec::new();
    let mut damaged = 0;
    for &size in &args.sizes {
        for &subs in &args.subscribers {
            let p = measure(&pub_node, sub_node.as_ref(), args, placement.as_ref(), size, subs)?;
            if !args.json {
                println!("{}", row(&p));
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
                    "{{\"size\":{},\"subscribers\":{},\"policy\":\"{}\",\"checksum\":\"{}\",\"separate_processes\":{},\"msgs_per_sec\":{:.1},\"mb_per_sec\":{:.3},\"p50_us\":{:.2},\"p99_us\":{:.2},\"p999_us\":{:.2},\"max_us\":{:.2},\"lost\":{},\"damaged\":{},\"waits_per_msg\":{:.3},\"acks_per_msg\":{:.3},\"doorbells_per_msg\":{:.3},\"pub_cpu_us\":{:.3},\"sub_cpu_us\":{:.3},\"other_cpu_us\":{:.3},\"lat_doorbells_per_msg\":{:.3},\"lat_doorbell_records_per_msg\":{:.3},\"publisher_cpus\":\"{}\",\"subscriber_cpus\":\"{}\"}}",
                    p.size, p.subscribers, p.policy.name(), checksum_name(p.checksum), args.separate_processes, p.msgs_per_sec, p.mb_per_sec, p.p50_us, p.p99_us, p.p999_us, p.max_us, p.lost, p.damaged, p.waits_per_msg, p.acks_per_msg, p.doorbells_per_msg, p.pub_cpu_us, p.sub_cpu_us, p.other_cpu_us, p.lat_doorbells_per_msg, p.lat_doorbell_records_per_msg, p.publisher_cpus, p.subscriber_cpus
                )
            })
            .collect();
        println!("[\n  {}\n]", objects.join(",\n  "));
    }
    if let Some(plot_file) = plot_file.as_mut() {
        let plotted: Vec<plot::PlotPoint> = points
            .iter()
            .map(|p| plot::PlotPoint {
                size: p.size,
                subscribers: p.subscribers,
                msgs_per_sec: p.msgs_per_sec,
                mb_per_sec: p.mb_per_sec,
            })
            .collect();
        let title = format!(
            "pubsub-demo bench: {} fabric, policy {}, subscribers in {}",
            pub_node.fabric().kind(),
            args.policy.name(),
            if args.separate_processes { "processes" } else { "threads" }
        );
        plot_file.write(&plot::svg(&plotted, &title))?;
        let written = format!("# plot: {}", plot_file.path.display());
        if args.json {
            eprintln!("{written}");
        } else {
            println!("{written}");
        }
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
    sub_node: Option<&Node>,
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
    let builder = pub_node.publisher(&topic).policy(args.policy.policy()).ring_capacity(cli::ring_capacity_for(size));
    let mut publisher = args.checksum.apply(builder).create()?;
    let stream = payload::stream_of(&topic);
    // Started from this thread while it is on the other CPUs: threads and processes alike
    // inherit them.
    let mut subscribers = match sub_node {
        Some(sub_node) => start_threads(pub_node, sub_node, args, &topic, size, subs)?,
        None => {
            let spec = processes::Spec {
                fabric: pub_node.fabric().kind(),
                addr: pub_node.local_addr(),
                topic: &topic,
                size: size as u64,
            };
            Subscribers::Processes(processes::Group::start(args, &spec, subs)?)
        }
    };
    if let Some(p) = placement {
        p.enter_publisher().map_err(Fail::Usage)?;
    }
    let publisher_cpus = placement::thread_cpus();
    let deadline = Instant::now() + Duration::from_secs_f64(args.seconds.max(0.1));
    let mut buf = vec![0u8; size];
    payload::fill(&mut buf, stream, 0, 0);

    // Throughput: the clock is read every CLOCK_EVERY messages; the last message is marked.
    let throughput_end = Instant::now() + Duration::from_secs_f64(args.seconds.max(0.1) * 0.6);
    let mut sender = Sender::new(&mut publisher, args.shared_publisher)?;
    let (waits0, acks0) = (sender.counters().waits(), sender.counters().acks());
    let doorbells0 = sender.counters().doorbells();
    let most = args.messages.max(1);
    let cpu0 = procinfo::thread_cpu();
    let others0 = procinfo::threads_cpu();
    let start = Instant::now();
    let mut seq = 0u64;
    loop {
        seq += 1;
        let last = seq >= most || (seq % CLOCK_EVERY == 0 && Instant::now() >= throughput_end);
        payload::write_header(&mut buf, stream, seq, if last { receive::THROUGHPUT_END } else { 0 });
        sender.publish(&buf).map_err(|e| subscribers.blame(e.into()))?;
        if last {
            break;
        }
    }
    let published = seq;
    let pub_cpu_us = (procinfo::thread_cpu() - cpu0).as_secs_f64() * 1e6 / published as f64;
    let per_message = |now: u64, before: u64| (now - before) as f64 / published as f64;
    let waits_per_msg = per_message(sender.counters().waits(), waits0);
    let acks_per_msg = per_message(sender.counters().acks(), acks0);
    let doorbells_per_msg = per_message(sender.counters().doorbells(), doorbells0);
    subscribers.wait_all(published, Duration::from_secs(30), true, false)?;
    let secs = start.elapsed().as_secs_f64();
    let others =
        procinfo::other_threads_cpu(&others0, &procinfo::threads_cpu(), procinfo::current_tid(), SUBSCRIBER_THREAD);
    let other_cpu_us = others.as_secs_f64() * 1e6 / published as f64;

    // Latency.
    let latency_count = args.messages.clamp(1, 10_000);
    let lat_doorbells0 = sender.counters().doorbells();
    let lat_records0 = sender.counters().doorbells_with_records();
    let latency_start = seq;
    for i in 0..latency_count {
        // At least MIN_LATENCY_SAMPLES, then until the point's time is up.
        if i >= MIN_LATENCY_SAMPLES && Instant::now() >= deadline {
            break;
        }
        seq += 1;
        payload::write_header(&mut buf, stream, seq, receive::stamp_now());
        sender.publish(&buf).map_err(|e| subscribers.blame(e.into()))?;
        subscribers.wait_all(seq, Duration::from_secs(1), false, args.latency_gap > 0)?;
        if args.latency_gap > 0 {
            // The load's shape (subscribers that go idle between messages), not a synchronisation.
            thread::sleep(Duration::from_micros(args.latency_gap));
        }
    }
    let per_latency_message = |now: u64, before: u64| (now - before) as f64 / (seq - latency_start).max(1) as f64;
    let lat_doorbells_per_msg = per_latency_message(sender.counters().doorbells(), lat_doorbells0);
    let lat_doorbell_records_per_msg = per_latency_message(sender.counters().doorbells_with_records(), lat_records0);
    drop(sender);
    let _ = publisher.flush(Duration::from_secs(5));
    let checksum = publisher.checksum();
    drop(publisher);
    let mut latency = new_histogram();
    let (mut lost, mut damaged) = (0, 0);
    let (mut sub_cpu, mut sub_msgs) = (Duration::ZERO, 0);
    let mut subscriber_cpus = String::new();
    for r in subscribers.finish()? {
        if subscriber_cpus.is_empty() {
            subscriber_cpus = r.cpus;
        } else if subscriber_cpus != r.cpus {
            subscriber_cpus = "mixed".into();
        }
        let _ = latency.add(&r.latency);
        lost += r.lost;
        damaged += r.damaged;
        sub_cpu += r.cpu;
        sub_msgs += r.msgs;
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
        lat_doorbells_per_msg,
        lat_doorbell_records_per_msg,
        other_cpu_us,
        sub_cpu_us: if sub_msgs > 0 { sub_cpu.as_secs_f64() * 1e6 / sub_msgs as f64 } else { 0.0 },
        publisher_cpus,
        subscriber_cpus,
    })
}

/// Subscribes `subs` times on `sub_node`, connects each subscription and starts a thread
/// receiving on it.
fn start_threads(
    pub_node: &Node,
    sub_node: &Node,
    args: &BenchArgs,
    topic: &str,
    size: usize,
    subs: u64,
) -> Result<Subscribers, Fail> {
    let stream = payload::stream_of(topic);
    let progress: Arc<Vec<AtomicU64>> = Arc::new((0..subs).map(|_| AtomicU64::new(0)).collect());
    // With a gap the publishing thread (this one) waits for each latency message asleep.
    let waiter = (args.latency_gap > 0).then(thread::current);
    let mut threads = Vec::new();
    for i in 0..subs as usize {
        let mut sub = sub_node.subscriber(topic).start(Start::Earliest).busy_poll(args.busy_poll).create()?;
        sub.connect_wait(pub_node.local_addr(), Duration::from_secs(10))?;
        let progress = progress.clone();
        let waiter = waiter.clone();
        threads.push(
            thread::Builder::new()
                .name(format!("{SUBSCRIBER_THREAD}{i}"))
                .spawn(move || {
                    let mut report = AtomicReporter { progress: &progress[i], latency: new_histogram(), waiter };
                    // The reporter never fails and no flag orphans a thread.
                    let totals = receive::receive(&mut sub, stream, size, &mut report, None).unwrap_or_default();
                    progress[i].store(u64::MAX, Ordering::Release);
                    SubResult {
                        cpus: placement::thread_cpus(),
                        latency: report.latency,
                        lost: totals.lost,
                        damaged: totals.damaged,
                        cpu: totals.throughput_cpu,
                        msgs: totals.throughput_msgs,
                    }
                })
                .map_err(|e| Fail::Usage(format!("cannot start a thread: {e}")))?,
        );
    }
    Ok(Subscribers::Threads { progress, threads })
}

/// A subscriber thread's reports: the last sequence in an atomic the publishing thread reads,
/// latency samples in the thread's histogram; with a waiter (`--latency-gap`), the publishing
/// thread, unparked after each latency report.
struct AtomicReporter<'a> {
    progress: &'a AtomicU64,
    latency: Histogram<u64>,
    waiter: Option<thread::Thread>,
}

impl receive::Reporter for AtomicReporter<'_> {
    fn progress(&mut self, seq: u64) -> Result<(), Fail> {
        self.progress.store(seq, Ordering::Release);
        Ok(())
    }

    fn latency(&mut self, seq: u64, ns: u64) -> Result<(), Fail> {
        self.latency.saturating_record(ns);
        self.progress.store(seq, Ordering::Release);
        if let Some(waiter) = &self.waiter {
            waiter.unpark();
        }
        Ok(())
    }

    fn dropped(&mut self) -> Result<(), Fail> {
        // Let the publisher stop waiting for this subscriber.
        self.progress.store(u64::MAX, Ordering::Release);
        Ok(())
    }
}

/// What the bench publishes through: an [`ExclusivePublisher`] held for the point's runs, or the
/// shared handle (`--shared-publisher`).
enum Sender<'a> {
    Exclusive(ExclusivePublisher<'a>),
    Shared(&'a Publisher),
}

impl<'a> Sender<'a> {
    fn new(publisher: &'a mut Publisher, shared: bool) -> rdma_pubsub::Result<Sender<'a>> {
        Ok(if shared { Sender::Shared(publisher) } else { Sender::Exclusive(publisher.exclusive()?) })
    }

    fn counters(&self) -> &PublisherCounters {
        match self {
            Sender::Exclusive(p) => p.counters(),
            Sender::Shared(p) => p.counters(),
        }
    }

    fn publish(&mut self, message: &[u8]) -> rdma_pubsub::Result<u64> {
        match self {
            Sender::Exclusive(p) => p.publish(message),
            Sender::Shared(p) => p.publish(message),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// With `--latency-gap` the publishing thread waits for the receipt of each latency message
    /// parked, not spinning: the subscribers' threads and the NIC threads have the CPUs. A
    /// reporter unparks it; here a thread reports after 100 ms (the wait's length, not a
    /// synchronisation), and the waiting thread spent almost no CPU meanwhile.
    #[test]
    fn a_latency_wait_with_a_gap_sleeps_until_the_report() {
        let progress: Arc<Vec<AtomicU64>> = Arc::new(vec![AtomicU64::new(0)]);
        let mut subscribers = Subscribers::Threads { progress: progress.clone(), threads: Vec::new() };
        let waiter = thread::current();
        let reporter = thread::spawn(move || {
            thread::sleep(Duration::from_millis(100));
            let mut report = AtomicReporter { progress: &progress[0], latency: new_histogram(), waiter: Some(waiter) };
            receive::Reporter::latency(&mut report, 1, 1_000).unwrap();
        });
        let cpu = procinfo::thread_cpu();
        assert!(subscribers.wait_all(1, Duration::from_secs(10), false, true).unwrap(), "the report arrived");
        let spent = procinfo::thread_cpu() - cpu;
        reporter.join().unwrap();
        assert!(spent < Duration::from_millis(20), "the waiting thread spent {spent:?} of CPU in 100 ms");
    }
}
