//! Process resource counters read from `/proc/self`: open file descriptors, threads, resident
//! memory. They count the whole process: measure in a process running one test (see
//! [`super::isolate`]).

use std::time::{Duration, Instant};

/// A snapshot of the process's resources.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Usage {
    /// Open file descriptors (entries of `/proc/self/fd`).
    pub fds: usize,
    /// Threads (`Threads:` of `/proc/self/status`).
    pub threads: usize,
    /// Resident set size in KiB (`VmRSS:` of `/proc/self/status`).
    pub rss_kib: u64,
    /// The largest resident set size so far in KiB (`VmHWM:`): memory taken and given back
    /// between two readings shows here.
    pub peak_rss_kib: u64,
    /// Memory mappings (lines of `/proc/self/maps`).
    pub mappings: usize,
}

impl Usage {
    /// Reads the current usage.
    pub fn now() -> Usage {
        let fds = std::fs::read_dir("/proc/self/fd").expect("read /proc/self/fd").count();
        let status = std::fs::read_to_string("/proc/self/status").expect("read /proc/self/status");
        let mappings = std::fs::read_to_string("/proc/self/maps").expect("read /proc/self/maps").lines().count();
        Usage {
            fds,
            threads: status_field(&status, "Threads:") as usize,
            rss_kib: status_field(&status, "VmRSS:"),
            peak_rss_kib: status_field(&status, "VmHWM:"),
            mappings,
        }
    }

    /// Waits up to `timeout` for the descriptor, thread and mapping counts to fall back to
    /// `baseline`
    /// (threads of closed connections may still be exiting) and returns the last reading.
    /// There is no notification for "a thread exited", so this polls `/proc` every 5 ms.
    pub fn settle_to(baseline: Usage, timeout: Duration) -> Usage {
        let deadline = Instant::now() + timeout;
        loop {
            let now = Usage::now();
            let settled =
                now.fds <= baseline.fds && now.threads <= baseline.threads && now.mappings <= baseline.mappings;
            if settled || Instant::now() >= deadline {
                return now;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

fn status_field(status: &str, key: &str) -> u64 {
    status
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {key} in /proc/self/status"))
}
