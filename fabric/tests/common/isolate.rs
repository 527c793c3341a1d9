//! Runs one test alone in a child process (the same test binary, filtered to that test), for
//! tests that measure process-wide resources while other tests run in parallel threads.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Set in the child to the path of the test it runs.
const CHILD_ENV: &str = "RDMA_PUBSUB_ISOLATED_TEST";

/// Returns `true` in the child process, which then runs the test body. In the parent, runs
/// `test_path` (`module::case`, as libtest names it) in a child process, waits up to `timeout`
/// for it, panics with its output if it failed, and returns `false`.
pub fn in_child_process(test_path: &str, timeout: Duration) -> bool {
    if std::env::var(CHILD_ENV).as_deref() == Ok(test_path) {
        return true;
    }
    let exe = std::env::current_exe().expect("current_exe");
    let mut child = Command::new(exe)
        .args([test_path, "--exact", "--include-ignored", "--test-threads=1", "--nocapture"])
        .env(CHILD_ENV, test_path)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the test binary");
    let out = drain(child.stdout.take().expect("stdout"));
    let err = drain(child.stderr.take().expect("stderr"));
    // A child gives no notification but its exit: poll it, bounded by `timeout`.
    let deadline = Instant::now() + timeout;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for the child") {
            break Some(status);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let (out, err) = (out.join().unwrap_or_default(), err.join().unwrap_or_default());
    let Some(status) = status else {
        panic!(
            "{test_path} did not finish within {timeout:?} in its child process\n--- stdout\n{out}\n--- stderr\n{err}"
        );
    };
    assert!(
        status.success() && out.contains("1 passed"),
        "{test_path} failed in its child process ({status})\n--- stdout\n{out}\n--- stderr\n{err}"
    );
    false
}

fn drain(mut pipe: impl Read + Send + 'static) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut s = String::new();
        let _ = pipe.read_to_string(&mut s);
        s
    })
}
