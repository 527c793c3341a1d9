//! A READ destination: local registered memory that only the NIC writes, and only while a READ
//! into it is outstanding. The typestate (`&mut self` to post, a completion to release) lets
//! the owner look at the bytes through a plain slice when no READ is in flight: zero copy.

use super::error::{Error, Result};
use super::handles::{MemoryRegion, ProtectionDomain, QueuePair};
use super::provider::SendRequest;
use super::types::{Access, RemoteAddr, SendOp};

/// A registered buffer that READs land in, with zero-copy access between READs.
#[derive(Debug)]
pub struct ReadBuffer {
    mr: MemoryRegion,
    in_flight: bool,
    filled: usize,
}

impl ReadBuffer {
    /// Registers `len` bytes with local write access only (no remote access).
    pub fn new(pd: &ProtectionDomain, len: usize) -> Result<Self> {
        Ok(ReadBuffer { mr: pd.register(len, Access::LOCAL_WRITE)?, in_flight: false, filled: 0 })
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
    pub fn post_read(&mut self, qp: &QueuePair, wr_id: u64, remote: RemoteAddr, len: usize) -> Result<()> {
        if self.in_flight {
            return Err(Error::invalid("post READ", "a READ into this buffer is already outstanding"));
        }
        let sge = [self.mr.sge(0, len)];
        qp.post_send(&SendRequest::new(wr_id, SendOp::RdmaRead(remote), &sge))?;
        self.in_flight = true;
        self.filled = 0;
        Ok(())
    }

    /// Records the completion of the outstanding READ: `filled` bytes are valid when it
    /// succeeded, none otherwise.
    pub fn complete(&mut self, filled: Option<usize>) {
        self.in_flight = false;
        self.filled = filled.unwrap_or(0).min(self.mr.len());
    }

    /// The bytes the last successful READ brought; empty while a READ is outstanding.
    pub fn bytes(&self) -> &[u8] {
        if self.in_flight || self.filled == 0 {
            return &[];
        }
        // SAFETY: no READ into this buffer is outstanding (posting needs `&mut self`, which
        // this borrow excludes), the region grants no remote access, and the owner never
        // writes it: nothing writes these bytes while the slice lives.
        unsafe { self.mr.buffer().slice(0, self.filled) }.unwrap_or(&[])
    }
}
