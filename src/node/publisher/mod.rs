//! The publishing side of a topic: the ring in a remote-read-only region, the subscribers
//! connected to it, acks as credits, the slow-subscriber policy, and doorbells for parked
//! subscribers.
//!
//! One lock, `state`, guards the producer, the cached publisher limit and the subscriber
//! table. A publishing call that fits under the cached limit holds it once, for the copy into
//! the ring and the commit (`publish.rs`); one that must wait for credit takes the publishing
//! *turn* (so that no other call interleaves with a message it wrote partly) and releases the
//! lock while it waits (`credit.rs`), so the CM thread can accept subscribers meanwhile
//! (`accept.rs`). Acks and doorbell requests arrive on the publisher's CQ, drained after each
//! commit without blocking (`control.rs`).

mod accept;
mod builder;
mod control;
mod credit;
mod liveness;
mod loan;
mod publish;

use std::collections::HashMap;
use std::marker::PhantomData;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use slab::Slab;

use crate::error::{Error, Result};
use crate::fabric::{Access, CompletionQueue, ConnId, MemoryRegion, QueuePair, RemoteAddr, SharedReceiveQueue};
use crate::protocol::{Control, PolicyKind, Secret, TopicId};
use crate::ring::{Checksum, RingConfig, RingProducer, NO_LIMIT};

use super::ack_clock::AckClock;
use super::wr_id::{WrId, WrKind};
use super::{check_topic, MessageType, NodeShared};
use credit::Deadline;
use liveness::{Liveness, SENDS_PER_SUBSCRIBER};

pub(crate) use accept::{handle_connect_request, publisher_id};
pub use builder::PublisherBuilder;
pub use loan::Loan;

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
    /// Which policy this is, without its settings (what subscribers see in
    /// [`PublisherInfo::policy`](crate::PublisherInfo::policy)).
    pub fn kind(self) -> PolicyKind {
        match self {
            Policy::Block { .. } => PolicyKind::Block,
            Policy::DropSlow { .. } => PolicyKind::DropSlow,
            Policy::Overwrite => PolicyKind::Overwrite,
        }
    }
}

/// Options of a publisher: what a [`PublisherBuilder`] sets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PublisherOptions {
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
    /// How long a subscriber may be idle before it is dropped with [`DropReason::Idle`]
    /// (default 30 s, at least 500 ms; `Duration::MAX`: never). Idle means holding the publisher back (its
    /// acks are behind the tail under `Block` or `DropSlow`) without sending anything, or
    /// taking none of the publisher's control messages (a peer that posts no receives). A
    /// subscriber's acks come from its `recv` calls, so under `Block` an application that
    /// stops calling `recv` on a subscription that is behind is dropped after this long; it
    /// is told why and may reconnect.
    ///
    /// [`DropReason::Idle`]: crate::protocol::DropReason::Idle
    pub idle_timeout: Duration,
    /// The topic's credential: when set, only subscribers that prove they hold the same secret
    /// ([`SubscriberBuilder::credential`](crate::SubscriberBuilder::credential)) are
    /// accepted; the others are rejected with [`RejectCode::Unauthorized`](crate::protocol::RejectCode::Unauthorized)
    /// before they learn anything of the ring, and counted
    /// ([`PublisherCounters::rejected_unauthorized`]). Default `None`: anyone who can reach the
    /// node may subscribe.
    pub credential: Option<Secret>,
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
            idle_timeout: Duration::from_secs(30),
            credential: None,
        }
    }
}

crate::counters::counter_set! {
    /// Counters of a publisher, readable while it runs.
    pub struct PublisherCounters {
        /// Messages published.
        published: Total, Messages;
        /// Payload bytes published.
        bytes: Total, Bytes;
        /// Acks received.
        acks: Total, Events;
        /// Acks refused (position not yet published, or unknown sender).
        bad_acks: Total, Events;
        /// Doorbells sent.
        doorbells: Total, Events;
        /// Subscribers accepted.
        accepted: Total, Connections;
        /// Subscribers dropped: by the DropSlow policy, or idle (see
        /// [`PublisherBuilder::idle_timeout`]).
        dropped: Total, Connections;
        /// Subscribers rejected because they did not prove the topic's credential (no proof, a
        /// wrong one, a stale time or a replayed nonce).
        rejected_unauthorized: Total, Connections;
        /// Times `publish` waited for credit.
        waits: Total, Events;
        /// Of those, the waits woken only by the solicited ack of the subscriber asked for credit
        /// (several subscribers held the publisher back), not by every ack.
        solicited_waits: Total, Events;
        /// `CreditWanted` requests sent: a blocked publisher asking the subscriber that will
        /// probably ack last for a solicited ack.
        credit_requests: Total, Events;
        /// Subscribers connected now (a gauge).
        subscribers: Gauge, Connections;
        /// Ring position after the last message published (a gauge, bytes).
        position: Gauge, Position;
        /// Position acknowledged by the slowest connected subscriber (a gauge, bytes): the lag is
        /// `position - slowest_ack`.
        slowest_ack: Gauge, Position;
    }
}

/// Receive slots kept posted per subscriber (acks are coalesced; a few suffice).
const RECVS_PER_SUBSCRIBER: u32 = 4;
/// Most subscribers a publisher serves ([`PublisherBuilder::max_subscribers`]).
const MAX_SUBSCRIBERS: usize = 4096;
/// Longest wait for the end-of-stream notices to leave before disconnecting: a bound
/// for a dead peer; on a live one the send completes in microseconds (milliseconds in an
/// emulated guest).
const NOTICE_TIMEOUT: Duration = Duration::from_secs(2);
/// Bytes of one control slot.
const SLOT: usize = 64;
/// Shortest [`PublisherBuilder::idle_timeout`]: longer than the probe of a silent subscriber
/// ([`liveness::PROBE_AFTER`]) and than a busy host's scheduling hiccups.
const MIN_IDLE_TIMEOUT: Duration = Duration::from_millis(500);
/// How often the CM thread services each publisher ([`PublisherShared::service`]): receives
/// reposted and idle subscribers found while the application publishes nothing.
pub(crate) const SERVICE_INTERVAL: Duration = super::RECHECK_INTERVAL;
/// On a fabric whose NIC copies on this host's CPUs (soft), a publisher that has just
/// committed this many payload bytes or more yields the CPU once, so that the NIC thread that
/// must copy them (and the subscribers it feeds) get a turn on a machine with fewer CPUs than
/// busy threads. Measured on 2 vCPUs, 64 KiB messages in one process, 14 rounds: 2.28 GB/s
/// mean without the yield against 2.75 with it (a yield per message of any size, as a
/// yielding CQ poll did, gave the same 64 KiB figure but cut 64 B messages from 8.7 to
/// 3.2 M/s). At 16 KiB the system call is a few percent of the copy and checksum.
const YIELD_AFTER_BYTES: usize = 16 * 1024;

// Every receive and send slot fits a work-request id.
const _: () = assert!((MAX_SUBSCRIBERS as u32 * RECVS_PER_SUBSCRIBER) as usize <= super::wr_id::MAX_SLOT + 1);
const _: () = assert!((MAX_SUBSCRIBERS as u32 * liveness::SENDS_PER_SUBSCRIBER) as usize <= super::wr_id::MAX_SLOT + 1);

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
}

/// What the `state` lock guards.
struct PubState {
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
}

/// What the publisher's parts share with the CM thread.
pub(crate) struct PublisherShared {
    node: Arc<NodeShared>,
    topic: String,
    topic_id: TopicId,
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
    recv_slots: u32,
    state: Mutex<PubState>,
    /// Signalled when the publishing turn is given back.
    turn: Condvar,
    /// Signalled when a subscriber is accepted or removed.
    subscribers_changed: Condvar,
    counters: Arc<PublisherCounters>,
    // Declared last: deregistered after every queue pair that could READ it is gone. Only
    // held: the producer writes through its buffer.
    _ring: MemoryRegion,
}

/// Publishes messages of type `T` on one topic: raw bytes (`Publisher`, that is
/// `Publisher<[u8]>`) or a serde type (`Publisher<Quote>`, from
/// [`PublisherBuilder::typed`](crate::PublisherBuilder::typed)). `Send + Sync`: share it
/// between threads with an `Arc`.
///
/// ```
/// use std::time::Duration;
/// use rdma_pubsub::{DiscoveryOptions, Node, Policy};
///
/// let node = Node::builder().discovery(DiscoveryOptions::disabled()).build()?;
/// let publisher = node.publisher("doc-publisher").policy(Policy::Block { timeout: Duration::from_secs(1) }).create()?;
/// // With no subscriber connected nothing holds the ring back.
/// assert_eq!(publisher.publish(b"first")?, 1);
/// let typed = node.publisher("doc-typed").typed::<(String, u32)>().create()?;
/// assert_eq!(typed.publish(&("second".into(), 2))?, 1);
/// # Ok::<(), rdma_pubsub::Error>(())
/// ```
pub struct Publisher<T: ?Sized + MessageType = [u8]> {
    shared: Arc<PublisherShared>,
    _type: PhantomData<fn(&T)>,
}

impl<T: ?Sized + MessageType> std::fmt::Debug for Publisher<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Publisher").field("topic", &self.shared.topic).field("id", &self.shared.id).finish()
    }
}

impl<T: ?Sized + MessageType> Publisher<T> {
    pub(crate) fn create(node: Arc<NodeShared>, topic: &str, options: PublisherOptions) -> Result<Publisher<T>> {
        check_topic(topic)?;
        if options.max_subscribers == 0 || options.max_subscribers > MAX_SUBSCRIBERS {
            return Err(Error::InvalidOption { option: "max_subscribers", detail: "must be in 1..=4096".into() });
        }
        if options.idle_timeout < MIN_IDLE_TIMEOUT {
            let detail = format!("must be at least {MIN_IDLE_TIMEOUT:?} (Duration::MAX: never)");
            return Err(Error::InvalidOption { option: "idle_timeout", detail });
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
        let send_slots = options.max_subscribers as u32 * SENDS_PER_SUBSCRIBER;
        let ctrl = node.pd.register((recv_slots + send_slots) as usize * SLOT, Access::LOCAL_WRITE)?;
        let cq_depth = (recv_slots + send_slots + 16).min(attrs.max_cqe);
        let cq = node.fabric.create_cq(cq_depth)?;
        if let Some(srq) = &srq {
            for slot in 0..recv_slots {
                srq.post_recv(WrId::publisher(WrKind::Recv, slot).encode(), &[ctrl.sge(slot as usize * SLOT, SLOT)])?;
            }
        }
        let shared = Arc::new(PublisherShared {
            id: publisher_id(node.id, topic_id),
            topic: topic.to_owned(),
            topic_id,
            max_record_payload: config.max_record_payload,
            yield_after: if attrs.copies_on_host_cpus { YIELD_AFTER_BYTES } else { usize::MAX },
            remote: ring.remote(),
            region_len: ring.len(),
            cq,
            srq,
            recv_slots,
            state: Mutex::new(PubState {
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
            }),
            turn: Condvar::new(),
            subscribers_changed: Condvar::new(),
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
        Ok(Publisher { shared, _type: PhantomData })
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

    /// Waits up to `timeout` (any `Duration`) until at least `n` subscribers are connected;
    /// returns how many are.
    ///
    /// # Errors
    /// [`Error::Timeout`] when fewer than `n` are connected when the time is up.
    pub fn wait_for_subscribers(&self, n: usize, timeout: Duration) -> Result<usize> {
        let deadline = crate::time::deadline_after(timeout);
        let mut st = self.shared.state.lock();
        while st.subs.len() < n {
            if self.shared.subscribers_changed.wait_until(&mut st, deadline).timed_out() && st.subs.len() < n {
                return Err(Error::Timeout { what: "waiting for subscribers", millis: crate::time::millis(timeout) });
            }
        }
        Ok(st.subs.len())
    }

    /// The counters.
    pub fn counters(&self) -> &PublisherCounters {
        &self.shared.counters
    }

    /// Sequence number the next message gets.
    pub fn next_seq(&self) -> u64 {
        self.shared.state.lock().producer.tail_seq()
    }
}

impl<T: ?Sized + MessageType> Drop for Publisher<T> {
    fn drop(&mut self) {
        self.shared.close();
    }
}

impl PublisherShared {
    /// On drop: stop accepting, let subscribers consume (bounded by `linger`), tell them the
    /// stream ended, and disconnect them.
    fn close(&self) {
        let linger = Deadline::flush(self.options.linger);
        let Ok((turn, mut st)) = self.take_turn(self.state.lock(), Deadline::never()) else {
            return;
        };
        st.closing = true;
        drop(st);
        {
            let mut publishers = self.node.publishers.lock();
            if publishers.get(&self.topic_id).is_some_and(|w| std::ptr::eq(w.as_ptr(), self)) {
                publishers.remove(&self.topic_id);
                self.node.discovery.publisher_removed(self.topic_id);
            }
        }
        // Whether or not it could be finished, the subscribers get what is complete.
        if let Ok(st) = self.finish_unfinished(self.state.lock(), linger) {
            drop(st);
        }
        self.wait_consumed(linger.at);
        let mut st = self.state.lock();
        let final_seq = st.producer.tail_seq().saturating_sub(1);
        let parting: Vec<(usize, Control)> =
            st.subs.iter().map(|(k, _)| (k, Control::EndOfStream { final_seq })).collect();
        self.part_with(&mut st, &parting, Instant::now() + NOTICE_TIMEOUT);
        drop(st);
        drop(turn);
    }
}
