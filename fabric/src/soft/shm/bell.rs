//! The bell of a completion queue: a page of shared memory holding the futex word its waiter
//! sleeps on, what it is armed for, and a count of SENDs written into the inboxes that feed it.
//! Same-host peers map the page and ring it after each SEND they write, so a waiting owner
//! wakes without a NIC thread or a socket in between.
//!
//! For an event loop the owner can also be woken through a descriptor: an eventfd, made when
//! the owner first asks for it ([`Bell::notify_fd`]) or when a peer maps the bell, and handed
//! to each peer with the page (`SCM_RIGHTS`, at inbox set-up). Whoever fires the bell writes
//! the eventfd too once the owner has asked for it (a word of the page says so), so the
//! descriptor turns readable for every notification that wakes the futex, whichever process
//! fires it, with no thread in between. Passing the descriptor was chosen over waking the
//! owner's NIC thread to write it: one system call by the process that fires the bell,
//! instead of a second hop through a thread that may be asleep. Until the owner asks, firing
//! the bell costs what it did (the word is read only when the bell fires, which is once per
//! arming); a bell that is never armed, as a busy poller's, never writes anything.
//!
//! A peer may write anything into the page: the worst it can do is wake the owner for nothing
//! or keep it from being woken (its waits then end at their timeouts). The count of SENDs
//! written is only a hint of when to look at the inboxes: an owner's poll looks anyway every
//! so often (see `cq`), so a forged count delays SENDs, never stalls them. (Keeping a peer
//! from delaying the wake-ups of the others' SENDs takes a bell per sender: not done yet.) The eventfd it holds gives it no more: writing it is a
//! wake-up for nothing, reading it steals one, as resetting the armed word would. A peer's
//! descriptor is used only once checked to be an eventfd, and is never blocked on.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

use super::map::PeerMapping;
use crate::error::{Error, Result};
use crate::memory::RegisteredBuffer;

/// Bytes of a bell (one page).
pub(crate) const BELL_LEN: usize = 4096;
/// Offset of the futex word (bumped on each notification).
const SEQ: usize = 0;
/// Offset of what the owner is armed for (its own cache line).
const ARMED: usize = 64;
/// Offset of the count of SENDs written for the owner (its own cache line).
const PENDING: usize = 128;
/// Offset of the word saying the owner waits on its eventfd too (nonzero: write it on fire).
const WANTS_FD: usize = 192;

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
    /// receive of a solicited SEND, or a failure); returns whether it did (the caller then
    /// writes the eventfd if the owner asked for it: [`signal_if_wanted`]).
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

/// After a notification fired: writes the eventfd `event` if the owner asked for it
/// (`wants_fd`, read after the arm the firing consumed, both SeqCst: the owner asks before it
/// arms).
fn signal_if_wanted(wants_fd: &AtomicU32, event: Option<BorrowedFd<'_>>) {
    if let Some(fd) = event.filter(|_| wants_fd.load(Ordering::SeqCst) != 0) {
        signal_event(fd);
    }
}

/// The owner's side of a bell (one per completion queue).
pub(crate) struct Bell {
    page: RegisteredBuffer,
    /// The notification count the last [`wait`](Self::wait) consumed.
    seen: AtomicU32,
    /// The eventfd of [`notify_fd`](Self::notify_fd), made on first use.
    event: OnceLock<OwnedFd>,
}

impl Bell {
    /// A new bell, not armed.
    pub(crate) fn new() -> Result<Bell> {
        Ok(Bell { page: RegisteredBuffer::new(BELL_LEN)?, seen: AtomicU32::new(0), event: OnceLock::new() })
    }

    /// The descriptor peers map (read-write: they ring it).
    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        self.page.memfd()
    }

    /// The eventfd peers write when they fire the bell (made on first use; written only once
    /// the owner asked for [`notify_fd`](Self::notify_fd)).
    pub(crate) fn event_fd(&self) -> Result<BorrowedFd<'_>> {
        if let Some(fd) = self.event.get() {
            return Ok(fd.as_fd());
        }
        let made = new_event()?;
        // Another thread may have made one meanwhile: the first stays, ours is closed.
        Ok(self.event.get_or_init(|| made).as_fd())
    }

    /// A descriptor that polls readable once a notification has fired (see the module doc),
    /// until [`take`](Self::take); from this call on, every firing writes it.
    pub(crate) fn notify_fd(&self) -> Result<BorrowedFd<'_>> {
        let fd = self.event_fd()?;
        self.word32(WANTS_FD).store(1, Ordering::SeqCst);
        Ok(fd)
    }

    /// Takes a notification without blocking: clears the eventfd and consumes what
    /// [`wait`](Self::wait) would. Returns whether one had fired.
    pub(crate) fn take(&self) -> Result<bool> {
        let cleared = match self.event.get() {
            Some(fd) => clear_event(fd.as_fd())?,
            None => false,
        };
        let now = self.word32(SEQ).load(Ordering::Acquire);
        let fired = self.seen.swap(now, Ordering::Relaxed) != now;
        Ok(cleared || fired)
    }

    /// Clears the eventfd after [`wait`](Self::wait) consumed a notification, so that the
    /// descriptor does not report it again (as a completion channel's would not).
    fn clear_event_if_wanted(&self) {
        if self.word32(WANTS_FD).load(Ordering::Relaxed) != 0 {
            if let Some(fd) = self.event.get() {
                let _ = clear_event(fd.as_fd());
            }
        }
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
        if self.firing().fire(solicited) {
            signal_if_wanted(self.word32(WANTS_FD), self.event.get().map(|fd| fd.as_fd()));
        }
    }

    /// The count of SENDs peers say they wrote for this queue (it only tells when to look).
    #[inline]
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
                self.clear_event_if_wanted();
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

/// A peer's bell as mapped by a sender, with the eventfd to write when the owner asked for it.
pub(crate) struct PeerBell {
    map: PeerMapping,
    event: OwnedFd,
}

impl PeerBell {
    /// Maps a peer's bell (checked to be sealed and a page long) and keeps its eventfd (checked
    /// to be an eventfd, made non-blocking).
    pub(crate) fn map(fd: BorrowedFd<'_>, event: OwnedFd) -> Result<PeerBell> {
        let map = PeerMapping::new(fd, BELL_LEN, true)?;
        check_event(event.as_fd())?;
        Ok(PeerBell { map, event })
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
        let fired = Words { seq, armed }.fire(solicited);
        if let Some(wants_fd) = self.map.word32(WANTS_FD).filter(|_| fired) {
            signal_if_wanted(wants_fd, Some(self.event.as_fd()));
        }
    }
}

/// A new non-blocking eventfd.
fn new_event() -> Result<OwnedFd> {
    // SAFETY: eventfd takes no pointers; a non-negative result is a descriptor we now own.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
    if fd < 0 {
        return Err(Error::os("eventfd", None, std::io::Error::last_os_error()));
    }
    // SAFETY: `fd` was just created and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Adds 1 to an eventfd (a full counter or a descriptor that is not one changes nothing: the
/// owner is woken anyway, or was a peer lying about it).
fn signal_event(fd: BorrowedFd<'_>) {
    let one = 1u64;
    // SAFETY: writes the 8 bytes of a live u64; the descriptor is non-blocking.
    unsafe { libc::write(fd.as_raw_fd(), (&one as *const u64).cast(), 8) };
}

/// Resets an eventfd to 0; returns whether it was signalled.
fn clear_event(fd: BorrowedFd<'_>) -> Result<bool> {
    let mut count = 0u64;
    // SAFETY: reads at most 8 bytes into a live u64; the descriptor is non-blocking.
    let n = unsafe { libc::read(fd.as_raw_fd(), (&mut count as *mut u64).cast(), 8) };
    if n == 8 {
        return Ok(true);
    }
    let err = std::io::Error::last_os_error();
    match err.kind() {
        std::io::ErrorKind::WouldBlock => Ok(false),
        _ => Err(Error::os("read eventfd", None, err)),
    }
}

/// Checks that a peer's descriptor is an eventfd and makes it non-blocking, so that writing it
/// can neither block nor raise SIGPIPE.
fn check_event(fd: BorrowedFd<'_>) -> Result<()> {
    let verb = "same-host bell";
    let link = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd())).map_err(|e| Error::os(verb, None, e))?;
    if link.as_os_str() != "anon_inode:[eventfd]" {
        return Err(Error::invalid(verb, format!("the peer's bell descriptor is {}, not an eventfd", link.display())));
    }
    // SAFETY: plain flag queries and updates of a descriptor we hold.
    let ok = unsafe {
        let flags = libc::fcntl(fd.as_raw_fd(), libc::F_GETFL);
        flags >= 0 && libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, flags | libc::O_NONBLOCK) == 0
    };
    if !ok {
        return Err(Error::os(verb, None, std::io::Error::last_os_error()));
    }
    Ok(())
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

    /// The bell as a same-host peer maps it.
    fn peer_of(bell: &Bell) -> PeerBell {
        PeerBell::map(bell.fd(), bell.event_fd().unwrap().try_clone_to_owned().unwrap()).unwrap()
    }

    #[test]
    fn a_peer_ring_wakes_an_armed_owner_and_counts_the_send() {
        let bell = Arc::new(Bell::new().unwrap());
        let peer = peer_of(&bell);
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
        let peer = peer_of(&bell);
        bell.arm_solicited();
        peer.ring(false);
        assert!(!bell.wait(Duration::from_millis(1)));
        peer.ring(true);
        assert!(bell.wait(Duration::from_millis(1)));
        bell.notify(true);
        assert!(!bell.wait(Duration::from_millis(1)), "a notification disarms");
    }

    /// The eventfd's counter, read without consuming it (0: not readable).
    fn signalled(fd: BorrowedFd<'_>) -> bool {
        let mut pfd = libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        // SAFETY: one valid pollfd for the duration of the call; timeout 0 never blocks.
        let rc = unsafe { libc::poll(&mut pfd, 1, 0) };
        rc == 1 && pfd.revents & libc::POLLIN != 0
    }

    #[test]
    fn the_eventfd_is_written_only_once_the_owner_asked_for_it() {
        let bell = Bell::new().unwrap();
        let peer = peer_of(&bell);
        let event = bell.event_fd().unwrap();
        bell.arm();
        peer.ring(false);
        bell.arm();
        bell.notify(false);
        assert!(!signalled(event), "a bell nobody asked the descriptor of wrote it");
        assert!(bell.take().unwrap(), "the notifications were still taken");

        let fd = bell.notify_fd().unwrap();
        assert_eq!(fd.as_raw_fd(), event.as_raw_fd(), "one eventfd per bell");
        peer.ring(false);
        assert!(!signalled(fd), "a ring while not armed only counts");
        bell.arm();
        peer.ring(false);
        assert!(signalled(fd), "a peer's ring of an armed bell writes the eventfd");
        assert!(bell.take().unwrap());
        assert!(!signalled(fd), "take clears it");
        assert!(!bell.take().unwrap(), "nothing more to take");
        bell.arm();
        bell.notify(false);
        assert!(signalled(fd), "the owner's own notification writes it too");
        assert!(bell.wait(Duration::ZERO), "wait consumes the notification");
        assert!(!signalled(fd), "and clears the descriptor with it");
    }

    #[test]
    fn a_peer_descriptor_that_is_not_an_eventfd_is_refused() {
        let bell = Bell::new().unwrap();
        let not_an_event = bell.fd().try_clone_to_owned().unwrap();
        assert!(PeerBell::map(bell.fd(), not_an_event).is_err(), "a memfd passed as the bell's eventfd");
    }
}
