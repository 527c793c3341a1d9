//! A helper thread of the verbs provider that waits on descriptors with poll(2) and is told to
//! stop through an eventfd: dropping the handle signals it, joins it and closes the eventfd.

use std::thread::JoinHandle;

use super::os::last_os;
use crate::{Error, Result};

/// A running helper thread; dropping it stops and joins the thread.
pub(super) struct StoppableThread {
    stop: i32,
    thread: Option<JoinHandle<()>>,
}

impl StoppableThread {
    /// Creates the stop eventfd and spawns `body(stop_fd)`, which must return once `stop_fd`
    /// is readable (poll it beside its own descriptors).
    pub(super) fn spawn<F>(name: String, what: &'static str, body: F) -> Result<StoppableThread>
    where
        F: FnOnce(i32) + Send + 'static,
    {
        // SAFETY: plain syscall; the descriptor is closed in Drop (or below on failure).
        let stop = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if stop < 0 {
            return Err(last_os("eventfd"));
        }
        match std::thread::Builder::new().name(name).spawn(move || body(stop)) {
            Ok(thread) => Ok(StoppableThread { stop, thread: Some(thread) }),
            Err(e) => {
                // SAFETY: created above and not shared with any thread.
                unsafe { libc::close(stop) };
                Err(Error::os(what, None, e))
            }
        }
    }
}

impl Drop for StoppableThread {
    fn drop(&mut self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a valid u64 to our eventfd.
        unsafe { libc::write(self.stop, (&one as *const u64).cast(), 8) };
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        // SAFETY: the thread using it has exited; closed once.
        unsafe { libc::close(self.stop) };
    }
}
