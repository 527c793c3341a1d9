//! A peer in another process, to kill with SIGKILL: the test binary re-runs one test in a
//! child process with a role in the environment; the child reports progress on stdout as
//! `@child <word> <value>` lines, which the parent awaits with a bound.

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The environment variable carrying the child's role.
pub const ROLE_ENV: &str = "RDMA_PUBSUB_CHILD_ROLE";
/// Prefix of the lines a child reports on.
const PREFIX: &str = "@child ";

/// The role of this process, when it is a child.
pub fn role() -> Option<String> {
    std::env::var(ROLE_ENV).ok()
}

/// Reports `word value` to the parent (one line, flushed).
pub fn report(word: &str, value: impl std::fmt::Display) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{PREFIX}{word} {value}");
    let _ = out.flush();
}

/// A child process running one test of this binary in a role.
pub struct ChildProcess {
    child: Child,
    lines: Receiver<String>,
    stderr: Option<JoinHandle<String>>,
}

impl ChildProcess {
    /// Runs `test_path` (`case` name as libtest knows it) in a child with `role` and `envs`.
    pub fn spawn(test_path: &str, role: &str, envs: &[(&str, String)]) -> ChildProcess {
        let exe = std::env::current_exe().expect("current_exe");
        let mut cmd = Command::new(exe);
        cmd.args([test_path, "--exact", "--include-ignored", "--test-threads=1", "--nocapture"])
            .env(ROLE_ENV, role)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, v) in envs {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("spawn the test binary");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                // libtest may have printed "test name ... " on the same line first.
                if let Some(at) = line.find(PREFIX) {
                    if tx.send(line[at + PREFIX.len()..].to_string()).is_err() {
                        break;
                    }
                }
            }
        });
        let mut stderr = child.stderr.take().expect("stderr");
        let stderr = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = stderr.read_to_string(&mut s);
            s
        });
        ChildProcess { child, lines, stderr: Some(stderr) }
    }

    /// Waits up to `timeout` for a report `word value` and returns the value.
    pub fn expect(&mut self, word: &str, timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    if let Some(value) = line.strip_prefix(word).and_then(|v| v.strip_prefix(' ')) {
                        return value.to_string();
                    }
                }
                Err(_) => {
                    let status = self.child.try_wait().ok().flatten();
                    self.kill();
                    let err = self.stderr.take().map(|h| h.join().unwrap_or_default()).unwrap_or_default();
                    panic!("the child did not report {word} within {timeout:?} (exit {status:?})\n--- stderr\n{err}");
                }
            }
        }
    }

    /// The latest report `word value` already received, if any, without waiting.
    pub fn latest(&mut self, word: &str) -> Option<String> {
        let mut found = None;
        while let Ok(line) = self.lines.try_recv() {
            if let Some(value) = line.strip_prefix(word).and_then(|v| v.strip_prefix(' ')) {
                found = Some(value.to_string());
            }
        }
        found
    }

    /// Kills the child with SIGKILL (no chance to clean up) and reaps it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for ChildProcess {
    fn drop(&mut self) {
        self.kill();
    }
}
