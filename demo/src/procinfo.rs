//! What the process uses, read from `/proc`: resident memory, open descriptors, threads,
//! allowed CPUs, and the calling thread's CPU time.

use nix::time::{clock_gettime, ClockId};

/// A reading of the process's resources.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Usage {
    /// Resident memory, KiB.
    pub rss_kib: u64,
    /// Open file descriptors.
    pub fds: usize,
    /// Threads.
    pub threads: u64,
}

fn status_field(name: &str) -> Option<String> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status.lines().find_map(|l| l.strip_prefix(name).map(|v| v.trim().to_owned()))
}

fn number(field: Option<String>) -> u64 {
    field.and_then(|v| v.split_whitespace().next().and_then(|n| n.parse().ok())).unwrap_or(0)
}

/// Reads the process's resources now.
pub fn usage() -> Usage {
    let fds = std::fs::read_dir("/proc/self/fd").map(|d| d.count()).unwrap_or(0);
    Usage { rss_kib: number(status_field("VmRSS:")), fds, threads: number(status_field("Threads:")) }
}

/// The CPUs this process may run on, as the kernel lists them (e.g. `0-1`); `taskset` sets it.
pub fn cpus_allowed() -> String {
    status_field("Cpus_allowed_list:").unwrap_or_else(|| "unknown".into())
}

/// CPU time the calling thread has used, up to now (`CLOCK_THREAD_CPUTIME_ID`); zero where it
/// cannot be read.
pub fn thread_cpu() -> std::time::Duration {
    clock_gettime(ClockId::CLOCK_THREAD_CPUTIME_ID).map(std::time::Duration::from).unwrap_or_default()
}
