//! A read-only view of a peer's registered memory, read in place rather than by RDMA READ:
//! only where the data path is shared memory (the soft provider with both ends on one host,
//! [`QueuePair::remote_view`](crate::QueuePair::remote_view)).
//!
//! The view is checked once, when it is made, exactly as a READ of its range is checked (the
//! rkey, the connection's protection domain, bounds and access). Its bytes change under the
//! reader at any time (the peer writes them), so it offers no reference into them: acquire
//! loads of aligned words ([`load_acquire`](RemoteView::load_acquire)) and opaque copies into
//! the caller's buffer ([`copy_to`](RemoteView::copy_to)), each bounds-checked. A copy checks
//! that the region is still registered and the connection still up, before and after it: a
//! deregistration or a closed connection is an error, never stale bytes. The mapping is sealed
//! against shrinking, so no access ever faults, whatever the peer does.

use crate::error::{Error, Result};
use crate::soft::{ShmView, ViewRefused};

/// A checked read-only view of a same-host peer's memory range.
pub struct RemoteView {
    inner: ShmView,
}

impl std::fmt::Debug for RemoteView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteView").field("len", &self.inner.len()).finish()
    }
}

const VERB: &str = "remote view";

impl RemoteView {
    /// Wraps a soft same-host view.
    pub(crate) fn from_soft(inner: ShmView) -> RemoteView {
        RemoteView { inner }
    }

    /// Bytes of the view.
    pub fn len(&self) -> usize {
        self.inner.len()
    }

    /// Whether the view is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The little-endian 64-bit word at `offset`, loaded with acquire ordering: what the peer
    /// wrote before its release store of that word is visible to later loads and copies.
    /// Revocation is not checked here (see [`check_live`](Self::check_live)).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `offset` is not 8-aligned or the word is out of bounds.
    pub fn load_acquire(&self, offset: usize) -> Result<u64> {
        self.inner.load_acquire(offset).ok_or_else(|| {
            Error::invalid(VERB, format!("the word at {offset} is unaligned or outside the {}-byte view", self.len()))
        })
    }

    /// Copies `dst.len()` bytes at `offset` of the view into `dst`, checking before and after
    /// that the region is still registered and the connection up.
    ///
    /// # Errors
    /// [`Error::RemoteAccess`] when the range is outside the view, the peer deregistered the
    /// region, or the connection is gone.
    pub fn copy_to(&self, offset: usize, dst: &mut [u8]) -> Result<()> {
        self.inner.copy_to(offset, dst).map_err(|why| refused(why, offset, dst.len(), self.len()))
    }

    /// Whether the region is still registered and the connection up.
    ///
    /// # Errors
    /// [`Error::RemoteAccess`] saying which is not.
    pub fn check_live(&self) -> Result<()> {
        self.inner.check_live().map_err(|why| refused(why, 0, 0, self.len()))
    }
}

/// The error of a refused copy or check.
fn refused(why: ViewRefused, offset: usize, len: usize, view_len: usize) -> Error {
    let detail = match why {
        ViewRefused::Access if offset.checked_add(len).is_none_or(|end| end > view_len) => {
            format!("[{offset}, +{len}) is outside the {view_len}-byte view")
        }
        ViewRefused::Access => "the peer deregistered the region".to_owned(),
        ViewRefused::Transport => "the connection to the peer is gone".to_owned(),
    };
    Error::RemoteAccess { verb: VERB, detail }
}
