//! Runs every example with `--fabric soft --both` (server and client in one process, over
//! loopback) and checks that it exits 0 and prints its verification line.
//!
//! The examples are built by cargo for the test run: plain `cargo test` builds the example
//! binaries by default. This test builds nothing; it locates them next to its own executable
//! (`<profile>/deps/examples-*` -> `<profile>/examples/<name>`). A target filter (`--test
//! examples`, `--all-targets`) does not build those binaries: run `cargo build --examples` with
//! the same profile first. A binary older than the sources is refused rather than tested.

/// The examples' shared code, for testing what their TCP bootstrap accepts from a peer.
#[path = "../examples/common/mod.rs"]
mod example_common;
#[path = "common/unused_addr.rs"]
mod unused_addr;

use std::io::{BufRead, BufReader, Read};
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
    // The sources cargo compiled into the binary (its dep-info file, beside it): a test-only
    // module changed since is no reason to rebuild. Without that file, every library source.
    let newest_source = match compiled_sources(&path) {
        Some(sources) => sources.iter().filter_map(|p| newest(p)).max(),
        None => {
            let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
            let sources =
                [root.join("examples").join(format!("{name}.rs")), root.join("examples/common"), root.join("src")];
            sources.iter().filter_map(|p| newest(p)).max()
        }
    };
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

/// The Rust sources listed in the dep-info file cargo wrote beside the binary at `path`
/// (`<binary>.d`: `<binary>: <source> <source> ...`), if there is one.
fn compiled_sources(path: &std::path::Path) -> Option<Vec<PathBuf>> {
    let text = std::fs::read_to_string(path.with_extension("d")).ok()?;
    let (_, sources) = text.lines().next()?.split_once(": ")?;
    let sources: Vec<PathBuf> =
        sources.split_whitespace().map(PathBuf::from).filter(|p| p.extension().is_some_and(|e| e == "rs")).collect();
    (!sources.is_empty()).then_some(sources)
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

/// A started example whose stdout and stderr are read line by line by two threads.
struct Running {
    name: String,
    args: Vec<String>,
    child: std::process::Child,
    /// `(0 = stdout / 1 = stderr, a line or None at end of file)`.
    lines: mpsc::Receiver<(usize, Option<String>)>,
    readers: Vec<std::thread::JoinHandle<()>>,
    outputs: [String; 2],
    open_pipes: usize,
    deadline: std::time::Instant,
}

/// Starts `name` with `args`; it is killed if it runs longer than [`TIMEOUT`].
fn start(name: &str, args: &[&str]) -> Running {
    let mut child = Command::new(example_path(name))
        .args(args)
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start example {name}: {e}"));
    let (tx, lines) = mpsc::channel();
    let pipes: [Box<dyn Read + Send>; 2] =
        [Box::new(child.stdout.take().expect("piped stdout")), Box::new(child.stderr.take().expect("piped stderr"))];
    let readers = pipes
        .into_iter()
        .enumerate()
        .map(|(idx, pipe)| {
            let tx = tx.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(pipe).lines() {
                    let Ok(line) = line else { break };
                    if tx.send((idx, Some(line))).is_err() {
                        return;
                    }
                }
                let _ = tx.send((idx, None));
            })
        })
        .collect();
    Running {
        name: name.to_owned(),
        args: args.iter().map(|a| a.to_string()).collect(),
        child,
        lines,
        readers,
        outputs: [String::new(), String::new()],
        open_pipes: 2,
        deadline: std::time::Instant::now() + TIMEOUT,
    }
}

impl Running {
    /// Takes the next line of either pipe (`None` once both are closed); kills the example
    /// and fails the test at the deadline.
    fn next_line(&mut self) -> Option<(usize, String)> {
        while self.open_pipes > 0 {
            let left = self.deadline.saturating_duration_since(std::time::Instant::now());
            match self.lines.recv_timeout(left) {
                Ok((idx, Some(line))) => {
                    self.outputs[idx].push_str(&line);
                    self.outputs[idx].push('\n');
                    return Some((idx, line));
                }
                Ok((_, None)) => self.open_pipes -= 1,
                Err(_) => self.kill_and_fail(),
            }
        }
        None
    }

    /// Reads stdout until a line contains `key`; returns that line.
    fn wait_for_line(&mut self, key: &str) -> String {
        while let Some((idx, line)) = self.next_line() {
            if idx == 0 && line.contains(key) {
                return line;
            }
        }
        panic!("example {} {:?} exited without printing {key:?}\n{}", self.name, self.args, self.output());
    }

    /// Waits for the example to exit (both pipes reach end of file when it does).
    fn finish(mut self) -> Outcome {
        while self.next_line().is_some() {}
        let status = self.child.wait().expect("wait for the example");
        for r in self.readers.drain(..) {
            r.join().expect("pipe reader");
        }
        let [stdout, stderr] = std::mem::take(&mut self.outputs);
        Outcome { success: status.success(), code: status.code(), stdout, stderr }
    }

    fn kill_and_fail(&mut self) -> ! {
        let _ = self.child.kill();
        let _ = self.child.wait();
        panic!("example {} {:?} did not finish within {TIMEOUT:?}; killed\n{}", self.name, self.args, self.output());
    }

    fn output(&self) -> String {
        format!("--- stdout\n{}\n--- stderr\n{}", self.outputs[0], self.outputs[1])
    }
}

/// Runs `name` with `args`, killing it after [`TIMEOUT`].
fn run_example(name: &str, args: &[&str]) -> Outcome {
    start(name, args).finish()
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

/// Runs `name` as two processes: a server (`--server --port 0`) and a client connecting to
/// the address the server prints, both on soft with `args`; both must succeed and print their
/// key.
fn check_two_processes(name: &str, args: &[&str], server_key: &str, client_key: &str) {
    let server_args = [&["--fabric", "soft", "--server", "--port", "0"], args].concat();
    let mut server = start(name, &server_args);
    let listening = server.wait_for_line("server: listening on ");
    let addr = listening.rsplit(' ').next().expect("an address").to_owned();
    let client = run_example(name, &[&["--fabric", "soft", "--client", &addr], args].concat());
    let server = server.finish();
    for (who, out, key) in [("server", &server, server_key), ("client", &client, client_key)] {
        assert!(
            out.success && out.stdout.contains(key),
            "{name} {who} exited with {:?} without printing {key:?}\n--- server stdout\n{}\n--- server stderr\n{}\n\
             --- client stdout\n{}\n--- client stderr\n{}",
            out.code,
            server.stdout,
            server.stderr,
            client.stdout,
            client.stderr
        );
    }
}

const RDMA_WRITE_VERIFIED: &str = "client: RDMA WRITE verified";
const RC_OPS_VERIFIED: &str = "client: all operations verified (SEND, RECV, RDMA READ, RDMA WRITE)";

#[test]
fn rdma_write_runs_as_server_and_client_processes() {
    check_two_processes("rdma_write", &[], "server: wrote 44 bytes", RDMA_WRITE_VERIFIED);
}

#[test]
fn rc_ops_runs_as_server_and_client_processes() {
    check_two_processes("rc_ops", &["-z", "8192"], "server: all operations verified", RC_OPS_VERIFIED);
}

#[test]
fn rdma_write_over_a_tcp_bootstrap_lands_in_the_clients_buffer() {
    let stdout = check("rdma_write", &["--fabric", "soft", "--both", "--bootstrap", "tcp"], RDMA_WRITE_VERIFIED);
    assert!(stdout.contains("server: wrote 44 bytes"), "{stdout}");
}

#[test]
fn rc_ops_over_a_tcp_bootstrap_verifies_send_recv_read_and_write() {
    let stdout = check("rc_ops", &["--fabric", "soft", "--both", "-z", "8192", "--bootstrap", "tcp"], RC_OPS_VERIFIED);
    assert!(stdout.contains("server: all operations verified"), "{stdout}");
}

#[test]
fn rdma_write_over_a_tcp_bootstrap_runs_as_server_and_client_processes() {
    check_two_processes("rdma_write", &["--bootstrap", "tcp"], "server: wrote 44 bytes", RDMA_WRITE_VERIFIED);
}

#[test]
fn rc_ops_over_a_tcp_bootstrap_runs_as_server_and_client_processes() {
    let args = ["-z", "8192", "--bootstrap", "tcp"];
    check_two_processes("rc_ops", &args, "server: all operations verified", RC_OPS_VERIFIED);
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

/// The TCP bootstrap's connection data (a region and a queue pair endpoint) survives the trip,
/// and what no peer may send is refused: a wrong length, an MTU code verbs does not define, a
/// QP number or PSN beyond 24 bits.
#[test]
fn tcp_bootstrap_connection_data_round_trips_and_refuses_what_no_peer_sends() {
    use example_common::{ConData, RegionInfo};
    use rdma_fabric::{PathMtu, QpEndpoint, RemoteAddr};
    let data = ConData {
        region: RegionInfo { remote: RemoteAddr { addr: 0x7f00_dead_b000, rkey: 0x1234_5678 }, len: 8192, extra: 0 },
        endpoint: QpEndpoint {
            qp_num: 0xab_cdef,
            psn: 0x12_3456,
            port: 1,
            lid: 0x0102,
            gid: std::array::from_fn(|i| i as u8 * 3),
            mtu: PathMtu::Mtu4096,
        },
    };
    let bytes = data.encode();
    assert_eq!(bytes.len(), ConData::SIZE);
    assert_eq!(ConData::decode(&bytes).unwrap(), data);
    for mtu in [PathMtu::Mtu256, PathMtu::Mtu512, PathMtu::Mtu1024, PathMtu::Mtu2048] {
        let d = ConData { endpoint: QpEndpoint { mtu, ..data.endpoint }, ..data };
        assert_eq!(ConData::decode(&d.encode()).unwrap(), d);
    }
    assert!(ConData::decode(&bytes[..ConData::SIZE - 1]).is_err());
    assert!(ConData::decode(&[bytes.as_slice(), &[0]].concat()).is_err());
    let mut bad_mtu = bytes;
    for code in [0u8, 6, 255] {
        bad_mtu[ConData::SIZE - 1] = code;
        assert!(ConData::decode(&bad_mtu).is_err(), "MTU code {code}");
    }
    for endpoint in [QpEndpoint { qp_num: 1 << 24, ..data.endpoint }, QpEndpoint { psn: u32::MAX, ..data.endpoint }] {
        assert!(ConData::decode(&ConData { endpoint, ..data }.encode()).is_err(), "{endpoint:?}");
    }
}

/// The staleness check reads the sources cargo compiled into a binary from its dep-info file
/// (so a test-only module changed since does not refuse it); without one it has nothing.
#[test]
fn the_sources_of_a_binary_come_from_its_dep_info_file() {
    let dir = std::env::temp_dir().join(format!("examples-dep-info-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let binary = dir.join("sample");
    assert_eq!(compiled_sources(&binary), None, "no dep-info file");
    std::fs::write(dir.join("sample.d"), "/t/sample: /s/lib.rs /s/a/b.rs /s/Cargo.toml\n\n/s/lib.rs:\n").unwrap();
    assert_eq!(compiled_sources(&binary), Some(vec![PathBuf::from("/s/lib.rs"), PathBuf::from("/s/a/b.rs")]));
    std::fs::remove_dir_all(&dir).unwrap();
}
