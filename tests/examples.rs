//! The examples a user copies (`examples/`), each run as the program it is, bounded, and what
//! it prints checked: typed, zero copy (a loan and `recv_ref`), throughput (an
//! `ExclusivePublisher`), async (feature `async`), the three policies with a slow subscriber,
//! secure (a domain secret, a credential, a wrong one), and two processes with discovery.
//!
//! The test builds the examples first (with the profile and features it was built with, in its
//! own target directory; nothing to do when `cargo test` built them already), so that it never
//! runs a stale one.

use std::io::Read;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The bound of one example's run.
const WAIT: Duration = Duration::from_secs(60);

/// The target directory's profile folder this test runs from (`target/<profile>`).
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("this test's path");
    exe.parent().and_then(|deps| deps.parent()).expect("target/<profile>/deps/<test>").to_path_buf()
}

/// The path of example `name`, built (once per run of this test) so that it is not stale.
fn example(name: &str) -> PathBuf {
    static BUILT: std::sync::OnceLock<()> = std::sync::OnceLock::new();
    BUILT.get_or_init(|| {
        let target_dir = profile_dir().parent().expect("target/<profile>").to_path_buf();
        let mut cargo = Command::new(env!("CARGO"));
        cargo.args(["build", "--examples", "--manifest-path", concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml")]);
        cargo.arg("--target-dir").arg(&target_dir);
        if !cfg!(debug_assertions) {
            cargo.arg("--release");
        }
        if cfg!(feature = "async") {
            cargo.args(["--features", "async"]);
        }
        let status = cargo.status().expect("cargo runs");
        assert!(status.success(), "building the examples failed");
    });
    profile_dir().join("examples").join(name)
}

/// Runs example `name` to its end (killed after [`WAIT`]); returns what it printed.
fn run(name: &str) -> String {
    let mut child = Command::new(example(name))
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| panic!("example {name} does not start: {e}"));
    let mut stdout = child.stdout.take().expect("piped");
    let reader = std::thread::spawn(move || {
        let mut out = String::new();
        stdout.read_to_string(&mut out).expect("its output");
        out
    });
    let deadline = Instant::now() + WAIT;
    let status = loop {
        if let Some(status) = child.try_wait().expect("waiting for the example") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("example {name} did not end within {WAIT:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let out = reader.join().expect("the output reader");
    assert!(status.success(), "example {name} failed ({status}):\n{out}");
    out
}

#[test]
fn typed() {
    let out = run("typed");
    for line in ["quote 1: ABC at 10", "quote 2: DEF at 11", "quote 3: GHI at 12"] {
        assert!(out.contains(line), "{line:?} in:\n{out}");
    }
    assert!(out.contains("final_seq: 3, complete: true"), "the end is an event:\n{out}");
}

#[test]
fn throughput() {
    let out = run("throughput");
    assert!(out.contains("received 200000 of 200000 messages in order"), "{out}");
    assert!(out.contains("M messages/s of 64 bytes"), "{out}");
}

#[test]
fn zero_copy() {
    let out = run("zero_copy");
    for frame in 0..3 {
        assert!(out.contains(&format!("received message {}: frame {frame} (16 bytes)", frame + 1)), "{out}");
    }
}

#[cfg(feature = "async")]
#[test]
fn async_stream() {
    let out = run("async_stream");
    for tick in 0..3 {
        assert!(out.contains(&format!("tick {tick} from publisher")), "{out}");
    }
    assert!(out.contains("event: Connected") && out.contains("event: Ended"), "events while streaming:\n{out}");
}

#[test]
fn policies() {
    let out = run("policies");
    let block = out.split("== ").find(|s| s.starts_with("Block")).expect("the Block part");
    assert!(block.contains("timed out after 100 ms"), "Block: the publisher waits, then times out:\n{out}");
    let published = block.lines().find_map(|l| l.strip_prefix("publisher: published ")).expect("a count");
    let published = published.split(',').next().expect("a count");
    assert!(block.contains(&format!("received {published} of {published}")), "Block loses nothing:\n{out}");
    let drop_slow = out.split("== ").find(|s| s.starts_with("DropSlow")).expect("the DropSlow part");
    assert!(drop_slow.contains("dropped 1 subscriber(s)"), "{out}");
    assert!(drop_slow.contains("recv says") && drop_slow.contains("TooSlow"), "told at the receive call:\n{out}");
    let overwrite = out.split("== ").find(|s| s.starts_with("Overwrite")).expect("the Overwrite part");
    assert!(overwrite.contains("(Overwritten)"), "losses counted:\n{out}");
}

#[test]
fn secure() {
    let out = run("secure");
    assert!(out.contains("with the credential: received \"salaries\""), "{out}");
    assert!(out.contains("with a wrong credential:") && out.contains("Unauthorized"), "{out}");
    assert!(out.contains("publisher refused 1 subscriber(s)"), "{out}");
}

#[test]
fn two_processes_with_discovery() {
    let out = run("discovery");
    assert!(out.contains("publisher: a subscriber connected"), "{out}");
    assert!(out.contains("the subscriber exited with exit status: 0"), "{out}");
}
