//! The bell of a completion queue: a page of shared memory holding the futex word its waiter
//! sleeps on, what it is armed for, and a count of SENDs written into the inboxes that feed it.
//! Same-host peers map the page and ring it after each SEND they write, so a waiting owner
//! wakes without a NIC thread or a socket in between.
//!
//! A peer may write anything into the page: the worst it can do is wake the owner for nothing
//! or keep it from being woken (its waits then end at their timeouts), as a peer flooding or
//! withholding SENDs could anyway.

use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use super::map::PeerMapping;
use crate::fabric::error::Result;
use crate::fabric::memory::RegisteredBuffer;

/// Bytes of a bell (one page).
pub(crate) const BELL_LEN: usize = 4096;
/// Offset of the futex word (bumped on each notification).
const SEQ: usize = 0;
/// Offset of what the owner is armed for (its own cache line).
const ARMED: usize = 64;
/// Offset of the count of SENDs written for the owner (its own cache line).
const PENDING: usize = 128;

/// Not armed.
const ARMED_NONE: u32 = 0;
/// Armed for the next completion.
const ARMED_NEXT: u32 = 1;
/// Armed for the next solicited (or failed) completion.
const ARMED_SOLICITED: u32 = 2;

/// The words that wake a bell's waiter, wherever the bell is mapped.
struct Words<'a> {
    seq: &'a AtomicU32,
    armed: &'a AtomicU32,
}

impl Words<'_> {
    /// Notifies the waiter if it is armed for a completion of this kind (`solicited`: the
    /// receive of a solicited SEND, or a failure); returns whether it did.
    fn fire(&self, solicited: bool) -> bool {
        let armed = self.armed.load(Ordering::SeqCst);
        let wanted = armed == ARMED_NEXT || (armed == ARMED_SOLICITED && solicited);
        if !wanted || self.armed.compare_exchange(armed, ARMED_NONE, Ordering::SeqCst, Ordering::SeqCst).is_err() {
            return false;
        }
        self.seq.fetch_add(1, Ordering::SeqCst);
        futex_wake(self.seq);
        true
    }
}

/// The owner's side of a bell (one per completion queue).
pub(crate) struct Bell {
    page: RegisteredBuffer,
    /// The notification count the last [`wait`](Self::wait) consumed.
    seen: AtomicU32,
}

impl Bell {
    /// A new bell, not armed.
    pub(crate) fn new() -> Result<Bell> {
        Ok(Bell { page: RegisteredBuffer::new(BELL_LEN)?, seen: AtomicU32::new(0) })
    }

    /// The descriptor peers map (read-write: they ring it).
    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        self.page.memfd()
    }

    /// One 32-bit word of the page (each call looks up only the word it uses: `pending` runs
    /// on every poll of the CQ).
    fn word32(&self, at: usize) -> &AtomicU32 {
        self.page.atomic_u32(at).expect("the bell page holds its words")
    }

    /// The words [`Words::fire`] uses.
    fn firing(&self) -> Words<'_> {
        Words { seq: self.word32(SEQ), armed: self.word32(ARMED) }
    }

    /// Arms for the next completion.
    pub(crate) fn arm(&self) {
        self.word32(ARMED).store(ARMED_NEXT, Ordering::SeqCst);
    }

    /// Arms for the next solicited (or failed) completion, unless armed for the next one.
    pub(crate) fn arm_solicited(&self) {
        let _ = self.word32(ARMED).compare_exchange(ARMED_NONE, ARMED_SOLICITED, Ordering::SeqCst, Ordering::SeqCst);
    }

    /// Notifies the waiter of a completion queued by this process, if armed for it.
    pub(crate) fn notify(&self, solicited: bool) {
        self.firing().fire(solicited);
    }

    /// The count of SENDs peers say they wrote for this queue (it only tells when to look).
    pub(crate) fn pending(&self) -> u64 {
        self.page.atomic_u64(PENDING).expect("the bell page holds its words").load(Ordering::SeqCst)
    }

    /// Waits up to `timeout` for a notification not consumed yet; returns whether one came.
    pub(crate) fn wait(&self, timeout: Duration) -> bool {
        let seq = self.word32(SEQ);
        let deadline = crate::time::deadline_after(timeout);
        loop {
            let now = seq.load(Ordering::Acquire);
            if now != self.seen.load(Ordering::Relaxed) {
                self.seen.store(now, Ordering::Relaxed);
                return true;
            }
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return false;
            }
            futex_wait(seq, now, left);
        }
    }
}

/// A peer's bell as mapped by a sender.
pub(crate) struct PeerBell {
    map: PeerMapping,
}

impl PeerBell {
    /// Maps a peer's bell (checked to be sealed and a page long).
    pub(crate) fn map(fd: BorrowedFd<'_>) -> Result<PeerBell> {
        let map = PeerMapping::new(fd, BELL_LEN, true)?;
        Ok(PeerBell { map })
    }

    /// Tells the owner a SEND was written for it, waking it if it waits for one of this kind.
    pub(crate) fn ring(&self, solicited: bool) {
        let (Some(seq), Some(armed), Some(pending)) =
            (self.map.word32(SEQ), self.map.word32(ARMED), self.map.word(PENDING))
        else {
            return;
        };
        // SeqCst pairs with the owner's arm-then-look: either it sees the count move, or this
        // side sees it armed.
        pending.fetch_add(1, Ordering::SeqCst);
        Words { seq, armed }.fire(solicited);
    }
}

/// Sleeps while `word` holds `expected`, at most `timeout` (a shared futex: the word may be in
/// another process's mapping too).
fn futex_wait(word: &AtomicU32, expected: u32, timeout: Duration) {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs().min(i64::MAX as u64) as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: FUTEX_WAIT reads the aligned word we pass and the timespec, both alive for the
    // call; it never writes memory. EAGAIN, EINTR and ETIMEDOUT are all "look again".
    unsafe {
        libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAIT, expected, &ts as *const libc::timespec);
    }
}

/// Wakes every thread sleeping on `word`.
fn futex_wake(word: &AtomicU32) {
    // SAFETY: FUTEX_WAKE only uses the word's address as a key.
    unsafe {
        libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE, i32::MAX);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn a_peer_ring_wakes_an_armed_owner_and_counts_the_send() {
        let bell = Arc::new(Bell::new().unwrap());
        let peer = PeerBell::map(bell.fd()).unwrap();
        assert!(!bell.wait(Duration::from_millis(1)), "nothing rang");
        peer.ring(false);
        assert_eq!(bell.pending(), 1);
        assert!(!bell.wait(Duration::from_millis(1)), "a ring while not armed only counts");
        bell.arm();
        let waiter = {
            let bell = bell.clone();
            std::thread::spawn(move || bell.wait(Duration::from_secs(10)))
        };
        peer.ring(false);
        assert!(waiter.join().unwrap(), "the armed owner was woken");
        assert_eq!(bell.pending(), 2);
    }

    #[test]
    fn solicited_arming_ignores_unsolicited_sends() {
        let bell = Bell::new().unwrap();
        let peer = PeerBell::map(bell.fd()).unwrap();
        bell.arm_solicited();
        peer.ring(false);
        assert!(!bell.wait(Duration::from_millis(1)));
        peer.ring(true);
        assert!(bell.wait(Duration::from_millis(1)));
        bell.notify(true);
        assert!(!bell.wait(Duration::from_millis(1)), "a notification disarms");
    }
}
