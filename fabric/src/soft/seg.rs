//! A range of registered memory that an operation reads or writes.

use std::sync::Arc;

use crate::error::Result;
use crate::memory::RegisteredBuffer;

/// The segments of one work request: inline up to two (a request has one or two), so posting
/// one allocates nothing.
pub(crate) type Segs = smallvec::SmallVec<[Seg; 2]>;

/// A range of registered memory an operation reads or writes; holds the memory alive.
#[derive(Clone)]
pub(crate) struct Seg {
    pub(crate) buf: Arc<RegisteredBuffer>,
    pub(crate) off: usize,
    pub(crate) len: usize,
}

impl Seg {
    /// A bounds-checked segment.
    pub(crate) fn new(buf: Arc<RegisteredBuffer>, off: usize, len: usize) -> Result<Seg> {
        buf.check_range(off, len)?;
        Ok(Seg { buf, off, len })
    }
}
