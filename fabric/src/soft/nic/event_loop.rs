//! The NIC thread's loop: commands from user threads, connections ready to be read (and those
//! a polling thread held, read again only after a pause and a yield: [`Pending::next_poll`]),
//! due timers, then a poll of the sockets (spinning for `nic_spin` after the thread was last
//! busy, blocking after that) and what the poll found.

use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mio::{Events, Poll};

use super::same_host::StreamOwner;
use super::state::{Nic, DATA_PORT_AGAIN};
use crate::provider::ConnId;
use crate::soft::conn::{Conn, Phase};
use crate::soft::connections::Connections;
use crate::soft::device::{DeviceState, NicCommand, LISTENER_BIT, WAKER};
use crate::soft::hello_streams::{HelloStreams, DATA_PORT_TOKEN};
use crate::soft::shm::Streams;
use crate::soft::timers::{TimerKind, Timers};

/// Pause instructions between two polls of the sockets while the NIC thread spins.
const SPIN_PAUSES: u32 = 64;
/// How long after refusing a same-host region request the connection's queue pair fails, unless
/// the request reached this NIC to be judged in order before (see `shm::serve`).
const REFUSED_REGION_GRACE: Duration = Duration::from_secs(1);

/// The NIC thread's main loop.
pub(crate) fn run(device: Arc<DeviceState>, conns: Arc<Connections>, mut poll: Poll) {
    let spin = device.nic_spin;
    let mut nic = Nic {
        device,
        conns,
        timers: Timers::default(),
        ready: Vec::new(),
        held: Vec::new(),
        streams: Streams::default(),
        hello_streams: HelloStreams::default(),
        accept_again: Vec::new(),
    };
    let mut events = Events::with_capacity(256);
    let mut last_busy = Instant::now();
    // Commands come with a wake-up: the queue is looked at only after the waker fired.
    let mut woken = true;
    loop {
        let commands =
            if std::mem::take(&mut woken) { std::mem::take(&mut *nic.device.commands.lock()) } else { Vec::new() };
        let mut busy = !commands.is_empty();
        for cmd in commands {
            match cmd {
                NicCommand::Stop => {
                    nic.drop_hello_streams();
                    nic.stop();
                    return;
                }
                NicCommand::Timer(at, id, kind) => nic.schedule(at, id, kind),
                NicCommand::Broken(id, why) => {
                    if let Some(c) = nic.conn(id) {
                        let mut rx = c.rx.lock();
                        nic.broken(&c, &mut rx, &why);
                    }
                }
                NicCommand::Resume(id) => nic.ready.push(id),
                NicCommand::ReadyToReceive(id) => nic.bind_waiting(id),
            }
        }
        let ready = std::mem::take(&mut nic.ready);
        // Held connections are read again too, but do not make the thread busy: what holds
        // them is another thread's (see `Pending::next_poll`).
        busy |= !ready.is_empty();
        let held = std::mem::take(&mut nic.held);
        for id in ready.into_iter().chain(held) {
            if let Some(c) = nic.conn(id) {
                nic.drive(&c);
            }
        }
        let again = std::mem::take(&mut nic.accept_again);
        busy |= !again.is_empty();
        for id in again {
            if id == DATA_PORT_AGAIN {
                nic.accept_hello_streams();
            } else {
                nic.accept(id);
            }
        }
        busy |= nic.fire_timers();
        nic.device.timers_pending.store(nic.timers.len(), std::sync::atomic::Ordering::Relaxed);
        let now = Instant::now();
        if busy {
            last_busy = now;
        }
        let pending = Pending {
            work: !nic.ready.is_empty() || !nic.accept_again.is_empty(),
            held: !nic.held.is_empty(),
            idle_for: now.duration_since(last_busy),
        };
        let timeout = match pending.next_poll(spin) {
            NextPoll::Now => Some(Duration::ZERO),
            NextPoll::AfterPause => {
                #[cfg(test)]
                if pending.held {
                    nic.device.yields_for_held.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
                for _ in 0..SPIN_PAUSES {
                    std::hint::spin_loop();
                }
                std::thread::yield_now();
                Some(Duration::ZERO)
            }
            NextPoll::Block => nic.timers.next().map(|at| at.saturating_duration_since(now)),
        };
        if let Err(e) = poll.poll(&mut events, timeout) {
            if e.kind() != io::ErrorKind::Interrupted {
                tracing::error!("soft NIC: epoll_wait failed: {e}");
                std::thread::sleep(Duration::from_millis(1));
            }
            continue;
        }
        if !events.is_empty() {
            last_busy = Instant::now();
        }
        for ev in events.iter() {
            let t = ev.token().0;
            if ev.token() == WAKER {
                woken = true;
                continue;
            }
            if ev.token() == DATA_PORT_TOKEN {
                nic.accept_hello_streams();
                continue;
            }
            if let Some(id) = HelloStreams::id_of(ev.token()) {
                nic.read_hello(id);
                continue;
            }
            if Streams::owns(ev.token()) {
                if nic.device.shm.is_some() {
                    let owner = StreamOwner { device: &nic.device, conns: &nic.conns, refused: Default::default() };
                    nic.streams.on_event(ev.token(), &owner, &nic.device.registry);
                    let at = Instant::now() + REFUSED_REGION_GRACE;
                    for conn in owner.refused.into_inner() {
                        nic.timers.schedule(at, conn, TimerKind::RefusedRegion);
                    }
                }
                continue;
            }
            if t & LISTENER_BIT != 0 {
                nic.accept((t & !LISTENER_BIT) as u64);
                continue;
            }
            let Some(c) = nic.conn(t as ConnId) else { continue };
            if ev.is_read_closed() || ev.is_error() {
                c.rx.lock().peer_closed = true;
            }
            if ev.is_writable() {
                nic.on_writable(&c);
            }
            if ev.is_readable() || ev.is_read_closed() || ev.is_error() {
                nic.drive(&c);
            }
        }
    }
}

/// What is left for the NIC thread after a turn of its loop.
struct Pending {
    /// Connections to read again, listeners to accept again.
    work: bool,
    /// Connections whose receive state a polling thread held (`Nic::held`).
    held: bool,
    /// Time since the thread was last busy.
    idle_for: Duration,
}

/// How the NIC thread polls its sockets next.
#[derive(Debug, PartialEq, Eq)]
enum NextPoll {
    /// At once (more work is waiting).
    Now,
    /// After [`SPIN_PAUSES`] pause instructions and a yield of the CPU.
    AfterPause,
    /// Blocking, until an event or the next timer.
    Block,
}

impl Pending {
    /// Work waiting: poll at once. A connection a polling thread holds, or a spin (for `spin`
    /// after the thread was last busy): pause and yield first, so that a thread this one serves
    /// and that shares its CPU gets a turn every few µs. The holder of a connection may be
    /// the very thread this one preempted: retrying it without a yield kept that thread off
    /// the CPU until the scheduler's tick (3-5 ms for 2-8% of a parked subscriber's messages
    /// on a 2-vCPU VM). Otherwise block.
    fn next_poll(&self, spin: Duration) -> NextPoll {
        if self.work {
            NextPoll::Now
        } else if self.held || self.idle_for < spin {
            NextPoll::AfterPause
        } else {
            NextPoll::Block
        }
    }
}

impl Nic {
    /// Schedules a timer a user thread asked for, unless it no longer matters: the connection
    /// is gone (its timers were cancelled when it was removed, on this thread) or, for a
    /// connect timeout, the connect already completed.
    pub(super) fn schedule(&mut self, at: Instant, id: ConnId, kind: TimerKind) {
        let Some(c) = self.conn(id) else { return };
        if kind == TimerKind::ConnectTimeout && c.st.lock().phase != Phase::Connecting {
            return;
        }
        self.timers.schedule(at, id, kind);
    }

    /// Finishes a TCP connect, or writes what the peer can take now.
    pub(super) fn on_writable(&mut self, c: &Arc<Conn>) {
        let mut st = c.st.lock();
        if !self.check_connect(c, &mut st) {
            return;
        }
        match c.flush_out(&mut st) {
            Ok(false) => {}
            Ok(true) => {
                drop(st);
                self.drive(c);
            }
            Err(e) => {
                drop(st);
                let mut rx = c.rx.lock();
                self.broken(c, &mut rx, &format!("write: {e}"));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connection_held_by_a_poller_is_read_again_only_after_a_yield() {
        let spin = Duration::from_micros(50);
        let pending = |work, held, idle_us| Pending { work, held, idle_for: Duration::from_micros(idle_us) };
        assert_eq!(pending(false, true, 1_000).next_poll(spin), NextPoll::AfterPause, "held, idle");
        assert_eq!(pending(false, true, 0).next_poll(spin), NextPoll::AfterPause, "held, spinning");
        assert_eq!(pending(true, true, 0).next_poll(spin), NextPoll::Now, "held, with other work");
        assert_eq!(pending(true, false, 1_000).next_poll(spin), NextPoll::Now);
        assert_eq!(pending(false, false, 10).next_poll(spin), NextPoll::AfterPause, "spinning");
        assert_eq!(pending(false, false, 1_000).next_poll(spin), NextPoll::Block);
    }
}
