//! Runs every example with `--fabric soft --both` (server and client in one process, over
//! loopback) and checks that it exits 0 and prints its verification line.
//!
//! The examples are built by cargo for the test run: plain `cargo test` builds the example
//! binaries by default. This test builds nothing; it locates them next to its own executable
//! (`<profile>/deps/examples-*` -> `<profile>/examples/<name>`). A target filter (`--test
//! examples`, `--all-targets`) does not build those binaries: run `cargo build --examples` with
//! the same profile first. A binary older than the sources is refused rather than tested.

#[path = "common/unused_addr.rs"]
mod unused_addr;

use std::io::Read;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// How long one example may run before it is killed and the test fails.
const TIMEOUT: Duration = Duration::from_secs(30);

fn example_path(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("the test executable has a path");
    let profile_dir = exe.parent().and_then(|deps| deps.parent()).expect("test executable lives in <profile>/deps");
    let path = profile_dir.join("examples").join(format!("{name}{}", std::env::consts::EXE_SUFFIX));
    assert!(
        path.exists(),
        "example binary {} is missing: cargo builds examples for `cargo test` unless a target filter excludes them \
         (run `cargo build --examples` with the same profile)",
        path.display()
    );
    let built = modified(&path);
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let sources = [root.join("examples").join(format!("{name}.rs")), root.join("examples/common"), root.join("src")];
    let newest_source = sources.iter().filter_map(|p| newest(p)).max();
    if let Some((when, source)) = newest_source {
        assert!(
            when <= built,
            "example binary {} is older than {}: rebuild it (`cargo build --examples` with the same profile)",
            path.display(),
            source.display()
        );
    }
    path
}

fn modified(path: &std::path::Path) -> std::time::SystemTime {
    std::fs::metadata(path).and_then(|m| m.modified()).unwrap_or_else(|e| panic!("mtime of {}: {e}", path.display()))
}

/// The most recently modified `.rs` file at or under `dir`.
fn newest(dir: &std::path::Path) -> Option<(std::time::SystemTime, PathBuf)> {
    if dir.is_file() {
        return Some((modified(dir), dir.to_path_buf()));
    }
    let mut best: Option<(std::time::SystemTime, PathBuf)> = None;
    for entry in std::fs::read_dir(dir).ok()?.flatten() {
        let path = entry.path();
        let candidate = if path.is_dir() {
            // The demo's sources (`src/bin`) are not part of the library the examples link.
            if path.ends_with("src/bin") {
                continue;
            }
            newest(&path)
        } else if path.extension().is_some_and(|e| e == "rs") {
            Some((modified(&path), path))
        } else {
            None
        };
        if let Some(c) = candidate {
            if best.as_ref().is_none_or(|b| c.0 > b.0) {
                best = Some(c);
            }
        }
    }
    best
}

struct Outcome {
    success: bool,
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

/// Runs `name` with `args`, killing it after [`TIMEOUT`].
fn run_example(name: &str, args: &[&str]) -> Outcome {
    let mut child = Command::new(example_path(name))
        .args(args)
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start example {name}: {e}"));
    let (tx, rx) = mpsc::channel();
    let mut readers = Vec::new();
    for (idx, mut pipe) in [
        Box::new(child.stdout.take().expect("piped stdout")) as Box<dyn Read + Send>,
        Box::new(child.stderr.take().expect("piped stderr")),
    ]
    .into_iter()
    .enumerate()
    {
        let tx = tx.clone();
        readers.push(std::thread::spawn(move || {
            let mut text = String::new();
            let _ = pipe.read_to_string(&mut text);
            let _ = tx.send((idx, text));
        }));
    }
    drop(tx);
    // Both pipes reach end-of-file when the child exits; a hung child never closes them.
    let mut outputs = [String::new(), String::new()];
    let deadline = std::time::Instant::now() + TIMEOUT;
    for _ in 0..2 {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match rx.recv_timeout(left) {
            Ok((idx, text)) => outputs[idx] = text,
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                for r in readers {
                    let _ = r.join();
                }
                panic!("example {name} {args:?} did not finish within {TIMEOUT:?}; killed");
            }
        }
    }
    let status = child.wait().expect("wait for the example");
    for r in readers {
        r.join().expect("pipe reader");
    }
    let [stdout, stderr] = outputs;
    Outcome { success: status.success(), code: status.code(), stdout, stderr }
}

/// Runs an example that must succeed and print `key`.
fn check(name: &str, args: &[&str], key: &str) -> String {
    let out = run_example(name, args);
    assert!(
        out.success,
        "example {name} {args:?} exited with {:?}\n--- stdout\n{}\n--- stderr\n{}",
        out.code, out.stdout, out.stderr
    );
    assert!(out.stdout.contains(key), "example {name} did not print {key:?}\n--- stdout\n{}", out.stdout);
    out.stdout
}

#[test]
fn send_recv_exchanges_messages_both_ways() {
    let stdout = check("send_recv", &["--fabric", "soft", "--both"], "client: send/recv exchange verified");
    assert!(stdout.contains("server: received \"ping from the client\""), "{stdout}");
}

#[test]
fn rdma_write_lands_in_the_clients_buffer() {
    check("rdma_write", &["--fabric", "soft", "--both", "--text", "written remotely"], "client: RDMA WRITE verified");
}

#[test]
fn rc_ops_verifies_send_recv_read_and_write() {
    let stdout = check(
        "rc_ops",
        &["--fabric", "soft", "--both", "-z", "8192"],
        "client: all operations verified (SEND, RECV, RDMA READ, RDMA WRITE)",
    );
    assert!(stdout.contains("server: all operations verified"), "{stdout}");
}

#[test]
fn rdma_read_pingpong_reads_and_acks_every_iteration() {
    let stdout = check(
        "rdma_read_pingpong",
        &["--fabric", "soft", "--both", "-z", "65536", "-n", "50"],
        "client: 50 READs of 65536 bytes verified and acknowledged",
    );
    assert!(stdout.contains("server: received 50 acknowledgements in order"), "{stdout}");
    assert!(stdout.contains("READ latency us: min"), "{stdout}");
}

#[test]
fn multicast_delivers_every_datagram_to_every_receiver() {
    let stdout = check(
        "multicast",
        &["--fabric", "soft", "--both", "-N", "3", "-m", "50"],
        "multicast: all 3 receivers got all 50 datagrams",
    );
    assert_eq!(stdout.matches("got all 50 datagrams, payloads verified").count(), 3, "{stdout}");
}

#[test]
fn bad_input_gives_a_one_line_error_and_no_panic() {
    let out = run_example("send_recv", &["--fabric", "soft", "--client", "not-an-address"]);
    assert!(!out.success);
    assert_eq!(out.code, Some(1), "stderr: {}", out.stderr);
    assert!(out.stderr.starts_with("error: "), "stderr: {}", out.stderr);
    assert_eq!(out.stderr.trim_end().lines().count(), 1, "stderr: {}", out.stderr);
    assert!(!out.stderr.contains("panicked"), "stderr: {}", out.stderr);
}

#[test]
fn connecting_to_nobody_fails_cleanly() {
    let unused = unused_addr::unused_addr([127, 0, 0, 1].into());
    let addr = unused.addr.to_string();
    let out = run_example("send_recv", &["--fabric", "soft", "--client", &addr, "--timeout", "5"]);
    assert_eq!(out.code, Some(1), "stdout: {}\nstderr: {}", out.stdout, out.stderr);
    assert!(out.stderr.starts_with("error: "), "stderr: {}", out.stderr);
    assert!(!out.stderr.contains("panicked"), "stderr: {}", out.stderr);
}
