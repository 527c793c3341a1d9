//! What the process uses, read from `/proc`: resident memory, open descriptors, threads,
//! and allowed CPUs; and where the bench places its threads.

use nix::sched::{sched_getaffinity, sched_setaffinity, CpuSet};
use nix::time::{clock_gettime, ClockId};
use nix::unistd::Pid;

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

/// The CPUs the calling thread may run on, as a list (`0,2,3`).
pub fn thread_cpus() -> String {
    match sched_getaffinity(Pid::from_raw(0)) {
        Ok(set) => cpu_list(&set),
        Err(_) => "unknown".into(),
    }
}

fn cpu_list(set: &CpuSet) -> String {
    let cpus: Vec<String> =
        (0..CpuSet::count()).filter(|&c| set.is_set(c).unwrap_or(false)).map(|c| c.to_string()).collect();
    cpus.join(",")
}

/// A CPU for the publishing thread alone and the other allowed CPUs for every other thread,
/// so that the publisher's CPU time is its own work, not the cost of sharing a CPU with the
/// threads it feeds. Threads inherit the CPUs of the thread that starts them.
pub struct Placement {
    /// The publisher's CPU.
    pub cpu: usize,
    publisher: CpuSet,
    others: CpuSet,
    /// The other CPUs, as a list.
    pub others_list: String,
}

impl Placement {
    /// Splits the CPUs the calling thread may use into `cpu` and the rest; an error (for the
    /// user) unless `cpu` is one of them and at least one other is left.
    pub fn new(cpu: usize) -> Result<Placement, String> {
        let allowed = sched_getaffinity(Pid::from_raw(0)).map_err(|e| format!("cannot read the allowed CPUs: {e}"))?;
        if !allowed.is_set(cpu).unwrap_or(false) {
            return Err(format!(
                "--pin-publisher {cpu}: CPU {cpu} is not among the allowed CPUs {}",
                cpu_list(&allowed)
            ));
        }
        let mut others = allowed;
        others.unset(cpu).map_err(|e| format!("--pin-publisher {cpu}: {e}"))?;
        let others_list = cpu_list(&others);
        if others_list.is_empty() {
            return Err(format!("--pin-publisher {cpu}: needs at least two allowed CPUs (allowed: {cpu})"));
        }
        let mut publisher = CpuSet::new();
        publisher.set(cpu).map_err(|e| format!("--pin-publisher {cpu}: {e}"))?;
        Ok(Placement { cpu, publisher, others, others_list })
    }

    /// Moves the calling thread to the publisher's CPU.
    pub fn enter_publisher(&self) -> Result<(), String> {
        sched_setaffinity(Pid::from_raw(0), &self.publisher).map_err(|e| format!("cannot pin the publisher: {e}"))
    }

    /// Moves the calling thread to the other CPUs (before it starts the threads that go there).
    pub fn enter_others(&self) -> Result<(), String> {
        sched_setaffinity(Pid::from_raw(0), &self.others).map_err(|e| format!("cannot place the other threads: {e}"))
    }
}
