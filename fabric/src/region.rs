//! A registered memory region: the provider's registration ([`MrOps`]), the handle that owns
//! it with its memory ([`MemoryRegion`]) and a range of it ([`Sge`]). Work requests name
//! regions through their scatter/gather entries, so the region handle is part of the provider
//! contract and sits below the provider traits, with the one trait it owns.

use std::sync::Arc;

use super::as_any::AsAny;
use super::error::Result;
use super::memory::RegisteredBuffer;
use super::types::{Access, RemoteAddr};

/// A registered memory region. Dropping it deregisters it: the rkey stops working at once.
pub trait MrOps: AsAny {
    /// The local key.
    fn lkey(&self) -> u32;
    /// The remote key.
    fn rkey(&self) -> u32;
}

/// A registered memory region that owns its memory. Dropping it deregisters the region (its
/// rkey stops working) and then frees the memory once no in-flight operation uses it.
pub struct MemoryRegion {
    // Declared first: deregistration happens before the buffer handle is released.
    ops: Box<dyn MrOps>,
    buffer: Arc<RegisteredBuffer>,
    access: Access,
}

impl std::fmt::Debug for MemoryRegion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryRegion")
            .field("addr", &self.addr())
            .field("len", &self.len())
            .field("lkey", &self.lkey())
            .field("rkey", &self.rkey())
            .finish()
    }
}

impl MemoryRegion {
    /// A region of `buffer`, registered as `ops` with `access` (by
    /// [`ProtectionDomain::register`](super::ProtectionDomain::register)).
    pub(super) fn new(ops: Box<dyn MrOps>, buffer: Arc<RegisteredBuffer>, access: Access) -> Self {
        MemoryRegion { ops, buffer, access }
    }
    /// Virtual address of the first byte.
    pub fn addr(&self) -> u64 {
        self.buffer.addr()
    }
    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.buffer.len()
    }
    /// Whether the region is empty.
    pub fn is_empty(&self) -> bool {
        self.buffer.is_empty()
    }
    /// The local key.
    pub fn lkey(&self) -> u32 {
        self.ops.lkey()
    }
    /// The remote key.
    pub fn rkey(&self) -> u32 {
        self.ops.rkey()
    }
    /// The access rights it was registered with.
    pub fn access(&self) -> Access {
        self.access
    }
    /// What a peer needs to READ or WRITE the region from its first byte.
    pub fn remote(&self) -> RemoteAddr {
        RemoteAddr { addr: self.addr(), rkey: self.rkey() }
    }
    /// The memory, with atomic and copy accessors that are safe against the NIC.
    pub fn buffer(&self) -> &RegisteredBuffer {
        &self.buffer
    }
    /// A scatter/gather entry over `[offset, offset + len)` of this region.
    pub fn sge(&self, offset: usize, len: usize) -> Sge<'_> {
        Sge { mr: self, offset, len }
    }
    /// The shared memory handle: a ring producer writes through it, and providers keep memory
    /// alive with it during a transfer.
    pub fn buffer_arc(&self) -> &Arc<RegisteredBuffer> {
        &self.buffer
    }
    /// The provider object (for providers).
    pub(crate) fn ops(&self) -> &dyn MrOps {
        &*self.ops
    }
}

/// A scatter/gather entry: a range of a registered region.
#[derive(Clone, Copy)]
pub struct Sge<'a> {
    /// The region.
    pub mr: &'a MemoryRegion,
    /// Offset in the region.
    pub offset: usize,
    /// Length in bytes.
    pub len: usize,
}

impl std::fmt::Debug for Sge<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sge")
            .field("lkey", &self.mr.lkey())
            .field("offset", &self.offset)
            .field("len", &self.len)
            .finish()
    }
}

/// Checks that every entry of `sges` lies inside its region.
pub(super) fn check_sges(sges: &[Sge<'_>]) -> Result<()> {
    for sge in sges {
        sge.mr.buffer().check_range(sge.offset, sge.len)?;
    }
    Ok(())
}
