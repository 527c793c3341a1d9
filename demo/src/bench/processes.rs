//! `bench --separate-processes`: each subscriber in a process of its own, as the benchmarks of
//! other middlewares (ZeroMQ's among them) measure their peers.
//!
//! The bench re-executes its own program (`std::env::current_exe()`) as
//! `pubsub-demo bench --subscriber-of IP:PORT --topic T --sizes S [--busy-poll] ...` (hidden
//! options). The child builds its own node, connects to the publisher's node, receives with the
//! loop the subscriber threads use ([`super::receive`]) and reports to the parent, one line each
//! on its stdout:
//!
//! | line | when |
//! |---|---|
//! | `ready CPUS` | connected; CPUS: the CPUs it may run on |
//! | `p SEQ` | progress: every 1024 messages, at the last message of the throughput run, when idle |
//! | `l SEQ NS` | latency message SEQ arrived NS after its send time (`CLOCK_MONOTONIC`) |
//! | `x` | the publisher dropped it |
//! | `done LOST DAMAGED CPU_NS MSGS` | the stream ended: its counts and the CPU time of its receiving thread over the MSGS messages of the throughput run |
//!
//! Its stdin stays open while the parent lives: end of file there means the parent is gone.
//! Children inherit the CPUs of the thread that starts them, so under `--pin-publisher` they
//! run on the other CPUs as the subscriber threads do. Every wait of the parent has a limit; a
//! child that exits early, says something unexpected, or stays silent while it is waited for is
//! an error naming it, and every child is killed on every way out.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::SocketAddr;
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use rdma_pubsub::{DiscoveryOptions, FabricKind, Start};

use super::receive::{self, Reporter};
use super::{new_histogram, SubResult};
use crate::cli::BenchArgs;
use crate::{payload, placement, Fail};

/// Longest wait for every child to connect and say `ready`.
const READY_LIMIT: Duration = Duration::from_secs(30);
/// A child that is waited for and says nothing for this long is taken as hung.
const SILENCE_LIMIT: Duration = Duration::from_secs(10);
/// Longest wait for every child's `done` once the publisher has gone, and for its exit.
const END_LIMIT: Duration = Duration::from_secs(30);
/// Bytes of a child's stderr kept for error messages.
const STDERR_KEPT: usize = 4096;

/// Environment variable for the tests of this module: `exit@WHEN` or `hang@WHEN` makes
/// subscriber process 0 exit (code 3), or stop receiving and reporting, at its first report of
/// a sequence number at least WHEN, or (`WHEN` = `latency`) at its first latency message.
pub const FAULT_ENV: &str = "PUBSUB_DEMO_BENCH_FAULT";

/// What [`FAULT_ENV`] asks of a child.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Fault {
    /// Exit (else hang).
    exit: bool,
    /// At the first report of this sequence or a later one (`None`: of a latency message).
    at: Option<u64>,
}

impl Fault {
    fn parse(spec: &str) -> Option<Fault> {
        let (what, when) = spec.split_once('@')?;
        let exit = match what {
            "exit" => true,
            "hang" => false,
            _ => return None,
        };
        let at = match when {
            "latency" => None,
            n => Some(n.parse().ok()?),
        };
        Some(Fault { exit, at })
    }

    /// Acts when a report of `seq` (`latency`: of a latency message) is due.
    fn check(&self, seq: u64, latency: bool) {
        if self.at.map_or(latency, |at| seq >= at) {
            if self.exit {
                std::process::exit(3);
            }
            loop {
                thread::park();
            }
        }
    }
}

/// A line from a child (or the end of its output).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Line {
    Ready(String),
    Progress(u64),
    Latency(u64, u64),
    Dropped,
    Done { lost: u64, damaged: u64, cpu_ns: u64, msgs: u64 },
    Garbled(String),
    Eof,
}

fn parse(line: &str) -> Line {
    let mut words = line.split_whitespace();
    let word = words.next().unwrap_or("");
    let numbers: Vec<u64> = words.clone().filter_map(|w| w.parse().ok()).collect();
    let count = words.count();
    match (word, numbers.as_slice()) {
        ("ready", _) => Line::Ready(line.trim_start()["ready".len()..].trim().to_owned()),
        ("p", &[seq]) if count == 1 => Line::Progress(seq),
        ("l", &[seq, ns]) if count == 2 => Line::Latency(seq, ns),
        ("x", &[]) if count == 0 => Line::Dropped,
        ("done", &[lost, damaged, cpu_ns, msgs]) if count == 4 => Line::Done { lost, damaged, cpu_ns, msgs },
        _ => Line::Garbled(line.to_owned()),
    }
}

/// One subscriber process, as the parent sees it.
struct Proc {
    child: Child,
    pid: u32,
    /// Kept open while the child should live (its end of file tells the child the parent went).
    stdin: Option<ChildStdin>,
    /// The end of its stderr.
    stderr: Arc<Mutex<String>>,
    cpus: Option<String>,
    progress: u64,
    latency: Histogram<u64>,
    last_heard: Instant,
    done: Option<Line>,
    eof: bool,
    reaped: bool,
}

/// The subscriber processes of one point of the matrix. Dropping it kills those still running.
pub struct Group {
    procs: Vec<Proc>,
    tx: mpsc::Sender<(usize, Line)>,
    rx: mpsc::Receiver<(usize, Line)>,
    /// Which point, for error messages (e.g. `64 B, 4 subscribers`).
    point: String,
}

impl Drop for Group {
    fn drop(&mut self) {
        for p in &mut self.procs {
            p.stdin = None;
            if !p.reaped {
                let _ = p.child.kill();
                let _ = p.child.wait();
                p.reaped = true;
            }
        }
    }
}

/// What a child is told to do (the hidden options of `bench`).
pub struct Spec<'a> {
    /// The fabric the publisher's node uses (resolved, never `auto`).
    pub fabric: FabricKind,
    /// The publisher's node.
    pub addr: SocketAddr,
    /// The topic.
    pub topic: &'a str,
    /// The message size.
    pub size: u64,
}

impl Group {
    /// Starts `count` subscriber processes and waits until each is connected.
    pub fn start(args: &BenchArgs, spec: &Spec<'_>, count: u64) -> Result<Group, Fail> {
        let exe = std::env::current_exe()
            .map_err(|e| Fail::Usage(format!("--separate-processes: cannot find this program to re-execute: {e}")))?;
        let (tx, rx) = mpsc::channel();
        let plural = if count == 1 { "" } else { "s" };
        let point = format!("size {} B, {count} subscriber{plural}", spec.size);
        let mut group = Group { procs: Vec::new(), tx, rx, point };
        for i in 0..count as usize {
            let mut cmd = Command::new(&exe);
            cmd.arg("bench")
                .arg("--subscriber-of")
                .arg(spec.addr.to_string())
                .arg("--subscriber-index")
                .arg(i.to_string())
                .arg("--topic")
                .arg(spec.topic)
                .arg("--sizes")
                .arg(spec.size.to_string())
                .arg("--fabric")
                .arg(spec.fabric.name())
                .arg("--bind")
                .arg(args.bind.to_string());
            if let Some(d) = &args.fabric.device {
                cmd.arg("--device").arg(d);
            }
            cmd.arg("--same-host").arg(args.fabric.same_host.name());
            if args.busy_poll {
                cmd.arg("--busy-poll");
            }
            cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
            let mut child = cmd
                .spawn()
                .map_err(|e| Fail::Usage(format!("--separate-processes: cannot start {}: {e}", exe.display())))?;
            let pid = child.id();
            let stdin = child.stdin.take();
            let stdout = child.stdout.take();
            let stderr_pipe = child.stderr.take();
            let stderr = Arc::new(Mutex::new(String::new()));
            group.procs.push(Proc {
                child,
                pid,
                stdin,
                stderr: stderr.clone(),
                cpus: None,
                progress: 0,
                latency: new_histogram(),
                last_heard: Instant::now(),
                done: None,
                eof: false,
                reaped: false,
            });
            let tx = group.tx.clone();
            let started = thread::Builder::new().name(format!("bench-pipe-{i}")).spawn(move || {
                if let Some(out) = stdout {
                    for line in BufReader::new(out).lines() {
                        let Ok(line) = line else { break };
                        if tx.send((i, parse(&line))).is_err() {
                            return;
                        }
                    }
                }
                let _ = tx.send((i, Line::Eof));
            });
            started.map_err(|e| Fail::Usage(format!("cannot start a thread: {e}")))?;
            let started = thread::Builder::new().name(format!("bench-stderr-{i}")).spawn(move || {
                let Some(mut err) = stderr_pipe else { return };
                let mut buf = [0u8; 1024];
                while let Ok(n @ 1..) = err.read(&mut buf) {
                    let mut kept = stderr.lock().unwrap_or_else(|e| e.into_inner());
                    kept.push_str(&String::from_utf8_lossy(&buf[..n]));
                    if kept.len() > STDERR_KEPT {
                        let cut = kept.len() - STDERR_KEPT;
                        let cut = (cut..kept.len()).find(|&c| kept.is_char_boundary(c)).unwrap_or(kept.len());
                        kept.drain(..cut);
                    }
                }
            });
            started.map_err(|e| Fail::Usage(format!("cannot start a thread: {e}")))?;
        }
        let deadline = Instant::now() + READY_LIMIT;
        while let Some(i) = group.procs.iter().position(|p| p.cpus.is_none()) {
            if !group.next(deadline)? {
                let what = format!("did not connect within {} s", READY_LIMIT.as_secs());
                return Err(group.fail(i, &what, false));
            }
        }
        Ok(group)
    }

    /// Waits until every child has reported `seq` (or was dropped, or ended) for up to
    /// `timeout`: `Ok(true)` when they have, `Ok(false)` when the time is up. An error when a
    /// child exits, garbles, or stays silent for 10 s while it lags; also when the time is up
    /// and `strict`.
    pub fn wait_all(&mut self, seq: u64, timeout: Duration, strict: bool) -> Result<bool, Fail> {
        let deadline = Instant::now() + timeout;
        loop {
            let Some(lagging) = self.procs.iter().position(|p| p.progress < seq) else { return Ok(true) };
            // Everything already queued is handled before anything is judged.
            let quiet = self.procs.iter().filter(|p| p.progress < seq).map(|p| p.last_heard + SILENCE_LIMIT).min();
            let limit = quiet.map_or(deadline, |q| deadline.min(q));
            if self.next(limit)? {
                continue;
            }
            let now = Instant::now();
            if let Some(i) = self.procs.iter().position(|p| p.progress < seq && now >= p.last_heard + SILENCE_LIMIT) {
                let what = format!(
                    "reported nothing for {} s while the bench waited for message {seq} (the last it reported: {})",
                    SILENCE_LIMIT.as_secs(),
                    self.procs[i].progress
                );
                return Err(self.fail(i, &what, false));
            }
            if now >= deadline {
                if strict {
                    let what = format!(
                        "had not reported message {seq} within {} s (the last it reported: {})",
                        timeout.as_secs_f64(),
                        self.procs[lagging].progress
                    );
                    return Err(self.fail(lagging, &what, false));
                }
                return Ok(false);
            }
        }
    }

    /// The error `fail` of the publisher, naming the child that caused it when one did: one
    /// that has exited, or the slowest when it has said nothing for a second or more (e.g. a
    /// hung child holds a Block publisher up until its timeout).
    pub fn blame(&mut self, fail: Fail) -> Fail {
        // Lines already queued first: a child that exited is the cause.
        loop {
            match self.next(Instant::now()) {
                Ok(true) => {}
                Ok(false) => break,
                Err(f) => return f,
            }
        }
        let now = Instant::now();
        let slowest = (0..self.procs.len())
            .filter(|&i| self.procs[i].progress != u64::MAX)
            .min_by_key(|&i| (self.procs[i].progress, self.procs[i].last_heard));
        match (fail, slowest) {
            (Fail::Usage(why), Some(i)) if now >= self.procs[i].last_heard + Duration::from_secs(1) => {
                let p = &self.procs[i];
                Fail::Usage(format!(
                    "{why}; subscriber process {i} (pid {}) has reported nothing for {:.1} s (the last message it \
                     reported: {}) ({})",
                    p.pid,
                    now.duration_since(p.last_heard).as_secs_f64(),
                    p.progress,
                    self.point
                ))
            }
            (f, _) => f,
        }
    }

    /// After the publisher has gone: waits for every child's counts and exit, and returns them.
    pub fn finish(mut self) -> Result<Vec<SubResult>, Fail> {
        let deadline = Instant::now() + END_LIMIT;
        while let Some(i) = self.procs.iter().position(|p| p.done.is_none() || !p.eof) {
            if !self.next(deadline)? {
                let what = format!("did not end within {} s after the publisher closed", END_LIMIT.as_secs());
                return Err(self.fail(i, &what, false));
            }
        }
        for i in 0..self.procs.len() {
            match self.exit_status(i, deadline) {
                Some(s) if s.success() => {}
                Some(s) => return Err(self.fail(i, &format!("ended with {s}"), false)),
                None => return Err(self.fail(i, "did not exit after its report", false)),
            }
        }
        let mut results = Vec::new();
        for (i, p) in self.procs.iter_mut().enumerate() {
            let Some(Line::Done { lost, damaged, cpu_ns, msgs }) = p.done else {
                return Err(Fail::Usage(format!("subscriber process {i} (pid {}) gave no counts", p.pid)));
            };
            let latency = std::mem::replace(&mut p.latency, new_histogram());
            results.push(SubResult {
                cpus: p.cpus.clone().unwrap_or_default(),
                latency,
                lost,
                damaged,
                cpu: Duration::from_nanos(cpu_ns),
                msgs,
            });
        }
        Ok(results)
    }

    /// Handles the next line from any child, waiting for one until `deadline`: `Ok(false)`
    /// when none came. An error when a child garbles or its output ends before its `done`.
    fn next(&mut self, deadline: Instant) -> Result<bool, Fail> {
        let left = deadline.saturating_duration_since(Instant::now());
        let (i, line) = match self.rx.recv_timeout(left) {
            Ok(m) => m,
            Err(_) => return Ok(false),
        };
        let p = &mut self.procs[i];
        p.last_heard = Instant::now();
        match line {
            Line::Ready(cpus) => p.cpus = Some(cpus),
            Line::Progress(seq) => p.progress = p.progress.max(seq),
            Line::Latency(seq, ns) => {
                p.latency.saturating_record(ns.max(1));
                p.progress = p.progress.max(seq);
            }
            Line::Dropped => p.progress = u64::MAX,
            done @ Line::Done { .. } => {
                p.done = Some(done);
                p.progress = u64::MAX;
            }
            Line::Garbled(text) => return Err(self.fail(i, &format!("sent an unexpected line {text:?}"), false)),
            Line::Eof => {
                p.eof = true;
                if p.done.is_none() {
                    return Err(self.fail(i, "exited before the end of the point", true));
                }
            }
        }
        Ok(true)
    }

    /// The exit status of child `i`, waiting for it until `deadline` (`None`: still running).
    fn exit_status(&mut self, i: usize, deadline: Instant) -> Option<ExitStatus> {
        let p = &mut self.procs[i];
        loop {
            match p.child.try_wait() {
                Ok(Some(s)) => {
                    p.reaped = true;
                    return Some(s);
                }
                Ok(None) if Instant::now() < deadline => thread::sleep(Duration::from_millis(1)),
                _ => return None,
            }
        }
    }

    /// The error for child `i`: `subscriber process I (pid P) WHAT (POINT)[: exit status][: the
    /// last line of its stderr]`. With `exited`, waits a little for its exit status first.
    fn fail(&mut self, i: usize, what: &str, exited: bool) -> Fail {
        let status = if exited { self.exit_status(i, Instant::now() + Duration::from_secs(2)) } else { None };
        let p = &self.procs[i];
        let mut line = format!("subscriber process {i} (pid {}) {what} ({})", p.pid, self.point);
        if let Some(s) = status {
            line.push_str(&format!(": {s}"));
        }
        // Its stderr ends when it exits; what it said so far is enough.
        let said = p.stderr.lock().map(|s| s.clone()).unwrap_or_default();
        if let Some(last) = said.lines().rev().map(str::trim).find(|l| !l.is_empty()) {
            line.push_str(&format!(": it said: {last}"));
        }
        Fail::Usage(line)
    }
}

/// Writes a child's reports on its stdout, one line each, flushed at once.
struct PipeReporter {
    out: std::io::StdoutLock<'static>,
    /// What [`FAULT_ENV`] asks of this child.
    fault: Option<Fault>,
}

impl PipeReporter {
    fn line(&mut self, text: std::fmt::Arguments<'_>) -> Result<(), Fail> {
        self.out
            .write_fmt(text)
            .and_then(|()| self.out.write_all(b"\n"))
            .and_then(|()| self.out.flush())
            .map_err(|e| Fail::Usage(format!("bench subscriber: cannot report to the bench process: {e}")))
    }
}

impl Reporter for PipeReporter {
    fn progress(&mut self, seq: u64) -> Result<(), Fail> {
        if let Some(f) = self.fault {
            f.check(seq, false);
        }
        self.line(format_args!("p {seq}"))
    }

    fn latency(&mut self, seq: u64, ns: u64) -> Result<(), Fail> {
        if let Some(f) = self.fault {
            f.check(seq, true);
        }
        self.line(format_args!("l {seq} {ns}"))
    }

    fn dropped(&mut self) -> Result<(), Fail> {
        self.line(format_args!("x"))
    }
}

/// Runs this process as subscriber process `index` of a `--separate-processes` bench,
/// subscribed to the publisher's node at `addr` (see the module's documentation).
pub fn run_child(args: &BenchArgs, addr: SocketAddr, index: u64) -> Result<(), Fail> {
    let topic = args.topic.as_deref().ok_or_else(|| Fail::Usage("--subscriber-of needs --topic".into()))?;
    let &[size] = args.sizes.as_slice() else {
        return Err(Fail::Usage("--subscriber-of needs one size in --sizes".into()));
    };
    // End of file on stdin: the parent is gone (its end closes when it exits, however it does).
    let orphaned = Arc::new(AtomicBool::new(false));
    let flag = orphaned.clone();
    thread::Builder::new()
        .name("bench-parent-watch".into())
        .spawn(move || {
            let mut buf = [0u8; 64];
            while let Ok(1..) = std::io::stdin().read(&mut buf) {}
            flag.store(true, Ordering::Relaxed);
        })
        .map_err(|e| Fail::Usage(format!("cannot start a thread: {e}")))?;
    let node = args.fabric.node(SocketAddr::new(args.bind, 0), DiscoveryOptions::disabled())?;
    let mut sub = node.subscriber(topic).start(Start::Earliest).busy_poll(args.busy_poll).create()?;
    sub.connect_wait(addr, Duration::from_secs(10))?;
    let fault = match std::env::var(FAULT_ENV) {
        Ok(spec) if index == 0 => Some(Fault::parse(&spec).ok_or_else(|| {
            Fail::Usage(format!("{FAULT_ENV}={spec}: give exit@SEQ, hang@SEQ, exit@latency or hang@latency"))
        })?),
        _ => None,
    };
    let mut report = PipeReporter { out: std::io::stdout().lock(), fault };
    report.line(format_args!("ready {}", placement::thread_cpus()))?;
    let stream = payload::stream_of(topic);
    let t = receive::receive(&mut sub, stream, size as usize, &mut report, Some(&orphaned))?;
    report.line(format_args!(
        "done {} {} {} {}",
        t.lost,
        t.damaged,
        t.throughput_cpu.as_nanos() as u64,
        t.throughput_msgs
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_lines_parse_and_anything_else_is_garbled() {
        assert_eq!(parse("ready 0,1"), Line::Ready("0,1".into()));
        assert_eq!(parse("p 1024"), Line::Progress(1024));
        assert_eq!(parse("l 7 1500"), Line::Latency(7, 1500));
        assert_eq!(parse("x"), Line::Dropped);
        assert_eq!(parse("done 1 2 3 4"), Line::Done { lost: 1, damaged: 2, cpu_ns: 3, msgs: 4 });
        for bad in ["", "p", "p 1 2", "p -1", "l 7", "done 1 2 3", "hello"] {
            assert_eq!(parse(bad), Line::Garbled(bad.into()), "{bad:?}");
        }
    }

    #[test]
    fn fault_specs_parse() {
        assert_eq!(Fault::parse("exit@latency"), Some(Fault { exit: true, at: None }));
        assert_eq!(Fault::parse("hang@1"), Some(Fault { exit: false, at: Some(1) }));
        for bad in ["exit", "hang@", "crash@1", "exit@-1"] {
            assert_eq!(Fault::parse(bad), None, "{bad:?}");
        }
    }
}
