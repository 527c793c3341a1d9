//! What every part of the provider needs of the system: errors from `errno`, and the
//! descriptor helpers (non-blocking descriptors, waiting with poll(2)) of channels and helper
//! threads.

use crate::{Error, Result};

/// An [`Error::Os`] from `errno` (librdmacm and libibverbs calls that return -1 or NULL).
pub(super) fn last_os(verb: &'static str) -> Error {
    Error::os(verb, None, std::io::Error::last_os_error())
}

/// An [`Error::Os`] from an errno returned by a libibverbs call.
pub(super) fn errno(verb: &'static str, code: i32) -> Error {
    Error::os(verb, None, std::io::Error::from_raw_os_error(code.abs()))
}

/// Makes `fd` non-blocking (waits on it use poll(2)).
pub(super) fn set_nonblocking(fd: i32, verb: &'static str) -> Result<()> {
    // SAFETY: fcntl on a descriptor the caller owns; no memory is passed.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    // SAFETY: as above.
    if flags < 0 || unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) } < 0 {
        return Err(last_os(verb));
    }
    Ok(())
}

/// Waits up to `timeout` for `fd` to become readable; returns whether it did.
pub(super) fn poll_fd(fd: i32, timeout: std::time::Duration, verb: &'static str) -> Result<bool> {
    let mut pfd = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
    // Round up so that a short remaining time still waits instead of spinning.
    let ms = timeout.as_nanos().div_ceil(1_000_000).min(i32::MAX as u128) as i32;
    // SAFETY: one valid pollfd for the duration of the call.
    let rc = unsafe { libc::poll(&mut pfd, 1, ms) };
    if rc < 0 {
        let err = std::io::Error::last_os_error();
        if err.kind() == std::io::ErrorKind::Interrupted {
            return Ok(false);
        }
        return Err(Error::os(verb, None, err));
    }
    Ok(rc > 0)
}
