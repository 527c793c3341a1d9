//! What a publisher's parts share: the [`PublisherShared`] the handle, the publishing calls
//! and the CM thread hold, the [`PubState`] its one lock guards (the producer, the cached
//! publisher limit and the subscriber table), and the publisher's fixed sizes.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use slab::Slab;

use rdma_fabric::{CompletionQueue, ConnId, MemoryRegion, QueuePair, RemoteAddr, SharedReceiveQueue};
use rdma_wire::protocol::TopicId;
use rdma_wire::ring::{RingProducer, NO_LIMIT};

use super::counters::PublisherCounters;
use super::liveness::{Liveness, SENDS_PER_SUBSCRIBER};
use super::options::PublisherOptions;
use crate::node::ack_clock::AckClock;
use crate::node::shared::{NodeShared, RECHECK_INTERVAL};
use crate::node::wr_id::MAX_SLOT;

/// Receive slots kept posted per subscriber (acks are coalesced; a few suffice).
pub(super) const RECVS_PER_SUBSCRIBER: u32 = 4;
/// Most subscribers a publisher serves ([`PublisherBuilder::max_subscribers`](super::PublisherBuilder::max_subscribers)).
pub(super) const MAX_SUBSCRIBERS: usize = 4096;
/// Longest wait for the end-of-stream notices to leave before disconnecting: a bound
/// for a dead peer; on a live one the send completes in microseconds (milliseconds in an
/// emulated guest).
pub(super) const NOTICE_TIMEOUT: Duration = Duration::from_secs(2);
/// Bytes of one control slot.
pub(super) const SLOT: usize = 64;
/// Shortest [`PublisherBuilder::idle_timeout`](super::PublisherBuilder::idle_timeout): longer than the probe of a silent subscriber
/// ([`PROBE_AFTER`](super::liveness::PROBE_AFTER)) and than a busy host's scheduling hiccups.
pub(super) const MIN_IDLE_TIMEOUT: Duration = Duration::from_millis(500);
/// How often the CM thread services each publisher ([`PublisherShared::service`]): receives
/// reposted and idle subscribers found while the application publishes nothing.
pub(crate) const SERVICE_INTERVAL: Duration = RECHECK_INTERVAL;
/// On a fabric whose NIC copies on this host's CPUs (soft), a publisher that has just
/// committed this many payload bytes or more yields the CPU once, so that the NIC thread that
/// must copy them (and the subscribers it feeds) get a turn on a machine with fewer CPUs than
/// busy threads. Measured on 2 vCPUs, 64 KiB messages in one process, 14 rounds: 2.28 GB/s
/// mean without the yield against 2.75 with it (a yield per message of any size, as a
/// yielding CQ poll did, gave the same 64 KiB figure but cut 64 B messages from 8.7 to
/// 3.2 M/s). At 16 KiB the system call is a few percent of the copy and checksum.
pub(super) const YIELD_AFTER_BYTES: usize = 16 * 1024;

// Every receive and send slot fits a work-request id.
const _: () = assert!((MAX_SUBSCRIBERS as u32 * RECVS_PER_SUBSCRIBER) as usize <= MAX_SLOT + 1);
const _: () = assert!((MAX_SUBSCRIBERS as u32 * SENDS_PER_SUBSCRIBER) as usize <= MAX_SLOT + 1);

/// A subscriber connected to this publisher.
pub(super) struct SubConn {
    pub(super) qp: QueuePair,
    pub(super) conn: ConnId,
    /// Consumed position from its acks (credit).
    pub(super) acked: u64,
    /// Armed doorbell: ring when the tail passes this position.
    pub(super) doorbell_at: Option<u64>,
    /// Since when it has been holding the publisher up (DropSlow).
    pub(super) slow_since: Option<Instant>,
    /// The rhythm of its acks: which subscriber a blocked publisher asks for credit.
    pub(super) clock: AckClock,
    /// The position it was last asked to ack by a `CreditWanted` (0: never).
    pub(super) asked_for: u64,
    /// Its activity, and its own control send slots (so that one subscriber that takes no
    /// SENDs cannot hold up the others' doorbells or end of stream).
    pub(super) liveness: Liveness,
}

/// What the `state` lock guards.
pub(super) struct PubState {
    pub(super) producer: RingProducer,
    pub(super) subs: Slab<SubConn>,
    pub(super) by_conn: HashMap<ConnId, usize>,
    pub(super) by_qp: HashMap<u32, usize>,
    /// The publisher limit: the position the producer may not write past, from the slowest
    /// subscriber's credit ([`NO_LIMIT`] under Overwrite or with no subscriber). Refreshed
    /// whenever an ack arrives or a subscriber comes or goes, never per message.
    pub(super) limit: u64,
    /// The policy never limits the producer.
    pub(super) overwrite: bool,
    /// The lowest armed doorbell position ([`u64::MAX`] when none is armed): a commit that does
    /// not pass it has no doorbell to ring.
    pub(super) doorbell_floor: u64,
    /// A publishing call holds the turn (it may have released the lock to wait for credit):
    /// other publishing calls wait for the `turn` condition.
    pub(super) publishing: bool,
    /// A message partly written when a Block timeout hit; finished by the next call.
    pub(super) unfinished: Option<Vec<u8>>,
    pub(super) closing: bool,
}

impl PubState {
    /// Recomputes the publisher limit and the credit gauges from the subscribers' acks.
    pub(super) fn refresh_credit(&mut self, counters: &PublisherCounters) {
        let slowest = self.subs.iter().map(|(_, s)| s.acked).min();
        self.limit = match slowest {
            Some(min) if !self.overwrite => self.producer.limit_for(min),
            _ => NO_LIMIT,
        };
        counters.subscribers.store(self.subs.len() as u64, Ordering::Relaxed);
        counters.slowest_ack.store(slowest.unwrap_or(self.producer.tail()), Ordering::Relaxed);
    }
}

/// What the publisher's parts share with the CM thread.
pub(crate) struct PublisherShared {
    pub(super) node: Arc<NodeShared>,
    pub(super) topic: String,
    pub(super) topic_id: TopicId,
    pub(super) id: u64,
    pub(super) options: PublisherOptions,
    pub(super) max_record_payload: usize,
    /// A commit of at least this many payload bytes gives the CPU up once (see
    /// [`YIELD_AFTER_BYTES`]); `usize::MAX` where the NIC does not copy on this host's CPUs.
    pub(super) yield_after: usize,
    pub(super) remote: RemoteAddr,
    pub(super) region_len: usize,
    pub(super) cq: CompletionQueue,
    pub(super) srq: Option<SharedReceiveQueue>,
    pub(super) ctrl: MemoryRegion,
    pub(super) recv_slots: u32,
    pub(super) state: Mutex<PubState>,
    /// Signalled when the publishing turn is given back.
    pub(super) turn: Condvar,
    /// Signalled when a subscriber is accepted or removed.
    pub(super) subscribers_changed: Condvar,
    pub(super) counters: Arc<PublisherCounters>,
    // Declared last: deregistered after every queue pair that could READ it is gone. Only
    // held: the producer writes through its buffer.
    pub(super) _ring: MemoryRegion,
}
