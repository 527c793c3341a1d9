//! A registered memory region: the handle that owns a provider's registration with its
//! memory ([`MemoryRegion`], its provider object an [`MrFlavor`]) and a range of it ([`Sge`]).
//! Work requests name regions through their scatter/gather entries, so the region handle is
//! part of the provider contract and sits below the other handles.

use std::sync::Arc;

use super::error::{Error, Result};
use super::memory::RegisteredBuffer;
use super::soft::SoftMr;
use super::types::{Access, FabricKind, RemoteAddr};
#[cfg(feature = "verbs")]
use super::verbs;

/// A provider's registration of a region. Dropping it deregisters the region: the rkey stops
/// working at once.
pub(crate) enum MrFlavor {
    /// A region of the soft provider.
    Soft(SoftMr),
    /// A region of the verbs provider.
    #[cfg(feature = "verbs")]
    Verbs(verbs::Mr),
}

/// A registered memory region that owns its memory. Dropping it deregisters the region (its
/// rkey stops working) and then frees the memory once no in-flight operation uses it.
pub struct MemoryRegion {
    // Declared first: deregistration happens before the buffer handle is released.
    flavor: MrFlavor,
    buffer: Arc<RegisteredBuffer>,
    access: Access,
    // The keys, fixed at registration (read on every post, so not asked of the provider).
    lkey: u32,
    rkey: u32,
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
    /// A region of `buffer`, registered as `flavor` with `access` (by
    /// [`ProtectionDomain::register`](super::ProtectionDomain::register)).
    pub(crate) fn new(flavor: MrFlavor, buffer: Arc<RegisteredBuffer>, access: Access) -> Self {
        let (lkey, rkey) = match &flavor {
            MrFlavor::Soft(mr) => (mr.key(), mr.key()),
            #[cfg(feature = "verbs")]
            MrFlavor::Verbs(mr) => (mr.lkey(), mr.rkey()),
        };
        MemoryRegion { flavor, buffer, access, lkey, rkey }
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
        self.lkey
    }
    /// The remote key.
    pub fn rkey(&self) -> u32 {
        self.rkey
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
    /// The provider's registration (for providers).
    pub(crate) fn flavor(&self) -> &MrFlavor {
        &self.flavor
    }
    /// The provider that registered the region.
    pub(crate) fn provider(&self) -> FabricKind {
        match self.flavor {
            MrFlavor::Soft(_) => FabricKind::Soft,
            #[cfg(feature = "verbs")]
            MrFlavor::Verbs(_) => FabricKind::Verbs,
        }
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

/// Checks that every entry of `sges` names a region of `provider` (the provider of the queue
/// that `verb` posts to) and lies inside it.
pub(crate) fn check_sges(sges: &[Sge<'_>], provider: FabricKind, verb: &'static str) -> Result<()> {
    for sge in sges {
        if sge.mr.provider() != provider {
            return Err(Error::ProviderMismatch { verb, object: "memory region" });
        }
        sge.mr.buffer().check_range(sge.offset, sge.len)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::FabricConfig;

    /// An SGE pairs with a queue of its region's provider only: a soft region posted to a queue
    /// of another provider is refused with `ProviderMismatch` naming the verb and the region,
    /// before its bounds are looked at; to a soft queue it is checked for bounds as before.
    #[test]
    fn an_sge_pairs_only_with_a_queue_of_its_regions_provider() {
        let fabric = crate::open(&FabricConfig::new(FabricKind::Soft)).expect("open soft");
        let mr = fabric.alloc_pd().expect("alloc_pd").register(64, Access::LOCAL_WRITE).expect("register");
        assert_eq!(mr.provider(), FabricKind::Soft);
        assert!(check_sges(&[mr.sge(0, 64)], FabricKind::Soft, "post_send").is_ok());
        for sge in [mr.sge(0, 64), mr.sge(60, 8)] {
            match check_sges(&[mr.sge(0, 8), sge], FabricKind::Verbs, "post_recv") {
                Err(Error::ProviderMismatch { verb: "post_recv", object: "memory region" }) => {}
                other => panic!("a soft region posted to a verbs queue gave {other:?}"),
            }
        }
        assert!(matches!(check_sges(&[mr.sge(60, 8)], FabricKind::Soft, "post_send"), Err(Error::LocalBounds { .. })));
    }
}
