//! Where stats files live, and finding them: the per-user directory (created private, refused
//! when someone else controls it), the files of live nodes, and removing those of dead
//! processes.

use std::path::{Path, PathBuf};

use super::{Snapshot, DIR_ENV};

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
pub(super) fn own_uid() -> std::io::Result<u32> {
    use std::os::unix::fs::MetadataExt;
    Ok(std::fs::metadata("/proc/self")?.uid())
}

/// Creates `dir` with mode 0700 if it does not exist, then checks that it is a directory (not
/// a symbolic link) owned by this process's user and writable by no one else.
pub(super) fn prepare_dir(dir: &Path) -> std::io::Result<()> {
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

/// Whether process `pid` exists (on Linux, `/proc/<pid>` does).
pub fn process_alive(pid: u32) -> bool {
    Path::new("/proc").join(pid.to_string()).exists()
}
