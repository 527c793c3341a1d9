//! The NIC thread's state (the device, its connections, timers, the connections ready to be
//! read, the same-host streams, the streams of the data port) and the small steps every part of the thread takes: finding a
//! connection, discarding or answering a frame, pausing a peer that leaves its answers unread.

use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::provider::ConnId;
use crate::soft::conn::{AfterPayload, Conn, ConnState, ReceiveState};
use crate::soft::connections::Connections;
use crate::soft::device::DeviceState;
use crate::soft::hello_streams::HelloStreams;
use crate::soft::shm::Streams;
use crate::soft::timers::{TimerKind, Timers};
use crate::soft::wire::Header;

/// Bytes one connection may read before others get a turn.
pub(super) const READ_BUDGET: usize = 4 << 20;
/// How long a connection whose reading is paused (its answers over `OUT_CAP`, unread by the
/// peer) may go without writing a byte before it is cut (`FabricCounters::output_stalls`).
pub const OUTPUT_STALL_TIMEOUT: Duration = Duration::from_secs(2);

/// What reading a connection came to.
pub(super) enum ReadOutcome {
    /// Go on reading.
    Continue,
    /// Nothing more to read now.
    Idle,
    /// The peer leaves its answers unread: reading stops until it has read enough.
    Paused,
    /// Budget used up: continue on the next turn.
    Yield,
    /// Waiting for a receive (RNR).
    Blocked,
    /// The peer closed the stream.
    Eof,
    /// The connection was closed while processing.
    Done,
    /// The connection must be cut, for this reason.
    Broken(String),
}

/// The NIC thread's state.
pub(super) struct Nic {
    pub(super) device: Arc<DeviceState>,
    /// The device's connections and listeners.
    pub(super) conns: Arc<Connections>,
    pub(super) timers: Timers,
    /// Connections to read again (they yielded, or a pause of reading them ended).
    pub(super) ready: Vec<ConnId>,
    /// Connections whose receive state a polling thread held (`conn/responses.rs`): read
    /// again after a pause and a yield of the CPU, which may be the one that thread needs.
    pub(super) held: Vec<ConnId>,
    /// Same-host streams of peers on this host (see `shm`).
    pub(super) streams: Streams,
    /// Streams of the data port waiting for their hello or their queue pair.
    pub(super) hello_streams: HelloStreams,
    /// Listeners (by id; the data port as [`DATA_PORT_AGAIN`]) that had more connections to
    /// accept than one turn takes: accepted again next turn, after the other work.
    pub(super) accept_again: Vec<u64>,
}

/// Connections one listener accepts in one turn of the NIC's loop: a flood of connects cannot
/// keep the NIC from reading the connections it has.
pub(super) const ACCEPT_BATCH: usize = 64;
/// The data port in [`Nic::accept_again`].
pub(super) const DATA_PORT_AGAIN: u64 = u64::MAX;

impl Nic {
    /// The open connection `id`.
    pub(super) fn conn(&self, id: ConnId) -> Option<Arc<Conn>> {
        self.conns.open.lock().get(&id).cloned()
    }

    /// Counts `n` bytes read against the turn's budget: `Yield` once it is used up.
    pub(super) fn charge(&self, budget: &mut usize, n: usize) -> ReadOutcome {
        *budget = budget.saturating_sub(n);
        if *budget == 0 {
            ReadOutcome::Yield
        } else {
            ReadOutcome::Continue
        }
    }

    /// Reads the payload of `hdr` into nothing, then does `then`.
    pub(super) fn discard(rx: &mut ReceiveState, hdr: &Header, after: AfterPayload) -> ReadOutcome {
        rx.discard(hdr, after);
        ReadOutcome::Continue
    }

    /// Pauses reading when the answers queued for the peer went over `OUT_CAP` (it does not
    /// read them), and starts the timer that cuts the connection if it writes nothing more.
    pub(super) fn pause_if_full(&mut self, c: &Conn, st: &mut ConnState, step: ReadOutcome) -> ReadOutcome {
        if !matches!(step, ReadOutcome::Continue) || !st.out.pause_if_full() {
            return step;
        }
        tracing::debug!("soft NIC: {} leaves its answers unread, reading paused", c.peer());
        // A timer of an earlier pause (the peer read a little, then stopped again) would check
        // this one too early.
        self.timers.cancel(c.id, TimerKind::OutputStall);
        self.timers.schedule(Instant::now() + OUTPUT_STALL_TIMEOUT, c.id, TimerKind::OutputStall);
        ReadOutcome::Paused
    }
}

/// What a failed read means for reading the connection.
pub(super) fn io_step(e: io::Error) -> ReadOutcome {
    match e.kind() {
        io::ErrorKind::WouldBlock => ReadOutcome::Idle,
        io::ErrorKind::Interrupted => ReadOutcome::Continue,
        _ => ReadOutcome::Broken(format!("read: {e}")),
    }
}
