//! `pubsub-demo`: the rdma-pubsub demo and tools.
//!
//! - no arguments (or `demo`): an embedded demo on the soft fabric over loopback — several
//!   publishers and subscribers on a few topics in one process, live progress, a summary —
//!   that exits 0 only if every message arrived intact;
//! - `pub` / `sub`: a publisher and a subscriber in separate processes or hosts;
//! - `bench`: a throughput and latency matrix;
//! - `soak`: a long run checking for loss and for growth of memory, descriptors and threads;
//! - `stat`: the counters of the nodes running on this host, live.
//!
//! Exit codes: 0 success, 1 a check failed (loss, damage, growth), 2 a usage or environment
//! error (one line on stderr saying what to do).

mod bench;
mod cli;
mod demo;
mod payload;
mod placement;
mod procinfo;
mod pubsub;
mod soak;
mod stat;

use std::process::ExitCode;

use clap::Parser;

use cli::{Cli, Command};

/// Why the program stops with a non-zero code.
#[derive(Debug)]
pub enum Fail {
    /// A check failed (exit 1); what failed was already reported.
    Check,
    /// A usage or environment error (exit 2): one line saying what went wrong and what to do.
    Usage(String),
}

impl From<rdma_pubsub::Error> for Fail {
    fn from(e: rdma_pubsub::Error) -> Self {
        Fail::Usage(cli::explain(&e))
    }
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "error".into()))
        .with_writer(std::io::stderr)
        .init();
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => return cli::usage_error(e),
    };
    let result = match cli.command.unwrap_or(Command::Demo(cli.demo)) {
        Command::Demo(args) => demo::run(&args),
        Command::Pub(args) => pubsub::publish(&args),
        Command::Sub(args) => pubsub::subscribe(&args),
        Command::Bench(args) => bench::run(&args),
        Command::Soak(args) => soak::run(&args),
        Command::Stat(args) => stat::run(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(Fail::Check) => ExitCode::from(1),
        Err(Fail::Usage(line)) => {
            eprintln!("pubsub-demo: {line}");
            ExitCode::from(2)
        }
    }
}
