//! Counters readable from outside the process: each node periodically writes a snapshot of its
//! counters (node, publishers, subscriptions) to a small text file under a well-known
//! directory, and removes it when it is dropped. `pubsub-demo stat` lists and shows them.
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
//! counters pub id=... published=10 bytes=640 ... lag_bytes=0 topic=prices
//! counters sub delivered=10 bytes=640 reads=4 ... topic=prices
//! ```
//!
//! A `counters` line is `counters <kind> name=value ...` with `kind` one of `node`, `pub`,
//! `sub`; values are unsigned decimal integers; on `pub` and `sub` lines the last field is
//! `topic=` followed by the topic name up to the end of the line (topic names have no control
//! characters, but may contain spaces). Readers ignore unknown lines and unknown counter names,
//! so counters can be added without a new version.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam::channel::{self, RecvTimeoutError, Sender};
use parking_lot::Mutex;

use crate::node::{NodeCounters, NodeShared, PublisherCounters, SubscriptionCounters};

internal! {
    /// The first line of a stats file, followed by the format version.
    pub const MAGIC: &str = "rdma-pubsub-stats";
}
internal! {
    /// The version of the format written.
    pub const FORMAT_VERSION: u32 = 1;
}
/// The environment variable that overrides the stats directory.
pub const DIR_ENV: &str = "RDMA_PUBSUB_STATS_DIR";
/// How often a node rewrites its stats file by default.
pub const DEFAULT_INTERVAL: Duration = Duration::from_millis(100);

/// The directory stats files go to: `$RDMA_PUBSUB_STATS_DIR`, else
/// `/dev/shm/rdma-pubsub-<uid>`, else `<temp dir>/rdma-pubsub-<uid>` (one per user, so that
/// no user writes into a directory another one controls).
pub fn default_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os(DIR_ENV).filter(|d| !d.is_empty()) {
        return PathBuf::from(dir);
    }
    let name = format!("rdma-pubsub-{}", own_uid().map_or_else(|_| "unknown".to_string(), |u| u.to_string()));
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        shm.join(name)
    } else {
        std::env::temp_dir().join(name)
    }
}

/// The user id this process runs as (the owner of `/proc/self`).
fn own_uid() -> std::io::Result<u32> {
    use std::os::unix::fs::MetadataExt;
    Ok(std::fs::metadata("/proc/self")?.uid())
}

/// Creates `dir` with mode 0700 if it does not exist, then checks that it is a directory (not
/// a symbolic link) owned by this process's user and writable by no one else.
fn prepare_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    let refuse = |why: String| {
        Err(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            format!("stats directory {}: {why}", dir.display()),
        ))
    };
    if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)?;
    }
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => return Err(e),
        _ => {}
    }
    let meta = std::fs::symlink_metadata(dir)?;
    let uid = own_uid()?;
    if !meta.file_type().is_dir() {
        return refuse("not a directory (a symbolic link?)".into());
    }
    if meta.uid() != uid {
        return refuse(format!("owned by uid {}, not by this process's uid {uid}", meta.uid()));
    }
    if meta.mode() & 0o022 != 0 {
        return refuse(format!("writable by others (mode {:o})", meta.mode() & 0o7777));
    }
    Ok(())
}

/// What a counters line describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The node as a whole.
    Node,
    /// One publisher.
    Publisher,
    /// One subscription.
    Subscription,
}

impl Kind {
    fn tag(self) -> &'static str {
        match self {
            Kind::Node => "node",
            Kind::Publisher => "pub",
            Kind::Subscription => "sub",
        }
    }
    fn from_tag(tag: &str) -> Option<Kind> {
        match tag {
            "node" => Some(Kind::Node),
            "pub" => Some(Kind::Publisher),
            "sub" => Some(Kind::Subscription),
            _ => None,
        }
    }
}

/// The counters of one node, publisher or subscription, by name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Section {
    /// What it describes.
    pub kind: Kind,
    /// The topic of a publisher or subscription.
    pub topic: Option<String>,
    /// Counter names and values, in the order written.
    pub values: Vec<(String, u64)>,
}

impl Section {
    /// The value of counter `name` (0 when absent).
    pub fn get(&self, name: &str) -> u64 {
        self.values.iter().find(|(n, _)| n == name).map_or(0, |(_, v)| *v)
    }
}

/// Totals of one topic over a node's publishers and subscriptions.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TopicTotals {
    /// The topic.
    pub topic: String,
    /// Local publishers (0 or 1).
    pub publishers: u64,
    /// Local subscriptions.
    pub subscriptions: u64,
    /// Messages published.
    pub published: u64,
    /// Bytes published.
    pub published_bytes: u64,
    /// Messages delivered, summed over subscriptions.
    pub delivered: u64,
    /// Bytes delivered, summed over subscriptions.
    pub delivered_bytes: u64,
    /// Messages lost to overruns, summed over subscriptions.
    pub lost: u64,
    /// Subscribers dropped by the publisher.
    pub dropped: u64,
    /// The publisher's lag: bytes published and not acknowledged by its slowest subscriber.
    pub lag_bytes: u64,
}

/// One snapshot of a node's counters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    /// The process.
    pub pid: u32,
    /// The node's id.
    pub node_id: u64,
    /// Where subscribers connect to it.
    pub addr: String,
    /// Its fabric provider.
    pub fabric: String,
    /// The node's epoch (start time, µs since the Unix epoch).
    pub epoch_us: u64,
    /// When the snapshot was taken (µs since the Unix epoch).
    pub updated_us: u64,
    /// The node's counters, then each publisher's, then each subscription's.
    pub sections: Vec<Section>,
}

/// A stats file that does not follow the format.
#[derive(Debug, thiserror::Error)]
#[error("not an rdma-pubsub stats file: {0}")]
pub struct ParseError(String);

impl Snapshot {
    /// The node's own counters.
    pub fn node(&self) -> Option<&Section> {
        self.sections.iter().find(|s| s.kind == Kind::Node)
    }
    /// The sections of one kind.
    pub fn of_kind(&self, kind: Kind) -> impl Iterator<Item = &Section> {
        self.sections.iter().filter(move |s| s.kind == kind)
    }
    /// Totals per topic, sorted by topic name.
    pub fn topics(&self) -> Vec<TopicTotals> {
        let mut topics: Vec<TopicTotals> = Vec::new();
        for s in &self.sections {
            let Some(name) = &s.topic else { continue };
            let i = match topics.iter().position(|t| &t.topic == name) {
                Some(i) => i,
                None => {
                    topics.push(TopicTotals { topic: name.clone(), ..Default::default() });
                    topics.len() - 1
                }
            };
            let t = &mut topics[i];
            match s.kind {
                Kind::Publisher => {
                    t.publishers += 1;
                    t.published += s.get("published");
                    t.published_bytes += s.get("bytes");
                    t.dropped += s.get("dropped");
                    t.lag_bytes = t.lag_bytes.max(s.get("lag_bytes"));
                }
                Kind::Subscription => {
                    t.subscriptions += 1;
                    t.delivered += s.get("delivered");
                    t.delivered_bytes += s.get("bytes");
                    t.lost += s.get("lost");
                }
                Kind::Node => {}
            }
        }
        topics.sort_by(|a, b| a.topic.cmp(&b.topic));
        topics
    }

    /// The file's text.
    pub fn render(&self) -> String {
        let mut out = String::with_capacity(256 + 256 * self.sections.len());
        let _ = writeln!(out, "{MAGIC} {FORMAT_VERSION}");
        let _ = writeln!(out, "pid {}", self.pid);
        let _ = writeln!(out, "node {:016x}", self.node_id);
        let _ = writeln!(out, "addr {}", self.addr);
        let _ = writeln!(out, "fabric {}", self.fabric);
        let _ = writeln!(out, "epoch_us {}", self.epoch_us);
        let _ = writeln!(out, "updated_us {}", self.updated_us);
        for s in &self.sections {
            let _ = write!(out, "counters {}", s.kind.tag());
            for (name, value) in &s.values {
                let _ = write!(out, " {name}={value}");
            }
            if let Some(topic) = &s.topic {
                let _ = write!(out, " topic={topic}");
            }
            out.push('\n');
        }
        out
    }

    /// Reads a file's text.
    ///
    /// # Errors
    /// [`ParseError`] when `text` is empty, does not start with the magic line and a version,
    /// or has a malformed field or counter (unknown lines and counter names are skipped, not
    /// errors).
    pub fn parse(text: &str) -> Result<Snapshot, ParseError> {
        let mut lines = text.lines();
        let header = lines.next().ok_or_else(|| ParseError("empty".into()))?;
        match header.split_once(' ') {
            Some((MAGIC, v)) if v.parse::<u32>().is_ok() => {}
            _ => return Err(ParseError(format!("first line is {header:?}"))),
        }
        let mut snap = Snapshot {
            pid: 0,
            node_id: 0,
            addr: String::new(),
            fabric: String::new(),
            epoch_us: 0,
            updated_us: 0,
            sections: Vec::new(),
        };
        let number = |key: &str, v: &str| v.parse::<u64>().map_err(|_| ParseError(format!("{key} is {v:?}")));
        for line in lines {
            let Some((key, rest)) = line.split_once(' ') else { continue };
            match key {
                "pid" => snap.pid = number(key, rest)? as u32,
                "node" => {
                    snap.node_id = u64::from_str_radix(rest, 16).map_err(|_| ParseError(format!("node is {rest:?}")))?
                }
                "addr" => snap.addr = rest.to_owned(),
                "fabric" => snap.fabric = rest.to_owned(),
                "epoch_us" => snap.epoch_us = number(key, rest)?,
                "updated_us" => snap.updated_us = number(key, rest)?,
                "counters" => {
                    if let Some(section) = parse_section(rest)? {
                        snap.sections.push(section);
                    }
                }
                _ => {}
            }
        }
        if snap.pid == 0 {
            return Err(ParseError("no pid line".into()));
        }
        Ok(snap)
    }
}

fn parse_section(rest: &str) -> Result<Option<Section>, ParseError> {
    let (tag, mut fields) = rest.split_once(' ').unwrap_or((rest, ""));
    let Some(kind) = Kind::from_tag(tag) else { return Ok(None) };
    let mut section = Section { kind, topic: None, values: Vec::new() };
    while !fields.is_empty() {
        if let Some(topic) = fields.strip_prefix("topic=") {
            section.topic = Some(topic.to_owned());
            break;
        }
        let (field, next) = fields.split_once(' ').unwrap_or((fields, ""));
        fields = next;
        let (name, value) = field.split_once('=').ok_or_else(|| ParseError(format!("counter {field:?}")))?;
        let value = value.parse::<u64>().map_err(|_| ParseError(format!("counter {field:?}")))?;
        section.values.push((name.to_owned(), value));
    }
    Ok(Some(section))
}

/// A stats file found by [`list`].
#[derive(Debug, Clone)]
pub struct Found {
    /// Its path.
    pub path: PathBuf,
    /// What it held.
    pub snapshot: Snapshot,
}

/// The snapshots in `dir` of nodes whose process is alive, sorted by pid and node id. Files
/// of dead processes, temporary files and unreadable files are skipped.
///
/// # Errors
/// The [`std::io::Error`] of reading `dir` (permission denied, not a directory); a missing
/// `dir` is an empty list.
pub fn list(dir: &Path) -> std::io::Result<Vec<Found>> {
    let mut found = Vec::new();
    for file in stats_files(dir)? {
        if file.temporary || !process_alive(file.pid) {
            continue;
        }
        // The node may remove its file between the listing and the read.
        let Ok(text) = std::fs::read_to_string(&file.path) else { continue };
        if let Ok(snapshot) = Snapshot::parse(&text) {
            found.push(Found { path: file.path, snapshot });
        }
    }
    found.sort_by_key(|f| (f.snapshot.pid, f.snapshot.node_id));
    Ok(found)
}

/// Removes the stats files (and temporary files) in `dir` of processes that no longer exist,
/// such as nodes of SIGKILLed processes, which could not remove their own; returns how many.
///
/// # Errors
/// The [`std::io::Error`] of reading `dir`; a missing `dir` removes nothing, and files that
/// cannot be removed are skipped.
pub fn remove_dead(dir: &Path) -> std::io::Result<usize> {
    let dead = stats_files(dir)?.into_iter().filter(|f| !process_alive(f.pid));
    Ok(dead.filter(|f| std::fs::remove_file(&f.path).is_ok()).count())
}

/// A stats file found in the directory: `<pid>-<node>.stats`, or its temporary
/// `.<pid>-<node>.stats.tmp`.
struct StatsFile {
    path: PathBuf,
    pid: u32,
    temporary: bool,
}

/// The stats files in `dir` (none when it does not exist); other files are left out.
fn stats_files(dir: &Path) -> std::io::Result<Vec<StatsFile>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut files = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else { continue };
        let stem = name.strip_prefix('.').and_then(|n| n.strip_suffix(".tmp"));
        let temporary = stem.is_some();
        let stem = stem.unwrap_or(name);
        if !stem.ends_with(".stats") || (!temporary && name.starts_with('.')) {
            continue;
        }
        let Some(pid) = stem.split('-').next().and_then(|p| p.parse::<u32>().ok()) else { continue };
        files.push(StatsFile { path, pid, temporary });
    }
    Ok(files)
}

internal! {
    /// Whether process `pid` exists (on Linux, `/proc/<pid>` does).
    pub fn process_alive(pid: u32) -> bool {
        Path::new("/proc").join(pid.to_string()).exists()
    }
}

/// A snapshot of everything a node counts.
pub(crate) fn snapshot_of(node: &NodeShared) -> Snapshot {
    let mut sections = vec![Section { kind: Kind::Node, topic: None, values: node_values(&node.counters) }];
    sections.extend(node.stats.sections());
    Snapshot {
        pid: std::process::id(),
        node_id: node.id,
        addr: node.addr.to_string(),
        fabric: node.fabric.kind().to_string(),
        epoch_us: node.epoch,
        updated_us: now_us(),
        sections,
    }
}

fn now_us() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_micros() as u64)
}

/// The named values of a node's counters.
pub(crate) fn node_values(c: &NodeCounters) -> Vec<(String, u64)> {
    // Exhaustive destructuring: a counter added to the struct must be exported here too.
    let NodeCounters { rejected_connects, bad_datagrams } = c;
    named(&[("rejected_connects", rejected_connects), ("bad_datagrams", bad_datagrams)])
}

fn publisher_values(id: u64, c: &PublisherCounters) -> Vec<(String, u64)> {
    let PublisherCounters {
        published,
        bytes,
        acks,
        bad_acks,
        doorbells,
        accepted,
        dropped,
        rejected_unauthorized,
        waits,
        solicited_waits,
        credit_requests,
        subscribers,
        position,
        slowest_ack,
    } = c;
    let mut values = vec![("id".to_owned(), id)];
    values.extend(named(&[
        ("published", published),
        ("bytes", bytes),
        ("acks", acks),
        ("bad_acks", bad_acks),
        ("doorbells", doorbells),
        ("accepted", accepted),
        ("dropped", dropped),
        ("rejected_unauthorized", rejected_unauthorized),
        ("waits", waits),
        ("solicited_waits", solicited_waits),
        ("credit_requests", credit_requests),
        ("subscribers", subscribers),
    ]));
    let subs = subscribers.load(Ordering::Relaxed);
    let lag = if subs == 0 {
        0
    } else {
        position.load(Ordering::Relaxed).saturating_sub(slowest_ack.load(Ordering::Relaxed))
    };
    values.push(("lag_bytes".to_owned(), lag));
    values
}

fn subscription_values(c: &SubscriptionCounters) -> Vec<(String, u64)> {
    let SubscriptionCounters {
        delivered,
        bytes,
        reads,
        empty_reads,
        reads_ahead,
        torn,
        lost,
        acks,
        doorbell_requests,
        doorbells,
        reconnects,
        duplicates,
        unpolled_waits,
        credit_requests,
        solicited_acks,
        shared_memory_connects,
        network_connects,
        read_buffer_bytes,
        events_dropped,
    } = c;
    named(&[
        ("delivered", delivered),
        ("bytes", bytes),
        ("reads", reads),
        ("empty_reads", empty_reads),
        ("reads_ahead", reads_ahead),
        ("torn", torn),
        ("lost", lost),
        ("acks", acks),
        ("doorbell_requests", doorbell_requests),
        ("doorbells", doorbells),
        ("reconnects", reconnects),
        ("duplicates", duplicates),
        ("unpolled_waits", unpolled_waits),
        ("credit_requests", credit_requests),
        ("solicited_acks", solicited_acks),
        ("shared_memory_connects", shared_memory_connects),
        ("network_connects", network_connects),
        ("read_buffer_bytes", read_buffer_bytes),
        ("events_dropped", events_dropped),
    ])
}

fn named(pairs: &[(&str, &AtomicU64)]) -> Vec<(String, u64)> {
    pairs.iter().map(|(n, v)| ((*n).to_owned(), v.load(Ordering::Relaxed))).collect()
}

struct PubEntry {
    topic: String,
    id: u64,
    counters: Weak<PublisherCounters>,
}

struct SubEntry {
    topic: String,
    counters: Weak<SubscriptionCounters>,
}

/// The publishers and subscriptions of a node whose counters are exported; entries of dropped
/// ones are pruned on every registration and snapshot.
#[derive(Default)]
pub(crate) struct Registry {
    publishers: Mutex<Vec<PubEntry>>,
    subscriptions: Mutex<Vec<SubEntry>>,
}

impl Registry {
    pub(crate) fn add_publisher(&self, topic: &str, id: u64, counters: &Arc<PublisherCounters>) {
        let mut p = self.publishers.lock();
        p.retain(|e| e.counters.strong_count() > 0);
        p.push(PubEntry { topic: topic.to_owned(), id, counters: Arc::downgrade(counters) });
    }

    pub(crate) fn add_subscription(&self, topic: &str, counters: &Arc<SubscriptionCounters>) {
        let mut s = self.subscriptions.lock();
        s.retain(|e| e.counters.strong_count() > 0);
        s.push(SubEntry { topic: topic.to_owned(), counters: Arc::downgrade(counters) });
    }

    /// The sections of the live publishers and subscriptions.
    pub(crate) fn sections(&self) -> Vec<Section> {
        let mut out = Vec::new();
        let mut p = self.publishers.lock();
        p.retain(|e| match e.counters.upgrade() {
            Some(c) => {
                out.push(Section {
                    kind: Kind::Publisher,
                    topic: Some(e.topic.clone()),
                    values: publisher_values(e.id, &c),
                });
                true
            }
            None => false,
        });
        drop(p);
        let mut s = self.subscriptions.lock();
        s.retain(|e| match e.counters.upgrade() {
            Some(c) => {
                out.push(Section {
                    kind: Kind::Subscription,
                    topic: Some(e.topic.clone()),
                    values: subscription_values(&c),
                });
                true
            }
            None => false,
        });
        out
    }
}

/// The thread that rewrites a node's stats file every interval and removes it on drop.
#[derive(Debug)]
pub(crate) struct Exporter {
    path: PathBuf,
    stop: Option<Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Exporter {
    /// Creates `dir` (mode 0700) or checks it (see the module doc), writes the first snapshot
    /// and starts the thread.
    pub(crate) fn start(
        dir: &Path,
        file_name: String,
        interval: Duration,
        snapshot: impl Fn() -> Option<Snapshot> + Send + 'static,
    ) -> std::io::Result<Exporter> {
        prepare_dir(dir)?;
        let path = dir.join(&file_name);
        let tmp = dir.join(format!(".{file_name}.tmp"));
        if let Some(s) = snapshot() {
            write_atomically(&tmp, &path, &s.render())?;
        }
        let (stop, stopped) = channel::bounded::<()>(0);
        let (thread_path, thread_tmp) = (path.clone(), tmp);
        let thread = std::thread::Builder::new().name("pubsub-stats".into()).spawn(move || {
            let mut warned = false;
            // Until the node drops the sender (or the node is gone).
            while let Err(RecvTimeoutError::Timeout) = stopped.recv_timeout(interval) {
                let Some(s) = snapshot() else { break };
                if let Err(e) = write_atomically(&thread_tmp, &thread_path, &s.render()) {
                    if !warned {
                        tracing::warn!(path = %thread_path.display(), "writing the stats file: {e}");
                        warned = true;
                    }
                }
            }
            let _ = std::fs::remove_file(&thread_tmp);
        })?;
        Ok(Exporter { path, stop: Some(stop), thread: Some(thread) })
    }

    /// The file written.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for Exporter {
    fn drop(&mut self) {
        self.stop.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Writes `text` to a new file `tmp` (never through a link planted there) and renames it over
/// `path`. A `tmp` left behind (by a killed process that had this pid) is removed first.
fn write_atomically(tmp: &Path, path: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let create = || {
        std::fs::OpenOptions::new().write(true).create_new(true).custom_flags(libc::O_NOFOLLOW).mode(0o600).open(tmp)
    };
    let mut file = match create() {
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            std::fs::remove_file(tmp)?;
            create()?
        }
        other => other?,
    };
    file.write_all(text.as_bytes())?;
    drop(file);
    std::fs::rename(tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Snapshot {
        Snapshot {
            pid: 42,
            node_id: 0x9f1c_2a0b_33d4_e5f6,
            addr: "127.0.0.1:4000".into(),
            fabric: "soft".into(),
            epoch_us: 1,
            updated_us: 2,
            sections: vec![
                Section { kind: Kind::Node, topic: None, values: vec![("rejected_connects".into(), 3)] },
                Section {
                    kind: Kind::Publisher,
                    topic: Some("a topic with spaces=and equals".into()),
                    values: vec![("published".into(), 10), ("bytes".into(), 640), ("lag_bytes".into(), 64)],
                },
                Section {
                    kind: Kind::Subscription,
                    topic: Some("a topic with spaces=and equals".into()),
                    values: vec![("delivered".into(), 9), ("lost".into(), 1)],
                },
            ],
        }
    }

    #[test]
    fn render_then_parse_gives_the_snapshot_back() {
        let s = sample();
        assert_eq!(Snapshot::parse(&s.render()).unwrap(), s);
    }

    #[test]
    fn parse_ignores_unknown_lines_and_kinds_and_rejects_other_files() {
        let text = format!("{}future 7\ncounters gauge x=1\n", sample().render());
        assert_eq!(Snapshot::parse(&text).unwrap(), sample());
        assert!(Snapshot::parse("hello\npid 1\n").is_err());
        assert!(Snapshot::parse(&format!("{MAGIC} 1\npid 1\ncounters pub published=x topic=t\n")).is_err());
    }

    #[test]
    fn topic_totals_sum_publishers_and_subscriptions() {
        let t = sample().topics();
        assert_eq!(t.len(), 1);
        assert_eq!((t[0].published, t[0].delivered, t[0].lost, t[0].lag_bytes), (10, 9, 1, 64));
    }

    #[test]
    fn exporter_writes_rewrites_and_removes_its_file() {
        let dir = std::env::temp_dir().join(format!("rdma-pubsub-stats-test-{}", std::process::id()));
        let counter = Arc::new(AtomicU64::new(1));
        let c = counter.clone();
        let exporter = Exporter::start(&dir, "x.stats".into(), Duration::from_millis(5), move || {
            let mut s = sample();
            s.updated_us = c.load(Ordering::Relaxed);
            Some(s)
        })
        .unwrap();
        let path = exporter.path().to_owned();
        assert_eq!(Snapshot::parse(&std::fs::read_to_string(&path).unwrap()).unwrap().updated_us, 1);
        counter.store(7, Ordering::Relaxed);
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while Snapshot::parse(&std::fs::read_to_string(&path).unwrap()).unwrap().updated_us != 7 {
            assert!(std::time::Instant::now() < deadline, "the file was not rewritten");
            std::thread::yield_now();
        }
        drop(exporter);
        assert!(!path.exists());
        let _ = std::fs::remove_dir(&dir);
    }

    fn test_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("rdma-pubsub-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    fn sample_exporter(dir: &Path) -> std::io::Result<Exporter> {
        Exporter::start(dir, "x.stats".into(), Duration::from_secs(3600), || Some(sample()))
    }

    #[test]
    fn the_directory_is_created_private_and_refused_when_others_control_it() {
        use std::os::unix::fs::PermissionsExt;
        let dir = test_dir("stats-private");
        let exporter = sample_exporter(&dir).unwrap();
        assert_eq!(std::fs::metadata(&dir).unwrap().permissions().mode() & 0o7777, 0o700);
        drop(exporter);
        // Writable by others (as a world-writable /tmp-like directory would be): refused.
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o1777)).unwrap();
        let e = sample_exporter(&dir).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::PermissionDenied, "{e}");
        assert!(std::fs::read_dir(&dir).unwrap().next().is_none(), "nothing written into it");
        // A symbolic link to a directory: refused, even one of ours.
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        let link = test_dir("stats-link");
        std::os::unix::fs::symlink(&dir, &link).unwrap();
        let e = sample_exporter(&link).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::PermissionDenied, "{e}");
        std::fs::remove_file(&link).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_link_planted_as_the_temporary_file_is_not_followed() {
        let dir = test_dir("stats-planted");
        std::fs::DirBuilder::new().create(&dir).unwrap();
        let victim = test_dir("stats-victim");
        std::fs::write(&victim, "precious").unwrap();
        std::os::unix::fs::symlink(&victim, dir.join(".x.stats.tmp")).unwrap();
        let exporter = sample_exporter(&dir).unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious", "written through the link");
        assert_eq!(Snapshot::parse(&std::fs::read_to_string(exporter.path()).unwrap()).unwrap(), sample());
        drop(exporter);
        std::fs::remove_file(&victim).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_default_directory_is_per_user() {
        if std::env::var_os(DIR_ENV).is_some() {
            return;
        }
        let name = default_dir().file_name().unwrap().to_str().unwrap().to_owned();
        assert_eq!(name, format!("rdma-pubsub-{}", own_uid().unwrap()));
    }

    #[test]
    fn list_skips_dead_processes_and_temporary_files() {
        let dir = std::env::temp_dir().join(format!("rdma-pubsub-list-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut live = sample();
        live.pid = std::process::id();
        std::fs::write(dir.join(format!("{}-1.stats", live.pid)), live.render()).unwrap();
        std::fs::write(dir.join(format!(".{}-2.stats.tmp", live.pid)), live.render()).unwrap();
        // pid_max is at most 2^22: this pid cannot exist.
        let mut dead = sample();
        dead.pid = 4_194_305;
        std::fs::write(dir.join("4194305-1.stats"), dead.render()).unwrap();
        let found = list(&dir).unwrap();
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].snapshot, live);
        // The dead process's file and temporary file go; the live one's and other files stay.
        std::fs::write(dir.join(".4194305-2.stats.tmp"), dead.render()).unwrap();
        std::fs::write(dir.join("4194305-notes.txt"), "not a stats file").unwrap();
        assert_eq!(remove_dead(&dir).unwrap(), 2);
        let mut left: Vec<String> =
            std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
        left.sort();
        let pid = live.pid;
        let mut kept = [format!(".{pid}-2.stats.tmp"), format!("{pid}-1.stats"), "4194305-notes.txt".to_string()];
        kept.sort();
        assert_eq!(left, kept);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
