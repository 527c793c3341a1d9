//! Counters readable from outside the process: each node periodically writes a snapshot of its
//! counters (node, discovery, publishers, subscriptions) to a small text file under a
//! well-known directory (every 100 ms by default; `NodeBuilder::stats_dir(None)` turns it off),
//! and removes it when it is dropped. `pubsub-demo stat` lists the files of live processes
//! (skipping those whose pid is gone) and shows their counters with per-second rates, as
//! aeron-stat does. This module is the file format, the directory and the writer; it knows
//! nothing of nodes (the node's exporter, `node/stats_export.rs`, fills the snapshots).
//!
//! | file | job |
//! |---|---|
//! | `snapshot.rs` | a snapshot: render and parse the format below |
//! | `directory.rs` | where the files are, listing them, removing those of dead processes |
//! | `writer.rs` | the thread that rewrites a node's file, atomically |
//!
//! # Where
//!
//! `$RDMA_PUBSUB_STATS_DIR` if set, otherwise `/dev/shm/rdma-pubsub-<uid>` (or
//! `<temp dir>/rdma-pubsub-<uid>` where there is no `/dev/shm`). One file per node:
//! `<pid>-<node id, 16 hex digits>.stats`. A snapshot is written to `.<name>.tmp` and renamed
//! over the file, so a reader always sees a complete snapshot.
//!
//! The directory is created with mode 0700. A node writes into it only if it is a real
//! directory (not a symbolic link), owned by the process's user and writable by no one else;
//! otherwise it writes no stats file and logs why. Temporary files are created with
//! `O_CREAT | O_EXCL | O_NOFOLLOW`: a link planted in their place is never followed.
//!
//! # Format (version 1)
//!
//! UTF-8 text, one record per line, fields separated by single spaces:
//!
//! ```text
//! rdma-pubsub-stats 1
//! pid 4242
//! node 9f1c2a0b33d4e5f6
//! addr 127.0.0.1:40123
//! fabric soft
//! epoch_us 1767225600000000
//! updated_us 1767225612345678
//! counters node rejected_connects=0
//! counters disc sent=12 received=30 ... bad_datagrams=0
//! counters pub id=... published=10 bytes=640 ... lag_bytes=0 topic=prices
//! counters sub delivered=10 bytes=640 reads=4 ... topic=prices
//! counters sub delivered=7 bytes=448 ... matched_topics=2 topic=sensors/**
//! counters match publishers=1 topic=sensors/kitchen
//! counters match publishers=2 topic=sensors/hall
//! ```
//!
//! A `counters` line is `counters <kind> name=value ...` with `kind` one of `node`, `disc`,
//! `pub`, `sub`, `match`; the names are those of the counter sets' descriptors
//! ([`crate::counters`]); values are unsigned decimal integers; on `pub`, `sub` and `match`
//! lines the last field is `topic=` followed by the topic name (a subscription's pattern, on a
//! `sub` line) up to the end of the line (names have no control characters, but may contain
//! spaces). The `match` lines after a pattern's `sub` line are the topics it matched, each
//! with its publishers announced now. Readers ignore unknown lines and unknown counter names,
//! so counters can be added without a new version.

use std::time::Duration;

mod directory;
mod snapshot;
#[cfg(test)]
mod tests;
mod writer;

pub use directory::process_alive;
pub use directory::{default_dir, list, remove_dead, Found};
pub use snapshot::{Kind, ParseError, Section, Snapshot, TopicTotals};
pub(crate) use writer::Exporter;

/// The first line of a stats file, followed by the format version.
pub const MAGIC: &str = "rdma-pubsub-stats";
/// The version of the format written.
pub const FORMAT_VERSION: u32 = 1;
/// The environment variable that overrides the stats directory.
pub const DIR_ENV: &str = "RDMA_PUBSUB_STATS_DIR";
/// How often a node rewrites its stats file by default.
pub const DEFAULT_INTERVAL: Duration = Duration::from_millis(100);
