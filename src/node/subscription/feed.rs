//! A subscription's connection to one publisher (a [`Feed`]), its state once established
//! ([`ActiveFeed`]: the ring reader, the two READ buffers, the messages ready, acks and
//! parking), and the subscription's hold on the process's spin permit ([`PollPermit`]).

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crate::node::pacing::ReadPacer;
use crate::node::spin_permit::SpinPermit;
use rdma_fabric::{ConnId, MemoryRegion, QueuePair, ReadBuffer, RemoteAddr};
use rdma_wire::ring::{ReadPlan, RingReader};

use super::message::PublisherInfo;
use super::options::SubscriptionOptions;

/// Control slots per feed: [ack send, doorbell-request send, receives...].
pub(super) const RECV_SLOTS: usize = 4;
pub(super) const SLOT: usize = 64;
pub(super) const CTRL_LEN: usize = (2 + RECV_SLOTS) * SLOT;
/// How long a subscription polls (yielding the CPU between polls) for the completion of a READ
/// in flight before it blocks: a 1 MiB READ takes a few hundred microseconds on the soft fabric,
/// and a wake-up from a blocked wait on these machines costs as much again.
pub(super) const READ_SPIN: Duration = Duration::from_micros(300);
/// Rounds of completions without a message (empty READs) before the thread yields the CPU.
pub(super) const PROBES_PER_YIELD: u32 = 16;
/// Longest a closed feed waits for the flush of its work requests before it is removed.
pub(super) const FLUSH_GRACE: Duration = Duration::from_secs(2);
/// Longest a parked feed waits before READing anyway (guards against a lost wake-up).
pub(super) const PARK_RECHECK: Duration = Duration::from_millis(100);

/// A parsed message waiting for delivery.
pub(super) enum Payload {
    /// In one of the feed's READ buffers.
    Slice { buf: usize, offset: usize, len: usize },
    /// Reassembled from fragments.
    Owned(Vec<u8>),
}

pub(super) struct Ready {
    pub(super) seq: u64,
    pub(super) payload: Payload,
}

/// The subscription's hold on the process's spin permit (`spin_permit`): it polls only while
/// it holds it, whether it spins on its CQ or READs an empty ring again and again. The latter
/// is polling too: on the same host such a READ is a copy that completes as it is posted, a
/// busy loop of the subscriber's thread that would take the CPU of the publisher it waits for.
/// So a feed READs an empty ring again only while the permit is held (else it parks after its
/// first empty READ). Kept across the rounds of one `next_ready`; released before it blocks
/// and when it returns.
#[derive(Debug, Default)]
pub(super) struct PollPermit {
    held: Option<SpinPermit>,
}

impl PollPermit {
    /// Whether the permit is held, taking it if one is free.
    pub(super) fn acquire(&mut self) -> bool {
        if self.held.is_none() {
            self.held = SpinPermit::try_acquire();
        }
        self.held.is_some()
    }

    /// Gives the permit back, if held.
    pub(super) fn release(&mut self) {
        self.held = None;
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Idle {
    /// READing.
    Active,
    /// A doorbell was requested; the READ that follows it decides whether to park.
    Requested,
    /// Waiting for the doorbell.
    Parked { since: Instant },
}

/// A connection to one publisher.
pub(super) struct Feed {
    pub(super) qp: QueuePair,
    pub(super) conn: ConnId,
    pub(super) addr: SocketAddr,
    pub(super) gen: u32,
    pub(super) ctrl: MemoryRegion,
    pub(super) active: Option<Box<ActiveFeed>>,
    /// No more READs: closed, waiting for its ready messages to be delivered.
    pub(super) closed: bool,
    /// The provider refuses or flushes this connection's work: post nothing more and let the
    /// CM's `Disconnected` event close the feed (it first handles what the CQ holds, such as
    /// an end-of-stream notice, so an orderly end is not reported as a failure).
    pub(super) quiesced: bool,
    /// Work requests posted and not completed yet: a closed feed is removed only when the
    /// provider has flushed them all (or after [`FLUSH_GRACE`]).
    pub(super) outstanding: u32,
    pub(super) closed_at: Option<Instant>,
}

pub(super) struct ActiveFeed {
    pub(super) info: PublisherInfo,
    pub(super) reader: RingReader,
    /// Two READ buffers: one READ lands in one while the messages of the other are delivered.
    pub(super) landings: [ReadBuffer; 2],
    /// The longest READ this feed can need (the ring's largest record and a header past it):
    /// how far the READ buffers may grow.
    pub(super) max_read_len: usize,
    /// Queued messages that still point into each buffer.
    pub(super) pending: [usize; 2],
    /// The buffer of the READ in flight.
    pub(super) reading_into: usize,
    /// The last READ reached the end of what was written: READ again only once its messages
    /// are delivered (reading ahead then would only bring small batches).
    pub(super) caught_up: bool,
    pub(super) ring: RemoteAddr,
    pub(super) capacity: u64,
    /// The READ in flight.
    pub(super) plan: Option<ReadPlan>,
    pub(super) ready: VecDeque<Ready>,
    pub(super) acked: u64,
    pub(super) ack_in_flight: bool,
    /// The publisher waits for credit and asked for a solicited ack once the consumed position
    /// reaches this (`Control::CreditWanted`).
    pub(super) credit_wanted: Option<u64>,
    pub(super) doorbell_req_in_flight: bool,
    pub(super) idle: Idle,
    pub(super) empty_since: Option<Instant>,
    /// The publisher announced the end of its stream after this sequence.
    pub(super) end: Option<u64>,
    /// The last parse stopped on a lap: READ the control block next.
    pub(super) need_control: bool,
    /// Messages up to this sequence were delivered by an earlier connection: skip them.
    pub(super) skip_through: u64,
    /// Delays the next data READ while a trickle comes in (over the network, without
    /// `busy_poll`).
    pub(super) pacer: ReadPacer,
    /// The longest READ of a ring the last READ found empty: a page on the same host, where a
    /// READ is this thread's copy and probing with the whole next record would copy it for
    /// nothing again and again; unbounded over the network (one READ then brings the record).
    pub(super) empty_probe_len: usize,
}

impl ActiveFeed {
    /// Bytes of the feed's READ buffers.
    pub(super) fn read_buffer_bytes(&self) -> u64 {
        self.landings.iter().map(|b| b.capacity() as u64).sum()
    }

    /// A READ brought something (or the control block showed data waiting).
    pub(super) fn note_progress(&mut self) {
        self.empty_since = None;
        self.idle = Idle::Active;
    }

    /// A READ found nothing new; returns whether it is time to ask for a doorbell: after
    /// `options.spin` of empty READs, or at once when the subscription may not poll (no spin
    /// permit for it).
    pub(super) fn note_empty(&mut self, options: &SubscriptionOptions, now: Instant, permit: &mut PollPermit) -> bool {
        match self.idle {
            Idle::Active => {
                let since = *self.empty_since.get_or_insert(now);
                !options.busy_poll && (now.duration_since(since) >= options.spin || !permit.acquire())
            }
            Idle::Requested | Idle::Parked { .. } => {
                self.idle = Idle::Parked { since: now };
                false
            }
        }
    }
}
