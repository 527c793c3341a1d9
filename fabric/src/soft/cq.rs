//! Completion queues of the soft provider.
//!
//! A CQ's waiter sleeps on its [`Bell`]: the NIC thread rings it for completions it queues,
//! and same-host peers ring it (each through an eventfd of its own) for SENDs they write into
//! the inboxes of queue pairs whose receives complete here. The bell also watches the sockets
//! of the connections that READ over the network and receive here (`attach_stream`): an
//! arrival wakes the waiter, and its next poll places the small SENDs waiting there itself
//! (`conn/responses.rs`). An event loop waits on the bell's
//! descriptor instead (`notify_fd`). A poll first places the SENDs waiting in those inboxes
//! (after an arm or a wake-up, always; otherwise when the bell's hint says some were written,
//! and every [`RECHECK_EVERY`]th poll anyway), then takes completions.

use std::collections::VecDeque;
use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use parking_lot::Mutex;

use super::device::{Device, DeviceState};
use super::shm::{Bell, SenderFds};
use crate::error::{Error, Result};
use crate::types::WorkCompletion;

/// What a look into a connection's inbox left.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Drain {
    /// Every SEND found was placed.
    Done,
    /// SENDs wait for receives to be posted.
    Waiting,
    /// The connection has no inbox any more.
    Gone,
}

/// A connection whose inbox holds SENDs for receives that complete on this CQ.
pub(crate) trait InboxSource: Send + Sync {
    /// Places the SENDs waiting in the inbox into posted receives.
    fn drain(&self) -> Drain;
}

/// A connection whose READs complete on this CQ: a poller that finds the CQ empty takes the
/// READ responses (and ACKs) waiting in its socket itself (`conn/responses.rs`); and, when the
/// connection's receives complete on this CQ too, a poller woken by its socket places the small
/// SENDs waiting there itself.
pub(crate) trait ResponseSource: Send + Sync {
    /// Takes the answers waiting in the socket, if a READ is on the wire and the NIC thread is
    /// not reading the connection.
    fn receive_on_poll(&self);
    /// Takes the answers and places the small SENDs waiting in the socket (each into a posted
    /// receive), if the NIC thread is not reading the connection; what it cannot take (a SEND
    /// without a receive, anything else) stays the NIC thread's.
    fn receive_on_wake(&self);
    /// The connection's socket, while it has one.
    fn stream(&self) -> Option<BorrowedFd<'_>>;
    /// Whether the connection waits for no large READ response: what arrives next is then an
    /// acknowledgement, a small READ response or a request of the peer (a doorbell SEND), each
    /// one a woken poller takes. Only then does the bell watch its socket: a parked owner
    /// waiting for a large READ response would otherwise be woken by each of its segments, for
    /// nothing it can take.
    fn awaits_no_large_read(&self) -> bool;
}

/// A connection whose socket the bell may watch, and whether it watches it now.
struct Watched {
    source: Weak<dyn ResponseSource>,
    on: bool,
}

/// The state of a completion queue shared by the NIC (producer) and the owner (consumer).
pub(crate) struct CqInner {
    depth: u32,
    /// Completions queued (a copy of `st.queue.len()` written under the lock): an empty poll
    /// reads it and returns without taking the lock, so a spinning poller costs the NIC
    /// thread that pushes nothing.
    queued: AtomicUsize,
    /// The queue overflowed (sticky, as on hardware).
    overrun: AtomicBool,
    st: Mutex<CqState>,
    /// Where the waiter sleeps and what it is armed for (same-host senders ring it).
    pub(crate) bell: Bell,
    /// The next poll by the owner looks into every inbox whatever the bell's hint says: set
    /// when the owner arms and when it is woken, since the hint is any sender's to forge.
    look_all: AtomicBool,
    /// Connections with an inbox feeding this CQ (lock order: `sources` before a connection's
    /// lock).
    sources: Mutex<Vec<Weak<dyn InboxSource>>>,
    /// The bell's hint when the inboxes were last drained.
    drained_at: AtomicU64,
    /// SENDs were left waiting for receives: look again at the next poll.
    backlog: AtomicBool,
    /// Connections that posted a READ over the network completing here (lock order: before
    /// a connection's locks).
    requesters: Mutex<Vec<Weak<dyn ResponseSource>>>,
    /// `requesters` is not empty: an empty poll of a CQ without any (the publisher's look after
    /// each message) stays a few loads.
    has_requesters: AtomicBool,
    /// Connections whose sockets the bell watches (their receives complete here): a poll after
    /// a wake-up places the small SENDs waiting in them (lock order: before a connection's
    /// locks).
    streams: Mutex<Vec<Watched>>,
    /// The owner was woken (by anything): the next poll looks into the watched sockets.
    look_streams: AtomicBool,
    /// Empty polls since the last look into the requesters' sockets (every
    /// [`LOOK_EVERY`]th empty poll looks).
    empty_polls: AtomicU32,
    /// Looks that skipped the inboxes because the bell's hint had not moved: every
    /// [`RECHECK_EVERY`]th looks anyway, since any sender may write the hint.
    skipped: AtomicU32,
}

/// How often a busy poller's look at the inboxes happens although the bell's hint (which any
/// peer of the CQ can write) says nothing new was written: what a peer freezing the hint can
/// delay the others' SENDs by, for a poller that never arms (one that arms looks anyway).
const RECHECK_EVERY: u32 = 64;

/// How often an empty poll of a CQ with requesters looks into their sockets: a look is a
/// system call (about a microsecond), an empty poll a few loads, and a spinning poller yields
/// its CPU after a number of polls (`CompletionQueue::poll_wait`), so looking at every poll
/// would keep it from yielding for tens of microseconds. One look per 16 polls delays a
/// response by well under a microsecond.
const LOOK_EVERY: u32 = 16;

#[derive(Default)]
struct CqState {
    queue: VecDeque<WorkCompletion>,
}

impl CqInner {
    pub(crate) fn new(depth: u32) -> Result<Self> {
        Ok(CqInner {
            depth,
            queued: AtomicUsize::new(0),
            overrun: AtomicBool::new(false),
            st: Mutex::new(CqState::default()),
            bell: Bell::new()?,
            look_all: AtomicBool::new(false),
            sources: Mutex::new(Vec::new()),
            drained_at: AtomicU64::new(0),
            backlog: AtomicBool::new(false),
            requesters: Mutex::new(Vec::new()),
            has_requesters: AtomicBool::new(false),
            streams: Mutex::new(Vec::new()),
            look_streams: AtomicBool::new(false),
            empty_polls: AtomicU32::new(0),
            skipped: AtomicU32::new(0),
        })
    }

    /// Makes polls of this CQ drain `source`'s inbox.
    pub(crate) fn attach(&self, source: Weak<dyn InboxSource>) {
        self.sources.lock().push(source);
    }

    /// Makes empty polls of this CQ take `source`'s READ responses (dropped connections leave
    /// the list here).
    pub(crate) fn attach_requester(&self, source: Weak<dyn ResponseSource>) {
        let mut requesters = self.requesters.lock();
        requesters.retain(|s| s.strong_count() > 0);
        requesters.push(source);
        self.has_requesters.store(true, Ordering::Relaxed);
    }

    /// Has the bell watch the socket of `source` ([`ResponseSource::stream`]), whose receives
    /// complete on this CQ: an
    /// arrival wakes a parked owner, and its next poll places the small SENDs waiting there
    /// itself (`conn/responses.rs`), a hop shorter than the NIC thread placing them and ringing
    /// the bell. A socket the bell cannot watch is left to the NIC thread, as before.
    pub(crate) fn attach_stream(&self, source: &Arc<dyn ResponseSource>) {
        let Some(sock) = source.stream() else { return };
        let mut streams = self.streams.lock();
        if self.bell.watch_stream(sock).is_err() {
            return;
        }
        let source = Arc::downgrade(source);
        streams.retain(|s| s.source.strong_count() > 0);
        streams.push(Watched { source, on: true });
    }

    /// Before the owner parks: the bell watches the socket of each connection that awaits no
    /// large READ response, and stops watching the others (one `epoll_ctl` where that changed, none while
    /// it stays; a failure only leaves that socket's SENDs to the NIC thread's wake-up).
    fn update_watches(&self) {
        let mut streams = self.streams.lock();
        for watched in streams.iter_mut() {
            let Some(source) = watched.source.upgrade() else { continue };
            let want = source.awaits_no_large_read();
            if want == watched.on {
                continue;
            }
            let Some(sock) = source.stream() else { continue };
            if self.bell.set_stream_watched(sock, want).is_ok() {
                watched.on = want;
            }
        }
    }

    /// After a wake-up: lets the watched connections place the SENDs waiting in their sockets
    /// on this thread (one poller at a time, as `receive_responses`).
    #[cold]
    fn receive_sends(&self) {
        let Some(streams) = self.streams.try_lock() else { return };
        for watched in streams.iter() {
            if let Some(source) = watched.source.upgrade() {
                source.receive_on_wake();
            }
        }
    }

    /// The owner was woken: its next poll looks into the watched sockets (if any).
    fn woken(&self) {
        self.look_all.store(true, Ordering::Relaxed);
        self.look_streams.store(true, Ordering::Relaxed);
    }

    /// Counts an empty poll; true on every [`LOOK_EVERY`]th, which looks into the requesters'
    /// sockets (a load and a store, as `skip_once`).
    #[inline]
    fn look_now(&self) -> bool {
        let polls = self.empty_polls.load(Ordering::Relaxed).wrapping_add(1);
        self.empty_polls.store(polls, Ordering::Relaxed);
        polls % LOOK_EVERY == 0
    }

    /// Lets the connections with READs on the wire take their responses on this thread (one
    /// poller at a time; another one polling meanwhile just finds what this one completed).
    #[inline(never)]
    fn receive_responses(&self) {
        let Some(requesters) = self.requesters.try_lock() else { return };
        for source in requesters.iter() {
            if let Some(source) = source.upgrade() {
                source.receive_on_poll();
            }
        }
    }

    /// A place at the bell for a new same-host sender: the descriptors to hand it, and the seat
    /// that takes it out when dropped. `None` when the bell has no place left (the sender's
    /// SENDs then take the stream).
    pub(crate) fn seat(self: &Arc<Self>) -> Option<(SenderFds, BellSeat)> {
        let fds = self.bell.attach_sender().ok()?;
        let seat = BellSeat { cq: self.clone(), token: fds.token };
        Some((fds, seat))
    }

    /// Places the SENDs waiting in the inboxes of this CQ's connections, if the bell's hint
    /// says some were written since the last look (or some waited for receives then, or this is
    /// the [`RECHECK_EVERY`]th look). The NIC calls it
    /// (holding no connection's lock) before it retries a stream SEND that found every receive
    /// claimed: inbox SENDs hold the claims until placed, and the owner may be asleep.
    #[inline]
    pub(crate) fn drain_inboxes(&self) {
        let hint = self.bell.hint();
        if hint == self.drained_at.load(Ordering::Relaxed) && !self.backlog.load(Ordering::Relaxed) && self.skip_once()
        {
            return;
        }
        self.drain_inboxes_now(hint);
    }

    /// Counts a look that skips the inboxes; false on every [`RECHECK_EVERY`]th, which looks
    /// anyway. A load and a store, not a read-modify-write: the publisher looks after every
    /// message, and a locked add there cost more than the rest of an empty poll. Two pollers
    /// racing may lose a count, which only moves the next recheck a look later.
    #[inline]
    fn skip_once(&self) -> bool {
        let skipped = self.skipped.load(Ordering::Relaxed).wrapping_add(1);
        self.skipped.store(skipped, Ordering::Relaxed);
        skipped % RECHECK_EVERY != 0
    }

    /// [`drain_inboxes`](Self::drain_inboxes) once there may be something to place (out of
    /// line: an empty poll, the publisher's look after each message, stays a few loads);
    /// `hint` is the bell's hint read before.
    #[cold]
    fn drain_inboxes_now(&self, hint: u64) {
        let mut sources = self.sources.lock();
        self.drained_at.store(hint, Ordering::Relaxed);
        let mut waiting = false;
        sources.retain(|s| match s.upgrade().map(|s| s.drain()) {
            Some(Drain::Done) => true,
            Some(Drain::Waiting) => {
                waiting = true;
                true
            }
            Some(Drain::Gone) | None => false,
        });
        self.backlog.store(waiting, Ordering::Relaxed);
    }

    /// Adds a completion; past `depth` the queue is overrun (sticky, as on hardware).
    pub(crate) fn push(&self, wc: WorkCompletion) {
        self.push_solicited(wc, false);
    }

    /// Adds a completion that may be the receive of a solicited SEND.
    pub(crate) fn push_solicited(&self, wc: WorkCompletion, solicited: bool) {
        let mut st = self.st.lock();
        if st.queue.len() >= self.depth as usize {
            self.overrun.store(true, Ordering::Release);
        } else {
            st.queue.push_back(wc);
            self.queued.store(st.queue.len(), Ordering::Release);
        }
        // Under the lock: an owner that armed before we took it is notified, one that arms
        // after we release it sees the completion when it polls.
        self.bell.notify(solicited || !wc.status.is_success());
    }

    /// Moves completions into `out`, after placing the SENDs waiting in inboxes. An empty queue
    /// with nothing new in the inboxes is seen from a few atomic loads, without the
    /// lock; the poller never yields here (waiting is `poll_wait`'s business). When the queue
    /// is empty and a connection has a READ on the wire, the poller first takes the responses
    /// waiting in its socket itself (`receive_responses`).
    #[inline]
    fn poll(&self, out: &mut [WorkCompletion]) -> Result<usize> {
        if self.look_all.load(Ordering::Relaxed) {
            // Two pollers may both look: no harm, and no atomic read-modify-write here.
            self.look_all.store(false, Ordering::Relaxed);
            self.drain_inboxes_now(self.bell.hint());
        } else {
            self.drain_inboxes();
        }
        if self.look_streams.load(Ordering::Relaxed) {
            self.look_streams.store(false, Ordering::Relaxed);
            self.receive_sends();
        }
        if self.overrun.load(Ordering::Acquire) {
            return Err(Error::CqOverrun { depth: self.depth });
        }
        if out.is_empty() {
            return Ok(0);
        }
        if self.queued.load(Ordering::Acquire) == 0 {
            if !self.has_requesters.load(Ordering::Relaxed) || !self.look_now() {
                return Ok(0);
            }
            self.receive_responses();
            if self.queued.load(Ordering::Acquire) == 0 {
                return Ok(0);
            }
        }
        Ok(self.take(out))
    }

    /// Moves up to `out.len()` queued completions into `out` (under the lock); returns how many.
    fn take(&self, out: &mut [WorkCompletion]) -> usize {
        let mut st = self.st.lock();
        let n = out.len().min(st.queue.len());
        for (slot, wc) in out.iter_mut().zip(st.queue.drain(..n)) {
            *slot = wc;
        }
        self.queued.store(st.queue.len(), Ordering::Release);
        n
    }

    /// Arms for the next completion (after choosing the sockets the bell watches, outside the
    /// lock the NIC pushes under, which it takes holding a connection's); the next poll looks
    /// into every inbox.
    fn arm(&self) {
        self.update_watches();
        let _st = self.st.lock();
        self.bell.arm();
        self.look_all.store(true, Ordering::Relaxed);
    }

    /// Arms for a solicited (or failed) completion, unless armed for the next one already;
    /// the next poll looks into every inbox.
    fn arm_solicited(&self) {
        self.update_watches();
        let _st = self.st.lock();
        self.bell.arm_solicited();
        self.look_all.store(true, Ordering::Relaxed);
    }

    /// Waits for a notification; the next poll after one looks into every inbox and every
    /// watched socket.
    fn wait(&self, timeout: Duration) -> bool {
        let woken = self.bell.wait(timeout);
        if woken {
            self.woken();
        }
        woken
    }

    /// Takes a notification without blocking; the next poll after one looks into every inbox
    /// and every watched socket.
    fn take_notification(&self) -> Result<bool> {
        let taken = self.bell.take()?;
        if taken {
            self.woken();
        }
        Ok(taken)
    }
}

/// A same-host sender's place at a CQ's bell ([`CqInner::seat`]): dropped with the sender's
/// inbox, it takes the sender's eventfd out of the bell's epoll set.
pub(crate) struct BellSeat {
    cq: Arc<CqInner>,
    token: u64,
}

impl Drop for BellSeat {
    fn drop(&mut self) {
        self.cq.bell.detach_sender(self.token);
    }
}

/// A completion queue handle.
pub(crate) struct SoftCq {
    pub(crate) inner: Arc<CqInner>,
    dev: Arc<Device>,
}

impl SoftCq {
    /// A completion queue of `dev` with `depth` entries.
    pub(crate) fn new(dev: Arc<Device>, depth: u32) -> Result<Self> {
        Ok(SoftCq { inner: Arc::new(CqInner::new(depth)?), dev })
    }
    /// Whether the queue belongs to the device of `state`.
    pub(crate) fn is_of(&self, state: &DeviceState) -> bool {
        std::ptr::eq(&*self.dev.state, state)
    }
    /// Moves up to `out.len()` completions into `out`; returns how many.
    #[inline]
    pub(crate) fn poll(&self, out: &mut [WorkCompletion]) -> Result<usize> {
        self.inner.poll(out)
    }
    /// Requests a notification for the next completion.
    pub(crate) fn arm(&self) {
        self.inner.arm();
    }
    /// Requests a notification for the next solicited (or failed) completion.
    pub(crate) fn arm_solicited(&self) {
        self.inner.arm_solicited();
    }
    /// Waits up to `timeout` for a requested notification; returns whether one arrived.
    pub(crate) fn wait(&self, timeout: Duration) -> bool {
        self.inner.wait(timeout)
    }
    /// The descriptor that polls readable once a requested notification arrived.
    pub(crate) fn notify_fd(&self) -> Result<BorrowedFd<'_>> {
        self.inner.bell.notify_fd()
    }
    /// Takes a notification without blocking; returns whether one had arrived.
    pub(crate) fn take_notification(&self) -> Result<bool> {
        self.inner.take_notification()
    }
    /// The depth.
    pub(crate) fn depth(&self) -> u32 {
        self.inner.depth
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_poll_does_not_take_the_lock_the_nic_pushes_under() {
        let cq = Arc::new(CqInner::new(4).unwrap());
        let held = cq.st.lock();
        let (tx, rx) = std::sync::mpsc::channel();
        let poller = {
            let cq = cq.clone();
            std::thread::spawn(move || {
                let mut out = [WorkCompletion::default(); 4];
                tx.send(cq.poll(&mut out).map_err(|e| e.to_string())).unwrap();
            })
        };
        let polled = rx.recv_timeout(Duration::from_secs(10));
        drop(held);
        poller.join().unwrap();
        assert_eq!(polled.expect("an empty poll returned while the lock was held").unwrap(), 0);
    }

    /// An inbox source that counts the looks into it.
    struct CountedSource(std::sync::atomic::AtomicU32);

    impl InboxSource for CountedSource {
        fn drain(&self) -> Drain {
            self.0.fetch_add(1, Ordering::Relaxed);
            Drain::Done
        }
    }

    /// A hint that never moves (a sender froze it) still lets every [`RECHECK_EVERY`]th poll
    /// look into the inboxes, and no other poll does.
    #[test]
    fn a_frozen_hint_delays_the_inboxes_by_at_most_the_recheck_period() {
        let cq = CqInner::new(4).unwrap();
        let source = Arc::new(CountedSource(Default::default()));
        let weak: Weak<dyn InboxSource> = Arc::downgrade(&source) as Weak<dyn InboxSource>;
        cq.attach(weak);
        let mut out = [WorkCompletion::default(); 1];
        for _ in 0..RECHECK_EVERY * 3 {
            assert_eq!(cq.poll(&mut out).unwrap(), 0);
        }
        assert_eq!(source.0.load(Ordering::Relaxed), 3, "one look per {RECHECK_EVERY} polls");
    }

    /// A connection whose socket the bell watches, as a test drives it.
    struct FakeStream {
        sock: std::os::unix::net::UnixStream,
        large_read: AtomicBool,
        looks: AtomicU32,
    }

    impl ResponseSource for FakeStream {
        fn receive_on_poll(&self) {}
        fn receive_on_wake(&self) {
            self.looks.fetch_add(1, Ordering::Relaxed);
        }
        fn stream(&self) -> Option<BorrowedFd<'_>> {
            Some(std::os::fd::AsFd::as_fd(&self.sock))
        }
        fn awaits_no_large_read(&self) -> bool {
            !self.large_read.load(Ordering::Relaxed)
        }
    }

    /// An arrival in a watched socket wakes the parked owner and its next poll looks into the
    /// socket; while the connection awaits a large READ response (whose every segment would
    /// wake it for nothing) the owner that arms is not woken by the socket.
    #[test]
    fn a_watched_socket_wakes_the_owner_unless_a_large_read_is_awaited() {
        use std::io::Write;
        let cq = CqInner::new(4).unwrap();
        let (sock, mut peer) = std::os::unix::net::UnixStream::pair().unwrap();
        let source = Arc::new(FakeStream { sock, large_read: AtomicBool::new(true), looks: AtomicU32::new(0) });
        cq.attach_stream(&(source.clone() as Arc<dyn ResponseSource>));
        let mut out = [WorkCompletion::default(); 1];

        cq.arm();
        peer.write_all(b"segment").unwrap();
        assert!(!cq.wait(Duration::from_millis(30)), "not woken while a large READ is awaited");
        assert_eq!(cq.poll(&mut out).unwrap(), 0);
        assert_eq!(source.looks.load(Ordering::Relaxed), 0);

        source.large_read.store(false, Ordering::Relaxed);
        cq.arm();
        peer.write_all(b"doorbell").unwrap();
        assert!(cq.wait(Duration::from_secs(10)), "woken by the arrival");
        assert_eq!(cq.poll(&mut out).unwrap(), 0);
        assert_eq!(source.looks.load(Ordering::Relaxed), 1, "the woken poll looked into the socket");
    }

    #[test]
    fn overrun_is_sticky_and_arm_wakes_a_waiter() {
        let cq = Arc::new(CqInner::new(2).unwrap());
        let mut out = [WorkCompletion::default(); 4];
        assert!(!cq.wait(Duration::from_millis(1)), "no notification without a completion");
        cq.arm();
        let waiter = {
            let cq = cq.clone();
            std::thread::spawn(move || cq.wait(Duration::from_secs(10)))
        };
        cq.push(WorkCompletion { wr_id: 1, ..Default::default() });
        assert!(waiter.join().unwrap());
        cq.push(WorkCompletion { wr_id: 2, ..Default::default() });
        assert_eq!(cq.poll(&mut out).unwrap(), 2);
        assert_eq!((out[0].wr_id, out[1].wr_id), (1, 2));
        for i in 0..3 {
            cq.push(WorkCompletion { wr_id: i, ..Default::default() });
        }
        assert!(matches!(cq.poll(&mut out), Err(Error::CqOverrun { depth: 2 })));
        assert!(matches!(cq.poll(&mut out), Err(Error::CqOverrun { .. })), "overrun is sticky");
    }
}
