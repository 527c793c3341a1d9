//! Runs the built `pubsub-demo` binary: every subcommand in a short run, `stat --once`
//! against a running `pub`/`sub` pair, `sub` finding `pub` by multicast and by unicast
//! discovery, and the user errors (one line, exit code 2, no panic). Every child is killed
//! after a deadline, which fails the test.
//!
//! Tests run in parallel (and other test processes may run on the host): each test uses its
//! own topic names and, where discovery is on, its own discovery group port, so no test's
//! subscriber can find another's publisher.

#[path = "../../fabric/tests/common/unused_addr.rs"]
mod unused_addr;

use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_pubsub-demo");

/// A stats directory of this test alone.
fn stats_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("pubsub-demo-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create the stats directory");
    dir
}

/// A topic name of this test alone.
fn topic(name: &str) -> String {
    format!("{name}-{}", std::process::id())
}

/// A discovery group (`--group`) of this test alone: the port comes from the process id and
/// the test's number `n` (0..8), below the ephemeral port range.
fn group(n: u16) -> String {
    assert!(n < 8);
    let port = 20_000 + (std::process::id() % 1_500) as u16 * 8 + n;
    format!("239.255.77.77:{port}")
}

/// A running `pub` whose output lines arrive on a channel.
struct Pub {
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl Pub {
    fn start(dir: &PathBuf, args: &[&str]) -> Pub {
        let mut all = vec!["pub"];
        all.extend_from_slice(args);
        let mut child = command(dir, &all).spawn().expect("start pub");
        let out = BufReader::new(child.stdout.take().expect("pub stdout"));
        let (tx, lines) = mpsc::channel();
        thread::spawn(move || {
            for line in out.lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        Pub { child, lines }
    }

    /// The next line containing `needle` (within 20 s).
    fn line_with(&self, needle: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) if line.contains(needle) => return line,
                Ok(_) => {}
                Err(e) => panic!("pub printed no line with {needle:?}: {e}"),
            }
        }
    }

    /// Where subscribers connect, from the first line ("publishing ... at ADDR ...").
    fn addr(&self) -> String {
        let first = self.line_with("publishing ");
        first.split(" at ").nth(1).and_then(|r| r.split_whitespace().next()).expect("an address").to_owned()
    }

    fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn command(dir: &PathBuf, args: &[&str]) -> Command {
    let mut c = Command::new(BIN);
    c.args(args).env("RDMA_PUBSUB_STATS_DIR", dir).env_remove("RUST_LOG");
    c.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    c
}

struct Output {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

fn drain(mut r: impl Read + Send + 'static) -> thread::JoinHandle<String> {
    thread::spawn(move || {
        let mut s = String::new();
        let _ = r.read_to_string(&mut s);
        s
    })
}

/// Waits for `child` up to `limit`; kills it and fails the test when it runs longer.
fn finish(mut child: Child, limit: Duration, what: &str) -> Output {
    let out = child.stdout.take().map(drain);
    let err = child.stderr.take().map(drain);
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait for the child") {
            break Some(s);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        thread::sleep(Duration::from_millis(20));
    };
    let stdout = out.map(|h| h.join().unwrap_or_default()).unwrap_or_default();
    let stderr = err.map(|h| h.join().unwrap_or_default()).unwrap_or_default();
    let status =
        status.unwrap_or_else(|| panic!("{what} ran longer than {limit:?}\nstdout:\n{stdout}\nstderr:\n{stderr}"));
    Output { code: status.code(), stdout, stderr }
}

fn run(dir: &PathBuf, args: &[&str], limit: Duration) -> Output {
    let child = command(dir, args).spawn().expect("start pubsub-demo");
    finish(child, limit, &format!("pubsub-demo {}", args.join(" ")))
}

/// Asserts a user error: exit code 2, one line on stderr naming `needle`, no panic.
fn assert_user_error(out: &Output, needle: &str) {
    assert_eq!(out.code, Some(2), "exit code; stderr: {}", out.stderr);
    assert_eq!(out.stderr.lines().count(), 1, "one line: {:?}", out.stderr);
    assert!(out.stderr.starts_with("pubsub-demo: "), "{:?}", out.stderr);
    assert!(out.stderr.contains(needle), "{needle:?} in {:?}", out.stderr);
    assert!(!out.stderr.contains("panicked") && !out.stderr.contains("backtrace"), "{:?}", out.stderr);
}

#[test]
fn the_default_demo_delivers_everything_intact_and_exits_0() {
    let dir = stats_dir("demo");
    let out = run(&dir, &[], Duration::from_secs(60));
    assert_eq!(out.code, Some(0), "stdout:\n{}\nstderr:\n{}", out.stdout, out.stderr);
    assert!(out.stdout.contains("every message arrived intact"), "{}", out.stdout);
    for topic in ["prices", "frames", "telemetry"] {
        let rows: Vec<&str> = out.stdout.lines().filter(|l| l.trim_start().starts_with(topic)).collect();
        assert!(rows.iter().any(|l| l.trim_end().ends_with(" ok")), "a summary row of {topic}: {}", out.stdout);
    }
    // Every node removed its stats file when it was dropped.
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0, "stats files left behind");
}

#[test]
fn pub_and_sub_in_two_processes_deliver_everything_and_stat_shows_them() {
    let dir = stats_dir("pair");
    let topic = topic("pair");
    let g = group(0);
    let publisher =
        Pub::start(&dir, &["--topic", &topic, "--group", &g, "--count", "4000", "--rate", "1000", "--size", "512"]);
    let pub_pid = publisher.child.id();
    let addr = publisher.addr();
    let subscriber =
        command(&dir, &["sub", "--connect", &addr, "--topic", &topic, "--size", "512"]).spawn().expect("start sub");
    let sub_pid = subscriber.id();

    // stat --once sees both processes' nodes, with traffic on the publisher and the subscription.
    let deadline = Instant::now() + Duration::from_secs(20);
    let snapshot = loop {
        let out = run(&dir, &["stat", "--once"], Duration::from_secs(10));
        assert_eq!(out.code, Some(0), "stat: {}", out.stderr);
        let published =
            out.stdout.lines().any(|l| l.contains(&format!("pub  {topic} ")) && !l.contains("published=0 "));
        let delivered =
            out.stdout.lines().any(|l| l.contains(&format!("sub  {topic} ")) && !l.contains("delivered=0 "));
        if published && delivered {
            break out.stdout;
        }
        assert!(Instant::now() < deadline, "stat never showed traffic:\n{}", out.stdout);
        thread::sleep(Duration::from_millis(50));
    };
    assert!(snapshot.contains(&format!("pid {pub_pid} ")), "{snapshot}");
    assert!(snapshot.contains(&format!("pid {sub_pid} ")), "{snapshot}");
    assert!(snapshot.contains("lag_bytes="), "{snapshot}");

    let sub_out = finish(subscriber, Duration::from_secs(30), "sub");
    assert_eq!(sub_out.code, Some(0), "sub:\n{}\n{}", sub_out.stdout, sub_out.stderr);
    assert!(sub_out.stdout.contains("delivered 4000 messages"), "{}", sub_out.stdout);
    assert!(sub_out.stdout.contains("ended at 4000, complete"), "{}", sub_out.stdout);
    let pub_out = finish(publisher.child, Duration::from_secs(30), "pub");
    assert_eq!(pub_out.code, Some(0), "pub: {}", pub_out.stderr);
    // Both processes removed their stats files.
    let out = run(&dir, &["stat", "--once"], Duration::from_secs(10));
    assert!(out.stdout.contains("): 0"), "{}", out.stdout);
}

#[test]
fn sub_fails_when_messages_are_not_the_expected_size() {
    let dir = stats_dir("size");
    let topic = topic("size");
    let publisher = Pub::start(&dir, &["--topic", &topic, "--no-discovery", "--count", "100", "--size", "100"]);
    let addr = publisher.addr();
    let out = run(&dir, &["sub", "--connect", &addr, "--topic", &topic, "--size", "200"], Duration::from_secs(30));
    assert_eq!(out.code, Some(1), "{}", out.stdout);
    assert!(out.stdout.contains("damaged 100") && out.stdout.contains("FAIL"), "{}", out.stdout);
    finish(publisher.child, Duration::from_secs(30), "pub");
}

/// Asserts a `sub` found `addr` by discovery and received all `count` messages of its one
/// publisher.
fn assert_found_and_complete(out: &Output, addr: &str, count: u64) {
    assert_eq!(out.code, Some(0), "sub:\n{}\n{}", out.stdout, out.stderr);
    let subscribed = out.stdout.lines().find(|l| l.starts_with("subscribed to")).unwrap_or_default();
    assert!(subscribed.contains(&format!(" at {addr} ")), "{}", out.stdout);
    assert!(subscribed.contains("found by discovery"), "{}", out.stdout);
    assert!(out.stdout.contains(&format!("delivered {count} messages")), "{}", out.stdout);
    assert!(out.stdout.contains(&format!("ended at {count}, complete")), "{}", out.stdout);
    assert!(!out.stdout.contains("also connected"), "one publisher only: {}", out.stdout);
}

#[test]
fn sub_without_connect_finds_pub_by_multicast_discovery_and_receives_everything() {
    let dir = stats_dir("multicast");
    let topic = topic("multicast");
    let g = group(1);
    let publisher = Pub::start(&dir, &["--topic", &topic, "--group", &g, "--count", "3000", "--size", "256"]);
    let addr = publisher.addr();
    let discovery = publisher.line_with("discovery:");
    assert!(discovery.contains(&format!("multicast group {g}")), "{discovery}");
    // A publisher of the same topic in another group: never found.
    let other = Pub::start(&dir, &["--topic", &topic, "--group", &group(2), "--wait", "60"]);
    let other_addr = other.addr();
    let out = run(&dir, &["sub", "--topic", &topic, "--group", &g, "--size", "256"], Duration::from_secs(60));
    assert_found_and_complete(&out, &addr, 3000);
    assert!(!out.stdout.contains(&other_addr), "{}", out.stdout);
    let pub_out = finish(publisher.child, Duration::from_secs(30), "pub");
    assert_eq!(pub_out.code, Some(0), "pub: {}", pub_out.stderr);
    other.kill();
}

#[test]
fn sub_with_a_pattern_reads_every_matching_pub_and_checks_each_by_its_topic() {
    let dir = stats_dir("pattern");
    let topic = topic("pattern");
    let g = group(4);
    let (a, b, other) = (format!("{topic}/a"), format!("{topic}/b"), format!("{topic}x/c"));
    let pub_a = Pub::start(&dir, &["--topic", &a, "--group", &g, "--count", "1000", "--size", "64"]);
    let pub_b = Pub::start(&dir, &["--topic", &b, "--group", &g, "--count", "1000", "--size", "64"]);
    // A topic the pattern does not include: never read.
    let pub_other = Pub::start(&dir, &["--topic", &other, "--group", &g, "--wait", "60"]);
    let other_addr = pub_other.addr();
    let pattern = format!("{topic}/*");
    let args = ["sub", "--topic", &pattern, "--group", &g, "--size", "64", "--count", "2000"];
    let out = run(&dir, &args, Duration::from_secs(60));
    assert_eq!(out.code, Some(0), "sub:\n{}\n{}", out.stdout, out.stderr);
    assert!(out.stdout.contains("delivered 2000 messages"), "{}", out.stdout);
    assert!(out.stdout.contains("ok: every message arrived intact"), "{}", out.stdout);
    assert!(!out.stdout.contains(&other_addr), "{}", out.stdout);
    for t in [&a, &b] {
        assert!(out.stdout.contains(&format!("  reading {t} from publisher")), "{}", out.stdout);
    }
    for publisher in [pub_a, pub_b] {
        let pub_out = finish(publisher.child, Duration::from_secs(30), "pub");
        assert_eq!(pub_out.code, Some(0), "pub: {}", pub_out.stderr);
    }
    pub_other.kill();
}

#[test]
fn sub_with_a_pattern_connected_to_a_pub_reads_its_matching_topic_without_discovery() {
    let dir = stats_dir("pattern-connect");
    let topic = topic("pattern-connect");
    let matching = format!("{topic}/a");
    let publisher = Pub::start(&dir, &["--topic", &matching, "--no-discovery", "--count", "500", "--size", "64"]);
    let addr = publisher.addr();
    let pattern = format!("{topic}/*");
    let args = ["sub", "--connect", &addr, "--topic", &pattern, "--size", "64"];
    let out = run(&dir, &args, Duration::from_secs(60));
    assert_eq!(out.code, Some(0), "sub:\n{}\n{}", out.stdout, out.stderr);
    assert!(out.stdout.contains(&format!("subscribed to {pattern:?} at {addr} ")), "{}", out.stdout);
    assert!(out.stdout.contains("delivered 500 messages"), "{}", out.stdout);
    assert!(out.stdout.contains("ok: every message arrived intact"), "{}", out.stdout);
    let pub_out = finish(publisher.child, Duration::from_secs(30), "pub");
    assert_eq!(pub_out.code, Some(0), "pub: {}", pub_out.stderr);
}

#[test]
fn sub_finds_pub_by_unicast_discovery_and_receives_everything() {
    let dir = stats_dir("unicast");
    let topic = topic("unicast");
    // `--peers` without addresses: unicast only, answering whoever lists this node.
    let publisher = Pub::start(&dir, &["--topic", &topic, "--peers", "--count", "2000", "--size", "64"]);
    let addr = publisher.addr();
    let discovery = publisher.line_with("discovery:");
    let endpoint = discovery
        .split("unicast at ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .unwrap_or_else(|| panic!("a unicast endpoint in {discovery:?}"))
        .to_owned();
    let hint = publisher.line_with("subscribe with:");
    assert!(hint.contains(&format!("--peers {endpoint}")), "{hint}");
    let out = run(&dir, &["sub", "--topic", &topic, "--peers", &endpoint, "--size", "64"], Duration::from_secs(60));
    assert_found_and_complete(&out, &addr, 2000);
    let pub_out = finish(publisher.child, Duration::from_secs(30), "pub");
    assert_eq!(pub_out.code, Some(0), "pub: {}", pub_out.stderr);
}

#[test]
fn soak_reports_no_loss_and_no_growth() {
    let dir = stats_dir("soak");
    let out = run(&dir, &["soak", "--seconds", "1", "--subscribers", "3", "--cycles", "200"], Duration::from_secs(60));
    assert_eq!(out.code, Some(0), "stdout:\n{}\nstderr:\n{}", out.stdout, out.stderr);
    assert!(out.stdout.contains("lost 0, damaged 0"), "{}", out.stdout);
    assert!(out.stdout.contains("ok: no loss, no growth"), "{}", out.stdout);
}

#[test]
fn stat_once_with_no_nodes_says_so() {
    let dir = stats_dir("empty");
    // A file of a process that does not exist (and its temporary file) is skipped and removed;
    // a file that is no stats file stays.
    let dead = dir.join("4194305-0000000000000001.stats");
    let dead_tmp = dir.join(".4194305-0000000000000001.stats.tmp");
    let other = dir.join("notes.txt");
    for f in [&dead, &dead_tmp, &other] {
        std::fs::write(f, "rdma-pubsub-stats 1\npid 4194305\n").unwrap();
    }
    let out = run(&dir, &["stat", "--once", "--dir", dir.to_str().unwrap()], Duration::from_secs(10));
    assert_eq!(out.code, Some(0));
    assert!(out.stdout.contains("): 0"), "{}", out.stdout);
    assert!(!dead.exists() && !dead_tmp.exists(), "the dead process's files were removed");
    assert!(other.exists(), "other files are left alone");
}

#[test]
fn user_mistakes_get_one_line_and_exit_code_2() {
    let dir = stats_dir("errors");
    let limit = Duration::from_secs(20);
    assert_user_error(&run(&dir, &["--fabric", "infiniband"], limit), "unknown fabric 'infiniband'");
    assert_user_error(&run(&dir, &["pub", "--bind", "nonsense"], limit), "'nonsense' is not an address");
    assert_user_error(&run(&dir, &["sub", "--connect", "127.0.0.1"], limit), "is not IP:PORT");
    assert_user_error(&run(&dir, &["pub", "--group", "10.1.2.3:7000"], limit), "is not a multicast");
    assert_user_error(&run(&dir, &["sub", "--no-discovery"], limit), "--connect IP:PORT");
    assert_user_error(&run(&dir, &["sub", "--connect", "127.0.0.1:9", "--group", &group(3)], limit), "cannot be used");
    // Nobody publishes this topic in this group.
    let nobody = topic("nobody");
    assert_user_error(
        &run(&dir, &["sub", "--topic", &nobody, "--group", &group(3), "--idle", "1"], limit),
        "found by discovery within 1 s",
    );
    // 192.0.2.0/24 is reserved for documentation: no host has it.
    assert_user_error(
        &run(&dir, &["pub", "--bind", "192.0.2.1:7000"], limit),
        "--bind must be an address of this host",
    );
    let verbs = run(&dir, &["pub", "--fabric", "verbs"], limit);
    assert_user_error(&verbs, "verbs");
    assert!(verbs.stderr.contains("--fabric soft"), "{}", verbs.stderr);
    // Nobody listens on the port of a socket this test holds.
    let unused = unused_addr::unused_addr([127, 0, 0, 1].into());
    let addr = unused.addr.to_string();
    assert_user_error(&run(&dir, &["sub", "--connect", &addr], limit), "is `pubsub-demo pub` running");
    drop(unused);

    // Port in use: a first publisher holds it while it waits for a subscriber.
    let errors = topic("errors");
    let first = Pub::start(&dir, &["--topic", &errors, "--no-discovery", "--wait", "20"]);
    let addr = first.addr();
    assert_user_error(
        &run(&dir, &["pub", "--topic", &errors, "--no-discovery", "--bind", &addr], limit),
        "already in use",
    );
    first.kill();
}

#[path = "demo/bench.rs"]
mod bench;
