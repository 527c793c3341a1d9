//! Where a benchmark places its threads: the publishing thread alone on one CPU, every other
//! thread on the other allowed CPUs. Shared by `pubsub-demo bench` and `benches/pubsub.rs`.

use nix::sched::{sched_getaffinity, sched_setaffinity, CpuSet};
use nix::unistd::Pid;

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
    all: CpuSet,
    /// The other CPUs, as a list.
    pub others_list: String,
}

impl Placement {
    /// Splits the CPUs the calling thread may use into `cpu` (default: the first of them) and
    /// the rest; an error (for the user) unless `cpu` is one of them and at least one other is
    /// left.
    pub fn new(cpu: Option<usize>) -> Result<Placement, String> {
        let allowed = sched_getaffinity(Pid::from_raw(0)).map_err(|e| format!("cannot read the allowed CPUs: {e}"))?;
        let first = (0..CpuSet::count()).find(|&c| allowed.is_set(c).unwrap_or(false));
        let cpu = cpu.or(first).ok_or("no CPU is allowed")?;
        if !allowed.is_set(cpu).unwrap_or(false) {
            return Err(format!(
                "--pin-publisher {cpu}: CPU {cpu} is not among the allowed CPUs {}",
                cpu_list(&allowed)
            ));
        }
        let all = allowed;
        let mut others = allowed;
        others.unset(cpu).map_err(|e| format!("--pin-publisher {cpu}: {e}"))?;
        let others_list = cpu_list(&others);
        if others_list.is_empty() {
            return Err(format!("--pin-publisher {cpu}: needs at least two allowed CPUs (allowed: {cpu})"));
        }
        let mut publisher = CpuSet::new();
        publisher.set(cpu).map_err(|e| format!("--pin-publisher {cpu}: {e}"))?;
        Ok(Placement { cpu, publisher, others, all, others_list })
    }

    /// Moves the calling thread to the publisher's CPU.
    pub fn enter_publisher(&self) -> Result<(), String> {
        sched_setaffinity(Pid::from_raw(0), &self.publisher).map_err(|e| format!("cannot pin the publisher: {e}"))
    }

    /// Moves the calling thread to the other CPUs (before it starts the threads that go there).
    pub fn enter_others(&self) -> Result<(), String> {
        sched_setaffinity(Pid::from_raw(0), &self.others).map_err(|e| format!("cannot place the other threads: {e}"))
    }

    /// Moves the calling thread back to every CPU it was allowed before.
    pub fn leave(&self) -> Result<(), String> {
        sched_setaffinity(Pid::from_raw(0), &self.all).map_err(|e| format!("cannot restore the allowed CPUs: {e}"))
    }
}
