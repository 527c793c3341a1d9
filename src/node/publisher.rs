//! The publishing side of a topic: the ring in a remote-read-only region, the subscribers
//! connected to it, acks as credits, the slow-subscriber policy, and doorbells for parked
//! subscribers.
//!
//! Two locks: `writer` serialises publishing calls for their whole duration (including waits for
//! credit); `state` guards the producer and the subscriber table and is only held briefly, so the
//! CM thread can accept subscribers while a publisher waits.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use parking_lot::{Mutex, MutexGuard};

pub use crate::ring::Claim;
use serde::Serialize;
use slab::Slab;

use crate::error::{Error, Result};
use crate::fabric::{
    Access, CompletionQueue, ConnId, ConnectRequest, MemoryRegion, QpCaps, QpInit, QueuePair, RemoteAddr, SendOp,
    SendRequest, SharedReceiveQueue, WcOpcode, WcStatus, WorkCompletion, RNR_RETRY_INFINITE,
};
use crate::protocol::{
    AcceptData, ConnectData, Control, DropReason, Policy as WirePolicy, ProtocolError, RejectCode, RejectData, StartAt,
    TopicId, CONTROL_MSG_MAX,
};
use crate::ring::{Append, Checksum, RingConfig, RingProducer, NO_LIMIT};

use super::ack_clock::{self, AckClock};
use super::{check_topic, NodeShared, Route};

/// What a publisher does when a subscriber falls behind by a whole ring.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    /// Lossless: `publish` waits for the slowest subscriber up to `timeout`, then returns
    /// [`Error::Timeout`].
    Block {
        /// Longest wait of one publish call.
        timeout: Duration,
    },
    /// A subscriber that keeps the publisher waiting longer than `grace` is disconnected and
    /// told why; the others are not slowed further.
    DropSlow {
        /// How long a slow subscriber may hold the publisher up.
        grace: Duration,
    },
    /// The publisher never waits; a subscriber that was overrun learns exactly how many
    /// messages it lost and continues from the oldest retained one.
    Overwrite,
}

impl Default for Policy {
    fn default() -> Self {
        Policy::Block { timeout: Duration::from_secs(5) }
    }
}

impl Policy {
    fn kind(self) -> WirePolicy {
        match self {
            Policy::Block { .. } => WirePolicy::Block,
            Policy::DropSlow { .. } => WirePolicy::DropSlow,
            Policy::Overwrite => WirePolicy::Overwrite,
        }
    }
}

/// Options of a publisher.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublisherOptions {
    /// Slow-subscriber policy.
    pub policy: Policy,
    /// Ring data bytes: a power of two, at least 64 KiB (default 1 MiB).
    pub ring_capacity: usize,
    /// Largest payload of one ring record; larger messages are fragmented (default: a
    /// quarter of the ring).
    pub max_record_payload: Option<usize>,
    /// Most subscribers connected at once (default 256).
    pub max_subscribers: usize,
    /// On drop, how long to wait for subscribers to consume what was published (default 2 s).
    pub linger: Duration,
    /// The function that checksums the ring's records, which subscribers learn from the
    /// accept private data (default `None`: whichever is faster on this CPU, timed once per
    /// process by [`Checksum::fastest_here`]).
    pub checksum: Option<Checksum>,
}

impl Default for PublisherOptions {
    fn default() -> Self {
        PublisherOptions {
            policy: Policy::default(),
            ring_capacity: 1 << 20,
            max_record_payload: None,
            max_subscribers: 256,
            linger: Duration::from_secs(2),
            checksum: None,
        }
    }
}

/// Counters of a publisher, readable while it runs.
#[derive(Debug, Default)]
pub struct PublisherCounters {
    /// Messages published.
    pub published: AtomicU64,
    /// Payload bytes published.
    pub bytes: AtomicU64,
    /// Acks received.
    pub acks: AtomicU64,
    /// Acks refused (position not yet published, or unknown sender).
    pub bad_acks: AtomicU64,
    /// Doorbells sent.
    pub doorbells: AtomicU64,
    /// Subscribers accepted.
    pub accepted: AtomicU64,
    /// Subscribers dropped by the DropSlow policy.
    pub dropped: AtomicU64,
    /// Times `publish` waited for credit.
    pub waits: AtomicU64,
    /// Of those, the waits woken only by the solicited ack of the subscriber asked for credit
    /// (several subscribers held the publisher back), not by every ack.
    pub solicited_waits: AtomicU64,
    /// `CreditWanted` requests sent: a blocked publisher asking the subscriber that will
    /// probably ack last for a solicited ack.
    pub credit_requests: AtomicU64,
    /// Subscribers connected now (a gauge).
    pub subscribers: AtomicU64,
    /// Ring position after the last message published (a gauge, bytes).
    pub position: AtomicU64,
    /// Position acknowledged by the slowest connected subscriber (a gauge, bytes): the lag is
    /// `position - slowest_ack`.
    pub slowest_ack: AtomicU64,
}

/// Receive slots kept posted per subscriber (acks are coalesced; a few suffice).
const RECVS_PER_SUBSCRIBER: u32 = 4;
/// Send slots for publisher → subscriber control messages.
const SEND_SLOTS: u32 = 64;
/// Longest wait for the end-of-stream notices to leave before disconnecting: a bound
/// for a dead peer; on a live one the send completes in microseconds (milliseconds in an
/// emulated guest).
const NOTICE_TIMEOUT: Duration = Duration::from_secs(2);
/// Bytes of one control slot.
const SLOT: usize = 64;

const KIND_RECV: u64 = 1;
const KIND_SEND: u64 = 2;

fn wr_id(kind: u64, slot: u32) -> u64 {
    (kind << 32) | slot as u64
}

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
}

struct PubState {
    producer: RingProducer,
    subs: Slab<SubConn>,
    by_conn: HashMap<ConnId, usize>,
    by_qp: HashMap<u32, usize>,
    free_send_slots: Vec<u32>,
    /// A message partly written when a Block timeout hit; finished by the next call.
    unfinished: Option<Vec<u8>>,
    closing: bool,
}

/// What the publisher's parts share with the CM thread.
pub(crate) struct PublisherShared {
    node: Arc<NodeShared>,
    topic: String,
    topic_id: TopicId,
    id: u64,
    options: PublisherOptions,
    max_record_payload: usize,
    remote: RemoteAddr,
    region_len: usize,
    cq: CompletionQueue,
    srq: Option<SharedReceiveQueue>,
    ctrl: MemoryRegion,
    recv_slots: u32,
    writer: Mutex<()>,
    state: Mutex<PubState>,
    counters: Arc<PublisherCounters>,
    // Declared last: deregistered after every queue pair that could READ it is gone. Only
    // held: the producer writes through its buffer.
    _ring: MemoryRegion,
}

/// Publishes messages on one topic. `Send + Sync`: share it between threads with an `Arc`.
pub struct Publisher {
    shared: Arc<PublisherShared>,
}

impl std::fmt::Debug for Publisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Publisher").field("topic", &self.shared.topic).field("id", &self.shared.id).finish()
    }
}

impl Publisher {
    pub(crate) fn create(node: Arc<NodeShared>, topic: &str, options: PublisherOptions) -> Result<Publisher> {
        check_topic(topic)?;
        if options.max_subscribers == 0 || options.max_subscribers > 4096 {
            return Err(Error::InvalidOption { option: "max_subscribers", detail: "must be in 1..=4096".into() });
        }
        let topic_id = TopicId::of(topic);
        let mut config = RingConfig::new(options.ring_capacity, node.epoch);
        if let Some(m) = options.max_record_payload {
            config.max_record_payload = m;
        }
        config.checksum = options.checksum.unwrap_or_else(Checksum::fastest_here);
        crate::ring::layout::check_geometry(config.capacity, config.max_record_payload)
            .map_err(|e| Error::InvalidOption { option: "ring_capacity/max_record_payload", detail: e.to_string() })?;
        let attrs = node.fabric.attributes().clone();
        let ring = node.pd.register(config.region_len(), Access::REMOTE_READ)?;
        let producer = RingProducer::new(Arc::clone(ring.buffer_arc()), config)?;
        let srq_wanted = (options.max_subscribers as u32 * RECVS_PER_SUBSCRIBER).min(attrs.max_srq_wr);
        let srq = if attrs.max_srq_wr > 0 { Some(node.pd.create_srq(srq_wanted, 1)?) } else { None };
        let recv_slots = if srq.is_some() { srq_wanted } else { options.max_subscribers as u32 * RECVS_PER_SUBSCRIBER };
        let ctrl = node.pd.register((recv_slots + SEND_SLOTS) as usize * SLOT, Access::LOCAL_WRITE)?;
        let cq_depth = (recv_slots + SEND_SLOTS + 16).min(attrs.max_cqe);
        let cq = node.fabric.create_cq(cq_depth)?;
        if let Some(srq) = &srq {
            for slot in 0..recv_slots {
                srq.post_recv(wr_id(KIND_RECV, slot), &[ctrl.sge(slot as usize * SLOT, SLOT)])?;
            }
        }
        let shared = Arc::new(PublisherShared {
            id: publisher_id(node.id, topic_id),
            topic: topic.to_owned(),
            topic_id,
            max_record_payload: config.max_record_payload,
            remote: ring.remote(),
            region_len: ring.len(),
            cq,
            srq,
            recv_slots,
            writer: Mutex::new(()),
            state: Mutex::new(PubState {
                producer,
                subs: Slab::new(),
                by_conn: HashMap::new(),
                by_qp: HashMap::new(),
                free_send_slots: (0..SEND_SLOTS).rev().collect(),
                unfinished: None,
                closing: false,
            }),
            counters: Arc::new(PublisherCounters::default()),
            ctrl,
            _ring: ring,
            options,
            node: node.clone(),
        });
        {
            let mut publishers = node.publishers.lock();
            if publishers.get(&topic_id).and_then(Weak::upgrade).is_some() {
                return Err(Error::AlreadyPublishing { topic: topic.to_owned() });
            }
            publishers.insert(topic_id, Arc::downgrade(&shared));
        }
        node.stats.add_publisher(topic, shared.id, &shared.counters);
        node.discovery.publisher_added(topic, topic_id);
        Ok(Publisher { shared })
    }

    /// The topic.
    pub fn topic(&self) -> &str {
        &self.shared.topic
    }

    /// This publisher's id (what subscribers see in [`crate::PublisherInfo`]).
    pub fn id(&self) -> u64 {
        self.shared.id
    }

    /// The function that checksums this publisher's records.
    pub fn checksum(&self) -> Checksum {
        self.shared.state.lock().producer.checksum()
    }

    /// Subscribers currently connected.
    pub fn subscriber_count(&self) -> usize {
        self.shared.state.lock().subs.len()
    }

    /// The counters.
    pub fn counters(&self) -> &PublisherCounters {
        &self.shared.counters
    }

    /// Sequence number the next message gets.
    pub fn next_seq(&self) -> u64 {
        self.shared.state.lock().producer.tail_seq()
    }

    /// Publishes one message (fragmented through the ring when it is large); returns its
    /// sequence number. Under [`Policy::Block`] it waits for credit up to the timeout; on
    /// timeout nothing of the message was published, unless it was larger than the free
    /// space and partly written: then it is finished by the next `publish`/`flush` call.
    pub fn publish(&self, payload: &[u8]) -> Result<u64> {
        let _writer = self.shared.writer.lock();
        let deadline = self.shared.deadline();
        self.shared.finish_unfinished(deadline)?;
        self.shared.append(payload, deadline)
    }

    /// Serializes `value` with bincode 2 (serde, standard configuration) and publishes it.
    pub fn publish_value<T: Serialize>(&self, value: &T) -> Result<u64> {
        let bytes = bincode::serde::encode_to_vec(value, bincode::config::standard())
            .map_err(|e| Error::Encode(e.to_string()))?;
        self.publish(&bytes)
    }

    /// Writes a message of `len` bytes (at most one ring record) in place: `fill` gets the
    /// reserved record and writes the payload straight into the ring (no intermediate copy),
    /// then the message is committed and its sequence number returned. If `fill` fails,
    /// nothing is published.
    pub fn publish_with<F>(&self, len: usize, fill: F) -> Result<u64>
    where
        F: FnOnce(&mut Claim<'_>) -> Result<()>,
    {
        if len > self.shared.max_record_payload {
            return Err(Error::InvalidOption {
                option: "in-place message length",
                detail: format!(
                    "{len} bytes exceeds one ring record ({}); use publish",
                    self.shared.max_record_payload
                ),
            });
        }
        let _writer = self.shared.writer.lock();
        let deadline = self.shared.deadline();
        self.shared.finish_unfinished(deadline)?;
        let mut st = self.shared.wait_for_room(len, deadline)?;
        let seq = {
            let mut claim = st.producer.claim(len, NO_LIMIT)?.ok_or(Error::Closed("the ring has no room"))?;
            fill(&mut claim)?;
            claim.commit()?
        };
        self.shared.after_commit(&mut st, len);
        Ok(seq)
    }

    /// Waits (under Block, up to the timeout) until every connected subscriber has consumed
    /// everything published, and finishes a partly written message first.
    pub fn flush(&self, timeout: Duration) -> Result<()> {
        let _writer = self.shared.writer.lock();
        let deadline = Instant::now() + timeout;
        self.shared.finish_unfinished(deadline)?;
        if self.shared.wait_consumed(deadline) {
            Ok(())
        } else {
            Err(Error::Timeout { what: "flush", millis: timeout.as_millis() as u64 })
        }
    }
}

impl Drop for Publisher {
    fn drop(&mut self) {
        self.shared.close();
    }
}

impl PublisherShared {
    fn deadline(&self) -> Instant {
        match self.options.policy {
            Policy::Block { timeout } => Instant::now() + timeout,
            _ => Instant::now() + Duration::from_secs(3600),
        }
    }

    fn finish_unfinished(&self, deadline: Instant) -> Result<()> {
        let pending = self.state.lock().unfinished.take();
        match pending {
            Some(p) => self.append(&p, deadline).map(|_| ()),
            None => Ok(()),
        }
    }

    /// The limit the policy allows now.
    fn limit(&self, st: &PubState) -> u64 {
        if self.options.policy == Policy::Overwrite {
            return NO_LIMIT;
        }
        match st.subs.iter().map(|(_, s)| s.acked).min() {
            Some(min) => st.producer.limit_for(min),
            None => NO_LIMIT,
        }
    }

    fn append(&self, payload: &[u8], deadline: Instant) -> Result<u64> {
        loop {
            let mut st = self.state.lock();
            self.progress(&mut st);
            let limit = self.limit(&st);
            match st.producer.append(payload, limit)? {
                Append::Complete { seq } => {
                    self.after_commit(&mut st, payload.len());
                    return Ok(seq);
                }
                Append::Blocked { written, needed_limit, .. } => {
                    if written > 0 {
                        self.ring_doorbells(&mut st);
                    }
                    if let Err(e) = self.wait_credit(st, needed_limit, deadline) {
                        if written > 0 {
                            self.state.lock().unfinished = Some(payload.to_vec());
                        }
                        return Err(e);
                    }
                }
            }
        }
    }

    /// Waits until a record of `len` bytes fits; returns the state lock held.
    fn wait_for_room(&self, len: usize, deadline: Instant) -> Result<MutexGuard<'_, PubState>> {
        loop {
            let mut st = self.state.lock();
            self.progress(&mut st);
            let needed = st.producer.needed_limit(len);
            if needed <= self.limit(&st) {
                return Ok(st);
            }
            self.wait_credit(st, needed, deadline)?;
        }
    }

    /// Called with the state locked when the producer needs `needed_limit`; releases the lock,
    /// applies the policy, and waits for acks. Returns when it is worth trying again.
    fn wait_credit(&self, mut st: MutexGuard<'_, PubState>, needed_limit: u64, deadline: Instant) -> Result<()> {
        self.counters.waits.fetch_add(1, Ordering::Relaxed);
        let now = Instant::now();
        let capacity = st.producer.capacity() as u64;
        let mut wait_until = deadline;
        if let Policy::DropSlow { grace } = self.options.policy {
            let mut to_drop = Vec::new();
            for (key, sub) in st.subs.iter_mut() {
                if sub.acked + capacity < needed_limit {
                    let since = *sub.slow_since.get_or_insert(now);
                    if now.duration_since(since) >= grace {
                        to_drop.push(key);
                    } else {
                        wait_until = wait_until.min(since + grace);
                    }
                } else {
                    sub.slow_since = None;
                }
            }
            if !to_drop.is_empty() {
                let tail = st.producer.tail();
                for key in to_drop {
                    let lag = tail - st.subs[key].acked;
                    self.drop_subscriber(&mut st, key, DropReason::TooSlow { lag });
                }
                return Ok(());
            }
        } else if now >= deadline {
            return Err(Error::Timeout { what: "publish (waiting for the slowest subscriber)", millis: 0 });
        }
        let solicited = st.subs.len() >= 2 && self.ask_for_credit(&mut st, needed_limit.saturating_sub(capacity));
        drop(st);
        let mut wcs = [WorkCompletion::default(); 32];
        let timeout = wait_until.saturating_duration_since(Instant::now()).min(super::SLICE);
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
        if n == 0 && Instant::now() >= deadline && !matches!(self.options.policy, Policy::DropSlow { .. }) {
            let waited = deadline.saturating_duration_since(now);
            return Err(Error::Timeout {
                what: "publish (waiting for the slowest subscriber)",
                millis: waited.as_millis() as u64,
            });
        }
        Ok(())
    }

    /// Several subscribers hold the publisher back (acked below `floor`): asks the one that
    /// will probably ack last ([`ack_clock::last_to_ack`]) for a solicited ack at `floor` or a
    /// quarter ring past its last ack, whichever is further (not past the tail), unless it was
    /// asked for that already. Returns whether the publisher may wait for solicited
    /// completions only: some subscriber has been asked and has not answered yet.
    fn ask_for_credit(&self, st: &mut PubState, floor: u64) -> bool {
        let laggards = st.subs.iter().filter(|(_, s)| s.acked < floor).map(|(k, s)| (k, &s.clock, s.acked));
        let Some(key) = ack_clock::last_to_ack(laggards) else { return false };
        let tail = st.producer.tail();
        let quarter = st.producer.capacity() as u64 / 4;
        let sub = &st.subs[key];
        let want = (sub.acked + quarter).max(floor).min(tail);
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

    fn after_commit(&self, st: &mut PubState, len: usize) {
        self.counters.published.fetch_add(1, Ordering::Relaxed);
        self.counters.bytes.fetch_add(len as u64, Ordering::Relaxed);
        self.counters.position.store(st.producer.tail(), Ordering::Relaxed);
        self.progress(st);
        self.ring_doorbells(st);
    }

    /// Refreshes the subscriber-count and slowest-ack gauges.
    fn update_gauges(&self, st: &PubState) {
        let slowest = st.subs.iter().map(|(_, s)| s.acked).min().unwrap_or(st.producer.tail());
        self.counters.subscribers.store(st.subs.len() as u64, Ordering::Relaxed);
        self.counters.slowest_ack.store(slowest, Ordering::Relaxed);
    }

    /// Drains the completion queue without blocking.
    fn progress(&self, st: &mut PubState) {
        let mut wcs = [WorkCompletion::default(); 32];
        loop {
            let n = match self.cq.poll(&mut wcs) {
                Ok(n) => n,
                Err(e) => {
                    tracing::warn!(topic = %self.topic, "publisher CQ: {e}");
                    return;
                }
            };
            self.handle_completions(st, &wcs[..n]);
            if n < wcs.len() {
                return;
            }
        }
    }

    fn handle_completions(&self, st: &mut PubState, wcs: &[WorkCompletion]) {
        for wc in wcs {
            let slot = (wc.wr_id & 0xffff_ffff) as u32;
            match wc.wr_id >> 32 {
                KIND_SEND => st.free_send_slots.push(slot),
                KIND_RECV => {
                    if wc.status == WcStatus::Success && wc.opcode == WcOpcode::Recv {
                        self.on_control(st, wc.qp_num, slot, wc.byte_len as usize);
                    }
                    self.repost_recv(st, slot, wc.status);
                }
                _ => {}
            }
        }
    }

    fn repost_recv(&self, st: &PubState, slot: u32, status: WcStatus) {
        let sge = [self.ctrl.sge(slot as usize * SLOT, SLOT)];
        let result = match &self.srq {
            Some(srq) => srq.post_recv(wr_id(KIND_RECV, slot), &sge),
            None => {
                // Per-QP receives: slot s belongs to subscriber s / RECVS_PER_SUBSCRIBER.
                if status != WcStatus::Success {
                    return;
                }
                match st.subs.get((slot / RECVS_PER_SUBSCRIBER) as usize) {
                    Some(sub) => sub.qp.post_recv(wr_id(KIND_RECV, slot), &sge),
                    None => return,
                }
            }
        };
        if let Err(e) = result {
            tracing::debug!(topic = %self.topic, "reposting a receive: {e}");
        }
    }

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
                sub.acked = position;
                sub.slow_since = None;
                sub.clock.on_ack(Instant::now());
                self.update_gauges(st);
            }
            Ok(Control::DoorbellRequest { armed, position }) => {
                st.subs[key].doorbell_at = armed.then_some(position);
                self.ring_doorbells(st);
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

    /// Sends a doorbell to every parked subscriber whose position the tail has passed.
    fn ring_doorbells(&self, st: &mut PubState) {
        let tail = st.producer.tail();
        let due: Vec<usize> =
            st.subs.iter().filter(|(_, s)| s.doorbell_at.is_some_and(|p| tail > p)).map(|(k, _)| k).collect();
        for key in due {
            if self.send_control(st, key, &Control::Doorbell { tail }).is_ok() {
                st.subs[key].doorbell_at = None;
                self.counters.doorbells.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Posts a control SEND to subscriber `key`; returns the slot used.
    fn send_control(&self, st: &mut PubState, key: usize, msg: &Control) -> Result<u32> {
        if st.free_send_slots.is_empty() {
            self.progress(st);
        }
        let slot = st.free_send_slots.pop().ok_or(Error::Closed("no free control send slot"))?;
        let bytes = msg.encode()?;
        debug_assert!(bytes.len() <= CONTROL_MSG_MAX);
        let offset = (self.recv_slots + slot) as usize * SLOT;
        let result = self.ctrl.buffer().write(offset, &bytes).map_err(Error::from).and_then(|_| {
            let sge = [self.ctrl.sge(offset, bytes.len())];
            st.subs[key]
                .qp
                .post_send(&SendRequest::new(wr_id(KIND_SEND, slot), SendOp::Send, &sge))
                .map_err(Error::from)
        });
        match result {
            Ok(()) => Ok(slot),
            Err(e) => {
                st.free_send_slots.push(slot);
                Err(e)
            }
        }
    }

    /// Tells subscriber `key` why, waits briefly for that to leave, and disconnects it.
    fn drop_subscriber(&self, st: &mut PubState, key: usize, reason: DropReason) {
        self.counters.dropped.fetch_add(1, Ordering::Relaxed);
        tracing::info!(topic = %self.topic, ?reason, "dropping a subscriber");
        let msg = Control::Dropped { reason };
        if let Ok(slot) = self.send_control(st, key, &msg) {
            // Briefly: a slow subscriber may not take the notice, and the others must not wait.
            self.await_send(st, slot, Instant::now() + Duration::from_millis(100));
        }
        self.remove_subscriber(st, key);
    }

    /// Waits (bounded) for the send in `slot` to complete, so a disconnect does not flush it.
    fn await_send(&self, st: &mut PubState, slot: u32, deadline: Instant) {
        let mut wcs = [WorkCompletion::default(); 32];
        while !st.free_send_slots.contains(&slot) && Instant::now() < deadline {
            let n = self.cq.poll_wait(&mut wcs, Duration::from_micros(50), Duration::from_millis(5)).unwrap_or(0);
            self.handle_completions(st, &wcs[..n]);
        }
    }

    fn remove_subscriber(&self, st: &mut PubState, key: usize) {
        if !st.subs.contains(key) {
            return;
        }
        let sub = st.subs.remove(key);
        self.update_gauges(st);
        st.by_conn.remove(&sub.conn);
        st.by_qp.remove(&sub.qp.qp_num());
        self.node.routes.lock().remove(&sub.conn);
        if let Err(e) = sub.qp.disconnect() {
            tracing::debug!(topic = %self.topic, "disconnect: {e}");
        }
    }

    /// Whether every subscriber consumed up to the tail before `deadline`.
    fn wait_consumed(&self, deadline: Instant) -> bool {
        let mut wcs = [WorkCompletion::default(); 32];
        loop {
            {
                let mut st = self.state.lock();
                self.progress(&mut st);
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
            let n = self.cq.poll_wait(&mut wcs, Duration::from_micros(50), left.min(super::SLICE)).unwrap_or(0);
            let mut st = self.state.lock();
            self.handle_completions(&mut st, &wcs[..n]);
        }
    }

    /// On drop: stop accepting, let subscribers consume (bounded by `linger`), tell them the
    /// stream ended, and disconnect them.
    fn close(&self) {
        let _writer = self.writer.lock();
        self.state.lock().closing = true;
        {
            let mut publishers = self.node.publishers.lock();
            if publishers.get(&self.topic_id).is_some_and(|w| std::ptr::eq(w.as_ptr(), self)) {
                publishers.remove(&self.topic_id);
                self.node.discovery.publisher_removed(self.topic_id);
            }
        }
        let deadline = Instant::now() + self.options.linger;
        let _ = self.finish_unfinished(deadline);
        self.wait_consumed(deadline);
        let mut st = self.state.lock();
        let final_seq = st.producer.tail_seq().saturating_sub(1);
        let keys: Vec<usize> = st.subs.iter().map(|(k, _)| k).collect();
        let mut slots = Vec::new();
        for &key in &keys {
            if let Ok(slot) = self.send_control(&mut st, key, &Control::EndOfStream { final_seq }) {
                slots.push(slot);
            }
        }
        let deadline = Instant::now() + NOTICE_TIMEOUT;
        for slot in slots {
            self.await_send(&mut st, slot, deadline);
        }
        for key in keys {
            self.remove_subscriber(&mut st, key);
        }
    }

    /// CM thread: a subscriber asks to connect.
    fn accept(self: &Arc<Self>, req: ConnectRequest, data: &ConnectData) {
        let mut st = self.state.lock();
        let refuse = if st.closing {
            Some((RejectCode::ShuttingDown, "the publisher is closing".to_string()))
        } else if st.subs.len() >= self.options.max_subscribers {
            Some((RejectCode::TooManySubscribers, format!("limit {}", self.options.max_subscribers)))
        } else if !data.accepts.contains(self.options.policy.kind()) {
            Some((RejectCode::PolicyNotAccepted, format!("{:?}", self.options.policy.kind())))
        } else {
            None
        };
        if let Some((reason, detail)) = refuse {
            drop(st);
            reject(&self.node, req, reason, &detail);
            return;
        }
        let start = match data.start {
            StartAt::Latest => st.producer.latest(),
            StartAt::Earliest => st.producer.earliest(),
        };
        let accept = AcceptData {
            topic: self.topic_id,
            ring: self.remote,
            region_len: self.region_len as u64,
            capacity: st.producer.capacity() as u64,
            epoch: self.node.epoch,
            publisher_id: self.id,
            policy: self.options.policy.kind(),
            max_record_payload: self.max_record_payload as u32,
            start_position: start.position,
            start_seq: start.seq,
            first_seq: start.first_seq,
            checksum: st.producer.checksum(),
        };
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
            max_send_sge: 1,
            max_recv_sge: 1,
        };
        let init = QpInit {
            pd: &self.node.pd,
            send_cq: &self.cq,
            recv_cq: &self.cq,
            srq: self.srq.as_ref(),
            caps,
            rnr_retry: RNR_RETRY_INFINITE,
            min_rnr_timer: Duration::from_micros(640),
        };
        let conn = req.conn_id();
        let peer = req.peer_addr();
        self.node.routes.lock().insert(conn, Route::Subscriber(Arc::downgrade(self)));
        let qp = match req.accept(&init, &encoded) {
            Ok(qp) => qp,
            Err(e) => {
                self.node.routes.lock().remove(&conn);
                tracing::warn!(topic = %self.topic, %peer, "accept failed: {e}");
                return;
            }
        };
        let key = st.subs.vacant_key();
        if self.srq.is_none() {
            for i in 0..RECVS_PER_SUBSCRIBER {
                let slot = key as u32 * RECVS_PER_SUBSCRIBER + i;
                if slot < self.recv_slots {
                    let _ = qp.post_recv(wr_id(KIND_RECV, slot), &[self.ctrl.sge(slot as usize * SLOT, SLOT)]);
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
        });
        self.update_gauges(&st);
        self.counters.accepted.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(topic = %self.topic, %peer, position = start.position, "subscriber accepted");
    }

    /// CM thread: a subscriber's connection is up.
    pub(crate) fn on_established(&self, conn: ConnId) {
        tracing::trace!(topic = %self.topic, conn, "subscriber established");
    }

    /// CM thread: a subscriber's connection is gone.
    pub(crate) fn on_disconnected(&self, conn: ConnId) {
        let mut st = self.state.lock();
        if let Some(&key) = st.by_conn.get(&conn) {
            self.remove_subscriber(&mut st, key);
        }
    }
}

/// The id of the publisher of `topic` on node `node` (stable across restarts of a node with a
/// fixed id).
pub(crate) fn publisher_id(node: super::NodeId, topic: TopicId) -> u64 {
    node ^ topic.0.rotate_left(29)
}

/// Rejects a connect request with a reason, counting it.
fn reject(node: &NodeShared, req: ConnectRequest, reason: RejectCode, detail: &str) {
    tracing::debug!(peer = %req.peer_addr(), ?reason, detail, "rejecting a subscriber");
    node.counters.rejected_connects.fetch_add(1, Ordering::Relaxed);
    let data = RejectData::new(reason, detail).encode().unwrap_or_default();
    if let Err(e) = req.reject(&data) {
        tracing::debug!("reject failed: {e}");
    }
}

/// CM thread: routes a connect request to the local publisher of its topic.
pub(crate) fn handle_connect_request(node: &Arc<NodeShared>, req: ConnectRequest) {
    let data = match ConnectData::decode(req.private_data()) {
        Ok(d) => d,
        Err(e) => {
            let reason = if matches!(e, ProtocolError::VersionMismatch { .. }) {
                RejectCode::VersionMismatch
            } else {
                RejectCode::Malformed
            };
            reject(node, req, reason, &e.to_string());
            return;
        }
    };
    let publisher = node.publishers.lock().get(&data.topic).and_then(Weak::upgrade);
    match publisher {
        Some(p) => p.accept(req, &data),
        None => reject(node, req, RejectCode::UnknownTopic, "no publisher of that topic on this node"),
    }
}
