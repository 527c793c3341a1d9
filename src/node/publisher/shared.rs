//! [`PublisherShared`]: what a publisher's handle, its publishing calls and the node's CM
//! thread share, whole: the ring's producer and the subscriber table under one lock
//! ([`PubState`]), the publishing turn and credit waits under each policy, the publisher's
//! CQ (acks and doorbell requests in, doorbells, credit requests and drops out), the service
//! tick, accepting subscribers for the CM thread, and closing.
//!
//! One lock, `state`, guards the producer, the cached publisher limit and the subscriber
//! table. A publishing call that fits under the cached limit holds it once, for the copy into
//! the ring and the commit: one uncontended lock, the copy, the header and its checksum, a
//! release store of the tail, a look at the CQ (a few atomic loads on soft when it is empty)
//! and a comparison with the lowest armed doorbell; no clock read, no allocation, no system
//! call. One that must wait for credit takes the publishing *turn* (so that no other call
//! interleaves with a message it wrote partly) and releases the lock while it waits, so the
//! CM thread can accept subscribers meanwhile. The flow-control rules themselves are pure
//! functions (`flow_control.rs`); a subscriber's activity is its [`Liveness`].
//!
//! # Creating and accepting
//!
//! Creating registers the ring's region (remote read only), a shared receive queue with 4
//! receives per subscriber (per-QP receives where the device has no SRQ) and one CQ. The CM
//! thread decodes a connect request and finds the topic's publisher; [`PublisherShared::accept`]
//! then checks the topic credential first (`rdma_wire::protocol::credential`: an HMAC proof
//! over the request, a nonce and the subscriber's clock; a missing or wrong proof, a time more
//! than 30 s off, or a nonce seen within that window is `Unauthorized`, counted in
//! `rejected_unauthorized`), so no `AcceptData` (the ring's address and rkey) exists before it
//! passed; then closing, `max_subscribers` and the policies the subscriber accepts. It accepts
//! under the state lock: the subscriber's start point (latest = tail, earliest = head) and its
//! credit are consistent with the producer. The CM thread, which serves the whole node, waits
//! for that lock at most `CM_LOCK_WAIT` (1 ms): a connect or a disconnect that finds it held
//! longer (by an `ExclusivePublisher`, or a long loan) is left in `deferred` (at most 16
//! connects; one more is refused) and handled by the holder between two messages, at the next
//! service tick, or at close (counter `deferred_events`).
//!
//! # The hot path
//!
//! `publish_bytes`: no clock read, no allocation, no system call and no locked
//! read-modify-write besides the state lock (counters written only under the lock are a load
//! and a store); the CQ is looked at with a one-entry poll, and a batch is set up only when it
//! holds something. Measured on 64 B messages with the publisher alone on a CPU and one
//! subscriber reading in place in another process (`bench --pin-publisher
//! --separate-processes`, no checksum): about 0.09 µs of CPU per message. Where it went (perf,
//! timer samples): the record header's stores about 38%, the lock and its unlock about 21%,
//! the payload copy 12%, the head walk's header loads 11% (a chain of dependent loads of lines
//! written a lap earlier, one per record passed: head now walks the producer's own log of its
//! records), placing and padding 6%, the counters and the CQ look 11%. The stores and the
//! locked instructions wait for the same thing: the ring lines the reader in place has just
//! read must be taken back from its cache before the stores leave the store buffer, and a
//! locked instruction waits until they have.
//!
//! An [`ExclusivePublisher`](super::ExclusivePublisher) holds the lock and the turn across its
//! calls (`publish_held`): a message costs no locked instruction, and the stores of one
//! message overlap the next one's work. Against `publish` before it (9 interleaved rounds,
//! medians): separate processes 10.4 → 13.3 M msg/s, 0.096 → 0.072 µs of publisher CPU.
//!
//! On a fabric whose NIC copies on this host's CPUs (`DeviceAttributes::copies_on_host_cpus`:
//! soft), a commit of 16 KiB or more is followed by one `sched_yield`, so that the NIC thread
//! that must copy those bytes gets a turn on a machine with fewer CPUs than busy threads (64
//! KiB in one process on 2 vCPUs: 2.28 → 2.75 GB/s). A serde value is sized first and encoded
//! straight into a loan when it fits one record. A message larger than the ring is written
//! fragment by fragment as credit allows
//! (`pubsub::streams::a_sixteen_mib_message_passes_through_a_one_mib_ring`). A loan's bytes
//! are written without atomics, which is sound because no other Rust code of the process
//! touches them before the commit.
//!
//! # Checksums
//!
//! A record's checksum is needed only where a READ can race a write. A subscriber that reads
//! the ring in place (same host) says so once (`Control::ReadsInPlace`); while every connected
//! subscriber has, records are written without one (`FLAG_NO_CHECKSUM`, counter
//! `unchecked_records`), which saves the largest part of a small message's cost. Any other
//! subscriber may READ: before its accept goes out (under the state lock) the producer gives
//! every retained record its checksum (`RingProducer::set_checksums`), and records carry one
//! for as long as such a subscriber is connected. A READ that finds a record without one takes
//! it for torn.
//!
//! # Credits, the limit and the turn
//!
//! Credit is each subscriber's acked position. The publisher limit (`PubState::limit`,
//! Aeron's) is `min(acked) + capacity` under Block and DropSlow, none under Overwrite or with
//! no subscriber; it is recomputed when an ack arrives or a subscriber comes or goes
//! (`PubState::refresh_credit`), never per message. Acks arrive as SENDs into the shared
//! receive queue; the CQ is drained after every commit and while a call waits for credit. An
//! ack outside `[acked, tail]`, or a control message only a publisher sends, is refused and
//! counted (`bad_acks`).
//!
//! A call that cannot publish under the limit takes the publishing turn ([`Turn`]: a flag and
//! a condition variable) and releases the lock while it waits; the other publishing calls wait
//! for the turn, so no call's message lands between the fragments of another's. Calls that fit
//! never touch it.
//!
//! With several subscribers, a call waiting for credit asks the one that will probably ack
//! last (`node/ack_clock.rs`) with `CreditWanted{position}`: the floor it needs, or a quarter
//! ring past that subscriber's last ack if further, never past the tail. That subscriber acks
//! with a solicited SEND once it has consumed that far, and the publisher waits with its CQ
//! armed for solicited completions only (`poll_wait_solicited`; counters `solicited_waits`,
//! `credit_requests`); if it wakes still short it asks the next one. With one subscriber it
//! waits on every ack. Before, a publisher blocked by 16 subscribers woke 1.9 times per 64 KiB
//! message and 3.5 per 1 MiB one, against 0.3 and 0.6 now
//! (`pubsub::policies::a_publisher_blocked_by_several_subscribers_does_not_wake_for_every_ack`).
//!
//! # Doorbells and control SENDs
//!
//! A parked subscriber sends `DoorbellRequest{position}`; a commit that moves the tail past the
//! lowest armed position (`doorbell_floor`, one comparison per commit) SENDs `Doorbell{tail}`
//! to every armed subscriber the tail passed (`ring_doorbells`). Control SENDs to a subscriber
//! (doorbells, `CreditWanted`, `Dropped`, `EndOfStream`) use 4 send slots of its own
//! ([`Liveness`]): a subscriber that posts no receives pins only its own 4 (its SENDs wait on
//! RNR), and the others still get theirs. A completion frees a slot only when it comes from
//! the queue pair of the subscriber that owns the slot now; a control SEND that completes in
//! error removes its subscriber at once.
//!
//! # The service tick, idle subscribers, parting
//!
//! Every `SERVICE_INTERVAL` (20 ms) the CM thread calls [`PublisherShared::service`]: unless a
//! publishing call holds the state (it drains the CQ itself), it drains the CQ, so receives
//! are reposted and acks and doorbell requests handled while the application publishes
//! nothing, and drops idle subscribers.
//!
//! A subscriber that holds credit back (acked behind the tail, under Block or DropSlow) and
//! sends nothing, or takes none of the publisher's SENDs, for `idle_timeout` (default 30 s) is
//! dropped with `DropReason::Idle`: silent subscribers hold a Block publisher at most that
//! long. Sampled at service ticks and credit waits; the hot path only counts control messages
//! received. One silent while holding credit for 250 ms is probed once with `CreditWanted`: a
//! live one takes it, a failed queue pair (after a remote access error) fails the SEND, which
//! removes it.
//!
//! Parting notices (`part_with`): dropped subscribers get `Dropped{reason}` and, at close,
//! every subscriber `EndOfStream{final_seq}`; all notices are posted first, then one bounded
//! wait for all of them (100 ms for drops; at close, what is left of the linger, at least
//! `NOTICE_GRACE` 20 ms), then the disconnects, so subscribers that take no SENDs cost one
//! wait, not one each. Closing the publisher (`Publisher::close(timeout)`, or its drop with
//! `timeout` its `linger`, default 2 s) stops accepting, waits up to `timeout` for
//! subscribers to consume everything (finishing a partly written message, dropping idle
//! subscribers), then parts: what a subscriber did not READ by then it reports lost.

use rdma_wire::Topic;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use crossbeam::utils::CachePadded;
use parking_lot::{Condvar, Mutex, MutexGuard};
use slab::Slab;

use rdma_fabric::{
    Access, CompletionQueue, ConnId, ConnectRequest, MemoryRegion, ProtectionDomain, QpCaps, QpInit, QueuePair,
    RemoteAddr, SendOp, SendRequest, Sge, SharedReceiveQueue, WcOpcode, WcStatus, WorkCompletion, RNR_RETRY_INFINITE,
};
use rdma_wire::protocol::{
    wall_clock_ms, AcceptData, AcceptTags, Admitted, ConnectData, ConnectFlags, Control, CredentialError, DropReason,
    RejectCode, ReplayGuard, StartAt, CONTROL_MSG_MAX, DOORBELL_RECORDS_MAX,
};
use rdma_wire::ring::{layout, Append, Checksum, Claim, RingConfig, RingProducer, NO_LIMIT};

use super::counters::PublisherCounters;
use super::flow_control::{credit_wanted, judge_slow, SlowVerdict};
use super::liveness::{Liveness, SENDS_PER_SUBSCRIBER};
use super::loan::Loan;
use super::options::{Policy, PublisherOptions};
use crate::error::{Error, Result};
use crate::node::ack_clock::{self, AckClock};
use crate::node::identity::publisher_id;
use crate::node::shared::{NodeShared, Route, RECHECK_INTERVAL};
use crate::node::single_writer::add_single_writer;
use crate::node::wr_id::{WrId, WrKind, MAX_SLOT};

/// Receive slots kept posted per subscriber (acks are coalesced; a few suffice).
const RECVS_PER_SUBSCRIBER: u32 = 4;
/// Most subscribers a publisher serves ([`PublisherBuilder::max_subscribers`](super::PublisherBuilder::max_subscribers)).
const MAX_SUBSCRIBERS: usize = 4096;
/// Longest wait for the end-of-stream notices to leave before disconnecting: a bound
/// for a dead peer; on a live one the send completes in microseconds (milliseconds in an
/// emulated guest).
const NOTICE_GRACE: Duration = Duration::from_millis(20);
/// Bytes of one control slot.
const SLOT: usize = 64;
/// Shortest [`PublisherBuilder::idle_timeout`](super::PublisherBuilder::idle_timeout): longer than the probe of a silent subscriber
/// ([`PROBE_AFTER`](super::liveness::PROBE_AFTER)) and than a busy host's scheduling hiccups.
const MIN_IDLE_TIMEOUT: Duration = Duration::from_millis(500);
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
const YIELD_AFTER_BYTES: usize = 16 * 1024;
/// Longest the CM thread waits for a publisher's state lock with a connection event (a
/// connect request, a disconnect) before it leaves the event to the lock's holder: an
/// [`ExclusivePublisher`](super::ExclusivePublisher) holds it between its messages, and the
/// CM thread serves the whole node.
const CM_LOCK_WAIT: Duration = Duration::from_millis(1);
/// Most connect requests left waiting for a publisher that holds its state; one more is
/// refused with `TooManySubscribers`.
const MAX_DEFERRED_ACCEPTS: usize = 16;

// A control message, padded to its largest size before a doorbell's records, fits its slot.
const _: () = assert!(SLOT >= CONTROL_MSG_MAX);
// Every receive and send slot fits a work-request id.
const _: () = assert!((MAX_SUBSCRIBERS as u32 * RECVS_PER_SUBSCRIBER) as usize <= MAX_SLOT + 1);
const _: () = assert!((MAX_SUBSCRIBERS as u32 * SENDS_PER_SUBSCRIBER) as usize <= MAX_SLOT + 1);

/// A subscriber connected to this publisher.
struct SubConn {
    qp: QueuePair,
    conn: ConnId,
    /// Consumed position from its acks (credit).
    acked: u64,
    /// Armed doorbell: ring when the tail passes this position.
    doorbell_at: Option<u64>,
    /// Since when it has been holding the publisher up (DropSlow).
    slow_since: Option<Instant>,
    /// The rhythm of its acks: which subscriber a blocked publisher asks for credit.
    clock: AckClock,
    /// The position it was last asked to ack by a `CreditWanted` (0: never).
    asked_for: u64,
    /// Its activity, and its own control send slots (so that one subscriber that takes no
    /// SENDs cannot hold up the others' doorbells or end of stream).
    liveness: Liveness,
    /// It said it reads the ring in place (`Control::ReadsInPlace`): it needs no checksum.
    reads_in_place: bool,
    /// Its receives take a doorbell with the new records (`ConnectFlags::DOORBELL_RECORDS`).
    doorbell_records: bool,
}

/// Connection events the CM thread left to the holder of the state lock (it did not get the
/// lock within [`CM_LOCK_WAIT`]): handled between two messages of an exclusive publisher, at
/// the next service tick, or when the publisher closes.
#[derive(Default)]
struct Deferred {
    /// Connect requests whose credential passed, at most [`MAX_DEFERRED_ACCEPTS`].
    accepts: Vec<(ConnectRequest, ConnectData, Option<Admitted>)>,
    /// Connections that ended (each one a subscriber's, so at most `max_subscribers`).
    disconnects: Vec<ConnId>,
}

/// What the `state` lock guards: the producer, the cached publisher limit and the subscriber
/// table. A [`Loan`] holds it while the application writes its record.
pub(super) struct PubState {
    producer: RingProducer,
    subs: Slab<SubConn>,
    by_conn: HashMap<ConnId, usize>,
    by_qp: HashMap<u32, usize>,
    /// The publisher limit: the position the producer may not write past, from the slowest
    /// subscriber's credit ([`NO_LIMIT`] under Overwrite or with no subscriber). Refreshed
    /// whenever an ack arrives or a subscriber comes or goes, never per message.
    limit: u64,
    /// The policy never limits the producer.
    overwrite: bool,
    /// The lowest armed doorbell position ([`u64::MAX`] when none is armed): a commit that does
    /// not pass it has no doorbell to ring.
    doorbell_floor: u64,
    /// A publishing call holds the turn (it may have released the lock to wait for credit):
    /// other publishing calls wait for the `turn` condition.
    publishing: bool,
    /// A message partly written when a Block timeout hit; finished by the next call.
    unfinished: Option<Vec<u8>>,
    closing: bool,
}

impl PubState {
    /// Recomputes the publisher limit and the credit gauges from the subscribers' acks.
    fn refresh_credit(&mut self, counters: &PublisherCounters) {
        let slowest = self.subs.iter().map(|(_, s)| s.acked).min();
        self.limit = match slowest {
            Some(min) if !self.overwrite => self.producer.limit_for(min),
            _ => NO_LIMIT,
        };
        counters.subscribers.store(self.subs.len() as u64, Ordering::Relaxed);
        counters.slowest_ack.store(slowest.unwrap_or(self.producer.tail()), Ordering::Relaxed);
    }

    /// Makes the records carry their checksum while some subscriber READs the ring (any that
    /// has not said it reads it in place), and none while every one reads it in place; the
    /// producer completes the retained records' checksums when they come back on.
    fn refresh_checksums(&mut self, counters: &PublisherCounters) {
        let needed = self.subs.iter().any(|(_, s)| !s.reads_in_place);
        if let Err(e) = self.producer.set_checksums(needed) {
            tracing::error!("completing the retained records' checksums: {e}");
        }
        counters.unchecked_records.store(self.producer.unchecked_records(), Ordering::Relaxed);
    }

    /// Sequence number the next message gets.
    pub(super) fn next_seq(&self) -> u64 {
        self.producer.tail_seq()
    }

    /// Whether a publishing call may write now without taking the turn: no other call holds
    /// it and no partly written message waits to be finished.
    fn may_publish_now(&self) -> bool {
        !self.publishing && self.unfinished.is_none()
    }

    /// Claims a record of `len` payload bytes under the publisher limit (room was checked).
    pub(super) fn claim(&mut self, len: usize) -> Result<Claim> {
        let limit = self.limit;
        self.producer
            .claim(len, limit)
            .map_err(Error::from_ring)?
            .ok_or_else(|| Error::Internal { detail: "a claim found no room after room was checked".into() })
    }

    /// Commits a claimed record; returns its sequence number.
    pub(super) fn commit(&mut self, claim: Claim) -> Result<u64> {
        self.producer.commit(claim).map_err(Error::from_ring)
    }

    /// Gives a claimed record back unpublished.
    pub(super) fn abandon(&mut self, claim: Claim) {
        self.producer.abandon(claim);
    }
}

/// What a publisher's handle, its publishing calls and the CM thread share.
pub(crate) struct PublisherShared {
    node: Arc<NodeShared>,
    topic: Topic,
    id: u64,
    options: PublisherOptions,
    max_record_payload: usize,
    /// A commit of at least this many payload bytes gives the CPU up once (see
    /// [`YIELD_AFTER_BYTES`]); `usize::MAX` where the NIC does not copy on this host's CPUs.
    yield_after: usize,
    remote: RemoteAddr,
    region_len: usize,
    cq: CompletionQueue,
    srq: Option<SharedReceiveQueue>,
    ctrl: MemoryRegion,
    /// The nonces of the credential proofs of the connects this publisher accepted (its own:
    /// another topic's subscribers cannot fill it).
    replay: Mutex<ReplayGuard>,
    recv_slots: u32,
    /// On cache lines of its own: the publishing thread writes the lock word and the producer
    /// per message, and a neighbour sharing a line (another thread's state) would take it
    /// from it every time.
    state: CachePadded<Mutex<PubState>>,
    /// Connection events waiting for the state lock's holder.
    deferred: Mutex<Deferred>,
    /// `deferred` holds an event: one relaxed load per message of an exclusive publisher.
    has_deferred: AtomicBool,
    /// Signalled when the publishing turn is given back.
    turn: Condvar,
    /// Signalled when a subscriber is accepted or removed.
    subscribers_changed: Condvar,
    counters: Arc<PublisherCounters>,
    // Declared last: deregistered after every queue pair that could READ it is gone. The
    // producer writes through its buffer; doorbells with records SEND from it.
    ring: MemoryRegion,
    /// This publisher's protection domain: its ring, control slots, SRQ and every subscriber's
    /// queue pair, and nothing else of the node.
    pd: ProtectionDomain,
}

impl PublisherShared {
    /// Creates the publisher of `topic` on `node`: registers its ring and control slots, and
    /// registers it with the node (which announces it, with discovery).
    pub(super) fn create(
        node: Arc<NodeShared>,
        topic: Topic,
        options: PublisherOptions,
    ) -> Result<Arc<PublisherShared>> {
        if options.max_subscribers == 0 || options.max_subscribers > MAX_SUBSCRIBERS {
            return Err(Error::InvalidOption { option: "max_subscribers", detail: "must be in 1..=4096".into() });
        }
        if options.idle_timeout < MIN_IDLE_TIMEOUT {
            let detail = format!("must be at least {MIN_IDLE_TIMEOUT:?} (Duration::MAX: never)");
            return Err(Error::InvalidOption { option: "idle_timeout", detail });
        }
        let topic_id = topic.id();
        let mut config = RingConfig::new(options.ring_capacity, node.epoch());
        if let Some(m) = options.max_record_payload {
            config.max_record_payload = m;
        }
        config.checksum = options.checksum.unwrap_or_else(Checksum::fastest_here);
        rdma_wire::ring::layout::check_geometry(config.capacity, config.max_record_payload)
            .map_err(|e| Error::InvalidOption { option: "ring_capacity/max_record_payload", detail: e.to_string() })?;
        let attrs = node.fabric().attributes().clone();
        // A protection domain of its own: a connection this publisher accepts reaches only
        // this publisher's memory, as a queue pair of one PD reaches no region of another.
        let pd = node.fabric().alloc_pd()?;
        let ring = pd.register(config.region_len(), Access::REMOTE_READ)?;
        let producer = RingProducer::new(Arc::clone(ring.buffer_arc()), config).map_err(Error::from_ring)?;
        let srq_wanted = (options.max_subscribers as u32 * RECVS_PER_SUBSCRIBER).min(attrs.max_srq_wr);
        let srq = if attrs.max_srq_wr > 0 { Some(pd.create_srq(srq_wanted, 1)?) } else { None };
        let recv_slots = if srq.is_some() { srq_wanted } else { options.max_subscribers as u32 * RECVS_PER_SUBSCRIBER };
        let send_slots = options.max_subscribers as u32 * SENDS_PER_SUBSCRIBER;
        let ctrl = pd.register((recv_slots + send_slots) as usize * SLOT, Access::LOCAL_WRITE)?;
        let cq_depth = (recv_slots + send_slots + 16).min(attrs.max_cqe);
        let cq = node.fabric().create_cq(cq_depth)?;
        if let Some(srq) = &srq {
            for slot in 0..recv_slots {
                srq.post_recv(WrId::publisher(WrKind::Recv, slot).encode(), &[ctrl.sge(slot as usize * SLOT, SLOT)])?;
            }
        }
        let shared = Arc::new(PublisherShared {
            id: publisher_id(node.id(), topic_id),
            topic: topic.clone(),
            max_record_payload: config.max_record_payload,
            yield_after: if attrs.copies_on_host_cpus { YIELD_AFTER_BYTES } else { usize::MAX },
            remote: ring.remote(),
            region_len: ring.len(),
            cq,
            srq,
            replay: Mutex::new(ReplayGuard::default()),
            recv_slots,
            state: CachePadded::new(Mutex::new(PubState {
                producer,
                subs: Slab::new(),
                by_conn: HashMap::new(),
                by_qp: HashMap::new(),
                limit: NO_LIMIT,
                overwrite: options.policy == Policy::Overwrite,
                doorbell_floor: u64::MAX,
                publishing: false,
                unfinished: None,
                closing: false,
            })),
            deferred: Mutex::new(Deferred::default()),
            has_deferred: AtomicBool::new(false),
            turn: Condvar::new(),
            subscribers_changed: Condvar::new(),
            counters: Arc::new(PublisherCounters::default()),
            ctrl,
            ring,
            pd,
            options,
            node: node.clone(),
        });
        node.add_publisher(&topic, &shared)?;
        Ok(shared)
    }

    /// The topic.
    pub(super) fn topic(&self) -> &str {
        self.topic.as_str()
    }

    /// The publisher's id (what subscribers see in [`crate::PublisherInfo`]).
    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    /// The publisher's counters.
    pub(super) fn counters(&self) -> &PublisherCounters {
        &self.counters
    }

    /// The counters, shared (for the node's stats registry).
    pub(crate) fn counters_arc(&self) -> &Arc<PublisherCounters> {
        &self.counters
    }

    /// Largest payload of one ring record: larger messages are fragmented.
    pub(super) fn max_record_payload(&self) -> usize {
        self.max_record_payload
    }

    /// The function that checksums the publisher's records.
    pub(super) fn checksum(&self) -> Checksum {
        self.state.lock().producer.checksum()
    }

    /// Subscribers connected now.
    pub(super) fn subscriber_count(&self) -> usize {
        self.state.lock().subs.len()
    }

    /// Numbers its first message `first_seq` (a publisher re-created on its node goes on
    /// after its predecessor); before it is added to the node, so before any message.
    pub(crate) fn start_at_seq(&self, first_seq: u64) -> Result<()> {
        self.state.lock().producer.start_at_seq(first_seq).map_err(Error::from_ring)
    }

    /// The sequence number the next message gets.
    pub(super) fn next_seq(&self) -> u64 {
        self.state.lock().producer.tail_seq()
    }

    /// Waits up to `timeout` until at least `n` subscribers are connected; returns how many are.
    pub(super) fn wait_for_subscribers(&self, n: usize, timeout: Duration) -> Result<usize> {
        let deadline = rdma_fabric::time::deadline_after(timeout);
        let mut st = self.state.lock();
        while st.subs.len() < n {
            if self.subscribers_changed.wait_until(&mut st, deadline).timed_out() && st.subs.len() < n {
                return Err(Error::Timeout {
                    what: "waiting for subscribers",
                    millis: rdma_fabric::time::millis(timeout),
                });
            }
        }
        Ok(st.subs.len())
    }

    /// Publishes `payload` as one message (fragmented through the ring when it is large);
    /// returns its sequence number. The hot path: a message that fits under the cached
    /// publisher limit costs one uncontended lock, the copy, the commit and [`after_commit`]'s
    /// look at the CQ; one that does not takes the turn and waits for credit as the policy says.
    ///
    /// [`after_commit`]: Self::after_commit
    pub(super) fn publish_bytes(&self, payload: &[u8]) -> Result<u64> {
        let mut st = self.state.lock();
        if st.may_publish_now() {
            if let Some(seq) = self.append_now(&mut st, payload)? {
                return Ok(seq);
            }
        }
        // Blocked by the limit (possibly after writing the first fragments, which the waiting
        // path resumes), or another call holds the turn.
        let deadline = Deadline::publish(self.options.policy);
        let (turn, st) = self.take_turn(st, deadline)?;
        let seq = self.append_in_turn(st, payload, deadline).map(|(seq, st)| {
            drop(st);
            seq
        });
        drop(turn);
        seq
    }

    /// The hot path of a publishing call allowed to write now: appends `payload` under the
    /// cached limit and runs [`after_commit`](Self::after_commit); `None` when the limit
    /// stopped it (the waiting path resumes a message partly written).
    #[inline]
    fn append_now(&self, st: &mut PubState, payload: &[u8]) -> Result<Option<u64>> {
        let limit = st.limit;
        match st.producer.append(payload, limit).map_err(Error::from_ring)? {
            Append::Complete { seq } => {
                self.after_commit(st, payload.len());
                Ok(Some(seq))
            }
            Append::Blocked { .. } => Ok(None),
        }
    }

    /// With the turn held: finishes a message a timed-out call left partly written, then
    /// appends `payload`, waiting for credit as the policy says.
    fn append_in_turn<'a>(
        &'a self,
        st: MutexGuard<'a, PubState>,
        payload: &[u8],
        deadline: Deadline,
    ) -> Result<(u64, MutexGuard<'a, PubState>)> {
        self.finish_unfinished(st, deadline).and_then(|st| self.append_waiting(st, payload, deadline))
    }

    /// Takes the publishing turn and the state for an
    /// [`ExclusivePublisher`](super::ExclusivePublisher), waiting for them as a publishing call
    /// waits (up to the Block timeout), and finishes a message a timed-out call left partly
    /// written.
    pub(super) fn hold(&self) -> Result<(Turn<'_>, MutexGuard<'_, PubState>)> {
        let deadline = Deadline::publish(self.options.policy);
        let (turn, st) = self.take_turn(self.state.lock(), deadline)?;
        match self.finish_unfinished(st, deadline) {
            Ok(st) => Ok((turn, st)),
            Err(e) => {
                drop(turn);
                Err(e)
            }
        }
    }

    /// An [`ExclusivePublisher`](super::ExclusivePublisher)'s publish, with the turn and the
    /// state held across its calls. It first lends the lock to a thread waiting for it (one
    /// relaxed load when none is) and handles connection events the CM thread left; then it
    /// publishes as [`publish_bytes`](Self::publish_bytes) does, without taking a lock: no
    /// locked instruction, so the stores of one message need not have left the store buffer
    /// before the next one is written.
    pub(super) fn publish_held<'a>(
        self: &'a Arc<Self>,
        held: &mut Option<MutexGuard<'a, PubState>>,
        payload: &[u8],
    ) -> Result<u64> {
        let st = held.get_or_insert_with(|| self.state.lock());
        MutexGuard::bump(st);
        self.run_deferred(st);
        if st.unfinished.is_none() {
            if let Some(seq) = self.append_now(st, payload)? {
                return Ok(seq);
            }
        }
        // Blocked by the limit (possibly after the first fragments), or a message left partly
        // written by a timeout: the waiting path, with the turn already held.
        let deadline = Deadline::publish(self.options.policy);
        let st = held.take().unwrap_or_else(|| self.state.lock());
        match self.append_in_turn(st, payload, deadline) {
            Ok((seq, st)) => {
                *held = Some(st);
                Ok(seq)
            }
            Err(e) => {
                *held = Some(self.state.lock());
                Err(e)
            }
        }
    }

    /// Lends `len` bytes of the ring (at most one record) for the next message; under Block it
    /// first waits for room, up to the timeout.
    pub(super) fn loan(&self, len: usize) -> Result<Loan<'_>> {
        if len > self.max_record_payload {
            return Err(Error::MessageTooLarge { len: len as u64, limit: self.max_record_payload as u64 });
        }
        let st = self.state.lock();
        if st.may_publish_now() && st.producer.needed_limit(len) <= st.limit {
            return Loan::new(self, st, None, len);
        }
        let deadline = Deadline::publish(self.options.policy);
        let (turn, st) = self.take_turn(st, deadline)?;
        match self.finish_unfinished(st, deadline).and_then(|st| self.wait_for_room(st, len, deadline)) {
            Ok(st) => Loan::new(self, st, Some(turn), len),
            Err(e) => {
                drop(turn);
                Err(e)
            }
        }
    }

    /// Waits (under Block, up to the timeout) until every connected subscriber has consumed
    /// everything published, and finishes a partly written message first.
    pub(super) fn flush(&self, timeout: Duration) -> Result<()> {
        let deadline = Deadline::flush(timeout);
        let (turn, st) = self.take_turn(self.state.lock(), deadline)?;
        let finished = self.finish_unfinished(st, deadline).map(drop);
        let consumed = finished.and_then(|()| {
            if self.wait_consumed(deadline.at) {
                Ok(())
            } else {
                Err(Error::Timeout { what: "flush", millis: rdma_fabric::time::millis(timeout) })
            }
        });
        drop(turn);
        consumed
    }

    /// Per message, after a commit: the counters, the acks and doorbell requests the CQ
    /// holds, and doorbells only when the tail passed an armed one.
    pub(super) fn after_commit(&self, st: &mut PubState, len: usize) {
        let c = &*self.counters;
        add_single_writer(&c.published, 1);
        add_single_writer(&c.bytes, len as u64);
        c.position.store(st.producer.tail(), Ordering::Relaxed);
        c.unchecked_records.store(st.producer.unchecked_records(), Ordering::Relaxed);
        self.progress(st);
        self.ring_doorbells(st);
        if len >= self.yield_after {
            std::thread::yield_now();
        }
    }

    /// Closes (once; later calls return at once): stop accepting, let subscribers consume
    /// (bounded by `linger`), tell them the stream ended (bounded by what is left of `linger`,
    /// at least [`NOTICE_GRACE`]), and disconnect them. Returns whether every subscriber had
    /// consumed everything.
    pub(super) fn close(self: &Arc<Self>, linger: Duration) -> bool {
        let linger = Deadline::flush(linger);
        let Ok((turn, mut st)) = self.take_turn(self.state.lock(), Deadline::never()) else {
            return true;
        };
        if st.closing {
            return true;
        }
        st.closing = true;
        // Connects left waiting are refused now, disconnects handled.
        self.run_deferred(&mut st);
        // After the last message, the one in progress included (finished below).
        let next_seq = st.producer.tail_seq() + 1;
        drop(st);
        self.node.remove_publisher(self.topic.id(), self, next_seq);
        // Whether or not it could be finished, the subscribers get what is complete.
        if let Ok(st) = self.finish_unfinished(self.state.lock(), linger) {
            drop(st);
        }
        let consumed = self.wait_consumed(linger.at);
        let mut st = self.state.lock();
        let final_seq = st.producer.tail_seq().saturating_sub(1);
        let parting: Vec<(usize, Control)> =
            st.subs.iter().map(|(k, _)| (k, Control::EndOfStream { final_seq })).collect();
        self.part_with(&mut st, &parting, linger.at.max(Instant::now() + NOTICE_GRACE));
        drop(st);
        drop(turn);
        consumed
    }

    /// How long the handle's drop lingers.
    pub(super) fn linger(&self) -> Duration {
        self.options.linger
    }
}

/// Flow control off the hot path: the publishing turn, waiting for credit under each policy
/// (its rules: `flow_control.rs`), asking the laggard for a solicited ack, and waiting until
/// everything is consumed.
impl PublisherShared {
    /// Takes the publishing turn, waiting until `deadline` for the call that holds it.
    fn take_turn<'a>(
        &'a self,
        mut st: MutexGuard<'a, PubState>,
        deadline: Deadline,
    ) -> Result<(Turn<'a>, MutexGuard<'a, PubState>)> {
        while st.publishing {
            if self.turn.wait_until(&mut st, deadline.at).timed_out() && st.publishing {
                return Err(deadline.expired(true));
            }
        }
        st.publishing = true;
        Ok((Turn { shared: self }, st))
    }

    /// Finishes a message a timed-out call left partly written (with the turn held).
    fn finish_unfinished<'a>(
        &'a self,
        mut st: MutexGuard<'a, PubState>,
        deadline: Deadline,
    ) -> Result<MutexGuard<'a, PubState>> {
        match st.unfinished.take() {
            Some(pending) => self.append_waiting(st, &pending, deadline).map(|(_, st)| st),
            None => Ok(st),
        }
    }

    /// Appends `payload`, waiting for credit as the policy says (with the turn held). On a
    /// Block timeout after part of the message was written, keeps it to be finished by the
    /// next call.
    fn append_waiting<'a>(
        &'a self,
        mut st: MutexGuard<'a, PubState>,
        payload: &[u8],
        deadline: Deadline,
    ) -> Result<(u64, MutexGuard<'a, PubState>)> {
        loop {
            self.progress(&mut st);
            let limit = st.limit;
            match st.producer.append(payload, limit).map_err(Error::from_ring)? {
                Append::Complete { seq } => {
                    self.after_commit(&mut st, payload.len());
                    return Ok((seq, st));
                }
                Append::Blocked { written, needed_limit, .. } => {
                    if written > 0 {
                        self.ring_doorbells(&mut st);
                    }
                    st = match self.wait_credit(st, needed_limit, deadline) {
                        Ok(st) => st,
                        Err(e) => {
                            if written > 0 {
                                self.state.lock().unfinished = Some(payload.to_vec());
                            }
                            return Err(e);
                        }
                    };
                }
            }
        }
    }

    /// Waits until a record of `len` bytes fits (with the turn held).
    fn wait_for_room<'a>(
        &'a self,
        mut st: MutexGuard<'a, PubState>,
        len: usize,
        deadline: Deadline,
    ) -> Result<MutexGuard<'a, PubState>> {
        loop {
            self.progress(&mut st);
            let needed = st.producer.needed_limit(len);
            if needed <= st.limit {
                return Ok(st);
            }
            st = self.wait_credit(st, needed, deadline)?;
        }
    }

    /// Called with the state locked when the producer needs `needed_limit`; releases the lock,
    /// applies the policy, and waits for acks. Returns the lock again when it is worth trying
    /// again.
    fn wait_credit<'a>(
        &'a self,
        mut st: MutexGuard<'a, PubState>,
        needed_limit: u64,
        deadline: Deadline,
    ) -> Result<MutexGuard<'a, PubState>> {
        self.counters.waits.fetch_add(1, Ordering::Relaxed);
        let now = Instant::now();
        // The service tick does not run while a call waits here: idle subscribers are found
        // here instead. One dropped may be all that held the publisher back.
        if self.drop_idle(&mut st, now) {
            return Ok(st);
        }
        let capacity = st.producer.capacity() as u64;
        let mut wait_until = deadline.at;
        if let Policy::DropSlow { grace } = self.options.policy {
            let mut to_drop = Vec::new();
            for (key, sub) in st.subs.iter_mut() {
                match judge_slow(sub.acked, capacity, needed_limit, &mut sub.slow_since, grace, now) {
                    SlowVerdict::Drop => to_drop.push(key),
                    SlowVerdict::Waiting { until } => wait_until = wait_until.min(until),
                    SlowVerdict::NotHoldingBack => {}
                }
            }
            if !to_drop.is_empty() {
                let tail = st.producer.tail();
                let drops: Vec<(usize, DropReason)> = to_drop
                    .into_iter()
                    .map(|key| (key, DropReason::TooSlow { lag: tail - st.subs[key].acked }))
                    .collect();
                self.drop_subscribers(&mut st, &drops);
                return Ok(st);
            }
        } else if now >= deadline.at {
            return Err(deadline.expired(false));
        }
        let solicited = st.subs.len() >= 2 && self.ask_for_credit(&mut st, needed_limit.saturating_sub(capacity));
        drop(st);
        let mut wcs = [WorkCompletion::default(); 32];
        let timeout = wait_until.saturating_duration_since(Instant::now()).min(RECHECK_INTERVAL);
        // No spinning while waiting for credit: the subscribers that will grant it need the CPU
        // (measured on 2 vCPUs: spinning here cost the publisher up to 7x CPU per message).
        let n = if solicited {
            self.counters.solicited_waits.fetch_add(1, Ordering::Relaxed);
            self.cq.poll_wait_solicited(&mut wcs, timeout)?
        } else {
            self.cq.poll_wait(&mut wcs, Duration::ZERO, timeout)?
        };
        let mut st = self.state.lock();
        self.handle_completions(&mut st, &wcs[..n]);
        if n == 0 && Instant::now() >= deadline.at && !matches!(self.options.policy, Policy::DropSlow { .. }) {
            return Err(deadline.expired(false));
        }
        Ok(st)
    }

    /// Several subscribers hold the publisher back (acked below `floor`): asks the one that
    /// will probably ack last ([`ack_clock::last_to_ack`]) for a solicited ack at `floor` or a
    /// quarter ring past its last ack, whichever is further (not past the tail), unless it was
    /// asked for that already. Returns whether the publisher may wait for solicited
    /// completions only: some subscriber has been asked and has not answered yet.
    fn ask_for_credit(&self, st: &mut PubState, floor: u64) -> bool {
        let laggards = st.subs.iter().filter(|(_, s)| s.acked < floor).map(|(k, s)| (k, &s.clock, s.acked));
        let Some(key) = ack_clock::last_to_ack(laggards) else { return false };
        let sub = &st.subs[key];
        let want = credit_wanted(sub.acked, floor, st.producer.capacity() as u64, st.producer.tail());
        if sub.asked_for >= want {
            return true;
        }
        match self.send_control(st, key, &Control::CreditWanted { position: want }) {
            Ok(_) => {
                st.subs[key].asked_for = want;
                self.counters.credit_requests.fetch_add(1, Ordering::Relaxed);
                true
            }
            Err(e) => {
                tracing::debug!(topic = %self.topic, "asking for credit: {e}");
                false
            }
        }
    }

    /// Whether every subscriber consumed up to the tail before `deadline`.
    fn wait_consumed(&self, deadline: Instant) -> bool {
        let mut wcs = [WorkCompletion::default(); 32];
        loop {
            {
                let mut st = self.state.lock();
                self.progress(&mut st);
                // The service tick skips a publisher in a call: idle subscribers are found here.
                self.drop_idle(&mut st, Instant::now());
                let tail = st.producer.tail();
                if st.subs.iter().all(|(_, s)| s.acked >= tail) {
                    return true;
                }
                self.ring_doorbells(&mut st);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            let n = self.cq.poll_wait(&mut wcs, Duration::from_micros(50), left.min(RECHECK_INTERVAL)).unwrap_or(0);
            let mut st = self.state.lock();
            self.handle_completions(&mut st, &wcs[..n]);
        }
    }
}

/// Completions taken from the CQ per poll.
const POLL_BATCH: usize = 32;

/// The control traffic: draining the CQ (acks and doorbell requests in, control SENDs
/// completing), the publisher → subscriber control SENDs (doorbells, credit requests, drops),
/// the service tick that does both for an idle publisher and drops idle subscribers, and
/// removing subscribers.
impl PublisherShared {
    /// Drains the completion queue without blocking. Most commits find it empty: a poll of one
    /// entry tells, before a batch of completions is set up (zeroing 32 per commit was about a
    /// quarter of the publisher's CPU time for 64 B messages).
    fn progress(&self, st: &mut PubState) {
        let mut first = [WorkCompletion::default(); 1];
        let polled = self.cq.poll(&mut first).and_then(|n| {
            if n == 0 {
                return Ok(());
            }
            self.handle_completions(st, &first);
            let mut wcs = [WorkCompletion::default(); POLL_BATCH];
            self.cq.drain(&mut wcs, |wcs| self.handle_completions(st, wcs))
        });
        if let Err(e) = polled {
            tracing::warn!(topic = %self.topic, "publisher CQ: {e}");
        }
    }

    /// Handles completions of the publisher's work: control SENDs done (or failed: the subscriber
    /// is removed), control messages received (and their receives reposted).
    fn handle_completions(&self, st: &mut PubState, wcs: &[WorkCompletion]) {
        for wc in wcs {
            let Some(id) = WrId::decode(wc.wr_id) else { continue };
            let slot = id.slot as u32;
            match id.kind {
                WrKind::Send => {
                    // Only a live subscriber's own queue pair frees its slot: the flushed SENDs
                    // of a removed one must not free a slot its successor is using.
                    let key = (slot / SENDS_PER_SUBSCRIBER) as usize;
                    if st.by_qp.get(&wc.qp_num) == Some(&key) {
                        st.subs[key].liveness.give_send(slot, wc.status == WcStatus::Success);
                        if wc.status != WcStatus::Success {
                            // Its queue pair failed (a remote access error, retries exhausted):
                            // it can never ack again.
                            tracing::debug!(topic = %self.topic, status = ?wc.status, "a subscriber's queue pair failed");
                            self.remove_subscriber(st, key);
                        }
                    }
                }
                WrKind::Recv => {
                    if wc.status == WcStatus::Success && wc.opcode == WcOpcode::Recv {
                        self.on_control(st, wc.qp_num, slot, wc.byte_len as usize);
                    }
                    self.repost_recv(st, slot, wc.status);
                }
                _ => {}
            }
        }
    }

    /// Posts the receive of control slot `slot` again (on the SRQ, or on its subscriber's queue
    /// pair while that one lives).
    fn repost_recv(&self, st: &PubState, slot: u32, status: WcStatus) {
        let sge = [self.ctrl.sge(slot as usize * SLOT, SLOT)];
        let result = match &self.srq {
            Some(srq) => srq.post_recv(WrId::publisher(WrKind::Recv, slot).encode(), &sge),
            None => {
                // Per-QP receives: slot s belongs to subscriber s / RECVS_PER_SUBSCRIBER.
                if status != WcStatus::Success {
                    return;
                }
                match st.subs.get((slot / RECVS_PER_SUBSCRIBER) as usize) {
                    Some(sub) => sub.qp.post_recv(WrId::publisher(WrKind::Recv, slot).encode(), &sge),
                    None => return,
                }
            }
        };
        if let Err(e) = result {
            tracing::debug!(topic = %self.topic, "reposting a receive: {e}");
        }
    }

    /// A subscriber's control message (`len` bytes in receive slot `slot`): acks and doorbell
    /// requests; anything else is refused and counted.
    fn on_control(&self, st: &mut PubState, qp_num: u32, slot: u32, len: usize) {
        let mut bytes = [0u8; SLOT];
        let len = len.min(SLOT);
        if self.ctrl.buffer().read(slot as usize * SLOT, &mut bytes[..len]).is_err() {
            return;
        }
        let Some(&key) = st.by_qp.get(&qp_num) else {
            self.counters.bad_acks.fetch_add(1, Ordering::Relaxed);
            return;
        };
        let tail = st.producer.tail();
        match Control::decode(&bytes[..len]) {
            Ok(Control::Ack { position, .. }) => {
                let sub = &mut st.subs[key];
                if position > tail || position < sub.acked {
                    self.counters.bad_acks.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(topic = %self.topic, position, tail, "refused an ack outside [acked, tail]");
                    return;
                }
                self.counters.acks.fetch_add(1, Ordering::Relaxed);
                sub.liveness.heard();
                sub.acked = position;
                sub.slow_since = None;
                sub.clock.on_ack(Instant::now());
                st.refresh_credit(&self.counters);
            }
            Ok(Control::DoorbellRequest { armed, position }) => {
                st.subs[key].liveness.heard();
                st.subs[key].doorbell_at = armed.then_some(position);
                if armed {
                    st.doorbell_floor = st.doorbell_floor.min(position);
                }
                self.ring_doorbells(st);
            }
            Ok(Control::ReadsInPlace) => {
                st.subs[key].liveness.heard();
                st.subs[key].reads_in_place = true;
                st.refresh_checksums(&self.counters);
            }
            Ok(Control::Bye) => {}
            Ok(other) => {
                self.counters.bad_acks.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(topic = %self.topic, ?other, "a subscriber sent a publisher's control message");
            }
            Err(e) => {
                self.counters.bad_acks.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(topic = %self.topic, "undecodable control message: {e}");
            }
        }
    }

    /// Sends a doorbell to every parked subscriber whose position the tail has passed, and
    /// lowers the doorbell floor to the lowest one still armed. Nothing to do (one comparison,
    /// inlined into the publishing call) while the tail has not passed the floor.
    #[inline]
    fn ring_doorbells(&self, st: &mut PubState) {
        if st.producer.tail() > st.doorbell_floor {
            self.ring_passed_doorbells(st);
        }
    }

    /// [`ring_doorbells`](Self::ring_doorbells) once the tail has passed the floor.
    #[cold]
    fn ring_passed_doorbells(&self, st: &mut PubState) {
        let tail = st.producer.tail();
        // A doorbell request handled while this loop sends (a send drains the CQ when its
        // subscriber's slots are busy) lowers the floor from here: kept by the `min` below.
        st.doorbell_floor = u64::MAX;
        let mut floor = u64::MAX;
        for key in 0..st.subs.capacity() {
            let Some(at) = st.subs.get(key).and_then(|s| s.doorbell_at) else { continue };
            if tail > at && self.send_doorbell(st, key, at, tail).is_ok() {
                st.subs[key].doorbell_at = None;
                self.counters.doorbells.fetch_add(1, Ordering::Relaxed);
            } else {
                // Not passed yet, or no send slot now: the next commit tries again.
                floor = floor.min(at);
            }
        }
        st.doorbell_floor = floor.min(st.doorbell_floor);
    }

    /// Rings the doorbell of subscriber `key`, armed at `at`, with the tail at `tail`: with the
    /// records from `at` on when it takes them (it READs the ring, its receives are large
    /// enough), so that it needs no READ for what it was woken for. They are SENT from the ring
    /// itself: at most [`DOORBELL_RECORDS_MAX`] bytes, up to the tail and never past the end of
    /// the data area (the position is the subscriber's word: any position only names bytes of
    /// this ring, which it may READ anyway). Under flow control they stay put until it acks
    /// them; under Overwrite a lap may tear them as it would tear a READ, and the checksums
    /// every record carries while a subscriber READs (`refresh_checksums`) tell.
    fn send_doorbell(&self, st: &mut PubState, key: usize, at: u64, tail: u64) -> Result<u32> {
        let sub = &st.subs[key];
        let capacity = st.producer.capacity();
        let records = (tail - at).min(DOORBELL_RECORDS_MAX as u64).min(layout::room_to_end(at, capacity));
        if !sub.doorbell_records || sub.reads_in_place || records == 0 {
            return self.send_control(st, key, &Control::Doorbell { tail });
        }
        let ring = self.ring.sge(layout::data_offset(at, capacity), records as usize);
        let slot = self.send_control_with(st, key, &Control::DoorbellRecords { position: at, tail }, Some(ring))?;
        self.counters.doorbells_with_records.fetch_add(1, Ordering::Relaxed);
        Ok(slot)
    }

    /// Posts a control SEND to subscriber `key` from one of its own send slots; returns the
    /// slot used.
    fn send_control(&self, st: &mut PubState, key: usize, msg: &Control) -> Result<u32> {
        self.send_control_with(st, key, msg, None)
    }

    /// [`send_control`](Self::send_control), followed in the same SEND by the bytes of `then`
    /// (the message is then padded with zeros to [`CONTROL_MSG_MAX`] bytes, where they start).
    fn send_control_with(&self, st: &mut PubState, key: usize, msg: &Control, then: Option<Sge>) -> Result<u32> {
        let take = |st: &mut PubState| st.subs.get_mut(key).and_then(|s| s.liveness.take_send());
        let bit = match take(st) {
            Some(bit) => bit,
            None => {
                // Its SENDs may have completed since the last drain.
                self.progress(st);
                take(st).ok_or_else(|| Error::PeerMisbehaved {
                    detail: "the subscriber takes none of its control messages: every send slot is in use".into(),
                })?
            }
        };
        let slot = key as u32 * SENDS_PER_SUBSCRIBER + bit;
        let mut bytes = msg.encode().map_err(Error::from_own_encoding)?;
        debug_assert!(bytes.len() <= CONTROL_MSG_MAX);
        if then.is_some() {
            bytes.resize(CONTROL_MSG_MAX, 0);
        }
        let offset = (self.recv_slots + slot) as usize * SLOT;
        let result = self.ctrl.buffer().write(offset, &bytes).map_err(Error::from).and_then(|_| {
            let message = self.ctrl.sge(offset, bytes.len());
            let sges = [message, then.unwrap_or(message)];
            let sges = if then.is_some() { &sges[..] } else { &sges[..1] };
            st.subs[key]
                .qp
                .post_send(&SendRequest::new(WrId::publisher(WrKind::Send, slot).encode(), SendOp::Send, sges))
                .map_err(Error::from)
        });
        match result {
            Ok(()) => Ok(slot),
            Err(e) => {
                st.subs[key].liveness.give_send(slot, false);
                Err(e)
            }
        }
    }

    /// Drops subscribers (DropSlow, idle): counts each, tells it why, and disconnects it. The
    /// notices get one short wait in all: a dropped subscriber may take none, and the others
    /// must not wait for each in turn.
    fn drop_subscribers(&self, st: &mut PubState, drops: &[(usize, DropReason)]) {
        let mut parting = Vec::with_capacity(drops.len());
        for &(key, reason) in drops.iter().filter(|(key, _)| st.subs.contains(*key)) {
            self.counters.dropped.fetch_add(1, Ordering::Relaxed);
            tracing::info!(topic = %self.topic, ?reason, "dropping a subscriber");
            parting.push((key, Control::Dropped { reason }));
        }
        self.part_with(st, &parting, Instant::now() + Duration::from_millis(100));
    }

    /// Sends each subscriber its parting notice (its end of stream, why it is dropped), waits
    /// until `deadline` at most for the notices to leave (all at once, so that a disconnect
    /// does not flush them), and removes the subscribers.
    fn part_with(&self, st: &mut PubState, parting: &[(usize, Control)], deadline: Instant) {
        let mut slots = Vec::with_capacity(parting.len());
        for (key, notice) in parting {
            // Sending one drains the CQ, which may have removed another.
            if st.subs.contains(*key) {
                slots.extend(self.send_control(st, *key, notice).ok());
            }
        }
        for slot in slots {
            self.await_send(st, slot, deadline);
        }
        for &(key, _) in parting {
            self.remove_subscriber(st, key);
        }
    }

    /// Waits (bounded) for the send in `slot` to complete, so a disconnect does not flush it.
    fn await_send(&self, st: &mut PubState, slot: u32, deadline: Instant) {
        let key = (slot / SENDS_PER_SUBSCRIBER) as usize;
        let mut wcs = [WorkCompletion::default(); POLL_BATCH];
        while st.subs.get(key).is_some_and(|s| !s.liveness.send_free(slot)) && Instant::now() < deadline {
            let n = self.cq.poll_wait(&mut wcs, Duration::from_micros(50), Duration::from_millis(5)).unwrap_or(0);
            self.handle_completions(st, &wcs[..n]);
        }
    }

    /// The service tick (CM thread, every [`SERVICE_INTERVAL`]): unless a publishing call holds
    /// the state (it drains the CQ itself), drains the CQ, so that receives are reposted and
    /// acks and doorbell requests handled while the application publishes nothing, and drops
    /// idle subscribers.
    ///
    /// [`SERVICE_INTERVAL`]: super::SERVICE_INTERVAL
    pub(crate) fn service(self: &Arc<Self>) {
        let Some(mut st) = self.state.try_lock() else { return };
        self.run_deferred(&mut st);
        if st.publishing {
            return;
        }
        self.progress(&mut st);
        self.drop_idle(&mut st, Instant::now());
    }

    /// Drops every subscriber idle for `idle_timeout` or longer (see [`Liveness::tick`]);
    /// returns whether it dropped any.
    ///
    /// [`Liveness::tick`]: super::liveness::Liveness::tick
    fn drop_idle(&self, st: &mut PubState, now: Instant) -> bool {
        let timeout = self.options.idle_timeout;
        let tail = st.producer.tail();
        let waits_for_acks = !st.overwrite;
        let mut probes = Vec::new();
        let mut idle = Vec::new();
        for (key, sub) in st.subs.iter_mut() {
            let quiet = sub.liveness.tick(now, waits_for_acks && sub.acked < tail);
            if quiet >= timeout {
                idle.push((key, quiet));
            } else if sub.liveness.wants_probe(quiet) {
                probes.push(key);
            }
        }
        for key in probes {
            // A live subscriber takes it (and acks solicited once it has consumed that far); a
            // failed queue pair fails it, and the completion removes the subscriber.
            if st.subs.contains(key) && self.send_control(st, key, &Control::CreditWanted { position: tail }).is_ok() {
                st.subs[key].asked_for = tail;
            }
        }
        let drops: Vec<(usize, DropReason)> = idle
            .iter()
            .map(|&(key, quiet)| (key, DropReason::Idle { millis: rdma_fabric::time::millis(quiet) }))
            .collect();
        self.drop_subscribers(st, &drops);
        !idle.is_empty()
    }

    /// Forgets subscriber `key`: its credit, its route, and disconnects it.
    fn remove_subscriber(&self, st: &mut PubState, key: usize) {
        if !st.subs.contains(key) {
            return;
        }
        let sub = st.subs.remove(key);
        st.refresh_credit(&self.counters);
        st.refresh_checksums(&self.counters);
        self.subscribers_changed.notify_all();
        st.by_conn.remove(&sub.conn);
        st.by_qp.remove(&sub.qp.qp_num());
        self.node.remove_route(sub.conn);
        if let Err(e) = sub.qp.disconnect() {
            tracing::debug!(topic = %self.topic, "disconnect: {e}");
        }
    }
}

/// The CM thread's side: connect requests are checked (the topic's credential first) and
/// accepted (the ring's address and the subscriber's start point go out in the accept private
/// data) or rejected with a reason; established and disconnected connections are tracked.
impl PublisherShared {
    /// CM thread: a subscriber asks to connect. Its credential is checked first: nothing of
    /// the ring (the accept data carries its address and rkey) leaves before it passed.
    pub(crate) fn accept(self: &Arc<Self>, req: ConnectRequest, data: &ConnectData) {
        let admitted = match self.check_credential(data, req.peer_addr()) {
            Ok(admitted) => admitted,
            Err(e) => {
                self.counters.rejected_unauthorized.fetch_add(1, Ordering::Relaxed);
                self.node.reject_connect(req, RejectCode::Unauthorized, &e.to_string());
                return;
            }
        };
        match self.state.try_lock_for(CM_LOCK_WAIT) {
            Some(mut st) => self.accept_admitted(&mut st, req, data, admitted),
            None => {
                let mut deferred = self.deferred.lock();
                if deferred.accepts.len() >= MAX_DEFERRED_ACCEPTS {
                    drop(deferred);
                    let detail = format!("{MAX_DEFERRED_ACCEPTS} connects already wait for the publisher");
                    self.node.reject_connect(req, RejectCode::TooManySubscribers, &detail);
                    return;
                }
                deferred.accepts.push((req, *data, admitted));
                self.note_deferred();
            }
        }
    }

    /// [`accept`](Self::accept) once the credential passed, with the state held: the
    /// subscriber's start point and credit are the producer's now.
    fn accept_admitted(
        self: &Arc<Self>,
        st: &mut PubState,
        req: ConnectRequest,
        data: &ConnectData,
        admitted: Option<Admitted>,
    ) {
        let refuse = if st.closing {
            Some((RejectCode::ShuttingDown, "the publisher is closing".to_string()))
        } else if st.subs.len() >= self.options.max_subscribers {
            Some((RejectCode::TooManySubscribers, format!("limit {}", self.options.max_subscribers)))
        } else if !data.accepts.contains(self.options.policy.kind().into()) {
            Some((RejectCode::PolicyNotAccepted, format!("{:?}", self.options.policy.kind())))
        } else {
            None
        };
        if let Some((reason, detail)) = refuse {
            self.node.reject_connect(req, reason, &detail);
            return;
        }
        let start = match data.start {
            StartAt::Latest => st.producer.latest(),
            StartAt::Earliest => st.producer.earliest(),
        };
        let accept = AcceptData {
            topic: self.topic.id(),
            ring: self.remote,
            region_len: self.region_len as u64,
            capacity: st.producer.capacity() as u64,
            epoch: self.node.epoch(),
            publisher_id: self.id,
            policy: self.options.policy.kind().into(),
            max_record_payload: self.max_record_payload as u32,
            start_position: start.position,
            start_seq: start.seq,
            first_seq: start.first_seq,
            checksum: st.producer.checksum(),
            message_type: self.options.message_type.clone(),
            tags: AcceptTags::default(),
        }
        // The subscriber's challenge answered under the domain secret, and under the topic's
        // credential (whose proof passed above): it can tell this node from one that took over
        // the announced address, and this accept from a replayed one.
        .with_tags(data.challenge(), self.node.domain_secret(), self.options.credential.as_ref());
        let encoded = match accept.encode() {
            Ok(b) => b,
            Err(e) => {
                tracing::error!(topic = %self.topic, "encoding accept data: {e}");
                return;
            }
        };
        let caps = QpCaps {
            max_send_wr: 32,
            max_recv_wr: if self.srq.is_some() { 0 } else { RECVS_PER_SUBSCRIBER },
            // A doorbell with records gathers its message and the ring's bytes.
            max_send_sge: 2,
            max_recv_sge: 1,
        };
        let init = QpInit {
            srq: self.srq.as_ref(),
            caps,
            rnr_retry: RNR_RETRY_INFINITE,
            // READ depths: the default, within the device's limits.
            ..QpInit::new(&self.pd, &self.cq)
        };
        // Until it says it reads the ring in place, a subscriber may READ it: every retained
        // record gets its checksum before the accept (with the ring's address) goes out.
        if let Err(e) = st.producer.set_checksums(true) {
            tracing::error!(topic = %self.topic, "completing the retained records' checksums: {e}");
        }
        self.counters.unchecked_records.store(st.producer.unchecked_records(), Ordering::Relaxed);
        let conn = req.conn_id();
        let peer = req.peer_addr();
        let route: Weak<Self> = Arc::downgrade(self);
        self.node.routes().insert(conn, Route::Subscriber(route));
        let qp = match req.accept(&init, &encoded) {
            Ok(qp) => qp,
            Err(e) => {
                self.node.remove_route(conn);
                tracing::warn!(topic = %self.topic, %peer, "accept failed: {e}");
                return;
            }
        };
        if let Some(admitted) = admitted {
            // Only an accepted connect's nonce takes room in the guard.
            self.replay.lock().remember(admitted);
        }
        let key = st.subs.vacant_key();
        if self.srq.is_none() {
            for i in 0..RECVS_PER_SUBSCRIBER {
                let slot = key as u32 * RECVS_PER_SUBSCRIBER + i;
                if slot < self.recv_slots {
                    let _ = qp.post_recv(
                        WrId::publisher(WrKind::Recv, slot).encode(),
                        &[self.ctrl.sge(slot as usize * SLOT, SLOT)],
                    );
                }
            }
        }
        st.by_conn.insert(conn, key);
        st.by_qp.insert(qp.qp_num(), key);
        st.subs.insert(SubConn {
            qp,
            conn,
            acked: start.position,
            doorbell_at: None,
            slow_since: None,
            clock: AckClock::default(),
            asked_for: 0,
            liveness: Liveness::default(),
            reads_in_place: false,
            doorbell_records: data.flags.contains(ConnectFlags::DOORBELL_RECORDS),
        });
        st.refresh_credit(&self.counters);
        self.subscribers_changed.notify_all();
        self.counters.accepted.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(topic = %self.topic, %peer, position = start.position, "subscriber accepted");
    }

    /// Whether the subscriber at `peer` proved the topic's credential (always, when the topic
    /// has none): its nonce, to remember once the connect is accepted.
    fn check_credential(&self, data: &ConnectData, peer: SocketAddr) -> Result<Option<Admitted>, CredentialError> {
        let Some(secret) = &self.options.credential else { return Ok(None) };
        data.check_credential(secret, &mut self.replay.lock(), wall_clock_ms(), peer.ip()).map(Some)
    }

    /// CM thread: a subscriber's connection is up.
    pub(crate) fn on_established(&self, conn: ConnId) {
        tracing::trace!(topic = %self.topic, conn, "subscriber established");
    }

    /// CM thread: a subscriber's connection is gone (left to the state's holder when it is
    /// held longer than [`CM_LOCK_WAIT`]).
    pub(crate) fn on_disconnected(&self, conn: ConnId) {
        match self.state.try_lock_for(CM_LOCK_WAIT) {
            Some(mut st) => self.disconnected(&mut st, conn),
            None => {
                self.deferred.lock().disconnects.push(conn);
                self.note_deferred();
            }
        }
    }

    /// After an event went into `deferred`: raises the flag the holder checks, and counts it.
    fn note_deferred(&self) {
        self.has_deferred.store(true, Ordering::Release);
        self.counters.deferred_events.fetch_add(1, Ordering::Relaxed);
    }

    /// Removes the subscriber of connection `conn`, if it is still one.
    fn disconnected(&self, st: &mut PubState, conn: ConnId) {
        if let Some(&key) = st.by_conn.get(&conn) {
            self.remove_subscriber(st, key);
        }
    }

    /// Handles the connection events the CM thread left to the state's holder, if any: one
    /// relaxed load when there are none.
    #[inline]
    pub(super) fn run_deferred(self: &Arc<Self>, st: &mut PubState) {
        if self.has_deferred.load(Ordering::Relaxed) {
            self.run_deferred_now(st);
        }
    }

    /// [`run_deferred`](Self::run_deferred) once the flag is up.
    #[cold]
    fn run_deferred_now(self: &Arc<Self>, st: &mut PubState) {
        let deferred = {
            let mut deferred = self.deferred.lock();
            self.has_deferred.store(false, Ordering::Relaxed);
            std::mem::take(&mut *deferred)
        };
        for (req, data, admitted) in deferred.accepts {
            self.accept_admitted(st, req, &data, admitted);
        }
        for conn in deferred.disconnects {
            self.disconnected(st, conn);
        }
    }
}

/// The publishing turn, held by the one call that may release the state lock in the middle
/// of a message (to wait for credit). Given back on drop; drop it only after the state lock.
pub(super) struct Turn<'a> {
    shared: &'a PublisherShared,
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        self.shared.state.lock().publishing = false;
        self.shared.turn.notify_one();
    }
}

/// When a waiting publisher call gives up, and the timeout it then reports: its own (`flush`)
/// or the Block policy's (a publishing call).
#[derive(Debug, Clone, Copy)]
struct Deadline {
    at: Instant,
    timeout: Duration,
    call: Call,
}

/// The call a [`Deadline`] belongs to.
#[derive(Debug, Clone, Copy)]
enum Call {
    Publish,
    Flush,
}

impl Deadline {
    /// A publishing call's: the Block timeout from now (DropSlow and Overwrite do not time out).
    fn publish(policy: Policy) -> Deadline {
        let timeout = match policy {
            Policy::Block { timeout } => timeout,
            _ => Duration::MAX,
        };
        Deadline { at: rdma_fabric::time::deadline_after(timeout), timeout, call: Call::Publish }
    }

    /// A `flush(timeout)`'s.
    fn flush(timeout: Duration) -> Deadline {
        Deadline { at: rdma_fabric::time::deadline_after(timeout), timeout, call: Call::Flush }
    }

    /// One that never passes (closing takes the turn however long it takes).
    fn never() -> Deadline {
        Deadline::publish(Policy::Overwrite)
    }

    /// The error of a call that waited until this deadline for the turn (`turn`) or for the
    /// slowest subscriber.
    fn expired(&self, turn: bool) -> Error {
        let what = match (self.call, turn) {
            (Call::Publish, true) => "publish (waiting for another publishing call)",
            (Call::Publish, false) => "publish (waiting for the slowest subscriber)",
            (Call::Flush, true) => "flush (waiting for another publishing call)",
            (Call::Flush, false) => "flush (waiting for the slowest subscriber)",
        };
        Error::Timeout { what, millis: rdma_fabric::time::millis(self.timeout) }
    }
}
