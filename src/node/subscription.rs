//! The subscribing side of a topic: one feed per publisher connection, each pulling its
//! publisher's ring with batched RDMA READs into two local READ buffers (one fills while the
//! messages of the other are delivered), validating and
//! reassembling records, acknowledging consumption with coalesced SENDs (the publisher's
//! credits), and parking on a doorbell when the topic is idle.
//!
//! With discovery on, a subscription watches its topic in the node's directory and connects to
//! every publisher announced, reconnecting when one comes back. Messages are deduplicated by
//! (publisher id, epoch, seq): a reconnection to an epoch already read starts at the earliest
//! retained message and skips what was delivered.

use std::collections::{HashMap, HashSet, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam::channel::{self, Receiver, Sender};
use serde::de::DeserializeOwned;
use slab::Slab;

use crate::error::{Error, Result};
use crate::fabric::{
    Access, CompletionQueue, ConnId, MemoryRegion, ProtectionDomain, QpCaps, QpInit, QueuePair, ReadBuffer,
    RejectReason as CmReject, RemoteAddr, SendOp, SendRequest, WcOpcode, WcStatus, WorkCompletion, RNR_RETRY_INFINITE,
};
use crate::protocol::{
    AcceptData, ConnectData, ConnectFlags, Control, DropReason, Policy as WirePolicy, PolicySet, RejectCode,
    RejectData, StartAt, TopicId,
};
use crate::ring::{ControlOutcome, ControlSnapshot, ReadPlan, RingReader, Stop, CONTROL_READ_LEN};

use super::cm::FeedEvent;
use super::discovery::watch::Watch;
use super::discovery::{LostReason, Sighting};
use super::pacing::ReadPacer;
use super::spin_permit::SpinPermit;
use super::{check_topic, NodeId, NodeShared, Route, SLICE};

/// Where a new subscription starts in each publisher's stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Start {
    /// Only messages published after the subscription connects.
    #[default]
    Latest,
    /// Every message the publisher still retains.
    Earliest,
}

/// Options of a subscription.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubscriptionOptions {
    /// Where to start.
    pub start: Start,
    /// Bytes one READ brings at most (default 256 KiB).
    pub batch: usize,
    /// Never park: keep READing while idle (lowest latency, one busy core).
    pub busy_poll: bool,
    /// How long empty READs continue before the subscription asks for a doorbell and parks.
    pub spin: Duration,
    /// Largest message reassembled (default 64 MiB); larger ones break the feed.
    pub max_message_len: u64,
    /// Connect by itself to every publisher of the topic discovery announces, and reconnect
    /// to those that come back (default true; no effect when the node's discovery is off).
    /// Connections are made by the subscription's own calls (`recv*`, `try_recv`,
    /// `try_event`), like all its progress.
    pub auto_connect: bool,
}

impl Default for SubscriptionOptions {
    fn default() -> Self {
        SubscriptionOptions {
            start: Start::Latest,
            batch: 256 * 1024,
            busy_poll: false,
            spin: Duration::from_micros(200),
            max_message_len: 64 << 20,
            auto_connect: true,
        }
    }
}

/// Who published a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PublisherInfo {
    /// The publisher's id (stable for a node and topic).
    pub id: u64,
    /// Its node's epoch: a restarted node has a larger one.
    pub epoch: u64,
    /// Its node's address.
    pub addr: SocketAddr,
    /// Its slow-subscriber policy.
    pub policy: WirePolicy,
}

/// A delivered message (owned).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// Who published it.
    pub publisher: PublisherInfo,
    /// Its sequence number in that publisher's stream (1, 2, ...).
    pub seq: u64,
    /// The payload.
    pub data: Vec<u8>,
}

/// A delivered message borrowed from the subscription's READ buffer (zero copy). Valid until
/// the next call on the subscription.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MessageRef<'a> {
    /// Who published it.
    pub publisher: PublisherInfo,
    /// Its sequence number in that publisher's stream.
    pub seq: u64,
    /// The payload.
    pub data: &'a [u8],
}

/// Something that happened to a subscription's connections.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SubscriptionEvent {
    /// Connected to a publisher.
    Connected(PublisherInfo),
    /// The publisher overran this subscription (Overwrite policy): `count` messages were lost
    /// just before the next one delivered from it.
    Lost {
        /// Which publisher.
        publisher: PublisherInfo,
        /// How many messages.
        count: u64,
    },
    /// The publisher closed its stream; `complete` tells whether everything up to `final_seq`
    /// was delivered.
    Ended {
        /// Which publisher.
        publisher: PublisherInfo,
        /// Its last sequence number.
        final_seq: u64,
        /// Whether nothing was missed.
        complete: bool,
    },
    /// The publisher dropped this subscription (DropSlow policy), saying why.
    Dropped {
        /// Which publisher.
        publisher: PublisherInfo,
        /// Its reason.
        reason: DropReason,
    },
    /// The connection broke (the publisher's node died or the network failed).
    Disconnected {
        /// The publisher's node.
        addr: SocketAddr,
        /// The publisher, when the connection had been established.
        publisher: Option<PublisherInfo>,
    },
    /// A publisher's node refused the subscription.
    Rejected {
        /// The node.
        addr: SocketAddr,
        /// Why.
        reason: RejectCode,
        /// Its explanation.
        detail: String,
    },
    /// A publisher's node could not be reached.
    Unreachable {
        /// The node.
        addr: SocketAddr,
        /// What failed.
        detail: String,
    },
    /// Discovery says a publisher of the topic is gone. After [`LostReason::Silent`] and
    /// [`LostReason::Restarted`] the connection to it is closed; the subscription reconnects
    /// by itself when the node is announced again.
    PublisherLost {
        /// The publisher's node.
        node: NodeId,
        /// The epoch that is gone.
        epoch: u64,
        /// Its address.
        addr: SocketAddr,
        /// How discovery knows.
        reason: LostReason,
    },
}

/// Counters of a subscription.
#[derive(Debug, Default)]
pub struct SubscriptionCounters {
    /// Messages delivered.
    pub delivered: AtomicU64,
    /// Payload bytes delivered.
    pub bytes: AtomicU64,
    /// READs issued.
    pub reads: AtomicU64,
    /// READs that brought nothing new.
    pub empty_reads: AtomicU64,
    /// READs posted ahead: before the READ that showed more written data was validated.
    pub reads_ahead: AtomicU64,
    /// Records re-read because a READ raced a write.
    pub torn: AtomicU64,
    /// Messages lost to overruns.
    pub lost: AtomicU64,
    /// Acks sent.
    pub acks: AtomicU64,
    /// Doorbells requested.
    pub doorbell_requests: AtomicU64,
    /// Doorbells received.
    pub doorbells: AtomicU64,
    /// Connections established to a publisher this subscription had been connected to before.
    pub reconnects: AtomicU64,
    /// Messages skipped because they had been delivered already (reconnection to the same epoch).
    pub duplicates: AtomicU64,
    /// Waits that blocked at once instead of polling first, because as many subscriptions of
    /// the process as it has CPUs but one were polling already.
    pub unpolled_waits: AtomicU64,
    /// `CreditWanted` requests received from publishers waiting for credit.
    pub credit_requests: AtomicU64,
    /// Acks sent as solicited SENDs, answering those requests.
    pub solicited_acks: AtomicU64,
    /// Bytes of READ buffers the subscription holds now (a gauge). A feed's two buffers start
    /// at the batch size and grow to the largest READ its records need, never past what the
    /// ring's largest record needs.
    pub read_buffer_bytes: AtomicU64,
}

const KIND_READ: u64 = 1;
const KIND_ACK: u64 = 2;
const KIND_DOORBELL_REQ: u64 = 3;
const KIND_RECV: u64 = 4;

/// Control slots per feed: [ack send, doorbell-request send, receives...].
const RECV_SLOTS: usize = 4;
const SLOT: usize = 64;
const CTRL_LEN: usize = (2 + RECV_SLOTS) * SLOT;
/// How long a subscription polls (yielding the CPU between polls) for the completion of a READ
/// in flight before it blocks: a 1 MiB READ takes a few hundred microseconds on the soft fabric,
/// and a wake-up from a blocked wait on these machines costs as much again.
const READ_SPIN: Duration = Duration::from_micros(300);
/// Longest a closed feed waits for the flush of its work requests before it is removed.
const FLUSH_GRACE: Duration = Duration::from_secs(2);
/// Longest a parked feed waits before READing anyway (guards against a lost wake-up).
const PARK_RECHECK: Duration = Duration::from_millis(100);

fn wr_id(key: usize, gen: u32, kind: u64, slot: usize) -> u64 {
    ((key as u64) << 40) | ((gen as u64 & 0xffff) << 24) | (kind << 16) | slot as u64
}

fn split_wr_id(id: u64) -> (usize, u32, u64, usize) {
    ((id >> 40) as usize, ((id >> 24) & 0xffff) as u32, (id >> 16) & 0xff, (id & 0xffff) as usize)
}

/// A parsed message waiting for delivery.
enum Payload {
    /// In one of the feed's READ buffers.
    Slice { buf: usize, offset: usize, len: usize },
    /// Reassembled from fragments.
    Owned(Vec<u8>),
}

struct Ready {
    seq: u64,
    payload: Payload,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Idle {
    /// READing.
    Active,
    /// A doorbell was requested; the READ that follows it decides whether to park.
    Requested,
    /// Waiting for the doorbell.
    Parked { since: Instant },
}

/// A connection to one publisher.
struct Feed {
    qp: QueuePair,
    conn: ConnId,
    addr: SocketAddr,
    gen: u32,
    ctrl: MemoryRegion,
    active: Option<Box<ActiveFeed>>,
    /// No more READs: closed, waiting for its ready messages to be delivered.
    closed: bool,
    /// The provider refuses or flushes this connection's work: post nothing more and let the
    /// CM's `Disconnected` event close the feed (it first handles what the CQ holds, such as
    /// an end-of-stream notice, so an orderly end is not reported as a failure).
    quiesced: bool,
    /// Work requests posted and not completed yet: a closed feed is removed only when the
    /// provider has flushed them all (or after [`FLUSH_GRACE`]).
    outstanding: u32,
    closed_at: Option<Instant>,
}

struct ActiveFeed {
    info: PublisherInfo,
    reader: RingReader,
    /// Two READ buffers: one READ lands in one while the messages of the other are delivered.
    landings: [ReadBuffer; 2],
    /// The longest READ this feed can need (the ring's largest record and a header past it):
    /// how far the READ buffers may grow.
    max_read_len: usize,
    /// Queued messages that still point into each buffer.
    pending: [usize; 2],
    /// The buffer of the READ in flight.
    reading_into: usize,
    /// The last READ reached the end of what was written: READ again only once its messages
    /// are delivered (reading ahead then would only bring small batches).
    caught_up: bool,
    ring: RemoteAddr,
    capacity: u64,
    /// The READ in flight.
    plan: Option<ReadPlan>,
    ready: VecDeque<Ready>,
    acked: u64,
    ack_in_flight: bool,
    /// The publisher waits for credit and asked for a solicited ack once the consumed position
    /// reaches this (`Control::CreditWanted`).
    credit_wanted: Option<u64>,
    doorbell_req_in_flight: bool,
    idle: Idle,
    empty_since: Option<Instant>,
    /// The publisher announced the end of its stream after this sequence.
    end: Option<u64>,
    /// The last parse stopped on a lap: READ the control block next.
    need_control: bool,
    /// Messages up to this sequence were delivered by an earlier connection: skip them.
    skip_through: u64,
    /// Delays the next data READ while a trickle comes in (not with `busy_poll`).
    pacer: ReadPacer,
}

impl ActiveFeed {
    /// Bytes of the feed's READ buffers.
    fn read_buffer_bytes(&self) -> u64 {
        self.landings.iter().map(|b| b.capacity() as u64).sum()
    }

    /// A READ brought something (or the control block showed data waiting).
    fn note_progress(&mut self) {
        self.empty_since = None;
        self.idle = Idle::Active;
    }

    /// A READ found nothing new; returns whether it is time to ask for a doorbell.
    fn note_empty(&mut self, options: &SubscriptionOptions, now: Instant) -> bool {
        match self.idle {
            Idle::Active => {
                let since = *self.empty_since.get_or_insert(now);
                !options.busy_poll && now.duration_since(since) >= options.spin
            }
            Idle::Requested | Idle::Parked { .. } => {
                self.idle = Idle::Parked { since: now };
                false
            }
        }
    }
}

/// A subscription to one topic: receives the messages of every publisher it is connected to,
/// in order per publisher.
pub struct Subscription {
    node: Arc<NodeShared>,
    topic: String,
    topic_id: TopicId,
    options: SubscriptionOptions,
    cq: CompletionQueue,
    feeds: Slab<Feed>,
    by_conn: HashMap<ConnId, usize>,
    next_gen: u32,
    events_tx: Sender<FeedEvent>,
    events_rx: Receiver<FeedEvent>,
    user_events: VecDeque<SubscriptionEvent>,
    cursor: usize,
    ever_connected: bool,
    /// Holds a reassembled message lent by `recv_ref`.
    stash: Vec<u8>,
    counters: Arc<SubscriptionCounters>,
    /// Discovery's view of the topic's publishers (auto-connect).
    watch: Option<Watch>,
    /// Publishers ever connected to (by id): connecting again is a reconnection.
    seen: HashSet<u64>,
    /// Highest sequence delivered per (publisher id, epoch) by removed connections.
    delivered: HashMap<(u64, u64), u64>,
}

impl std::fmt::Debug for Subscription {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subscription").field("topic", &self.topic).field("feeds", &self.feeds.len()).finish()
    }
}

impl Subscription {
    pub(crate) fn create(node: Arc<NodeShared>, topic: &str, options: SubscriptionOptions) -> Result<Subscription> {
        check_topic(topic)?;
        if options.batch < 4096 || options.batch > 64 << 20 {
            return Err(Error::InvalidOption { option: "batch", detail: "must be in 4 KiB..=64 MiB".into() });
        }
        let depth = 4096.min(node.fabric.attributes().max_cqe);
        let cq = node.fabric.create_cq(depth)?;
        let (events_tx, events_rx) = channel::unbounded();
        let counters = Arc::new(SubscriptionCounters::default());
        node.stats.add_subscription(topic, &counters);
        let topic_id = TopicId::of(topic);
        let watch = (options.auto_connect && node.discovery.enabled()).then(|| Watch::new(&node.discovery, topic_id));
        Ok(Subscription {
            topic: topic.to_owned(),
            topic_id,
            node,
            options,
            cq,
            feeds: Slab::new(),
            by_conn: HashMap::new(),
            next_gen: 1,
            events_tx,
            events_rx,
            user_events: VecDeque::new(),
            cursor: 0,
            ever_connected: false,
            stash: Vec::new(),
            counters,
            watch,
            seen: HashSet::new(),
            delivered: HashMap::new(),
        })
    }

    /// The topic.
    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// The counters.
    pub fn counters(&self) -> &SubscriptionCounters {
        &self.counters
    }

    /// Publishers currently connected.
    pub fn publishers(&self) -> Vec<PublisherInfo> {
        self.feeds.iter().filter(|(_, f)| !f.closed).filter_map(|(_, f)| f.active.as_ref().map(|a| a.info)).collect()
    }

    /// Starts connecting to the publisher of this topic on the node at `addr` (nothing to do
    /// when a connection to `addr` is open or opening, e.g. made by discovery). The outcome
    /// arrives as a [`SubscriptionEvent`] (see [`try_event`](Self::try_event)) while receiving,
    /// or wait for it with [`connect_wait`](Self::connect_wait).
    pub fn connect(&mut self, addr: SocketAddr) -> Result<()> {
        let start = match self.options.start {
            Start::Latest => StartAt::Latest,
            Start::Earliest => StartAt::Earliest,
        };
        self.connect_at(addr, start)
    }

    fn has_open_feed(&self, addr: SocketAddr) -> bool {
        self.feeds.iter().any(|(_, f)| !f.closed && f.addr == addr)
    }

    fn connect_at(&mut self, addr: SocketAddr, start: StartAt) -> Result<()> {
        if self.has_open_feed(addr) {
            return Ok(());
        }
        if self.feeds.len() >= 1 << 16 {
            return Err(Error::InvalidOption { option: "connect", detail: "too many publishers".into() });
        }
        let data = ConnectData {
            topic: self.topic_id,
            start,
            accepts: PolicySet::ALL,
            node_id: self.node.id,
            flags: if self.options.busy_poll { ConnectFlags::NONE } else { ConnectFlags::WANTS_DOORBELLS },
        }
        .encode()?;
        let ctrl = self.node.pd.register(CTRL_LEN, Access::LOCAL_WRITE)?;
        let init = QpInit {
            pd: &self.node.pd,
            send_cq: &self.cq,
            recv_cq: &self.cq,
            srq: None,
            caps: QpCaps { max_send_wr: 16, max_recv_wr: RECV_SLOTS as u32, max_send_sge: 1, max_recv_sge: 1 },
            rnr_retry: RNR_RETRY_INFINITE,
            min_rnr_timer: Duration::from_micros(640),
        };
        let key = self.feeds.vacant_key();
        let gen = self.next_gen;
        self.next_gen = self.next_gen.wrapping_add(1);
        // Hold the routes while connecting so the CM thread cannot see the outcome first.
        let mut routes = self.node.routes.lock();
        let qp = self.node.channel.connect(addr, &init, &data, Duration::from_secs(5))?;
        let conn = qp.conn_id();
        routes.insert(conn, Route::Feed(self.events_tx.clone()));
        drop(routes);
        for slot in 0..RECV_SLOTS {
            let offset = (2 + slot) * SLOT;
            qp.post_recv(wr_id(key, gen, KIND_RECV, slot), &[ctrl.sge(offset, SLOT)])?;
        }
        self.by_conn.insert(conn, key);
        self.feeds.insert(Feed {
            qp,
            conn,
            addr,
            gen,
            ctrl,
            active: None,
            closed: false,
            quiesced: false,
            outstanding: RECV_SLOTS as u32,
            closed_at: None,
        });
        Ok(())
    }

    /// Connects to `addr` and waits until the publisher accepted or refused.
    pub fn connect_wait(&mut self, addr: SocketAddr, timeout: Duration) -> Result<PublisherInfo> {
        self.connect(addr)?;
        let deadline = Instant::now() + timeout;
        loop {
            self.drain_feed_events();
            let open = self.feeds.iter().find(|(_, f)| !f.closed && f.addr == addr);
            if let Some(info) = open.and_then(|(_, f)| f.active.as_ref()).map(|a| a.info) {
                return Ok(info);
            }
            if let Some(pos) = self.user_events.iter().position(|e| match e {
                SubscriptionEvent::Connected(info) => info.addr == addr,
                SubscriptionEvent::Rejected { addr: a, .. } | SubscriptionEvent::Unreachable { addr: a, .. } => {
                    *a == addr
                }
                SubscriptionEvent::Disconnected { addr: a, .. } => *a == addr,
                _ => false,
            }) {
                let event = self.user_events.remove(pos).expect("position is valid");
                return match event {
                    SubscriptionEvent::Connected(info) => {
                        self.user_events.push_back(SubscriptionEvent::Connected(info));
                        Ok(info)
                    }
                    SubscriptionEvent::Rejected { addr, reason, detail } => {
                        Err(Error::Rejected { peer: addr, reason, detail })
                    }
                    SubscriptionEvent::Unreachable { detail, .. } => Err(Error::Fabric(crate::fabric::Error::invalid(
                        "connect",
                        format!("{addr} is unreachable: {detail}"),
                    ))),
                    _ => Err(Error::Closed("the connection closed while it was being set up")),
                };
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(Error::Timeout { what: "connect", millis: timeout.as_millis() as u64 });
            }
            if let Ok(ev) = self.events_rx.recv_timeout(left.min(SLICE)) {
                self.on_feed_event(ev);
            }
        }
    }

    /// The next event about this subscription's connections, if any.
    pub fn try_event(&mut self) -> Option<SubscriptionEvent> {
        self.drain_feed_events();
        self.poll_discovery();
        self.user_events.pop_front()
    }

    /// Waits for the next message (until every publisher has gone: then [`Error::Closed`]).
    pub fn recv(&mut self) -> Result<Message> {
        loop {
            if let Some(m) = self.recv_timeout(Duration::from_secs(3600))? {
                return Ok(m);
            }
        }
    }

    /// Waits up to `timeout` for the next message; `None` on timeout.
    pub fn recv_timeout(&mut self, timeout: Duration) -> Result<Option<Message>> {
        let deadline = Instant::now() + timeout;
        Ok(self.next_ready(Some(deadline))?.map(|key| self.take_owned(key)))
    }

    /// Returns a message that has already arrived, making progress without blocking.
    pub fn try_recv(&mut self) -> Result<Option<Message>> {
        Ok(self.next_ready(None)?.map(|key| self.take_owned(key)))
    }

    /// Waits up to `timeout` for the next message and lends it without copying: the payload
    /// stays in the READ buffer it arrived in (reassembled messages in a buffer of the
    /// subscription) until the next call.
    pub fn recv_ref(&mut self, timeout: Duration) -> Result<Option<MessageRef<'_>>> {
        let deadline = Instant::now() + timeout;
        let Some(key) = self.next_ready(Some(deadline))? else { return Ok(None) };
        let Subscription { feeds, stash, counters, .. } = self;
        let feed = feeds[key].active.as_mut().expect("a ready feed is active");
        let ready = feed.ready.pop_front().expect("a ready feed has a message");
        let data: &[u8] = match ready.payload {
            Payload::Slice { buf, offset, len } => {
                feed.pending[buf] -= 1;
                &feed.landings[buf].bytes()[offset..offset + len]
            }
            Payload::Owned(v) => {
                *stash = v;
                stash
            }
        };
        counters.delivered.fetch_add(1, Ordering::Relaxed);
        counters.bytes.fetch_add(data.len() as u64, Ordering::Relaxed);
        Ok(Some(MessageRef { publisher: feed.info, seq: ready.seq, data }))
    }

    /// Waits up to `timeout` for the next message and deserializes it (bincode 2, serde).
    pub fn recv_value<T: DeserializeOwned>(&mut self, timeout: Duration) -> Result<Option<(T, Message)>> {
        let Some(m) = self.recv_timeout(timeout)? else { return Ok(None) };
        let (value, _) = bincode::serde::decode_from_slice(&m.data, bincode::config::standard())
            .map_err(|e| Error::Decode(e.to_string()))?;
        Ok(Some((value, m)))
    }

    /// An iterator over messages; it ends when the subscription closes or fails.
    pub fn iter(&mut self) -> impl Iterator<Item = Message> + '_ {
        std::iter::from_fn(move || self.recv().ok())
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        if let Some(watch) = &self.watch {
            watch.unwatch(&self.node.discovery);
        }
        let mut routes = self.node.routes.lock();
        for (_, feed) in self.feeds.iter() {
            routes.remove(&feed.conn);
        }
    }
}

/// The machinery: connection events, READs, completions, acks, doorbells.
impl Subscription {
    fn take_owned(&mut self, key: usize) -> Message {
        let feed = self.feeds[key].active.as_mut().expect("a ready feed is active");
        let ready = feed.ready.pop_front().expect("a ready feed has a message");
        let data = match ready.payload {
            Payload::Slice { buf, offset, len } => {
                feed.pending[buf] -= 1;
                feed.landings[buf].bytes()[offset..offset + len].to_vec()
            }
            Payload::Owned(v) => v,
        };
        self.counters.delivered.fetch_add(1, Ordering::Relaxed);
        self.counters.bytes.fetch_add(data.len() as u64, Ordering::Relaxed);
        Message { publisher: feed.info, seq: ready.seq, data }
    }

    /// Runs the feeds until one has a message ready and returns its key; `None` when the
    /// deadline passes (with no deadline: after one pass that does not block).
    fn next_ready(&mut self, deadline: Option<Instant>) -> Result<Option<usize>> {
        let mut wcs = [WorkCompletion::default(); 64];
        loop {
            self.drain_feed_events();
            self.poll_discovery();
            self.reap_closed();
            if let Some(key) = self.pick_ready() {
                return Ok(Some(key));
            }
            let may_return = self.watch.as_ref().is_some_and(Watch::expects_publishers);
            if self.ever_connected && self.feeds.is_empty() && !may_return {
                return Err(Error::Closed("every publisher of this subscription has gone"));
            }
            self.housekeeping();
            let n = self.cq.poll(&mut wcs)?;
            if n > 0 {
                self.handle_completions(&wcs[..n]);
                continue;
            }
            let Some(deadline) = deadline else { return Ok(None) };
            let now = Instant::now();
            if now >= deadline {
                return Ok(None);
            }
            let wait = deadline.saturating_duration_since(now).min(SLICE);
            let any_active = self.feeds.iter().any(|(_, f)| f.active.is_some() && !f.closed);
            if !any_active {
                match &self.watch {
                    Some(watch) => {
                        // Wake on whichever comes first: a connection event or a sighting (it is
                        // handled by `poll_discovery` at the top of the loop).
                        let mut select = channel::Select::new();
                        select.recv(&self.events_rx);
                        select.recv(watch.receiver());
                        let _ = select.ready_timeout(wait);
                    }
                    None => {
                        if let Ok(ev) = self.events_rx.recv_timeout(wait) {
                            self.on_feed_event(ev);
                        }
                    }
                }
                continue;
            }
            let reading = self.feeds.iter().any(|(_, f)| f.active.as_ref().is_some_and(|a| a.plan.is_some()));
            let mut spin = if reading || self.options.busy_poll { READ_SPIN } else { Duration::ZERO };
            let mut wait = if reading || self.options.busy_poll { wait } else { wait.min(PARK_RECHECK) };
            // A paced feed READs again within microseconds: poll (yielding) until then rather
            // than sleep, whose wake-up costs more than the delay.
            let paced = self
                .feeds
                .iter()
                .filter(|(_, f)| !f.closed && !f.quiesced)
                .filter_map(|(_, f)| f.active.as_ref().filter(|a| a.plan.is_none()).and_then(|a| a.pacer.left(now)))
                .min();
            if let Some(left) = paced {
                spin = spin.max(left);
                wait = wait.min(left);
            }
            // Only so many subscriptions poll at once; the others block at once (see
            // `spin_permit`). A busy-polling one always polls.
            let permit = (spin > Duration::ZERO && !self.options.busy_poll).then(SpinPermit::try_acquire);
            if let Some(None) = permit {
                spin = Duration::ZERO;
                self.counters.unpolled_waits.fetch_add(1, Ordering::Relaxed);
            }
            let n = self.cq.poll_wait(&mut wcs, spin, wait)?;
            drop(permit);
            self.handle_completions(&wcs[..n]);
        }
    }

    fn pick_ready(&mut self) -> Option<usize> {
        let n = self.feeds.capacity();
        for i in 0..n {
            let key = (self.cursor + i) % n.max(1);
            if let Some(feed) = self.feeds.get(key) {
                if feed.active.as_ref().is_some_and(|a| !a.ready.is_empty()) {
                    self.cursor = key + 1;
                    return Some(key);
                }
            }
        }
        None
    }

    /// Applies discovery's sightings: reports lost publishers (closing the connection to a
    /// silent or restarted one) and connects to the publishers due.
    fn poll_discovery(&mut self) {
        let Some(watch) = self.watch.as_mut() else { return };
        let now = Instant::now();
        let sightings: Vec<Sighting> = watch.receiver().try_iter().collect();
        let mut lost = Vec::new();
        for s in sightings {
            if let Some(l) = watch.apply(s, now) {
                lost.push(l);
            }
        }
        for l in lost {
            self.user_events.push_back(SubscriptionEvent::PublisherLost {
                node: l.node,
                epoch: l.epoch,
                addr: l.addr,
                reason: l.reason,
            });
            if matches!(l.reason, LostReason::Silent | LostReason::Restarted) {
                let gone: Vec<usize> = self
                    .feeds
                    .iter()
                    .filter(|(_, f)| !f.closed && f.addr == l.addr)
                    .filter(|(_, f)| f.active.as_ref().is_none_or(|a| a.info.epoch == l.epoch))
                    .map(|(k, _)| k)
                    .collect();
                for key in gone {
                    self.close_feed(key);
                }
            }
        }
        let feeds = &self.feeds;
        let Some(watch) = self.watch.as_mut() else { return };
        let due = watch.due(now, |addr| feeds.iter().any(|(_, f)| !f.closed && f.addr == addr));
        for (node, addr) in due {
            // A publisher read before is resumed from its earliest retained message (duplicates
            // of the same epoch are skipped); a new one starts where the options say.
            let start = if self.seen.contains(&super::publisher::publisher_id(node, self.topic_id)) {
                StartAt::Earliest
            } else {
                match self.options.start {
                    Start::Latest => StartAt::Latest,
                    Start::Earliest => StartAt::Earliest,
                }
            };
            if let Err(e) = self.connect_at(addr, start) {
                tracing::debug!(topic = %self.topic, %addr, "auto-connect: {e}");
                self.user_events.push_back(SubscriptionEvent::Unreachable { addr, detail: e.to_string() });
            }
        }
    }

    fn drain_feed_events(&mut self) {
        while let Ok(ev) = self.events_rx.try_recv() {
            self.on_feed_event(ev);
        }
    }

    fn on_feed_event(&mut self, ev: FeedEvent) {
        match ev {
            FeedEvent::Established { conn, private_data } => {
                let Some(&key) = self.by_conn.get(&conn) else { return };
                match self.activate(key, &private_data) {
                    Ok(info) => {
                        self.ever_connected = true;
                        if !self.seen.insert(info.id) {
                            self.counters.reconnects.fetch_add(1, Ordering::Relaxed);
                        }
                        if let Some(watch) = self.watch.as_mut() {
                            watch.connected(info.addr);
                        }
                        self.user_events.push_back(SubscriptionEvent::Connected(info));
                    }
                    Err(e) => {
                        let addr = self.feeds[key].addr;
                        tracing::warn!(topic = %self.topic, %addr, "unusable accept from publisher: {e}");
                        self.user_events.push_back(SubscriptionEvent::Rejected {
                            addr,
                            reason: RejectCode::Malformed,
                            detail: format!("the publisher's accept data is unusable: {e}"),
                        });
                        self.remove_feed(key);
                    }
                }
            }
            FeedEvent::Rejected { conn, reason, private_data } => {
                let Some(&key) = self.by_conn.get(&conn) else { return };
                let addr = self.feeds[key].addr;
                let event = match (reason, RejectData::decode(&private_data)) {
                    (_, Ok(r)) => SubscriptionEvent::Rejected { addr, reason: r.reason, detail: r.detail },
                    (CmReject::NoListener, Err(_)) => {
                        SubscriptionEvent::Unreachable { addr, detail: "no node listens at that address".into() }
                    }
                    (other, Err(e)) => SubscriptionEvent::Rejected {
                        addr,
                        reason: RejectCode::Malformed,
                        detail: format!("rejected ({other:?}) without a readable reason: {e}"),
                    },
                };
                self.user_events.push_back(event);
                self.remove_feed(key);
            }
            FeedEvent::Unreachable { conn, detail } => {
                let Some(&key) = self.by_conn.get(&conn) else { return };
                let addr = self.feeds[key].addr;
                self.user_events.push_back(SubscriptionEvent::Unreachable { addr, detail });
                self.remove_feed(key);
            }
            FeedEvent::Disconnected { conn } => {
                let Some(&key) = self.by_conn.get(&conn) else { return };
                // What arrived before the disconnect (an end of stream, a drop notice) is in the
                // CQ already: handle it first, so an orderly end is not reported as a failure.
                self.drain_completions();
                let Some(feed) = self.feeds.get_mut(key) else { return };
                if feed.closed {
                    return;
                }
                let event = match &feed.active {
                    Some(a) => match a.end {
                        Some(final_seq) => SubscriptionEvent::Ended { publisher: a.info, final_seq, complete: false },
                        None => SubscriptionEvent::Disconnected { addr: feed.addr, publisher: Some(a.info) },
                    },
                    None => SubscriptionEvent::Disconnected { addr: feed.addr, publisher: None },
                };
                self.user_events.push_back(event);
                self.close_feed(key);
            }
        }
    }

    /// Sets up reading of the publisher's ring from its accept data.
    fn activate(&mut self, key: usize, private_data: &[u8]) -> Result<PublisherInfo> {
        let accept = AcceptData::decode(private_data)?;
        if accept.topic != self.topic_id {
            return Err(Error::Protocol(crate::protocol::ProtocolError::Malformed {
                what: "accept private data",
                detail: "the publisher accepted another topic".into(),
            }));
        }
        let reader = RingReader::new(accept.reader_config(self.options.max_message_len))?;
        // Small until a record needs more: a ring that allows large records costs nothing
        // while its messages are small.
        let max_read_len = reader.max_read_len(self.options.batch);
        let landing_len = self.options.batch.max(CONTROL_READ_LEN);
        let landings = [ReadBuffer::new(&self.node.pd, landing_len)?, ReadBuffer::new(&self.node.pd, landing_len)?];
        let (id, epoch) = (accept.publisher_id, accept.epoch);
        // What earlier connections to this publisher's epoch delivered (or still hold ready).
        let skip_through = self
            .feeds
            .iter()
            .filter_map(|(k, f)| f.active.as_ref().filter(|a| k != key && a.info.id == id && a.info.epoch == epoch))
            .map(|a| a.reader.next_seq().saturating_sub(1))
            .chain(self.delivered.get(&(id, epoch)).copied())
            .max()
            .unwrap_or(0);
        let feed = &mut self.feeds[key];
        let info = PublisherInfo { id, epoch, addr: feed.addr, policy: accept.policy };
        feed.active = Some(Box::new(ActiveFeed {
            info,
            reader,
            landings,
            max_read_len,
            pending: [0, 0],
            reading_into: 0,
            caught_up: false,
            ring: accept.ring,
            capacity: accept.capacity,
            plan: None,
            ready: VecDeque::new(),
            acked: accept.start_position,
            ack_in_flight: false,
            credit_wanted: None,
            doorbell_req_in_flight: false,
            idle: Idle::Active,
            empty_since: None,
            end: None,
            need_control: false,
            skip_through,
            pacer: ReadPacer::default(),
        }));
        let held = feed.active.as_ref().map_or(0, |a| a.read_buffer_bytes());
        self.counters.read_buffer_bytes.fetch_add(held, Ordering::Relaxed);
        Ok(info)
    }

    /// Stops READing a feed; it is removed once its ready messages are delivered.
    fn close_feed(&mut self, key: usize) {
        if let Some(feed) = self.feeds.get_mut(key) {
            feed.closed = true;
            feed.closed_at.get_or_insert_with(Instant::now);
            let _ = feed.qp.disconnect();
        }
    }

    fn remove_feed(&mut self, key: usize) {
        if self.feeds.contains(key) {
            let feed = self.feeds.remove(key);
            self.by_conn.remove(&feed.conn);
            self.node.routes.lock().remove(&feed.conn);
            if let Some(a) = &feed.active {
                self.counters.read_buffer_bytes.fetch_sub(a.read_buffer_bytes(), Ordering::Relaxed);
                let last = a.reader.next_seq().saturating_sub(1);
                let entry = self.delivered.entry((a.info.id, a.info.epoch)).or_insert(0);
                *entry = (*entry).max(last);
                // Older epochs of this publisher are never read again.
                self.delivered.retain(|&(id, epoch), _| id != a.info.id || epoch >= a.info.epoch);
            }
            if let Some(watch) = self.watch.as_mut() {
                watch.closed(feed.addr, Instant::now());
            }
        }
    }

    fn reap_closed(&mut self) {
        let done: Vec<usize> = self
            .feeds
            .iter()
            .filter(|(_, f)| {
                let flushed = f.outstanding == 0 || f.closed_at.is_some_and(|t| t.elapsed() >= FLUSH_GRACE);
                f.closed && flushed && f.active.as_ref().is_none_or(|a| a.ready.is_empty())
            })
            .map(|(k, _)| k)
            .collect();
        for key in done {
            self.remove_feed(key);
        }
    }

    /// Posts the READs, acks and doorbell requests each feed needs now.
    fn housekeeping(&mut self) {
        let now = Instant::now();
        let mut failed = Vec::new();
        for (key, feed) in self.feeds.iter_mut() {
            if feed.closed || feed.quiesced {
                continue;
            }
            let Some(a) = feed.active.as_deref_mut() else { continue };
            // Acks are coalesced to a quarter ring; one more goes out once the feed has found
            // nothing new for `spin` (parking or busy-polling), so a publisher flushing or
            // closing sees everything consumed. A feed that merely caught up does not ack at
            // once: with at most a quarter ring unacknowledged the publisher always has room for
            // its largest record, so it never waits on such a feed.
            let idle = a.idle != Idle::Active
                || a.empty_since.is_some_and(|since| now.duration_since(since) >= self.options.spin);
            // A publisher waiting for credit asked for an ack at a position: that one goes out as
            // soon as it is consumed, solicited (the publisher wakes for it alone).
            if !a.ack_in_flight {
                let consumed = a.reader.consumed_position();
                let wanted = a.credit_wanted.is_some_and(|p| consumed >= p);
                if wanted || (consumed > a.acked && (idle || consumed - a.acked >= a.capacity / 4)) {
                    if let Err(e) = send_ack((feed.gen, key, &feed.qp, &feed.ctrl), a, wanted) {
                        failed.push((key, e));
                        continue;
                    }
                    feed.outstanding += 1;
                    self.counters.acks.fetch_add(1, Ordering::Relaxed);
                    if wanted {
                        a.credit_wanted = None;
                        self.counters.solicited_acks.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            if a.plan.is_some() || (a.caught_up && !a.ready.is_empty()) {
                continue;
            }
            // A buffer no queued message points into: the READ lands there while the messages
            // of the other buffer are being delivered.
            let Some(buf) = (0..2).find(|&b| a.pending[b] == 0 && !a.landings[b].in_flight()) else { continue };
            if let Idle::Parked { since } = a.idle {
                if now.duration_since(since) < PARK_RECHECK {
                    continue;
                }
                a.idle = Idle::Requested;
            }
            if !a.need_control && !a.pacer.ready(now) {
                continue;
            }
            let plan =
                if a.need_control { ReadPlan::control() } else { a.reader.next_read(self.options.batch, !a.caught_up) };
            match post_ring_read((feed.gen, key, &feed.qp), a, buf, plan, (&self.node.pd, &self.counters)) {
                Ok(()) => {
                    feed.outstanding += 1;
                    self.counters.reads.fetch_add(1, Ordering::Relaxed);
                }
                Err(e) => failed.push((key, e.into())),
            }
        }
        for (key, e) in failed {
            self.fail_feed(key, e);
        }
    }

    fn fail_feed(&mut self, key: usize, e: Error) {
        let Some(feed) = self.feeds.get(key) else { return };
        if feed.closed {
            return;
        }
        if matches!(e, Error::Fabric(crate::fabric::Error::NotConnected { .. })) {
            // The connection is going away: the CM's Disconnected event closes the feed, with
            // the right event once the CQ was handled.
            tracing::debug!(topic = %self.topic, addr = %feed.addr, "feed quiesced: {e}");
            if let Some(feed) = self.feeds.get_mut(key) {
                feed.quiesced = true;
            }
            return;
        }
        tracing::warn!(topic = %self.topic, addr = %feed.addr, "feed failed: {e}");
        let publisher = feed.active.as_ref().map(|a| a.info);
        self.user_events.push_back(SubscriptionEvent::Disconnected { addr: feed.addr, publisher });
        self.close_feed(key);
    }

    /// Handles every completion already in the CQ, without waiting.
    fn drain_completions(&mut self) {
        let mut wcs = [WorkCompletion::default(); 64];
        loop {
            let n = match self.cq.poll(&mut wcs) {
                Ok(n) => n,
                Err(e) => {
                    tracing::warn!(topic = %self.topic, "subscription CQ: {e}");
                    return;
                }
            };
            self.handle_completions(&wcs[..n]);
            if n < wcs.len() {
                return;
            }
        }
    }

    fn handle_completions(&mut self, wcs: &[WorkCompletion]) {
        for wc in wcs {
            let (key, gen, kind, slot) = split_wr_id(wc.wr_id);
            let Some(feed) = self.feeds.get_mut(key) else { continue };
            if feed.gen & 0xffff != gen {
                continue;
            }
            feed.outstanding = feed.outstanding.saturating_sub(1);
            match kind {
                KIND_READ => {
                    let Some(a) = feed.active.as_deref_mut() else { continue };
                    let plan = a.plan.take();
                    if wc.status != WcStatus::Success {
                        a.landings[a.reading_into].complete(None);
                        if wc.status == WcStatus::WorkRequestFlushed {
                            // Flushed by a disconnect: the CM event decides how it ended.
                            feed.quiesced = true;
                            continue;
                        }
                        let e = crate::fabric::Error::invalid("RDMA READ", format!("completed with {:?}", wc.status));
                        self.fail_feed(key, e.into());
                        continue;
                    }
                    let buf = a.reading_into;
                    a.landings[buf].complete(plan.map(|p| p.len));
                    if feed.closed {
                        // The stream already ended or failed: what this READ brought is moot.
                        continue;
                    }
                    let Some(plan) = plan else { continue };
                    // When the headers show more written data, the next READ goes out before
                    // this one is validated (checksums), into the other buffer.
                    let other = 1 - buf;
                    let other_free = a.pending[other] == 0 && !a.landings[other].in_flight();
                    let ahead = (other_free && plan != ReadPlan::control() && !feed.quiesced)
                        .then(|| a.reader.plan_ahead(a.landings[buf].bytes(), plan.position, self.options.batch))
                        .flatten();
                    if let Some(next) = ahead {
                        match post_ring_read((feed.gen, key, &feed.qp), a, other, next, (&self.node.pd, &self.counters))
                        {
                            Ok(()) => {
                                feed.outstanding += 1;
                                self.counters.reads.fetch_add(1, Ordering::Relaxed);
                                self.counters.reads_ahead.fetch_add(1, Ordering::Relaxed);
                            }
                            Err(e) => tracing::debug!(topic = %self.topic, "a READ ahead was refused: {e}"),
                        }
                    }
                    if let Err(e) = self.on_read(key, plan, buf) {
                        self.fail_feed(key, e);
                    }
                }
                KIND_ACK => {
                    if let Some(a) = feed.active.as_deref_mut() {
                        a.ack_in_flight = false;
                    }
                }
                KIND_DOORBELL_REQ => {
                    if let Some(a) = feed.active.as_deref_mut() {
                        a.doorbell_req_in_flight = false;
                    }
                }
                KIND_RECV if wc.status == WcStatus::Success && wc.opcode == WcOpcode::Recv && !feed.closed => {
                    self.on_control(key, slot, wc.byte_len as usize);
                }
                _ => {}
            }
        }
    }

    /// A READ completed: validate and queue what it brought.
    fn on_read(&mut self, key: usize, plan: ReadPlan, buf: usize) -> Result<()> {
        let Feed { qp, ctrl, gen, active, outstanding, .. } = &mut self.feeds[key];
        let a = active.as_deref_mut().expect("a READ completes on an active feed");
        let post = (*gen, key, &*qp, &*ctrl);
        if plan == ReadPlan::control() && a.need_control {
            let snapshot = ControlSnapshot::decode(a.landings[buf].bytes()).map_err(Error::from)?;
            a.need_control = false;
            match a.reader.apply_control(&snapshot)? {
                ControlOutcome::Retry => a.need_control = true,
                ControlOutcome::Resync { .. } | ControlOutcome::Behind { .. } => {
                    // Written data waits past the position: READ at once (the reader makes it a
                    // whole batch).
                    a.pacer.reset();
                    a.note_progress();
                }
                ControlOutcome::CaughtUp => {
                    self.counters.empty_reads.fetch_add(1, Ordering::Relaxed);
                    if a.note_empty(&self.options, Instant::now()) {
                        request_doorbell_counted(post, outstanding, a, &self.counters)?;
                    }
                }
            }
            return Ok(());
        }
        let bytes = a.landings[buf].bytes();
        let base = bytes.as_ptr() as usize;
        let end = base + bytes.len();
        let ready = &mut a.ready;
        let pending = &mut a.pending[buf];
        let skip_through = a.skip_through;
        let mut skipped = 0u64;
        let parsed = a
            .reader
            .parse(bytes, plan.position, |seq, payload| {
                if seq <= skip_through {
                    skipped += 1;
                    return;
                }
                let p = payload.as_ptr() as usize;
                let payload = if p >= base && p + payload.len() <= end {
                    *pending += 1;
                    Payload::Slice { buf, offset: p - base, len: payload.len() }
                } else {
                    Payload::Owned(payload.to_vec())
                };
                ready.push_back(Ready { seq, payload });
            })
            .map_err(Error::from)?;
        if skipped > 0 {
            self.counters.duplicates.fetch_add(skipped, Ordering::Relaxed);
        }
        if parsed.stop == Stop::Stale {
            // A READ ahead past a record the parse of the previous READ did not accept: it
            // says nothing about the ring, and the state that parse left stands.
            return Ok(());
        }
        a.caught_up = parsed.stop != Stop::End;
        if !self.options.busy_poll {
            a.pacer.after_read(Instant::now(), parsed.consumed, plan.len, !a.caught_up);
        }
        if parsed.lost > 0 {
            self.counters.lost.fetch_add(parsed.lost, Ordering::Relaxed);
            self.user_events.push_back(SubscriptionEvent::Lost { publisher: a.info, count: parsed.lost });
        }
        if parsed.stop == Stop::Torn {
            self.counters.torn.fetch_add(1, Ordering::Relaxed);
        }
        // Only the control block tells "not written yet" from "overwritten by a later lap" when
        // the publisher may overwrite; otherwise a lap is proven by the record itself.
        let overwrites = a.info.policy == WirePolicy::Overwrite;
        a.need_control = match parsed.stop {
            Stop::NeedControl => true,
            Stop::NotYetWritten | Stop::Torn => overwrites,
            Stop::End | Stop::Stale => false,
        };
        if parsed.consumed > 0 || parsed.stop != Stop::NotYetWritten {
            a.note_progress();
        } else if !a.need_control {
            self.counters.empty_reads.fetch_add(1, Ordering::Relaxed);
            if a.note_empty(&self.options, Instant::now()) {
                request_doorbell_counted(post, outstanding, a, &self.counters)?;
            }
        }
        if let Some(final_seq) = a.end {
            if a.reader.next_seq() > final_seq {
                self.user_events.push_back(SubscriptionEvent::Ended { publisher: a.info, final_seq, complete: true });
                self.close_feed(key);
            }
        }
        Ok(())
    }

    /// A control message from the publisher arrived in receive slot `slot`.
    fn on_control(&mut self, key: usize, slot: usize, len: usize) {
        let feed = &mut self.feeds[key];
        let offset = (2 + slot) * SLOT;
        let mut bytes = [0u8; SLOT];
        let len = len.min(SLOT);
        let decoded = feed
            .ctrl
            .buffer()
            .read(offset, &mut bytes[..len])
            .map_err(Error::from)
            .and_then(|_| Control::decode(&bytes[..len]).map_err(Error::from));
        if !feed.closed {
            match feed.qp.post_recv(wr_id(key, feed.gen, KIND_RECV, slot), &[feed.ctrl.sge(offset, SLOT)]) {
                Ok(()) => feed.outstanding += 1,
                Err(e) => tracing::debug!("reposting a receive: {e}"),
            }
        }
        let Some(a) = feed.active.as_deref_mut() else { return };
        match decoded {
            Ok(Control::Doorbell { .. }) => {
                self.counters.doorbells.fetch_add(1, Ordering::Relaxed);
                a.idle = Idle::Active;
                a.empty_since = None;
                a.pacer.reset();
            }
            Ok(Control::CreditWanted { position }) => {
                self.counters.credit_requests.fetch_add(1, Ordering::Relaxed);
                a.credit_wanted = Some(a.credit_wanted.map_or(position, |p| p.max(position)));
            }
            Ok(Control::Dropped { reason }) => {
                self.user_events.push_back(SubscriptionEvent::Dropped { publisher: a.info, reason });
                self.close_feed(key);
            }
            Ok(Control::EndOfStream { final_seq }) => {
                a.end = Some(final_seq);
                a.idle = Idle::Active;
                if a.reader.next_seq() > final_seq {
                    self.user_events.push_back(SubscriptionEvent::Ended {
                        publisher: a.info,
                        final_seq,
                        complete: true,
                    });
                    self.close_feed(key);
                }
            }
            Ok(other) => {
                tracing::debug!(topic = %self.topic, ?other, "the publisher sent a subscriber's control message")
            }
            Err(e) => tracing::debug!(topic = %self.topic, "undecodable control message from the publisher: {e}"),
        }
    }
}

/// Posts a control SEND from `slot` of the feed's control region (`solicited`: the publisher
/// waits for it alone).
fn post_control(
    (gen, key, qp, ctrl): ControlPost<'_>,
    kind: u64,
    slot: usize,
    msg: &Control,
    solicited: bool,
) -> Result<()> {
    let bytes = msg.encode()?;
    let offset = slot * SLOT;
    ctrl.buffer().write(offset, &bytes)?;
    let sge = [ctrl.sge(offset, bytes.len())];
    qp.post_send(&SendRequest { solicited, ..SendRequest::new(wr_id(key, gen, kind, slot), SendOp::Send, &sge) })?;
    Ok(())
}

/// Posts a READ of the publisher's ring as `plan` says into READ buffer `buf`, which has no
/// READ in flight and no queued message pointing into it; it is then the feed's READ in flight.
/// A buffer too small for the READ is replaced by a larger one first (at least twice its size,
/// at most the feed's longest READ), registered in `pd` and counted in `counters`.
fn post_ring_read(
    (gen, key, qp): (u32, usize, &QueuePair),
    a: &mut ActiveFeed,
    buf: usize,
    plan: ReadPlan,
    (pd, counters): (&ProtectionDomain, &SubscriptionCounters),
) -> crate::fabric::Result<()> {
    let old = a.landings[buf].capacity();
    if plan.len > old {
        let len = (2 * old).min(a.max_read_len).max(plan.len);
        a.landings[buf] = ReadBuffer::new(pd, len)?;
        counters.read_buffer_bytes.fetch_add((len - old) as u64, Ordering::Relaxed);
    }
    let remote = RemoteAddr { addr: a.ring.addr + plan.ring_offset as u64, rkey: a.ring.rkey };
    a.landings[buf].post_read(qp, wr_id(key, gen, KIND_READ, 0), remote, plan.len)?;
    a.plan = Some(plan);
    a.reading_into = buf;
    Ok(())
}

/// The feed's parts a control SEND needs: generation, key, queue pair, control region.
type ControlPost<'a> = (u32, usize, &'a QueuePair, &'a MemoryRegion);

fn send_ack(post: ControlPost<'_>, a: &mut ActiveFeed, solicited: bool) -> Result<()> {
    let position = a.reader.consumed_position();
    let ack = Control::Ack { position, seq: a.reader.next_seq() };
    post_control(post, KIND_ACK, 0, &ack, solicited)?;
    a.ack_in_flight = true;
    a.acked = position;
    Ok(())
}

/// Asks the publisher for a doorbell and counts it; the feed then makes one more READ and
/// parks if that finds nothing.
fn request_doorbell_counted(
    post: ControlPost<'_>,
    outstanding: &mut u32,
    a: &mut ActiveFeed,
    counters: &SubscriptionCounters,
) -> Result<()> {
    if request_doorbell(post, a)? {
        *outstanding += 1;
        counters.doorbell_requests.fetch_add(1, Ordering::Relaxed);
    }
    a.idle = Idle::Requested;
    Ok(())
}

/// Asks the publisher for a doorbell; returns whether a request was posted.
fn request_doorbell(post: ControlPost<'_>, a: &mut ActiveFeed) -> Result<bool> {
    if a.doorbell_req_in_flight {
        return Ok(false);
    }
    let position = a.reader.consumed_position();
    let request = Control::DoorbellRequest { armed: true, position };
    post_control(post, KIND_DOORBELL_REQ, 1, &request, false)?;
    a.doorbell_req_in_flight = true;
    Ok(true)
}
