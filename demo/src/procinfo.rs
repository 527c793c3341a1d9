//! What the process uses, read from `/proc`: resident memory, open descriptors, threads,
//! allowed CPUs, the calling thread's CPU time, and every thread's.

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

/// One thread of this process and the CPU time it had used when read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThreadCpu {
    /// Its thread id.
    pub tid: i32,
    /// Its name (`/proc/self/task/<tid>/comm`).
    pub name: String,
    /// CPU time used up to the reading.
    pub cpu: std::time::Duration,
}

/// The calling thread's id.
pub fn current_tid() -> i32 {
    nix::unistd::gettid().as_raw()
}

/// Every thread of this process with its CPU time now, read from the kernel's per-thread CPU
/// clock (nanoseconds; `/proc`'s tick counts are 10 ms coarse). A thread that ends while it is
/// read is left out.
pub fn threads_cpu() -> Vec<ThreadCpu> {
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else { return Vec::new() };
    dir.filter_map(|entry| {
        let entry = entry.ok()?;
        let tid: i32 = entry.file_name().to_str()?.parse().ok()?;
        let name = std::fs::read_to_string(entry.path().join("comm")).ok()?.trim_end().to_owned();
        // Linux's CPU clock of thread `tid` of this process: its id, complemented, above the
        // per-thread bit (4) and the scheduler clock (2) (`MAKE_THREAD_CPUCLOCK`).
        let clock = ClockId::from_raw((!tid << 3) | 6);
        let cpu = clock_gettime(clock).ok()?;
        Some(ThreadCpu { tid, name, cpu: std::time::Duration::from(cpu) })
    })
    .collect()
}

/// The CPU time the threads of `after` used since `before`, leaving out the thread `skip_tid`
/// and those whose names start with `skip_prefix`; a thread missing from `before` (started
/// since) counts whole.
pub fn other_threads_cpu(
    before: &[ThreadCpu],
    after: &[ThreadCpu],
    skip_tid: i32,
    skip_prefix: &str,
) -> std::time::Duration {
    after
        .iter()
        .filter(|t| t.tid != skip_tid && !t.name.starts_with(skip_prefix))
        .map(|t| {
            let earlier = before.iter().find(|b| b.tid == t.tid).map_or(std::time::Duration::ZERO, |b| b.cpu);
            t.cpu.saturating_sub(earlier)
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    /// Spins until the calling thread has used `d` of CPU time (or 10 s have passed).
    fn spin_cpu(d: Duration) {
        let (cpu0, give_up) = (thread_cpu(), Instant::now() + Duration::from_secs(10));
        let mut x = 0u64;
        while thread_cpu() - cpu0 < d && Instant::now() < give_up {
            x = std::hint::black_box(x.wrapping_add(1));
        }
    }

    #[test]
    fn every_thread_is_read_with_its_name_and_a_busy_one_is_charged_its_cpu() {
        let before = threads_cpu();
        let (started_tx, started_rx) = std::sync::mpsc::channel();
        let (stop_tx, stop_rx) = std::sync::mpsc::channel::<()>();
        let worker = std::thread::Builder::new()
            .name("cpu-probe-busy".into())
            .spawn(move || {
                spin_cpu(Duration::from_millis(30));
                started_tx.send(current_tid()).unwrap();
                stop_rx.recv_timeout(Duration::from_secs(10)).ok();
            })
            .unwrap();
        let tid = started_rx.recv_timeout(Duration::from_secs(10)).expect("the worker reports its id");
        let after = threads_cpu();
        let me = current_tid();
        assert!(after.iter().any(|t| t.tid == me), "the calling thread is listed");
        let busy = after.iter().find(|t| t.tid == tid).expect("the worker is listed");
        assert_eq!(busy.name, "cpu-probe-busy");
        assert!(busy.cpu >= Duration::from_millis(30), "its clock shows the 30 ms it spun: {:?}", busy.cpu);
        // Other tests' threads run meanwhile: leaving the worker out by name leaves out exactly
        // its clock (it started after `before`, so it counts whole).
        let with = other_threads_cpu(&before, &after, me, "no-such-prefix");
        let without = other_threads_cpu(&before, &after, me, "cpu-probe");
        assert_eq!(with - without, busy.cpu);
        stop_tx.send(()).unwrap();
        worker.join().unwrap();
    }

    #[test]
    fn a_thread_read_twice_is_charged_only_what_it_used_between() {
        let t = |cpu_ms| ThreadCpu { tid: 7, name: "soft0-nic".into(), cpu: Duration::from_millis(cpu_ms) };
        assert_eq!(other_threads_cpu(&[t(100)], &[t(130)], 1, "bench-sub"), Duration::from_millis(30));
        assert_eq!(other_threads_cpu(&[t(100)], &[t(130)], 7, "bench-sub"), Duration::ZERO, "the skipped thread");
        assert_eq!(
            other_threads_cpu(&[], &[t(130)], 1, "bench-sub"),
            Duration::from_millis(130),
            "a new thread counts whole"
        );
    }
}
