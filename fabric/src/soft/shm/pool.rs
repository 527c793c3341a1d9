//! The receive credits of a same-host receiver: which of the receives posted to a queue pair
//! (or a shared receive queue) each same-host sender may fill through its inbox.
//!
//! A sender puts a SEND in the receiver's inbox only with a credit, so the SEND is sure to be
//! placed as soon as the receiver looks: it completes at once, as a SEND the responder
//! acknowledged. Without one (none granted, or the receives too small), the SEND takes the
//! connection's stream, where the receiver's NIC applies RNR retries and length errors exactly
//! as on the network path.
//!
//! No peer can write a word another party believes. Each sender has a credit page of its own,
//! which only the receiver writes and the sender maps read-only: the credits granted to it
//! (ever) and the smallest capacity ever posted. The sender counts the credits it used
//! privately; the receiver counts privately the credits granted to each sender, what each
//! used (every inbox SEND placed uses one) and how many receives are promised in all. A SEND
//! found in an inbox beyond its sender's credits is a violation: the caller fails that
//! connection and counts it, and nobody else notices. Stream SENDs take only receives no
//! credit promises, so a sender can hold back at most its window of receives.
//!
//! Grants: each sender holds at most [`WINDOW`] unused credits; a shared receive queue keeps
//! at least half of its receives unpromised for the SENDs of its other connections'
//! streams; a queue pair's own list may promise all of its receives to its one sender, whose
//! credits its own stream SENDs take back (while one of its SENDs travels on the stream it
//! writes nothing into its inbox, so the take-back cannot race with a claim).

use std::collections::BTreeMap;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};

use super::map::{reopen_read_only, PeerMapping};
use crate::error::Result;
use crate::memory::RegisteredBuffer;

/// Bytes of a credit page.
pub(crate) const CREDIT_PAGE: usize = 4096;
/// Offset of the count of credits ever granted.
const GRANTED: usize = 0;
/// Offset of the smallest receive capacity ever posted.
const FLOOR: usize = 64;
/// Most unused credits one sender holds.
pub(crate) const WINDOW: u64 = 64;

/// A sender's credits as the receiver keeps them.
struct Sender {
    page: RegisteredBuffer,
    granted: u64,
    used: u64,
}

impl Sender {
    fn word(&self, at: usize) -> &AtomicU64 {
        self.page.atomic_u64(at).expect("the credit page holds its words")
    }

    fn outstanding(&self) -> u64 {
        self.granted - self.used
    }

    fn publish(&self) {
        self.word(GRANTED).store(self.granted, Ordering::Release);
    }
}

/// A SEND was found in an inbox without a credit for it: its sender broke the protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct NoCredit;

/// The receiver's side: the credits of every sender of one receive list (kept under the
/// list's lock, with the list's length passed in).
#[derive(Default)]
pub(crate) struct Credits {
    senders: BTreeMap<u64, Sender>,
    next: u64,
    /// Unused credits of all senders: receives promised to inbox SENDs.
    promised: u64,
    /// Smallest capacity ever posted (`None`: none yet; the pages then say 0).
    floor: Option<u64>,
    /// The list is a shared receive queue's: half of it stays unpromised.
    shared: bool,
    /// Where the next grant round starts (round robin among senders).
    cursor: u64,
}

impl Credits {
    /// The credits of a shared receive queue (`shared`) or a queue pair's own list.
    pub(crate) fn new(shared: bool) -> Credits {
        Credits { shared, ..Credits::default() }
    }

    /// A receive of `cap` bytes was posted; `len` receives are in the list now.
    pub(crate) fn posted(&mut self, cap: usize, len: usize) {
        let floor = self.floor.map_or(cap as u64, |f| f.min(cap as u64));
        if self.floor != Some(floor) {
            self.floor = Some(floor);
            for s in self.senders.values() {
                s.word(FLOOR).store(floor, Ordering::Release);
            }
        }
        self.refill(len);
    }

    /// A new sender: its id and the read-only descriptor of its credit page.
    pub(crate) fn attach(&mut self, len: usize) -> Result<(u64, OwnedFd)> {
        let page = RegisteredBuffer::new(CREDIT_PAGE)?;
        let fd = reopen_read_only(page.memfd())?;
        let id = self.next;
        self.next += 1;
        let s = Sender { page, granted: 0, used: 0 };
        s.word(FLOOR).store(self.floor.unwrap_or(0), Ordering::Release);
        self.senders.insert(id, s);
        self.refill(len);
        Ok((id, fd))
    }

    /// Sender `id` is gone (its connection failed or closed): its unused credits come back.
    pub(crate) fn detach(&mut self, id: u64, len: usize) {
        if let Some(s) = self.senders.remove(&id) {
            self.promised -= s.outstanding();
            self.refill(len);
        }
    }

    /// Uses one of sender `id`'s credits for a SEND of its inbox (the caller then takes the
    /// oldest receive, which the credit promised).
    pub(crate) fn use_credit(&mut self, id: u64) -> std::result::Result<(), NoCredit> {
        let s = self.senders.get_mut(&id).ok_or(NoCredit)?;
        if s.outstanding() == 0 {
            return Err(NoCredit);
        }
        s.used += 1;
        self.promised -= 1;
        Ok(())
    }

    /// Whether a SEND of a stream may take a receive of the `len` in the list: only one that
    /// no credit promises. `own` is the sender id of the stream's connection, when its inbox is
    /// empty: its unused credits are then taken back first if that frees one.
    pub(crate) fn take_for_stream(&mut self, len: usize, own: Option<u64>) -> bool {
        if len as u64 > self.promised {
            return true;
        }
        let Some(s) = own.and_then(|id| self.senders.get_mut(&id)).filter(|s| s.outstanding() > 0) else {
            return false;
        };
        self.promised -= s.outstanding();
        s.granted = s.used;
        s.publish();
        len as u64 > self.promised
    }

    /// Grants credits while receives are left to promise (`len` in the list), one per sender
    /// in turn, up to each one's window.
    pub(crate) fn refill(&mut self, len: usize) {
        let limit = if self.shared { len as u64 / 2 } else { len as u64 };
        while self.promised < limit {
            let ids: Vec<u64> = self
                .senders
                .range(self.cursor..)
                .chain(self.senders.range(..self.cursor))
                .filter(|(_, s)| s.outstanding() < WINDOW)
                .map(|(&id, _)| id)
                .collect();
            if ids.is_empty() {
                return;
            }
            for id in ids {
                if self.promised >= limit {
                    break;
                }
                let s = self.senders.get_mut(&id).expect("listed above");
                s.granted += 1;
                s.publish();
                self.promised += 1;
                self.cursor = id + 1;
            }
        }
    }
}

/// A receiver's credits as one sender maps them: its page (read-only) and what it used.
pub(crate) struct PeerCredits {
    page: PeerMapping,
    used: u64,
}

impl PeerCredits {
    /// Maps a credit page (checked to be sealed and large enough; read-only).
    pub(crate) fn map(fd: BorrowedFd<'_>) -> Result<PeerCredits> {
        Ok(PeerCredits { page: PeerMapping::new(fd, CREDIT_PAGE, false)?, used: 0 })
    }

    /// Uses a credit for a SEND of `len` bytes; false if none is left or a receive may be
    /// too small for it.
    pub(crate) fn try_claim(&mut self, len: usize) -> bool {
        let (Some(granted), Some(floor)) = (self.page.word(GRANTED), self.page.word(FLOOR)) else { return false };
        // Acquire: the floor written before the grant is seen with it.
        if self.used >= granted.load(Ordering::Acquire) || len as u64 > floor.load(Ordering::Relaxed) {
            return false;
        }
        self.used += 1;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credits_follow_posted_receives_their_smallest_size_and_each_senders_window() {
        let mut c = Credits::new(false);
        let (a, fa) = c.attach(0).unwrap();
        let mut pa = PeerCredits::map(fa.as_fd()).unwrap();
        assert!(!pa.try_claim(1), "no receive posted: no credit");
        c.posted(64, 1);
        c.posted(128, 2);
        assert!(!pa.try_claim(65), "larger than the smallest receive posted");
        assert!(pa.try_claim(64) && pa.try_claim(1));
        assert!(!pa.try_claim(1), "both receives are promised and used");
        assert_eq!((c.use_credit(a), c.use_credit(a)), (Ok(()), Ok(())));
        assert_eq!(c.use_credit(a), Err(NoCredit), "a third inbox SEND has no credit");
        // The queue pair's own list: its sender's stream SEND takes back its unused credits.
        c.posted(64, 1);
        assert!(!c.take_for_stream(1, None), "the receive is promised");
        assert!(c.take_for_stream(1, Some(a)), "its own sender's credit is taken back");
        c.refill(0);
        assert!(!pa.try_claim(1), "the credit taken back is not used");
    }

    #[test]
    fn a_shared_queue_keeps_half_for_streams_and_shares_the_rest_in_turn() {
        let mut c = Credits::new(true);
        let (a, fa) = c.attach(0).unwrap();
        let (b, fb) = c.attach(0).unwrap();
        for len in 1..=8 {
            c.posted(64, len);
        }
        let (mut pa, mut pb) = (PeerCredits::map(fa.as_fd()).unwrap(), PeerCredits::map(fb.as_fd()).unwrap());
        let claims = |p: &mut PeerCredits| (0..10).filter(|_| p.try_claim(8)).count();
        assert_eq!((claims(&mut pa), claims(&mut pb)), (2, 2), "half of 8, in turn");
        assert!(c.take_for_stream(8, None), "a stream SEND takes an unpromised receive");
        // A sender that goes away gives its credits back, and the other gets them.
        c.detach(a, 7);
        assert_eq!(c.promised, 3, "b's 2, and 1 of a's for b (half of 7)");
        c.use_credit(b).unwrap();
        c.use_credit(b).unwrap();
        c.refill(5);
        assert_eq!(claims(&mut pb), 2);
    }

    #[test]
    fn the_credit_page_is_read_only_for_senders() {
        let mut c = Credits::new(false);
        let (_, fd) = c.attach(0).unwrap();
        assert!(PeerMapping::new(fd.as_fd(), CREDIT_PAGE, true).is_err(), "a sender mapped its credits writable");
    }

    use std::os::fd::AsFd;
}
