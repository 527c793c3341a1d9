//! Descriptor passing (`SCM_RIGHTS`) on Unix stream sockets: how a region's memory object
//! reaches a peer on the same host.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

use crate::memory::send_msg;
use std::os::unix::net::UnixStream;

/// Most descriptors one message carries.
pub(crate) const MAX_FDS: usize = 6;

/// Control-message space for [`MAX_FDS`] descriptors (a generous constant: `CMSG_SPACE` is not
/// a `const fn`).
const CMSG_BUF: usize = 64;

/// Sends `bytes` with `fds` attached in one non-blocking `sendmsg` (no SIGPIPE). Returns the
/// bytes sent.
pub(crate) fn send_with_fds(sock: &UnixStream, bytes: &[u8], fds: &[BorrowedFd<'_>]) -> io::Result<usize> {
    assert!(fds.len() <= MAX_FDS, "at most {MAX_FDS} descriptors per message");
    let mut iov = libc::iovec { iov_base: bytes.as_ptr() as *mut libc::c_void, iov_len: bytes.len() };
    let mut cbuf = [0u64; CMSG_BUF / 8];
    // SAFETY: an all-zero msghdr is a valid "no address, no control data" header.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    if !fds.is_empty() {
        let payload = std::mem::size_of_val(fds) as u32;
        // SAFETY: CMSG_SPACE is pure arithmetic.
        let space = unsafe { libc::CMSG_SPACE(payload) } as usize;
        debug_assert!(space <= CMSG_BUF);
        msg.msg_control = cbuf.as_mut_ptr().cast();
        msg.msg_controllen = space as _;
        // SAFETY: the control buffer is `space` bytes and 8-aligned, so the first header and
        // its data (`payload` bytes) fit; the raw descriptors are copied in as plain ints.
        unsafe {
            let cmsg = libc::CMSG_FIRSTHDR(&msg);
            (*cmsg).cmsg_level = libc::SOL_SOCKET;
            (*cmsg).cmsg_type = libc::SCM_RIGHTS;
            (*cmsg).cmsg_len = libc::CMSG_LEN(payload) as _;
            let data = libc::CMSG_DATA(cmsg).cast::<RawFd>();
            for (i, fd) in fds.iter().enumerate() {
                data.add(i).write_unaligned(fd.as_raw_fd());
            }
        }
    }
    // SAFETY: `msg` points at `iov` (the caller's bytes) and the control buffer, both alive for
    // the call.
    unsafe { send_msg(sock.as_fd(), &msg) }
}

/// Receives into `buf` with one `recvmsg` (blocking as the socket is), collecting at most
/// [`MAX_FDS`] attached descriptors (close-on-exec). Returns the bytes received (0 at end of
/// stream) and the descriptors.
pub(crate) fn recv_with_fds(sock: &UnixStream, buf: &mut [u8]) -> io::Result<(usize, Vec<OwnedFd>)> {
    let mut iov = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
    let mut cbuf = [0u64; CMSG_BUF / 8];
    // SAFETY: an all-zero msghdr is a valid "no address, no control data" header.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf.as_mut_ptr().cast();
    msg.msg_controllen = CMSG_BUF as _;
    // SAFETY: `msg` points at the caller's buffer and our control buffer, both alive and
    // writable for the call.
    let r = unsafe { libc::recvmsg(sock.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut fds = Vec::new();
    // SAFETY: the kernel filled `msg_controllen` bytes of the control buffer with well-formed
    // headers; each SCM_RIGHTS header carries whole descriptors now owned by this process.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(cmsg).cast::<RawFd>();
                let bytes = (*cmsg).cmsg_len as usize - (data as usize - cmsg as usize);
                for i in 0..bytes / std::mem::size_of::<RawFd>() {
                    fds.push(OwnedFd::from_raw_fd(data.add(i).read_unaligned()));
                }
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
    }
    if msg.msg_flags & libc::MSG_CTRUNC != 0 {
        // Descriptors beyond the buffer were closed by the kernel: a peer sent too many.
        return Err(io::Error::new(io::ErrorKind::InvalidData, "too many descriptors attached"));
    }
    if fds.len() > MAX_FDS {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "too many descriptors attached"));
    }
    Ok((r as usize, fds))
}
