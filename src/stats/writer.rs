//! The thread that rewrites a node's stats file every interval (to a temporary file renamed
//! over it) and removes it when dropped.

use std::path::{Path, PathBuf};
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam::channel::{self, RecvTimeoutError, Sender};

use super::directory::{prepare_dir, remove_dead};
use super::Snapshot;

/// The thread that rewrites a node's stats file every interval and removes it on drop.
#[derive(Debug)]
pub(crate) struct Exporter {
    path: PathBuf,
    stop: Option<Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Exporter {
    /// Creates `dir` (mode 0700) or checks it (see the module doc), removes the files of its
    /// user's dead processes (nodes SIGKILLed could not remove their own, and they would pile
    /// up), writes the first snapshot and starts the thread.
    pub(crate) fn start(
        dir: &Path,
        file_name: String,
        interval: Duration,
        snapshot: impl Fn() -> Option<Snapshot> + Send + 'static,
    ) -> std::io::Result<Exporter> {
        prepare_dir(dir)?;
        match remove_dead(dir) {
            Ok(0) => {}
            Ok(n) => tracing::debug!(dir = %dir.display(), "removed {n} stats files of dead processes"),
            Err(e) => tracing::debug!(dir = %dir.display(), "removing stats files of dead processes: {e}"),
        }
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
