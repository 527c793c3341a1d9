//! A READ destination: local registered memory that only the NIC writes, and only while a READ
//! into it is outstanding. The typestate (`&mut self` to post, the READ's completion to
//! release) lets the owner look at the bytes through a plain slice when no READ is in flight:
//! zero copy. Releasing is `unsafe`: only the caller knows that a completion is this READ's.

use super::error::{Error, Result};
use super::handles::{ProtectionDomain, QueuePair};
use super::region::MemoryRegion;
use super::types::{Access, RemoteAddr, SendOp, WorkCompletion};
use super::work_request::SendRequest;

/// A registered buffer that READs land in, with zero-copy access between READs.
#[derive(Debug)]
pub struct ReadBuffer {
    mr: MemoryRegion,
    in_flight: bool,
    /// Length of the outstanding (or last) READ.
    posted: usize,
    filled: usize,
}

impl ReadBuffer {
    /// Registers `len` bytes with local write access only (no remote access).
    ///
    /// # Errors
    /// What [`ProtectionDomain::register`] returns.
    pub fn new(pd: &ProtectionDomain, len: usize) -> Result<Self> {
        Ok(ReadBuffer { mr: pd.register(len, Access::LOCAL_WRITE)?, in_flight: false, posted: 0, filled: 0 })
    }

    /// Capacity in bytes.
    pub fn capacity(&self) -> usize {
        self.mr.len()
    }

    /// Whether a READ into the buffer is outstanding.
    pub fn in_flight(&self) -> bool {
        self.in_flight
    }

    /// Posts a signaled READ of `len` bytes from `remote` into the start of the buffer.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when a READ into the buffer is outstanding already; what
    /// [`QueuePair::post_send`] returns ([`Error::LocalBounds`] when `len` exceeds the capacity,
    /// [`Error::QueueFull`], [`Error::NotConnected`], ...).
    pub fn post_read(&mut self, qp: &QueuePair, wr_id: u64, remote: RemoteAddr, len: usize) -> Result<()> {
        if self.in_flight {
            return Err(Error::invalid("post READ", "a READ into this buffer is already outstanding"));
        }
        let sge = [self.mr.sge(0, len)];
        qp.post_send(&SendRequest::new(wr_id, SendOp::RdmaRead(remote), &sge))?;
        self.in_flight = true;
        self.posted = len;
        self.filled = 0;
        Ok(())
    }

    /// Records `wc`, the completion of the outstanding READ: its bytes are valid when it
    /// succeeded, none otherwise. From then on [`bytes`](Self::bytes) lends them.
    ///
    /// # Safety
    /// `wc` must be the completion, polled from the send CQ of the queue pair the READ was
    /// posted on, of the READ [`post_read`](Self::post_read) posted last: after it the NIC no
    /// longer writes the buffer. The completion of another request (of another READ with the
    /// same `wr_id`, say), or none, lets [`bytes`](Self::bytes) lend memory the NIC may still be
    /// writing.
    pub unsafe fn complete(&mut self, wc: &WorkCompletion) {
        self.in_flight = false;
        self.filled = if wc.status.is_success() { self.posted } else { 0 };
    }

    /// Fills the first `len` bytes with `fill` instead of a READ (a reader that copies the
    /// peer's memory itself, [`RemoteView::copy_to`](crate::RemoteView::copy_to)): from then on
    /// [`bytes`](Self::bytes) lends them, as after a READ of `len` bytes.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] while a READ into the buffer is outstanding;
    /// [`Error::LocalBounds`] when `len` exceeds the capacity.
    pub fn fill_with<R>(&mut self, len: usize, fill: impl FnOnce(&mut [u8]) -> R) -> Result<R> {
        if self.in_flight {
            return Err(Error::invalid("fill a READ buffer", "a READ into this buffer is outstanding"));
        }
        self.filled = 0;
        // SAFETY: no READ into this buffer is outstanding (checked above) and none can be posted
        // while the slice lives (`&mut self`); the region grants no remote access and nothing
        // else of this process touches it: the slice is the only access to these bytes.
        let dst = unsafe { self.mr.buffer().slice_mut(0, len) }?;
        let made = fill(dst);
        self.posted = len;
        self.filled = len;
        Ok(made)
    }

    /// The bytes the last successful READ brought; empty while a READ is outstanding.
    pub fn bytes(&self) -> &[u8] {
        if self.in_flight || self.filled == 0 {
            return &[];
        }
        // SAFETY: no READ into this buffer is outstanding: the last one completed (the contract
        // of `complete`) and posting needs `&mut self`, which this borrow excludes. The region
        // grants no remote access and the owner never writes it: nothing writes these bytes
        // while the slice lives.
        unsafe { self.mr.buffer().slice(0, self.filled) }.unwrap_or(&[])
    }
}
