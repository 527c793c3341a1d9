//! Mappings of a peer's shared-memory objects and the copies to and from them.
//!
//! A peer's object is mapped only after its seals say it can never shrink and its size covers
//! the mapping, so a mapping never faults (no SIGBUS), whatever the peer does later (exit,
//! deregister, close). Bytes in it change under us at any time: they are copied with
//! `rep movsb` in inline assembly, which Rust treats like another agent (as a DMA engine), never
//! through references.

use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64};

use crate::error::{Error, Result};
use crate::memory::racy_copy;

/// A mapping of a shared-memory object received from a peer.
pub(crate) struct PeerMapping {
    ptr: NonNull<u8>,
    len: usize,
    writable: bool,
}

// SAFETY: the mapping is owned by this struct and only accessed through raw-pointer copies in
// inline assembly and atomics, so sharing it between threads cannot create data races in Rust.
unsafe impl Send for PeerMapping {}
// SAFETY: see `Send`.
unsafe impl Sync for PeerMapping {}

impl PeerMapping {
    /// Maps the first `len` bytes of `fd` (read-only unless `writable`) after checking that the
    /// object is sealed against shrinking and at least `len` bytes long.
    pub(crate) fn new(fd: BorrowedFd<'_>, len: usize, writable: bool) -> Result<PeerMapping> {
        let verb = "same-host map";
        // SAFETY: a plain query of a descriptor we hold.
        let seals = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GET_SEALS) };
        if seals < 0 || seals & libc::F_SEAL_SHRINK == 0 {
            return Err(Error::invalid(verb, "the peer's memory object is not sealed against shrinking"));
        }
        // SAFETY: an all-zero stat is a valid output buffer.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: `st` is a valid output buffer for the call.
        if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
            return Err(Error::os(verb, None, std::io::Error::last_os_error()));
        }
        if len == 0 || (st.st_size as u64) < len as u64 {
            return Err(Error::invalid(verb, format!("an object of {} bytes cannot hold {len}", st.st_size)));
        }
        let prot = if writable { libc::PROT_READ | libc::PROT_WRITE } else { libc::PROT_READ };
        // SAFETY: a fresh shared mapping chosen by the kernel; the object is at least `len`
        // bytes long and sealed, so every mapped page stays backed.
        let raw = unsafe { libc::mmap(std::ptr::null_mut(), len, prot, libc::MAP_SHARED, fd.as_raw_fd(), 0) };
        if raw == libc::MAP_FAILED {
            return Err(Error::os("same-host mmap", None, std::io::Error::last_os_error()));
        }
        let ptr = NonNull::new(raw.cast()).expect("mmap never returns a null mapping on success");
        Ok(PeerMapping { ptr, len, writable })
    }

    /// The 8-aligned 64-bit word at `offset`, if in bounds.
    pub(crate) fn word(&self, offset: usize) -> Option<&AtomicU64> {
        if offset % 8 != 0 || offset.checked_add(8)? > self.len {
            return None;
        }
        // SAFETY: in bounds and aligned (mappings are page-aligned); the word is only accessed
        // atomically, here and by the owner.
        Some(unsafe { &*(self.ptr.as_ptr().add(offset) as *const AtomicU64) })
    }

    /// The 4-aligned 32-bit word at `offset`, if in bounds.
    pub(crate) fn word32(&self, offset: usize) -> Option<&AtomicU32> {
        if offset % 4 != 0 || offset.checked_add(4)? > self.len {
            return None;
        }
        // SAFETY: in bounds and aligned (mappings are page-aligned); the word is only accessed
        // atomically, here and by the owner.
        Some(unsafe { &*(self.ptr.as_ptr().add(offset) as *const AtomicU32) })
    }

    /// Copies `len` bytes at `offset` of the mapping to `dst`.
    ///
    /// # Safety
    /// `dst` must be valid for writes of `len` bytes and not aliased by any Rust reference (it
    /// points into registered memory, which is only accessed through atomics and raw pointers).
    pub(crate) unsafe fn copy_out(&self, offset: usize, dst: *mut u8, len: usize) -> bool {
        if offset.checked_add(len).is_none_or(|end| end > self.len) {
            return false;
        }
        // SAFETY: the source range is inside the mapping (checked above); the caller vouches
        // for `dst`.
        unsafe { racy_copy(self.ptr.as_ptr().add(offset), dst, len) };
        true
    }

    /// Copies `len` bytes from `src` to `offset` of the mapping (which must be writable).
    ///
    /// # Safety
    /// `src` must be valid for reads of `len` bytes (registered memory, accessed only through
    /// atomics and raw pointers).
    pub(crate) unsafe fn copy_in(&self, offset: usize, src: *const u8, len: usize) -> bool {
        if !self.writable || offset.checked_add(len).is_none_or(|end| end > self.len) {
            return false;
        }
        // SAFETY: the destination range is inside a writable mapping (checked above); the
        // caller vouches for `src`.
        unsafe { racy_copy(src, self.ptr.as_ptr().add(offset), len) };
        true
    }
}

impl Drop for PeerMapping {
    fn drop(&mut self) {
        // SAFETY: mapped in `new` with this length and unmapped exactly once.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

/// A read-only descriptor of the same object as `fd` (a new open file description through
/// `/proc/self/fd`): a peer holding it can map the object read-only and nothing more (no
/// writable mapping, no truncation).
pub(crate) fn reopen_read_only(fd: BorrowedFd<'_>) -> Result<OwnedFd> {
    let path = format!("/proc/self/fd/{}\0", fd.as_raw_fd());
    // SAFETY: `path` is NUL-terminated; the flags are plain bits.
    let raw = unsafe { libc::open(path.as_ptr().cast(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if raw < 0 {
        return Err(Error::os("same-host: reopen read-only", None, std::io::Error::last_os_error()));
    }
    // SAFETY: `raw` was just returned by the kernel and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}
