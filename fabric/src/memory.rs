//! Registered memory: a page-aligned allocation that the NIC (hardware, or the soft NIC thread)
//! may read or write at any time while its owner also accesses it.
//!
//! Every buffer is its own shared-memory object (a sealed memfd mapped once): the soft
//! provider's same-host path hands a region's descriptor to a peer process on the same host,
//! which maps it and copies from it as a NIC would. Nothing else of the process is shared, and
//! the object can neither shrink nor grow (`F_SEAL_SHRINK | F_SEAL_GROW`), so a mapping of it
//! never faults.
//!
//! Because another agent may access the bytes concurrently, the owner never holds plain
//! references into it: short copies in and out use relaxed atomic word accesses, long ones an
//! opaque bulk copy (`rep movsb`, as another agent's), control words are atomics, and providers hand raw pointers to the kernel or the device (which are outside the
//! Rust memory model, like DMA). `unsafe` lives only here, in the READ buffers, in the soft
//! provider's same-host mappings (`fabric::soft::shm`) and in the verbs provider.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering};

use super::error::{Error, Result};

/// Alignment of every registered buffer (a page, as `ibv_reg_mr` users do).
pub const BUFFER_ALIGN: usize = 4096;

/// Copies of registered memory this long or longer go through [`racy_copy`] (`rep movsb` on
/// x86_64, which moves whole cache lines) instead of a loop of word-sized atomic accesses: a
/// 64 KiB record is 8,192 atomic stores otherwise. Shorter copies keep the loop, which has no
/// start-up cost.
pub const BULK_COPY_MIN: usize = 256;

/// Copies `len` bytes between memory that another process, thread or the NIC may be accessing
/// at the same time (the bytes may then be torn: readers validate them, as after an RDMA READ).
/// The copy is opaque to the compiler (inline assembly on x86_64, volatile byte accesses
/// elsewhere), so concurrent accesses are those of an outside agent, as with DMA.
///
/// # Safety
/// Both ranges must be valid for `len` bytes and must not overlap.
pub(crate) unsafe fn racy_copy(src: *const u8, dst: *mut u8, len: usize) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `rep movsb` copies `rcx` bytes from `rsi` to `rdi` with the direction flag clear
    // (the ABI guarantees it at this point); the caller vouches for both ranges. The assembly is
    // opaque to the compiler, so the racing accesses are those of an outside agent.
    unsafe {
        std::arch::asm!(
            "rep movsb",
            inout("rcx") len => _,
            inout("rsi") src => _,
            inout("rdi") dst => _,
            options(nostack, preserves_flags)
        );
    }
    #[cfg(not(target_arch = "x86_64"))]
    for i in 0..len {
        // SAFETY: in bounds of both ranges (caller); volatile accesses are never elided or
        // merged, and a torn result is validated by the caller.
        unsafe { std::ptr::write_volatile(dst.add(i), std::ptr::read_volatile(src.add(i))) };
    }
}

/// A zeroed, page-aligned shared-memory object accessed only through atomics, volatile-equivalent
/// copies and raw pointers. Shared between the owner and the NIC through `Arc`.
pub struct RegisteredBuffer {
    ptr: NonNull<u8>,
    len: usize,
    /// Bytes mapped (and the size of the memory object): `len` rounded up to whole pages.
    map_len: usize,
    memfd: OwnedFd,
}

// SAFETY: the buffer is a mapping owned by this struct; every access to its bytes
// goes through atomic operations or raw pointers handed to the kernel/device, so sharing the
// handle between threads cannot create data races in Rust code.
unsafe impl Send for RegisteredBuffer {}
// SAFETY: see `Send`: no method hands out references that alias concurrent writes.
unsafe impl Sync for RegisteredBuffer {}

impl std::fmt::Debug for RegisteredBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegisteredBuffer").field("addr", &self.addr()).field("len", &self.len).finish()
    }
}

impl RegisteredBuffer {
    /// Allocates `len` zeroed bytes (at least one page is reserved, `len` may be 0) in a new
    /// sealed shared-memory object.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `len` does not fit the address space; [`Error::Os`] when
    /// the shared-memory object cannot be created, sized, sealed or mapped.
    pub fn new(len: usize) -> Result<Self> {
        let map_len =
            len.max(1).checked_next_multiple_of(BUFFER_ALIGN).filter(|&n| n <= isize::MAX as usize).ok_or_else(
                || Error::invalid("register memory", format!("{len} bytes do not fit the address space")),
            )?;
        let memfd = sealed_memfd(c"rdma-pubsub-region", map_len)?;
        // SAFETY: a fresh shared mapping of the whole object; the kernel picks the address.
        let raw = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                memfd.as_raw_fd(),
                0,
            )
        };
        if raw == libc::MAP_FAILED {
            return Err(Error::os("register memory: mmap", None, std::io::Error::last_os_error()));
        }
        let ptr = NonNull::new(raw.cast()).expect("mmap never returns a null mapping on success");
        Ok(RegisteredBuffer { ptr, len, map_len, memfd })
    }

    /// The shared-memory object holding the buffer (its first byte is the buffer's first).
    pub(crate) fn memfd(&self) -> BorrowedFd<'_> {
        self.memfd.as_fd()
    }

    /// Length in bytes as registered.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the buffer is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Virtual address of the first byte (the address remote peers use).
    pub fn addr(&self) -> u64 {
        self.ptr.as_ptr() as u64
    }

    /// Checks that `[offset, offset + len)` lies inside the buffer.
    ///
    /// # Errors
    /// [`Error::LocalBounds`] when the range is not inside the buffer.
    #[inline]
    pub fn check_range(&self, offset: usize, len: usize) -> Result<()> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len => Ok(()),
            _ => Err(Error::LocalBounds { offset, len, region_len: self.len }),
        }
    }

    /// Raw pointer to `offset` after a bounds check of `len` bytes, for providers that hand the
    /// range to the kernel (send/recv) or to the device (`ibv_reg_mr`, SGEs).
    ///
    /// # Errors
    /// [`Error::LocalBounds`] when the range is not inside the buffer.
    pub fn raw_range(&self, offset: usize, len: usize) -> Result<*mut u8> {
        self.check_range(offset, len)?;
        // SAFETY: offset <= len <= allocation size, so the result stays inside the allocation.
        Ok(unsafe { self.ptr.as_ptr().add(offset) })
    }

    /// The atomic byte at `offset` (bounds already checked by the caller).
    #[inline]
    fn byte(&self, offset: usize) -> &AtomicU8 {
        debug_assert!(offset < self.map_len);
        // SAFETY: in bounds of the live allocation; AtomicU8 has the layout of u8 and all
        // concurrent accesses from Rust are atomic.
        unsafe { &*(self.ptr.as_ptr().add(offset) as *const AtomicU8) }
    }

    /// The atomic word at an 8-aligned offset (bounds already checked by the caller).
    #[inline]
    fn word(&self, offset: usize) -> &AtomicU64 {
        debug_assert!(offset % 8 == 0 && offset + 8 <= self.map_len);
        // SAFETY: in bounds, 8-aligned (the base is page-aligned), and all concurrent accesses
        // from Rust are atomic.
        unsafe { &*(self.ptr.as_ptr().add(offset) as *const AtomicU64) }
    }

    /// The 64-bit atomic at `offset`, which must be 8-aligned and in bounds.
    ///
    /// # Errors
    /// [`Error::LocalBounds`] out of bounds; [`Error::InvalidArgument`] when `offset` is not
    /// 8-aligned.
    #[inline]
    pub fn atomic_u64(&self, offset: usize) -> Result<&AtomicU64> {
        self.check_range(offset, 8)?;
        if offset % 8 != 0 {
            return Err(Error::invalid("atomic_u64", format!("offset {offset} is not 8-aligned")));
        }
        Ok(self.word(offset))
    }

    /// The `count` consecutive 64-bit atomics from `offset`, which must be 8-aligned, with the
    /// whole range in bounds: one check for the words of one record, rather than one per word.
    ///
    /// # Errors
    /// [`Error::LocalBounds`] out of bounds; [`Error::InvalidArgument`] when `offset` is not
    /// 8-aligned.
    #[inline]
    pub fn atomic_u64s(&self, offset: usize, count: usize) -> Result<&[AtomicU64]> {
        let Some(len) = count.checked_mul(8) else {
            return Err(Error::LocalBounds { offset, len: usize::MAX, region_len: self.len });
        };
        self.check_range(offset, len)?;
        if offset % 8 != 0 {
            return Err(Error::invalid("atomic_u64s", format!("offset {offset} is not 8-aligned")));
        }
        // SAFETY: the range is in bounds of the live allocation (checked above) and 8-aligned
        // (the base is page-aligned); AtomicU64 has the layout of u64, and all concurrent
        // accesses from Rust are atomic.
        Ok(unsafe { std::slice::from_raw_parts(self.ptr.as_ptr().add(offset) as *const AtomicU64, count) })
    }

    /// The 32-bit atomic at `offset`, which must be 4-aligned and in bounds.
    ///
    /// # Errors
    /// [`Error::LocalBounds`] out of bounds; [`Error::InvalidArgument`] when `offset` is not
    /// 4-aligned.
    pub fn atomic_u32(&self, offset: usize) -> Result<&AtomicU32> {
        self.check_range(offset, 4)?;
        if offset % 4 != 0 {
            return Err(Error::invalid("atomic_u32", format!("offset {offset} is not 4-aligned")));
        }
        // SAFETY: in bounds, 4-aligned, accessed only atomically from Rust.
        Ok(unsafe { &*(self.ptr.as_ptr().add(offset) as *const AtomicU32) })
    }

    /// Copies `src` into the buffer at `offset`: short copies with relaxed atomic stores
    /// (word-sized where aligned), long ones ([`BULK_COPY_MIN`] bytes or more) with one opaque
    /// bulk copy, as another agent's would be ([`racy_copy`]). Publish the bytes to readers with a release store of a control word afterwards.
    ///
    /// # Errors
    /// [`Error::LocalBounds`] when `src` does not fit at `offset`; nothing is written then.
    #[inline]
    pub fn write(&self, offset: usize, src: &[u8]) -> Result<()> {
        self.check_range(offset, src.len())?;
        if src.len() >= BULK_COPY_MIN {
            // SAFETY: the destination is in bounds of the live mapping (checked above) and
            // cannot overlap `src`, a Rust slice (the mapping is never lent out as one while
            // copies run: `slice_mut`'s contract).
            unsafe { racy_copy(src.as_ptr(), self.ptr.as_ptr().add(offset), src.len()) };
            return Ok(());
        }
        let mut i = 0;
        let head = ((8 - offset % 8) % 8).min(src.len());
        while i < head {
            self.byte(offset + i).store(src[i], Ordering::Relaxed);
            i += 1;
        }
        while i + 8 <= src.len() {
            let v = u64::from_ne_bytes(src[i..i + 8].try_into().expect("8 bytes"));
            self.word(offset + i).store(v, Ordering::Relaxed);
            i += 8;
        }
        while i < src.len() {
            self.byte(offset + i).store(src[i], Ordering::Relaxed);
            i += 1;
        }
        Ok(())
    }

    /// Copies bytes at `offset` into `dst`: short copies with relaxed atomic loads (word-sized
    /// where aligned), long ones with one opaque bulk copy ([`racy_copy`]).
    /// Acquire a control word first to see bytes published with release.
    ///
    /// # Errors
    /// [`Error::LocalBounds`] when the range is not inside the buffer; `dst` is untouched then.
    #[inline]
    pub fn read(&self, offset: usize, dst: &mut [u8]) -> Result<()> {
        self.check_range(offset, dst.len())?;
        if dst.len() >= BULK_COPY_MIN {
            // SAFETY: the source is in bounds of the live mapping (checked above); `dst` is an
            // exclusive Rust slice, so the ranges do not overlap.
            unsafe { racy_copy(self.ptr.as_ptr().add(offset), dst.as_mut_ptr(), dst.len()) };
            return Ok(());
        }
        let mut i = 0;
        let head = ((8 - offset % 8) % 8).min(dst.len());
        while i < head {
            dst[i] = self.byte(offset + i).load(Ordering::Relaxed);
            i += 1;
        }
        while i + 8 <= dst.len() {
            let v = self.word(offset + i).load(Ordering::Relaxed);
            dst[i..i + 8].copy_from_slice(&v.to_ne_bytes());
            i += 8;
        }
        while i < dst.len() {
            dst[i] = self.byte(offset + i).load(Ordering::Relaxed);
            i += 1;
        }
        Ok(())
    }

    /// Fills `[offset, offset + len)` with `value`.
    ///
    /// # Errors
    /// [`Error::LocalBounds`] when the range is not inside the buffer; nothing is written then.
    pub fn fill(&self, offset: usize, len: usize, value: u8) -> Result<()> {
        self.check_range(offset, len)?;
        for i in 0..len {
            self.byte(offset + i).store(value, Ordering::Relaxed);
        }
        Ok(())
    }

    /// A shared slice over `[offset, offset + len)`, for zero-copy reading of data the NIC has
    /// finished writing.
    ///
    /// # Safety
    /// For as long as the slice lives, nothing may write the range: no posted work request
    /// (receive, READ destination) targets it, the region grants no remote write, and no
    /// owner thread writes it.
    ///
    /// # Errors
    /// [`Error::LocalBounds`] when the range is not inside the buffer.
    pub unsafe fn slice(&self, offset: usize, len: usize) -> Result<&[u8]> {
        let ptr = self.raw_range(offset, len)?;
        // SAFETY: in bounds of the live allocation; the caller guarantees no concurrent writer.
        Ok(unsafe { std::slice::from_raw_parts(ptr, len) })
    }

    /// An exclusive slice over `[offset, offset + len)`, for writing in place (a ring record
    /// claimed by its producer).
    ///
    /// # Safety
    /// For as long as the slice lives, no other reference to the range exists and nothing else
    /// in this process's Rust code reads or writes it: no posted work request targets it, the
    /// region grants no remote write, and no other slice or atomic access of this buffer covers
    /// it. (Reads that happen outside it, by the kernel, a device or another mapping, may see
    /// any mix of old and new bytes.)
    ///
    /// # Errors
    /// [`Error::LocalBounds`] when the range is not inside the buffer.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn slice_mut(&self, offset: usize, len: usize) -> Result<&mut [u8]> {
        let ptr = self.raw_range(offset, len)?;
        // SAFETY: in bounds of the live allocation; the caller guarantees exclusivity.
        Ok(unsafe { std::slice::from_raw_parts_mut(ptr, len) })
    }
}

/// Most iovecs one vectored call hands to the kernel.
pub const MAX_IOV: usize = 64;

/// A bounds-checked byte range of a registered buffer, handed to the kernel for vectored
/// socket I/O (the soft NIC sends from and receives into registered memory without copies).
#[derive(Debug, Clone, Copy)]
pub struct RawRange<'a> {
    buf: &'a RegisteredBuffer,
    offset: usize,
    len: usize,
}

impl<'a> RawRange<'a> {
    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }
    /// Whether the range is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// The range without its first `n` bytes (saturating).
    pub fn skip(self, n: usize) -> RawRange<'a> {
        let n = n.min(self.len);
        RawRange { buf: self.buf, offset: self.offset + n, len: self.len - n }
    }
    /// The first `n` bytes of the range (saturating).
    pub fn take(self, n: usize) -> RawRange<'a> {
        RawRange { buf: self.buf, offset: self.offset, len: self.len.min(n) }
    }
    fn iovec(&self) -> libc::iovec {
        // The pointer stays inside the allocation: `range` checked offset + len <= buffer len.
        libc::iovec { iov_base: self.buf.ptr.as_ptr().wrapping_add(self.offset).cast(), iov_len: self.len }
    }
}

impl RegisteredBuffer {
    /// The range `[offset, offset + len)` for vectored socket I/O, after a bounds check.
    ///
    /// # Errors
    /// [`Error::LocalBounds`] when the range is not inside the buffer.
    pub fn range(&self, offset: usize, len: usize) -> Result<RawRange<'_>> {
        self.check_range(offset, len)?;
        Ok(RawRange { buf: self, offset, len })
    }
}

/// One piece of an outgoing vectored send: plain bytes or a registered range.
#[derive(Debug, Clone, Copy)]
pub enum IoPart<'a> {
    /// Bytes owned by the caller (headers).
    Bytes(&'a [u8]),
    /// A range of registered memory, read by the kernel directly.
    Region(RawRange<'a>),
}

/// Sends `parts` (at most [`MAX_IOV`] are used) on the stream socket `fd` with one non-blocking
/// `sendmsg` (no SIGPIPE). Returns the bytes sent; `WouldBlock` when the socket is full.
///
/// # Errors
/// The `sendmsg` error: `WouldBlock` when the socket is full, others when the connection
/// failed.
pub fn send_vectored(fd: BorrowedFd<'_>, parts: &[IoPart<'_>]) -> std::io::Result<usize> {
    let mut iov = [libc::iovec { iov_base: std::ptr::null_mut(), iov_len: 0 }; MAX_IOV];
    let mut n = 0;
    for part in parts.iter().take(MAX_IOV) {
        iov[n] = match part {
            IoPart::Bytes(b) => libc::iovec { iov_base: b.as_ptr() as *mut libc::c_void, iov_len: b.len() },
            IoPart::Region(r) => r.iovec(),
        };
        n += 1;
    }
    // SAFETY: an all-zero msghdr is a valid "no address, no control data" header.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = iov.as_mut_ptr();
    msg.msg_iovlen = n as _;
    // SAFETY: every iovec points into memory that stays alive for the call (caller's slices,
    // or registered buffers borrowed by the `RawRange`s, bounds-checked when created).
    unsafe { send_msg(fd, &msg) }
}

/// One non-blocking `sendmsg` of `msg` on the stream socket `fd` (no SIGPIPE): the bytes sent,
/// `WouldBlock` when the socket is full.
///
/// # Safety
/// Every pointer in `msg` (its iovecs and their memory, its control data) must be valid for
/// reads for the duration of the call; the kernel only reads them.
pub(crate) unsafe fn send_msg(fd: BorrowedFd<'_>, msg: &libc::msghdr) -> std::io::Result<usize> {
    // SAFETY: the caller vouches for `msg`'s pointers; `fd` is a live descriptor borrowed for
    // the call.
    let r = unsafe { libc::sendmsg(fd.as_raw_fd(), msg, libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT) };
    if r < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(r as usize)
    }
}

/// Receives from the stream socket `fd` straight into `ranges` of registered memory (at most
/// [`MAX_IOV`] are used) with one non-blocking `recvmsg`. Returns the bytes received (0 at
/// end of stream); `WouldBlock` when nothing is there.
///
/// # Errors
/// The `recvmsg` error: `WouldBlock` when nothing is there, others when the connection
/// failed.
pub fn recv_vectored(fd: BorrowedFd<'_>, ranges: &[RawRange<'_>]) -> std::io::Result<usize> {
    let mut iov = [libc::iovec { iov_base: std::ptr::null_mut(), iov_len: 0 }; MAX_IOV];
    let mut n = 0;
    for r in ranges.iter().take(MAX_IOV) {
        iov[n] = r.iovec();
        n += 1;
    }
    // SAFETY: an all-zero msghdr is a valid "no address, no control data" header.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = iov.as_mut_ptr();
    msg.msg_iovlen = n as _;
    // SAFETY: every iovec lies inside a live registered buffer (bounds-checked `RawRange`s that
    // borrow it for the call). The kernel writes those bytes like a DMA engine would: Rust code
    // only ever accesses registered memory through atomics or raw pointers, so this write
    // cannot alias a Rust reference.
    let r = unsafe { libc::recvmsg(fd.as_raw_fd(), &mut msg, libc::MSG_DONTWAIT) };
    if r < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(r as usize)
    }
}

impl Drop for RegisteredBuffer {
    fn drop(&mut self) {
        // SAFETY: mapped in `new` with this length and unmapped exactly once; the descriptor
        // closes with `memfd`. Peers that mapped the object keep their own mappings.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.map_len) };
    }
}

/// A new memory object of `len` bytes that can neither shrink nor grow, so that every mapping
/// of it (ours or a peer's) stays backed.
pub(crate) fn sealed_memfd(name: &std::ffi::CStr, len: usize) -> Result<OwnedFd> {
    // SAFETY: `name` is a valid C string; the flags are plain bits.
    let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING) };
    if fd < 0 {
        return Err(Error::os("register memory: memfd_create", None, std::io::Error::last_os_error()));
    }
    // SAFETY: `fd` was just returned by the kernel and is owned by nobody else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let size = libc::off_t::try_from(len)
        .map_err(|_| Error::invalid("register memory", format!("{len} bytes do not fit a file size")))?;
    // SAFETY: plain calls on a descriptor we own.
    if unsafe { libc::ftruncate(fd.as_raw_fd(), size) } != 0 {
        return Err(Error::os("register memory: ftruncate", None, std::io::Error::last_os_error()));
    }
    // SAFETY: as above.
    if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, libc::F_SEAL_SHRINK | libc::F_SEAL_GROW) } != 0 {
        return Err(Error::os("register memory: seal", None, std::io::Error::last_os_error()));
    }
    Ok(fd)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_read_roundtrip_at_unaligned_offsets() {
        let buf = RegisteredBuffer::new(100).unwrap();
        assert_eq!(buf.addr() % BUFFER_ALIGN as u64, 0);
        for off in 0..9 {
            let src: Vec<u8> = (0..37u8).map(|b| b.wrapping_mul(7).wrapping_add(off as u8)).collect();
            buf.write(off, &src).unwrap();
            let mut dst = vec![0u8; src.len()];
            buf.read(off, &mut dst).unwrap();
            assert_eq!(dst, src);
        }
    }

    #[test]
    fn bulk_copies_round_trip_at_unaligned_offsets_and_stay_in_their_range() {
        let len = 3 * BULK_COPY_MIN + 5;
        let buf = RegisteredBuffer::new(len + 64).unwrap();
        for off in [0, 1, 7, 8, 33] {
            buf.fill(0, buf.len(), 0xEE).unwrap();
            let src: Vec<u8> = (0..len).map(|i| (i * 31 + off) as u8).collect();
            buf.write(off, &src).unwrap();
            let mut whole = vec![0u8; buf.len()];
            buf.read(0, &mut whole).unwrap();
            assert_eq!(&whole[off..off + len], &src[..], "bulk write at {off}");
            assert!(
                whole[..off].iter().chain(&whole[off + len..]).all(|&b| b == 0xEE),
                "bytes outside the range moved"
            );
        }
        assert!(matches!(
            buf.write(buf.len() - BULK_COPY_MIN + 1, &vec![0; BULK_COPY_MIN]),
            Err(Error::LocalBounds { .. })
        ));
        assert!(matches!(buf.read(65, &mut vec![0; buf.len()]), Err(Error::LocalBounds { .. })));
    }

    #[test]
    fn a_run_of_atomic_words_is_checked_once_and_is_the_words_one_at_a_time() {
        let buf = RegisteredBuffer::new(64).unwrap();
        let words = buf.atomic_u64s(16, 4).unwrap();
        for (i, w) in words.iter().enumerate() {
            w.store(0x0101_0101_0101_0101 * (i as u64 + 1), Ordering::Relaxed);
        }
        for i in 0..4 {
            assert_eq!(
                buf.atomic_u64(16 + 8 * i).unwrap().load(Ordering::Relaxed),
                0x0101_0101_0101_0101 * (i as u64 + 1)
            );
        }
        assert_eq!(buf.atomic_u64s(0, 8).unwrap().len(), 8);
        assert!(matches!(buf.atomic_u64s(40, 4), Err(Error::LocalBounds { .. })));
        assert!(matches!(buf.atomic_u64s(8, usize::MAX), Err(Error::LocalBounds { .. })));
        assert!(matches!(buf.atomic_u64s(4, 2), Err(Error::InvalidArgument { .. })));
    }

    #[test]
    fn out_of_bounds_is_refused() {
        let buf = RegisteredBuffer::new(16).unwrap();
        assert!(matches!(buf.write(10, &[0; 7]), Err(Error::LocalBounds { .. })));
        assert!(matches!(buf.read(usize::MAX, &mut [0; 2]), Err(Error::LocalBounds { .. })));
        assert!(buf.atomic_u64(9).is_err());
        assert!(buf.atomic_u64(16).is_err());
        buf.atomic_u64(8).unwrap().store(5, Ordering::Release);
        let mut b = [0u8; 8];
        buf.read(8, &mut b).unwrap();
        assert_eq!(u64::from_ne_bytes(b), 5);
    }

    #[test]
    fn vectored_send_and_recv_move_bytes_between_regions() {
        use std::os::fd::AsFd;
        let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
        let src = RegisteredBuffer::new(64).unwrap();
        let dst = RegisteredBuffer::new(64).unwrap();
        src.write(0, &(0..64u8).collect::<Vec<_>>()).unwrap();
        let hdr = [0xAAu8; 3];
        let parts = [IoPart::Bytes(&hdr), IoPart::Region(src.range(10, 20).unwrap().skip(5).take(10))];
        assert_eq!(send_vectored(a.as_fd(), &parts).unwrap(), 13);
        let ranges = [dst.range(0, 3).unwrap(), dst.range(40, 10).unwrap()];
        assert_eq!(recv_vectored(b.as_fd(), &ranges).unwrap(), 13);
        let mut out = [0u8; 3];
        dst.read(0, &mut out).unwrap();
        assert_eq!(out, hdr);
        let mut out = [0u8; 10];
        dst.read(40, &mut out).unwrap();
        assert_eq!(out.to_vec(), (15..25u8).collect::<Vec<_>>());
        assert!(src.range(60, 5).is_err());
        assert_eq!(recv_vectored(b.as_fd(), &ranges).unwrap_err().kind(), std::io::ErrorKind::WouldBlock);
    }
}
