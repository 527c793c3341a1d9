//! The bell of a completion queue: how the owner of a CQ sleeps, and how whoever queues a
//! completion for it (the NIC thread, a poller placing inbox SENDs, a same-host peer that wrote
//! a SEND into one of the CQ's inboxes) wakes it, with no NIC thread or socket in between.
//!
//! # No peer can delay another's wake-ups
//!
//! Every word or descriptor a same-host sender can write is either its own alone, or is a hint
//! the owner never relies on to sleep:
//!
//! - **What the owner is armed for** is kept in this process's memory (authoritative), and
//!   mirrored into the *owner page*, which senders map **read-only**: a sender reads it to know
//!   whether to wake the owner, and cannot clear it for the others.
//! - **Each sender has its own eventfd**, made by the owner when the sender's inbox is opened
//!   ([`Bell::attach_sender`]) and handed to that sender alone. The owner waits on an epoll set
//!   of its own ([`Bell::wait`]) holding its own eventfd (for the completions this process
//!   queues) and every sender's, edge-triggered: each write is a new event, and the owner never
//!   reads the counters. A sender that reads its eventfd (or fills its counter) loses only its
//!   own wake-ups; one that writes it wakes the owner for nothing, which costs the owner a
//!   look, never the others a delay. A sender whose inbox closes (its connection failed, was
//!   cut, or closed) is taken out of the set at once, whatever it still holds. The epoll set is
//!   also the descriptor of [`Bell::notify_fd`] for event loops. It also holds the sockets of
//!   this process's network connections that READ and receive on the CQ
//!   ([`Bell::watch_stream`]), so that a SEND's arrival wakes the owner in one hop (the woken
//!   poll places it: `conn/responses.rs`); any other arrival there wakes it for a look.
//! - **What a sender wrote** is counted by its own inbox's tail, which the owner checks before
//!   it follows it (see `inbox`: a broken one cuts that sender and is counted). When the owner
//!   arms, and when it is woken, its next poll looks into every inbox of the CQ: it believes
//!   no shared word before it parks.
//! - **The hint page** (a count of SENDs written, which every sender of the CQ adds to) only
//!   spares a busy poller, which never arms, from looking into every inbox at every poll. A
//!   peer that forges it makes the owner look for nothing; one that freezes it delays a busy
//!   poller's notice of the others' SENDs by at most `RECHECK_EVERY` (64) polls (see `cq`),
//!   microseconds, and never a parked owner's wake-up.
//!
//! Before this design one page, shared read-write by every sender, held the futex word, the
//! armed word and the count, and one eventfd was handed to every sender: a hostile peer could
//! clear the armed word or steal the eventfd's wake-ups, and an owner parked on the others'
//! SENDs then slept until its own timed re-poll (20 ms in the node's waits).
//!
//! Why an epoll set and not a futex, as before: a sender may write no word the owner sleeps
//! on, and a wake of a futex whose word the waker cannot change is lost when it comes between
//! the owner's last look into the inboxes and its sleep; one futex per sender cannot be waited
//! on together (`futex_waitv` takes at most 128, and only from Linux 5.16).
//!
//! # Costs
//!
//! A sender's ring after each SEND: an add to the hint, a fence, a load of the owner page, and
//! one `write` to its eventfd only while the owner is armed (the first wake-up clears the
//! mirror; senders that ring before the owner runs write theirs too, a few system calls per
//! park at most). A busy poller never arms, so nobody writes anything for it. The owner's
//! notification of its own completions is a load of a private word unless armed. Waiting is
//! one `epoll_pwait2` (nanosecond timeouts; `epoll_wait` rounded up to the millisecond where
//! the kernel predates it): a parked SEND/RECV round trip measured about 0.3 µs more than over
//! the shared futex (5.5 against 5.2 µs, 2 vCPUs). A CQ holds four descriptors (its two pages, the epoll set and its
//! eventfd; a page and, once asked for, an eventfd before) and one per sender (its eventfd), at
//! most [`MAX_SENDERS`] senders: past that an inbox is refused and that connection's SENDs take
//! its stream.

use std::collections::HashMap;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::sync::atomic::{fence, AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;

use super::map::{reopen_read_only, PeerMapping};
use crate::error::{Error, Result};
use crate::memory::RegisteredBuffer;

/// Bytes of the owner page and of the hint page (one page each).
pub(crate) const BELL_LEN: usize = 4096;
/// Offset, in the owner page, of what the owner is armed for (only the owner writes it).
const ARMED: usize = 0;
/// Offset, in the hint page, of the count of SENDs written (any sender of the CQ adds to it).
const WRITTEN: usize = 0;
/// Most senders (inboxes) one bell serves; more are refused (their SENDs take the stream).
pub(crate) const MAX_SENDERS: usize = 1024;

/// Not armed.
const ARMED_NONE: u32 = 0;
/// Armed for the next completion.
const ARMED_NEXT: u32 = 1;
/// Armed for the next solicited (or failed) completion.
const ARMED_SOLICITED: u32 = 2;

/// The epoll token of the owner's own eventfd (senders' tokens start at 1).
const OWN_TOKEN: u64 = 0;
/// The epoll token of the watched sockets ([`Bell::watch_stream`]).
const STREAM_TOKEN: u64 = u64::MAX;

/// What a word of [`Bell::armed`] is armed for.
fn kind(armed: u64) -> u32 {
    (armed & 3) as u32
}

/// Whether a completion of this kind (`solicited`: the receive of a solicited SEND, or a
/// failure) is one an owner armed for `armed` waits for.
fn wanted(armed: u32, solicited: bool) -> bool {
    armed == ARMED_NEXT || (armed == ARMED_SOLICITED && solicited)
}

/// The descriptors a sender is handed with its inbox: the owner page (read-only), the hint
/// page and the sender's own eventfd; and the token that takes it out again.
pub(crate) struct SenderFds {
    /// What [`Bell::detach_sender`] takes.
    pub(crate) token: u64,
    /// The owner page, read-only.
    pub(crate) owner: OwnedFd,
    /// The hint page, read-write.
    pub(crate) hint: OwnedFd,
    /// The sender's own eventfd.
    pub(crate) event: OwnedFd,
}

/// The senders' eventfds, as the owner keeps them (to take them out of the epoll set).
#[derive(Default)]
struct Senders {
    next: u64,
    events: HashMap<u64, OwnedFd>,
}

/// The owner's side of a bell (one per completion queue).
pub(crate) struct Bell {
    /// What the owner is armed for (`ARMED_*`), and how many times it armed (`<< 2`): the
    /// authoritative word, in this process's memory only. Changed under `arming`, with the
    /// mirror; read without it.
    armed: AtomicU64,
    /// Serialises changes of `armed` and its mirror.
    arming: Mutex<()>,
    /// The owner page: a mirror of `armed` that senders map read-only.
    page: RegisteredBuffer,
    /// The hint page: a count of SENDs written, shared read-write by every sender.
    hint: RegisteredBuffer,
    /// The epoll set the owner waits on: its own eventfd and every sender's, edge-triggered.
    epoll: OwnedFd,
    /// The eventfd of the owner's own notifications.
    own: OwnedFd,
    senders: Mutex<Senders>,
}

impl Bell {
    /// A new bell, not armed, with no sender.
    pub(crate) fn new() -> Result<Bell> {
        // SAFETY: epoll_create1 takes no pointers; a non-negative result is a descriptor we own.
        let epoll = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if epoll < 0 {
            return Err(Error::os("epoll_create1", None, std::io::Error::last_os_error()));
        }
        // SAFETY: `epoll` was just created and is owned by nobody else.
        let epoll = unsafe { OwnedFd::from_raw_fd(epoll) };
        let own = new_event()?;
        watch(epoll.as_fd(), own.as_fd(), OWN_TOKEN)?;
        Ok(Bell {
            armed: AtomicU64::new(u64::from(ARMED_NONE)),
            arming: Mutex::new(()),
            page: RegisteredBuffer::new(BELL_LEN)?,
            hint: RegisteredBuffer::new(BELL_LEN)?,
            epoll,
            own,
            senders: Mutex::new(Senders { next: OWN_TOKEN + 1, events: HashMap::new() }),
        })
    }

    /// The mirror of what the owner is armed for, in the owner page.
    fn mirror(&self) -> &AtomicU32 {
        self.page.atomic_u32(ARMED).expect("the owner page holds its word")
    }

    /// A new sender: its descriptors, its eventfd now in the epoll set. Refused past
    /// [`MAX_SENDERS`].
    pub(crate) fn attach_sender(&self) -> Result<SenderFds> {
        let mut senders = self.senders.lock();
        if senders.events.len() >= MAX_SENDERS {
            return Err(Error::invalid("same-host bell", format!("{MAX_SENDERS} senders already")));
        }
        let owner = reopen_read_only(self.page.memfd())?;
        let hint = self.hint.memfd().try_clone_to_owned().map_err(|e| Error::os("dup", None, e))?;
        let mine = new_event()?;
        let event = mine.try_clone().map_err(|e| Error::os("dup", None, e))?;
        let token = senders.next;
        watch(self.epoll.as_fd(), mine.as_fd(), token)?;
        senders.next += 1;
        senders.events.insert(token, mine);
        Ok(SenderFds { token, owner, hint, event })
    }

    /// Takes sender `token` out: its eventfd leaves the epoll set (whatever the sender does
    /// with its copy, it wakes nothing any more).
    pub(crate) fn detach_sender(&self, token: u64) {
        if let Some(fd) = self.senders.lock().events.remove(&token) {
            // SAFETY: removes a descriptor we hold from our epoll set; the event pointer may be
            // null for EPOLL_CTL_DEL.
            unsafe {
                libc::epoll_ctl(self.epoll.as_raw_fd(), libc::EPOLL_CTL_DEL, fd.as_raw_fd(), std::ptr::null_mut())
            };
        }
    }

    /// Adds the socket of a connection whose receives complete on this CQ to the epoll set,
    /// edge-triggered: every arrival on it wakes the owner, whose next poll places a small SEND
    /// itself (`conn/responses.rs`) instead of waiting for the NIC thread to place it and ring
    /// this bell. The socket leaves the set when it is closed.
    pub(crate) fn watch_stream(&self, sock: BorrowedFd<'_>) -> Result<()> {
        watch(self.epoll.as_fd(), sock, STREAM_TOKEN)
    }

    /// Watches a socket added by [`watch_stream`](Self::watch_stream) again (`on`), or stops
    /// watching it for now.
    pub(crate) fn set_stream_watched(&self, sock: BorrowedFd<'_>, on: bool) -> Result<()> {
        let events = if on { EDGE_READABLE } else { 0 };
        epoll_ctl(self.epoll.as_fd(), libc::EPOLL_CTL_MOD, sock, events, STREAM_TOKEN)
    }

    /// Senders attached now.
    #[cfg(test)]
    pub(crate) fn senders(&self) -> usize {
        self.senders.lock().events.len()
    }

    /// A descriptor that polls readable once a notification has arrived (the epoll set: see
    /// the module doc), until [`take`](Self::take).
    pub(crate) fn notify_fd(&self) -> Result<BorrowedFd<'_>> {
        Ok(self.epoll.as_fd())
    }

    /// Takes the notifications that arrived (up to 16 senders' events: any left keep the
    /// descriptor readable), without blocking; returns whether one had.
    pub(crate) fn take(&self) -> Result<bool> {
        let armed = self.armed.load(Ordering::SeqCst);
        let any = collect(self.epoll.as_fd(), Duration::ZERO)? > 0;
        if any {
            self.disarm(armed);
        }
        Ok(any)
    }

    /// Arms for the next completion. The caller's next poll then looks into every inbox: a
    /// SEND written before a sender could see the arm is found there.
    pub(crate) fn arm(&self) {
        let _arming = self.arming.lock();
        self.set_armed(self.armed.load(Ordering::Relaxed) + 4, ARMED_NEXT);
        // Pairs with the fence of `PeerBell::ring`: either the sender sees the arm, or the
        // owner's look after this sees the sender's SEND.
        fence(Ordering::SeqCst);
    }

    /// Arms for the next solicited (or failed) completion, unless armed for the next one.
    pub(crate) fn arm_solicited(&self) {
        let _arming = self.arming.lock();
        let now = self.armed.load(Ordering::Relaxed);
        if kind(now) == ARMED_NONE {
            self.set_armed(now + 4, ARMED_SOLICITED);
        }
        fence(Ordering::SeqCst);
    }

    /// Sets what the owner is armed for, and its mirror (under `arming`).
    fn set_armed(&self, word: u64, armed: u32) {
        self.armed.store(word & !3 | u64::from(armed), Ordering::SeqCst);
        self.mirror().store(armed, Ordering::SeqCst);
    }

    /// The arm counted `armed` (as read before waiting) was used: a notification of it was
    /// taken, so senders stop writing their eventfds. An arm made since (by another thread
    /// waiting on the same CQ) stays.
    fn disarm(&self, armed: u64) {
        let _arming = self.arming.lock();
        let now = self.armed.load(Ordering::Relaxed);
        if now >> 2 == armed >> 2 && kind(now) != ARMED_NONE {
            self.set_armed(now, ARMED_NONE);
        }
    }

    /// Notifies the waiter of a completion queued by this process, if armed for it.
    #[inline]
    pub(crate) fn notify(&self, solicited: bool) {
        if !wanted(kind(self.armed.load(Ordering::SeqCst)), solicited) {
            return;
        }
        let _arming = self.arming.lock();
        let now = self.armed.load(Ordering::Relaxed);
        if wanted(kind(now), solicited) {
            self.set_armed(now, ARMED_NONE);
            signal_event(self.own.as_fd());
        }
    }

    /// The count of SENDs senders say they wrote for this queue: a hint of when to look, which
    /// any sender may forge (see the module doc).
    #[inline]
    pub(crate) fn hint(&self) -> u64 {
        self.hint.atomic_u64(WRITTEN).expect("the hint page holds its word").load(Ordering::SeqCst)
    }

    /// Waits up to `timeout` for a notification not taken yet; returns whether one came.
    pub(crate) fn wait(&self, timeout: Duration) -> bool {
        let armed = self.armed.load(Ordering::SeqCst);
        let deadline = crate::time::deadline_after(timeout);
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match collect(self.epoll.as_fd(), left) {
                Ok(0) if !left.is_zero() => continue,
                Ok(0) | Err(_) => return false,
                Ok(_) => {
                    self.disarm(armed);
                    return true;
                }
            }
        }
    }
}

/// A peer's bell as one sender maps it: the owner page (read-only), the hint page and its own
/// eventfd.
pub(crate) struct PeerBell {
    owner: PeerMapping,
    hint: PeerMapping,
    event: OwnedFd,
}

impl PeerBell {
    /// Maps a peer's owner page (read-only) and hint page (both checked to be sealed and a page
    /// long) and keeps its eventfd (checked to be an eventfd, made non-blocking).
    pub(crate) fn map(owner: BorrowedFd<'_>, hint: BorrowedFd<'_>, event: OwnedFd) -> Result<PeerBell> {
        let owner = PeerMapping::new(owner, BELL_LEN, false)?;
        let hint = PeerMapping::new(hint, BELL_LEN, true)?;
        check_event(event.as_fd())?;
        Ok(PeerBell { owner, hint, event })
    }

    /// Tells the owner a SEND was written for it (the inbox's tail is stored before), waking it
    /// if it waits for one of this kind.
    #[inline]
    pub(crate) fn ring(&self, solicited: bool) {
        if let Some(written) = self.hint.word(WRITTEN) {
            written.fetch_add(1, Ordering::Relaxed);
        }
        // Pairs with the fence of `Bell::arm`: either this side sees the arm, or the owner's
        // look after arming sees the SEND.
        fence(Ordering::SeqCst);
        let armed = self.owner.word32(ARMED).map_or(ARMED_NONE, |w| w.load(Ordering::Relaxed));
        if wanted(armed, solicited) {
            signal_event(self.event.as_fd());
        }
    }
}

/// Events taken from the epoll set per call.
const COLLECT: usize = 16;

/// Whether the kernel lacks `epoll_pwait2` (found out at the first call).
static NO_PWAIT2: AtomicBool = AtomicBool::new(false);

/// Takes the events of an epoll set, waiting up to `timeout` for one; returns how many (0 on
/// timeout or interruption).
fn collect(epoll: BorrowedFd<'_>, timeout: Duration) -> Result<usize> {
    // SAFETY: an all-zero epoll_event is a valid output slot.
    let mut events: [libc::epoll_event; COLLECT] = unsafe { std::mem::zeroed() };
    let n = if NO_PWAIT2.load(Ordering::Relaxed) {
        -1
    } else {
        let ts = libc::timespec {
            tv_sec: timeout.as_secs().min(i64::MAX as u64) as libc::time_t,
            tv_nsec: timeout.subsec_nanos() as libc::c_long,
        };
        // SAFETY: the events buffer holds COLLECT entries and the timespec lives for the call;
        // no signal mask is passed.
        unsafe {
            libc::syscall(
                libc::SYS_epoll_pwait2,
                epoll.as_raw_fd(),
                events.as_mut_ptr(),
                COLLECT as libc::c_int,
                &ts as *const libc::timespec,
                std::ptr::null::<libc::sigset_t>(),
                0usize,
            )
        }
    };
    let n = if n < 0
        && (NO_PWAIT2.load(Ordering::Relaxed) || std::io::Error::last_os_error().raw_os_error() == Some(libc::ENOSYS))
    {
        NO_PWAIT2.store(true, Ordering::Relaxed);
        // Rounded up to the millisecond, so that a short wait still waits.
        let ms = timeout.as_nanos().div_ceil(1_000_000).min(i32::MAX as u128) as libc::c_int;
        // SAFETY: the events buffer holds COLLECT entries.
        unsafe { libc::epoll_wait(epoll.as_raw_fd(), events.as_mut_ptr(), COLLECT as libc::c_int, ms) as libc::c_long }
    } else {
        n
    };
    if n >= 0 {
        return Ok(n as usize);
    }
    let err = std::io::Error::last_os_error();
    match err.kind() {
        std::io::ErrorKind::Interrupted => Ok(0),
        _ => Err(Error::os("epoll_wait", None, err)),
    }
}

/// Adds an eventfd (or a watched socket) to an epoll set, edge-triggered, with `token` as its
/// data.
fn watch(epoll: BorrowedFd<'_>, event: BorrowedFd<'_>, token: u64) -> Result<()> {
    epoll_ctl(epoll, libc::EPOLL_CTL_ADD, event, EDGE_READABLE, token)
}

/// Readable, edge-triggered: the events a watched descriptor is registered for.
const EDGE_READABLE: u32 = (libc::EPOLLIN | libc::EPOLLET) as u32;

/// `epoll_ctl(op)` of `fd` in `epoll`, for `events`, with `token` as its data.
fn epoll_ctl(epoll: BorrowedFd<'_>, op: libc::c_int, fd: BorrowedFd<'_>, events: u32, token: u64) -> Result<()> {
    let mut ev = libc::epoll_event { events, u64: token };
    // SAFETY: adds or changes a descriptor we hold in our epoll set; `ev` lives for the call.
    if unsafe { libc::epoll_ctl(epoll.as_raw_fd(), op, fd.as_raw_fd(), &mut ev) } != 0 {
        return Err(Error::os("epoll_ctl", None, std::io::Error::last_os_error()));
    }
    Ok(())
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
/// owner is woken anyway, or was a peer lying about it). Its counter is never read: each write
/// is an edge of the owner's epoll set.
fn signal_event(fd: BorrowedFd<'_>) {
    let one = 1u64;
    // SAFETY: writes the 8 bytes of a live u64; the descriptor is non-blocking.
    unsafe { libc::write(fd.as_raw_fd(), (&one as *const u64).cast(), 8) };
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// A sender of `bell` as a same-host peer maps it, and its token.
    fn peer_of(bell: &Bell) -> (PeerBell, u64) {
        let fds = bell.attach_sender().unwrap();
        (PeerBell::map(fds.owner.as_fd(), fds.hint.as_fd(), fds.event).unwrap(), fds.token)
    }

    /// Whether a descriptor polls readable now.
    fn readable(fd: BorrowedFd<'_>) -> bool {
        let mut pfd = libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        // SAFETY: one valid pollfd for the duration of the call; timeout 0 never blocks.
        let rc = unsafe { libc::poll(&mut pfd, 1, 0) };
        rc == 1 && pfd.revents & libc::POLLIN != 0
    }

    #[test]
    fn a_peer_ring_wakes_an_armed_owner_and_counts_the_send() {
        let bell = Arc::new(Bell::new().unwrap());
        let (peer, _) = peer_of(&bell);
        assert!(!bell.wait(Duration::from_millis(1)), "nothing rang");
        peer.ring(false);
        assert_eq!(bell.hint(), 1);
        assert!(!bell.wait(Duration::from_millis(1)), "a ring while not armed only counts");
        bell.arm();
        let waiter = {
            let bell = bell.clone();
            std::thread::spawn(move || bell.wait(Duration::from_secs(10)))
        };
        peer.ring(false);
        assert!(waiter.join().unwrap(), "the armed owner was woken");
        assert_eq!(bell.hint(), 2);
        peer.ring(false);
        assert!(!bell.wait(Duration::from_millis(1)), "the wake-up disarmed: the next ring only counts");
    }

    #[test]
    fn solicited_arming_ignores_unsolicited_sends() {
        let bell = Bell::new().unwrap();
        let (peer, _) = peer_of(&bell);
        bell.arm_solicited();
        peer.ring(false);
        assert!(!bell.wait(Duration::from_millis(1)));
        peer.ring(true);
        assert!(bell.wait(Duration::from_millis(1)));
        bell.notify(true);
        assert!(!bell.wait(Duration::from_millis(1)), "a notification disarms");
        bell.arm();
        bell.arm_solicited();
        bell.notify(false);
        assert!(bell.wait(Duration::ZERO), "arming for solicited ones keeps an arm for the next");
    }

    #[test]
    fn the_descriptor_polls_readable_for_each_armed_notification_until_taken() {
        let bell = Bell::new().unwrap();
        let (peer, _) = peer_of(&bell);
        let fd = bell.notify_fd().unwrap();
        peer.ring(false);
        bell.notify(false);
        assert!(!readable(fd), "nothing was armed");
        assert!(!bell.take().unwrap());
        bell.arm();
        peer.ring(false);
        assert!(readable(fd), "a peer's ring of an armed bell");
        assert!(bell.take().unwrap());
        assert!(!readable(fd), "take clears it");
        assert!(!bell.take().unwrap(), "nothing more to take");
        peer.ring(false);
        assert!(!readable(fd), "the take disarmed");
        bell.arm();
        bell.notify(false);
        assert!(readable(fd), "the owner's own notification");
        assert!(bell.wait(Duration::ZERO), "wait takes the notification");
        assert!(!readable(fd), "and clears the descriptor with it");
    }

    #[test]
    fn a_peer_descriptor_that_is_not_an_eventfd_is_refused() {
        let bell = Bell::new().unwrap();
        let fds = bell.attach_sender().unwrap();
        let not_an_event = fds.hint.try_clone().unwrap();
        assert!(PeerBell::map(fds.owner.as_fd(), fds.hint.as_fd(), not_an_event).is_err(), "a memfd as the eventfd");
    }

    /// What a hostile sender holds gives it no hold on another sender's wake-ups: the owner
    /// page is read-only, and its eventfd is its own (reading it, or filling it, loses only its
    /// own wake-ups).
    #[test]
    fn a_sender_cannot_write_the_owner_page_and_its_eventfd_is_its_own() {
        let bell = Bell::new().unwrap();
        let (honest, _) = peer_of(&bell);
        let hostile = bell.attach_sender().unwrap();
        assert!(PeerMapping::new(hostile.owner.as_fd(), BELL_LEN, true).is_err(), "the owner page mapped writable");
        let forged = PeerMapping::new(hostile.hint.as_fd(), BELL_LEN, true).unwrap();
        forged.word(WRITTEN).unwrap().store(u64::MAX, Ordering::SeqCst);
        // It fills its eventfd's counter: its writes fail from then on.
        let full = u64::MAX - 1;
        // SAFETY: writes the 8 bytes of a live u64 to a non-blocking eventfd we hold.
        assert_eq!(unsafe { libc::write(hostile.event.as_raw_fd(), (&full as *const u64).cast(), 8) }, 8);
        assert!(bell.take().unwrap(), "its write was an edge, for nothing");
        bell.arm();
        let mut count = 0u64;
        // SAFETY: reads 8 bytes into a live u64 from a non-blocking eventfd we hold.
        assert_eq!(unsafe { libc::read(hostile.event.as_raw_fd(), (&mut count as *mut u64).cast(), 8) }, 8);
        honest.ring(false);
        assert!(bell.wait(Duration::from_secs(10)), "the honest ring woke the owner");
    }

    /// Two threads wait on one CQ: the one that takes a notification disarms only the arm it
    /// waited for, not one the other thread made since.
    #[test]
    fn taking_a_notification_keeps_an_arm_made_since() {
        let bell = Bell::new().unwrap();
        let (peer, _) = peer_of(&bell);
        bell.arm();
        let seen_by_first = bell.armed.load(Ordering::SeqCst);
        bell.arm();
        bell.disarm(seen_by_first);
        peer.ring(false);
        assert!(bell.wait(Duration::ZERO), "the second arm stood: the ring woke its waiter");
        peer.ring(false);
        assert!(!bell.wait(Duration::ZERO), "and that wake-up used it");
    }

    #[test]
    fn a_detached_sender_wakes_nothing_and_senders_are_bounded() {
        let bell = Bell::new().unwrap();
        let (peer, token) = peer_of(&bell);
        bell.detach_sender(token);
        bell.arm();
        peer.ring(false);
        assert!(!bell.wait(Duration::from_millis(1)), "a detached sender woke the owner");
        assert_eq!(bell.senders(), 0);
        let tokens: Vec<u64> = (0..MAX_SENDERS).map(|_| bell.attach_sender().unwrap().token).collect();
        assert!(bell.attach_sender().is_err(), "more than {MAX_SENDERS} senders");
        bell.detach_sender(tokens[0]);
        assert!(bell.attach_sender().is_ok(), "a place freed is taken again");
    }
}
