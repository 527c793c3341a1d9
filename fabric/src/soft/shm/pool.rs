//! The receive credits of a same-host receiver: how many receives a queue pair (or a shared
//! receive queue) has had posted, the smallest of them, and how many senders have claimed.
//!
//! A sender puts a SEND in the receiver's inbox only after claiming a posted receive large
//! enough for it, so the SEND is sure to be placed as soon as the receiver looks: it completes
//! at once, as a SEND the responder acknowledged. Without a claim (no receive posted, or one
//! too small), the SEND takes the connection's stream, where the receiver's NIC applies RNR
//! retries and length errors exactly as on the network path.
//!
//! The counts of posted receives live in a page peers map read-only; the claims in a page they
//! share read-write (every sender of a shared receive queue claims from it, and so does the
//! receiver's NIC for SENDs of the streams). A peer that forges the claims can make other
//! senders' SENDs wait (in the inbox for a receive, or on the stream as for RNR), as a peer
//! flooding the queue with SENDs could; the receiver never places a SEND without a receive,
//! and never trusts a count to find one.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};

use super::map::{reopen_read_only, PeerMapping};
use crate::error::Result;
use crate::memory::RegisteredBuffer;

/// Bytes of each page.
pub(crate) const POOL_PAGE: usize = 4096;
/// Offset of the count of receives ever posted (info page).
const POSTED: usize = 0;
/// Offset of the smallest capacity ever posted (info page).
const FLOOR: usize = 64;
/// Offset of the count of receives ever claimed (claims page).
const CLAIMED: usize = 0;

/// The receiver's side of a pool.
pub(crate) struct Pool {
    info: RegisteredBuffer,
    info_read_only: OwnedFd,
    claims: RegisteredBuffer,
}

impl Pool {
    /// A pool counting the receives outstanding now (their capacities) as posted.
    pub(crate) fn new(outstanding: impl Iterator<Item = usize>) -> Result<Pool> {
        let info = RegisteredBuffer::new(POOL_PAGE)?;
        let info_read_only = reopen_read_only(info.memfd())?;
        let pool = Pool { info, info_read_only, claims: RegisteredBuffer::new(POOL_PAGE)? };
        pool.word(FLOOR).store(u64::MAX, Ordering::Relaxed);
        for cap in outstanding {
            pool.posted(cap);
        }
        Ok(pool)
    }

    fn word(&self, at: usize) -> &AtomicU64 {
        self.info.atomic_u64(at).expect("the pool page holds its words")
    }

    fn claimed(&self) -> &AtomicU64 {
        self.claims.atomic_u64(CLAIMED).expect("the claims page holds its word")
    }

    /// A receive of `cap` bytes was posted (called under the lock of the receive list).
    pub(crate) fn posted(&self, cap: usize) {
        self.word(FLOOR).fetch_min(cap as u64, Ordering::Relaxed);
        // Release: a sender that sees the count sees the floor and the receive.
        self.word(POSTED).fetch_add(1, Ordering::Release);
    }

    /// Claims a receive for a SEND that came over the stream; false when every posted receive
    /// is claimed already (by SENDs waiting in inboxes): the stream's SEND then waits as for
    /// a missing receive (RNR), and never takes a receive an inbox SEND was promised.
    pub(crate) fn claim_for_stream(&self) -> bool {
        claim(self.claimed(), self.word(POSTED), || true)
    }

    /// The descriptors a sender maps: the counts (read-only) and the claims (read-write).
    pub(crate) fn fds(&self) -> [BorrowedFd<'_>; 2] {
        [self.info_read_only.as_fd(), self.claims.memfd()]
    }
}

/// A receiver's pool as a sender maps it.
pub(crate) struct PeerPool {
    info: PeerMapping,
    claims: PeerMapping,
}

impl PeerPool {
    /// Maps a receiver's pool from the descriptors of [`Pool::fds`].
    pub(crate) fn map(info: BorrowedFd<'_>, claims: BorrowedFd<'_>) -> Result<PeerPool> {
        Ok(PeerPool {
            info: PeerMapping::new(info, POOL_PAGE, false)?,
            claims: PeerMapping::new(claims, POOL_PAGE, true)?,
        })
    }

    /// Claims a posted receive of at least `len` bytes; false if there is none to claim.
    pub(crate) fn try_claim(&self, len: usize) -> bool {
        let (Some(posted), Some(floor), Some(claimed)) =
            (self.info.word(POSTED), self.info.word(FLOOR), self.claims.word(CLAIMED))
        else {
            return false;
        };
        // The count is read (acquire) before the floor, so the floor is at least as new.
        claim(claimed, posted, || len as u64 <= floor.load(Ordering::Relaxed))
    }
}

/// Takes one claim in `claimed` if fewer than `posted` are claimed and `fits` says the receive
/// will do; false otherwise.
fn claim(claimed: &AtomicU64, posted: &AtomicU64, fits: impl Fn() -> bool) -> bool {
    claimed
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |c| {
            (c < posted.load(Ordering::Acquire) && fits()).then_some(c + 1)
        })
        .is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claims_follow_posted_receives_and_their_smallest_size() {
        let pool = Pool::new([64, 128].into_iter()).unwrap();
        let [info, claims] = pool.fds();
        let a = PeerPool::map(info, claims).unwrap();
        let b = PeerPool::map(info, claims).unwrap();
        assert!(!a.try_claim(65), "larger than the smallest receive posted");
        assert!(a.try_claim(64));
        assert!(b.try_claim(1), "a second sender claims the second receive");
        assert!(!a.try_claim(1), "both receives are claimed");
        pool.posted(32);
        assert!(!b.try_claim(33));
        assert!(pool.claim_for_stream(), "the NIC claims the new receive for a SEND of the stream");
        assert!(!b.try_claim(1), "the NIC claimed it");
        assert!(!pool.claim_for_stream(), "nor does the NIC take a receive promised to a sender");
        pool.posted(32);
        assert!(b.try_claim(32));
    }

    #[test]
    fn the_counts_page_is_read_only_for_senders() {
        let pool = Pool::new(std::iter::empty()).unwrap();
        let [info, _] = pool.fds();
        assert!(PeerMapping::new(info, POOL_PAGE, true).is_err(), "a sender mapped the counts writable");
    }
}
