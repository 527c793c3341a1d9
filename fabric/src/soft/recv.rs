//! Posted receives: the receive list of a queue pair or of a shared receive queue, in order,
//! with the credits same-host senders fill them with; and the local check of a work request's
//! SGEs against the regions they name.

use std::collections::VecDeque;
use std::os::fd::OwnedFd;

use super::seg::{Seg, Segs};
use super::shm::{Credits, NoCredit};
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

/// Posted receives in order and the credits same-host senders fill them with: the receive
/// list of a queue pair or of a shared receive queue.
#[derive(Default)]
pub(crate) struct RecvList {
    wrs: VecDeque<RecvWr>,
    credits: Credits,
}

/// Whose SEND takes a receive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Taker {
    /// A SEND of the inbox of same-host sender `id`, which must hold a credit.
    Inbox(u64),
    /// A SEND of a stream; `own` is the stream's connection's sender id when its inbox is
    /// empty (its unused credits may be taken back).
    Stream { own: Option<u64> },
}

impl RecvList {
    /// The receive list of a shared receive queue (`shared`: half of it stays for streams)
    /// or of a queue pair.
    pub(crate) fn new(shared: bool) -> RecvList {
        RecvList { wrs: VecDeque::new(), credits: Credits::new(shared) }
    }

    /// Receives posted and not taken.
    pub(crate) fn len(&self) -> usize {
        self.wrs.len()
    }

    /// Adds a posted receive (and credits for it).
    pub(crate) fn push(&mut self, wr: RecvWr) {
        let cap = wr.cap;
        self.wrs.push_back(wr);
        self.credits.posted(cap, self.wrs.len());
    }

    /// Takes the oldest receive for a SEND of `taker`: `Ok(None)` when there is none it may
    /// take (a stream SEND then waits as for a missing receive, RNR), `Err` when an inbox SEND
    /// came without a credit (its sender broke the protocol).
    pub(crate) fn take(&mut self, taker: Taker) -> std::result::Result<Option<RecvWr>, NoCredit> {
        if self.wrs.is_empty() {
            return match taker {
                // A credit promises a receive; none left means the receives were flushed.
                Taker::Inbox(id) => self.credits.use_credit(id).map(|()| None),
                Taker::Stream { .. } => Ok(None),
            };
        }
        match taker {
            Taker::Inbox(id) => self.credits.use_credit(id)?,
            Taker::Stream { own } => {
                if !self.credits.take_for_stream(self.wrs.len(), own) {
                    return Ok(None);
                }
            }
        }
        let wr = self.wrs.pop_front();
        self.credits.refill(self.wrs.len());
        Ok(wr)
    }

    /// Takes the oldest receive whatever was promised (to flush it).
    pub(crate) fn take_any(&mut self) -> Option<RecvWr> {
        self.wrs.pop_front()
    }

    /// A new same-host sender: its id and its credit page (read-only).
    pub(crate) fn attach(&mut self) -> Option<(u64, OwnedFd)> {
        self.credits.attach(self.wrs.len()).ok()
    }

    /// Same-host sender `id` is gone: its unused credits come back.
    pub(crate) fn detach(&mut self, id: u64) {
        self.credits.detach(id, self.wrs.len());
    }
}

/// A posted receive.
pub(crate) struct RecvWr {
    pub(crate) wr_id: u64,
    pub(crate) segs: Segs,
    pub(crate) cap: usize,
}

impl RecvWr {
    /// Checks the SGEs (soft regions of `pd` with LOCAL_WRITE) and builds the receive.
    pub(crate) fn new(wr_id: u64, sges: &[Sge<'_>], pd: u32, verb: &'static str) -> Result<RecvWr> {
        let mut segs = Segs::with_capacity(sges.len());
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
