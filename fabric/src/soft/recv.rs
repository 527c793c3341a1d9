//! Posted receives: the receive list of a queue pair or of a shared receive queue, in order,
//! with the credits a same-host sender claims from; and the local check of a work request's
//! SGEs against the regions they name.

use std::collections::VecDeque;
use std::sync::Arc;

use super::seg::Seg;
use super::shm::Pool;
use crate::error::{Error, Result};
use crate::provider::Sge;
use crate::region::MrFlavor;
use crate::types::Access;

/// The segment of an SGE if its region is a soft region of protection domain `pd` that grants
/// `need`; `None` is a local protection error. (The handles refuse a region of another provider
/// before a post reaches the provider.)
pub(crate) fn sge_segment(sge: &Sge<'_>, pd: u32, need: Access) -> Option<Seg> {
    let mr = match sge.mr.flavor() {
        MrFlavor::Soft(mr) => Some(mr),
        #[cfg(feature = "verbs")]
        MrFlavor::Verbs(_) => None,
    }?;
    if mr.pd != pd || !mr.access.contains(need) {
        return None;
    }
    Seg::new(sge.mr.buffer_arc().clone(), sge.offset, sge.len).ok()
}

/// Posted receives in order and, once a same-host sender asked for them, their credits: the
/// receive list of a queue pair or of a shared receive queue.
#[derive(Default)]
pub(crate) struct RecvList {
    wrs: VecDeque<RecvWr>,
    pool: Option<Arc<Pool>>,
}

impl RecvList {
    /// Receives posted and not taken.
    pub(crate) fn len(&self) -> usize {
        self.wrs.len()
    }

    /// Adds a posted receive (and its credit).
    pub(crate) fn push(&mut self, wr: RecvWr) {
        if let Some(pool) = &self.pool {
            pool.posted(wr.cap);
        }
        self.wrs.push_back(wr);
    }

    /// Takes the oldest receive, for a SEND that claimed it from the pool (`claimed`, from an
    /// inbox) or one that came over a stream (never a receive promised to an inbox SEND).
    pub(crate) fn take(&mut self, claimed: bool) -> Option<RecvWr> {
        if self.wrs.is_empty() {
            return None;
        }
        if let (false, Some(pool)) = (claimed, &self.pool) {
            if !pool.claim_for_stream() {
                return None;
            }
        }
        self.wrs.pop_front()
    }

    /// Takes the oldest receive whatever was claimed (to flush it).
    pub(crate) fn take_any(&mut self) -> Option<RecvWr> {
        self.wrs.pop_front()
    }

    /// The credits a same-host sender claims from, made on first use.
    pub(crate) fn pool(&mut self) -> Option<Arc<Pool>> {
        if self.pool.is_none() {
            self.pool = Some(Arc::new(Pool::new(self.wrs.iter().map(|w| w.cap)).ok()?));
        }
        self.pool.clone()
    }
}

/// A posted receive.
pub(crate) struct RecvWr {
    pub(crate) wr_id: u64,
    pub(crate) segs: Vec<Seg>,
    pub(crate) cap: usize,
}

impl RecvWr {
    /// Checks the SGEs (soft regions of `pd` with LOCAL_WRITE) and builds the receive.
    pub(crate) fn new(wr_id: u64, sges: &[Sge<'_>], pd: u32, verb: &'static str) -> Result<RecvWr> {
        let mut segs = Vec::with_capacity(sges.len());
        for sge in sges {
            let seg = sge_segment(sge, pd, Access::LOCAL_WRITE).ok_or_else(|| {
                Error::invalid(verb, "receive buffer is not a LOCAL_WRITE region of this protection domain")
            })?;
            segs.push(seg);
        }
        let cap = segs.iter().map(|s| s.len).sum();
        Ok(RecvWr { wr_id, segs, cap })
    }
}
