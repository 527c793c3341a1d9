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

use std::collections::{HashMap, VecDeque};
use std::marker::PhantomData;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam::channel::{self, Receiver};
use slab::Slab;

use crate::error::{Error, Result};
use crate::fabric::{CompletionQueue, ConnId, DataPath, MemoryRegion, QueuePair, ReadBuffer, RemoteAddr};
use crate::node::spin_permit::SpinPermit;
use crate::protocol::{DropReason, PolicyKind, RejectCode, Secret, TopicId};
use crate::ring::{ReadPlan, RingReader};

use super::cm::FeedEvent;
use super::discovery::{LostReason, Sighting};
use super::pacing::ReadPacer;
use super::{check_topic, MessageType, NodeId, NodeShared};
pub use builder::SubscriberBuilder;
pub(crate) use connector::{run_all as run_connectors, Connector, OpenedFeed};
pub use events::MAX_EVENTS;
use events::{EventQueue, MAX_UNDELIVERABLE};
#[cfg(feature = "async")]
pub use stream::MessageStream;
use wake::EventWaker;
pub(crate) use wake::FeedSender;

mod builder;
mod connect;
mod connector;
mod deliver;
mod events;
mod pull;
#[cfg(feature = "async")]
mod stream;
mod wake;

/// Where a new subscription starts in each publisher's stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Start {
    /// Only messages published after the subscription connects.
    #[default]
    Latest,
    /// Every message the publisher still retains.
    Earliest,
}

/// Options of a subscription: what a [`SubscriberBuilder`] sets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SubscriptionOptions {
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
    /// Largest record payload this subscription READs (default 16 MiB, what a 64 MiB ring
    /// holds by default): a publisher whose accept data advertises larger records, or whose
    /// ring holds a record header claiming more than it advertised, is not read
    /// ([`SubscriptionEvent::RecordTooLarge`]). So a feed's two READ buffers never grow past
    /// this, a record header and one more header each (or `batch`, if larger), whatever a
    /// publisher says.
    pub max_record_payload: usize,
    /// The topic's credential, proven (never sent) to publishers that require one
    /// ([`PublisherBuilder::credential`](crate::PublisherBuilder::credential)); one that refuses
    /// it answers [`RejectCode::Unauthorized`]. Publishers without a credential accept anyone.
    /// Default `None`.
    pub credential: Option<Secret>,
    /// Connect by itself to every publisher of the topic discovery announces, and reconnect
    /// to those that come back (default true; no effect when the node's discovery is off).
    /// Connections are opened in the background, by the node's connector thread (and by the
    /// subscription's own calls, which then connect at once), so a publisher sees the
    /// subscriber before the application calls anything; messages are read once it does.
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
            max_record_payload: 16 << 20,
            credential: None,
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
    pub policy: PolicyKind,
    /// How this subscription's READs reach the publisher's ring: shared memory when both run
    /// on this host (soft fabric, [`crate::fabric::SameHost::Auto`]), else the network.
    pub data_path: DataPath,
}

/// A delivered message: its payload `data` (raw bytes, `Vec<u8>`, by default; the decoded
/// value on a typed subscription) and where it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message<D = Vec<u8>> {
    /// Who published it.
    pub publisher: PublisherInfo,
    /// Its sequence number in that publisher's stream (1, 2, ...).
    pub seq: u64,
    /// The payload.
    pub data: D,
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
#[non_exhaustive]
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
    /// The publisher sent a message longer than this subscription accepts
    /// ([`SubscriberBuilder::max_message_len`]): the subscription stops reading that
    /// publisher (a `Disconnected` follows), since the stream cannot continue without it. The
    /// next receive returns [`Error::MessageTooLarge`].
    MessageTooLarge {
        /// The publisher.
        publisher: PublisherInfo,
        /// The message's length in bytes.
        len: u64,
        /// This subscription's limit in bytes.
        limit: u64,
    },
    /// A publisher's records are larger than this subscription READs
    /// ([`SubscriberBuilder::max_record_payload`]): its accept data advertised larger ones
    /// (then the subscription never READs its ring), or a record header claimed more than the
    /// publisher advertised (the same header twice: no torn READ; a `Disconnected` follows).
    /// The subscription stops reading that publisher; with discovery it tries again later, with
    /// back-off, as after a refusal.
    RecordTooLarge {
        /// The publisher's node.
        addr: SocketAddr,
        /// The record payload advertised or claimed, in bytes.
        len: u64,
        /// The largest this feed READs, in bytes: the subscription's limit, or the publisher's
        /// advertised one when a header claimed more than that.
        limit: u64,
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

crate::counters::counter_set! {
    /// Counters of a subscription.
    pub struct SubscriptionCounters {
        /// Messages delivered.
        delivered: Total, Messages;
        /// Payload bytes delivered.
        bytes: Total, Bytes;
        /// READs issued.
        reads: Total, Events;
        /// READs that brought nothing new.
        empty_reads: Total, Events;
        /// READs posted ahead: before the READ that showed more written data was validated.
        reads_ahead: Total, Events;
        /// Records re-read because a READ raced a write.
        torn: Total, Events;
        /// Messages lost to overruns.
        lost: Total, Messages;
        /// Acks sent.
        acks: Total, Events;
        /// Doorbells requested.
        doorbell_requests: Total, Events;
        /// Doorbells received.
        doorbells: Total, Events;
        /// Connections established to a publisher this subscription had been connected to before.
        reconnects: Total, Connections;
        /// Messages skipped because they had been delivered already (reconnection to the same epoch).
        duplicates: Total, Messages;
        /// Waits that blocked at once instead of polling first, because as many subscriptions of
        /// the process as it has CPUs but one were polling already.
        unpolled_waits: Total, Events;
        /// `CreditWanted` requests received from publishers waiting for credit.
        credit_requests: Total, Events;
        /// Acks sent as solicited SENDs, answering those requests.
        solicited_acks: Total, Events;
        /// Connections to publishers whose ring this subscription reads through shared memory
        /// (same host, soft fabric).
        shared_memory_connects: Total, Connections;
        /// Connections to publishers whose ring this subscription reads over the network.
        network_connects: Total, Connections;
        /// Bytes of READ buffers the subscription holds now (a gauge). A feed's two buffers start
        /// at the batch size and grow to the largest READ its records need, never past what the
        /// ring's largest record needs.
        read_buffer_bytes: Gauge, Bytes;
        /// Events dropped, oldest first, because the application left more than
        /// [`MAX_EVENTS`] untaken.
        events_dropped: Total, Events;
    }
}

impl SubscriptionCounters {
    /// Counts a delivered message. Only the subscription's owner (`&mut`) delivers: a load and
    /// a store, not a locked read-modify-write, per message.
    fn count_delivery(&self, len: usize) {
        super::add_single_writer(&self.delivered, 1);
        super::add_single_writer(&self.bytes, len as u64);
    }
}

/// Control slots per feed: [ack send, doorbell-request send, receives...].
const RECV_SLOTS: usize = 4;
const SLOT: usize = 64;
const CTRL_LEN: usize = (2 + RECV_SLOTS) * SLOT;
/// How long a subscription polls (yielding the CPU between polls) for the completion of a READ
/// in flight before it blocks: a 1 MiB READ takes a few hundred microseconds on the soft fabric,
/// and a wake-up from a blocked wait on these machines costs as much again.
const READ_SPIN: Duration = Duration::from_micros(300);
/// Rounds of completions without a message (empty READs) before the thread yields the CPU.
const PROBES_PER_YIELD: u32 = 16;
/// Longest a closed feed waits for the flush of its work requests before it is removed.
const FLUSH_GRACE: Duration = Duration::from_secs(2);
/// Longest a parked feed waits before READing anyway (guards against a lost wake-up).
const PARK_RECHECK: Duration = Duration::from_millis(100);

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

/// The subscription's hold on the process's spin permit (`spin_permit`): it polls only while
/// it holds it, whether it spins on its CQ or READs an empty ring again and again. The latter
/// is polling too: on the same host such a READ is a copy that completes as it is posted, a
/// busy loop of the subscriber's thread that would take the CPU of the publisher it waits for.
/// So a feed READs an empty ring again only while the permit is held (else it parks after its
/// first empty READ). Kept across the rounds of one `next_ready`; released before it blocks
/// and when it returns.
#[derive(Debug, Default)]
struct PollPermit {
    held: Option<SpinPermit>,
}

impl PollPermit {
    /// Whether the permit is held, taking it if one is free.
    fn acquire(&mut self) -> bool {
        if self.held.is_none() {
            self.held = SpinPermit::try_acquire();
        }
        self.held.is_some()
    }

    /// Gives the permit back, if held.
    fn release(&mut self) {
        self.held = None;
    }
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
    /// Delays the next data READ while a trickle comes in (over the network, without
    /// `busy_poll`).
    pacer: ReadPacer,
    /// The longest READ of a ring the last READ found empty: a page on the same host, where a
    /// READ is this thread's copy and probing with the whole next record would copy it for
    /// nothing again and again; unbounded over the network (one READ then brings the record).
    empty_probe_len: usize,
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

    /// A READ found nothing new; returns whether it is time to ask for a doorbell: after
    /// `options.spin` of empty READs, or at once when the subscription may not poll (no spin
    /// permit for it).
    fn note_empty(&mut self, options: &SubscriptionOptions, now: Instant, permit: &mut PollPermit) -> bool {
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

/// A subscription to one topic: receives the messages of every publisher it is connected to,
/// in order per publisher.
///
/// ```
/// use std::time::Duration;
/// use rdma_pubsub::{DiscoveryOptions, Node, Start};
///
/// let without_discovery = || Node::builder().discovery(DiscoveryOptions::disabled()).build();
/// let (a, b) = (without_discovery()?, without_discovery()?);
/// let publisher = a.publisher("doc-subscription").create()?;
/// let mut sub = b.subscriber("doc-subscription").start(Start::Earliest).create()?;
/// sub.connect_wait(a.local_addr(), Duration::from_secs(10))?;
/// publisher.publish(b"hello")?;
/// let m = sub.recv_timeout(Duration::from_secs(10))?.expect("a message within 10 s");
/// assert_eq!((m.seq, m.data.as_slice()), (1, &b"hello"[..]));
/// # Ok::<(), rdma_pubsub::Error>(())
/// ```
pub struct Subscription<T: ?Sized + MessageType = [u8]> {
    _type: PhantomData<fn() -> Box<T>>,
    node: Arc<NodeShared>,
    topic: String,
    topic_id: TopicId,
    options: SubscriptionOptions,
    cq: CompletionQueue,
    feeds: Slab<Feed>,
    by_conn: HashMap<ConnId, usize>,
    next_gen: u32,
    events_rx: Receiver<FeedEvent>,
    user_events: EventQueue,
    /// Messages of failed feeds the application is told about through `recv` (at most
    /// [`MAX_UNDELIVERABLE`]; the events name them all).
    undeliverable: VecDeque<Error>,
    cursor: usize,
    ever_connected: bool,
    /// Holds a reassembled message lent by `recv_ref`.
    stash: Vec<u8>,
    /// The spin permit, while the subscription polls (see [`PollPermit`]).
    permit: PollPermit,
    counters: Arc<SubscriptionCounters>,
    /// Opens connections (in the background, with discovery) and holds discovery's view.
    connector: Arc<Connector>,
    /// Discovery's sightings of the topic, to wake on while waiting (auto-connect).
    sightings: Option<Receiver<Sighting>>,
    /// Highest sequence delivered per (publisher id, epoch) by removed connections.
    delivered: HashMap<(u64, u64), u64>,
    /// The async task waiting for connection events, woken by whoever sends one.
    #[cfg_attr(not(feature = "async"), allow(dead_code))]
    event_waker: Arc<EventWaker>,
}

impl<T: ?Sized + MessageType> std::fmt::Debug for Subscription<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subscription").field("topic", &self.topic).field("feeds", &self.feeds.len()).finish()
    }
}

impl<T: ?Sized + MessageType> Subscription<T> {
    pub(crate) fn create(node: Arc<NodeShared>, topic: &str, options: SubscriptionOptions) -> Result<Subscription<T>> {
        check_topic(topic)?;
        if options.batch < 4096 || options.batch > 64 << 20 {
            return Err(Error::InvalidOption { option: "batch", detail: "must be in 4 KiB..=64 MiB".into() });
        }
        let depth = 4096.min(node.fabric.attributes().max_cqe);
        let cq = node.fabric.create_cq(depth)?;
        let (events_tx, events_rx) = channel::unbounded();
        let event_waker = Arc::new(EventWaker::default());
        let events_tx = FeedSender::new(events_tx, event_waker.clone());
        let counters = Arc::new(SubscriptionCounters::default());
        node.stats.add_subscription(topic, &counters);
        let topic_id = TopicId::of(topic);
        let connector = Connector::new(&node, topic, topic_id, &options, cq.clone(), events_tx);
        let sightings = connector.sightings();
        Ok(Subscription {
            _type: PhantomData,
            topic: topic.to_owned(),
            topic_id,
            node,
            options,
            cq,
            feeds: Slab::new(),
            by_conn: HashMap::new(),
            next_gen: 1,
            events_rx,
            user_events: EventQueue::new(counters.clone()),
            undeliverable: VecDeque::new(),
            cursor: 0,
            ever_connected: false,
            stash: Vec::new(),
            permit: PollPermit::default(),
            counters,
            connector,
            sightings,
            delivered: HashMap::new(),
            event_waker,
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
}

impl<T: ?Sized + MessageType> Drop for Subscription<T> {
    fn drop(&mut self) {
        self.connector.close(&self.node);
        // Connections opened and not taken yet are closed with the rest.
        let unopened: Vec<ConnId> = self
            .events_rx
            .try_iter()
            .filter_map(|ev| match ev {
                FeedEvent::Opened(opened) => Some(opened.conn),
                _ => None,
            })
            .collect();
        let mut routes = self.node.routes.lock();
        for conn in self.feeds.iter().map(|(_, feed)| feed.conn).chain(unopened) {
            routes.remove(&conn);
        }
    }
}
