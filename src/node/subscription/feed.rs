//! A subscription's connection to one publisher, a [`Feed`] (as Aeron's `Image`): it owns
//! that publisher's stream, whole. It posts READs of the publisher's ring into two local READ
//! buffers (one fills while the messages of the other are delivered), handles their
//! completions, parses what they bring with the wire crate's ring reader (validating and
//! reassembling records) into the messages ready for delivery, acknowledges consumption with
//! coalesced SENDs (the publisher's credits), asks for a doorbell and parks when the topic is
//! idle, and takes the publisher's control messages (doorbells, credit requests, end of
//! stream, drops).
//!
//! The [`Subscription`](super::Subscription) only takes turns over its feeds: it hands each
//! completion to its feed with a [`FeedContext`] (what the feed's work needs of the
//! subscription), and does what the feed reports back ([`FeedStep`]): closing it, telling
//! the application.
//!
//! # Pulling
//!
//! One READ at a time per feed (two behind large records, below) brings up to `batch` bytes
//! (default 256 KiB) from the feed's position, never past the end of the data area; complete
//! messages are queued as slices of the READ buffer (zero copy) or, when reassembled from
//! fragments, as owned buffers. A READ is posted only into a buffer no queued message points
//! into, so while the messages of one buffer are delivered the next READ lands in the other.
//! When a completed READ's headers show a written record continuing past it
//! (`RingReader::plan_ahead`, headers only), the next READ goes out at once, before this one is
//! validated, and the checksums are computed while it travels (a READ ahead that validation
//! then makes stale is discarded; counter `reads_ahead`); otherwise once the messages are
//! delivered, so a subscriber that keeps up does not spend the publisher's NIC on tiny READs.
//! How long each READ is, behind or caught up, is the ring reader's plan
//! (`RingReader::next_read` in `rdma_wire::ring`).
//!
//! Behind a stream of records larger than `batch`, each READ brings one record and the header
//! after it, and one READ at a time left the publisher's NIC idle through every turn-around
//! (the completion, the subscriber's wake-up, the next request): with 1 MiB messages over
//! loopback its NIC thread was busy 60% of the time, the two CPUs 80%. There a second READ goes
//! out while the first is on the wire, as soon as the buffer of the READ before it is free: the
//! next record, from the header the first ends with, guessed to be of the same size
//! (`RingReader::plan_behind`; counter `reads_behind`). The reader plans one only while its last
//! parse consumed records and stopped in the middle of written data (the publisher a record
//! ahead or more): after a probe of an idle ring found a record, the one after it is not
//! written yet. A wrong
//! guess costs a READ (short, long or stale), never a message. At most [`READS_IN_FLIGHT`] (2)
//! are in flight, in the order posted, which is the order they complete in; no buffer is
//! added, the second READ lands in the one whose messages were just delivered.
//!
//! READ buffers start at `batch` bytes and grow when a READ needs more (at least doubling, at
//! most `RingReader::max_read_len`: the ring's largest record and a header), so a ring that
//! allows 4 MiB records costs its subscribers 512 KiB each while its messages are small (gauge
//! `read_buffer_bytes`). The largest record is the publisher's word, so the subscription bounds
//! it by its own `max_record_payload` (16 MiB): a publisher advertising more is refused before
//! any READ buffer exists, and a header claiming more than the publisher advertised, READ
//! twice at the same position (so not torn), ends the feed (`RecordTooLarge`).
//!
//! # Acks
//!
//! Coalesced, at most one in flight per feed: when the consumed position moved a quarter ring
//! since the last ack, and whenever the feed goes idle (so a Block publisher is never left
//! waiting on an idle subscriber). After a `CreditWanted{position}`, the first ack at or past
//! that position goes out as soon as it is consumed, as a solicited SEND (`solicited_acks`).
//!
//! # Pacing, polling an empty ring, parking
//!
//! A caught-up feed fed a trickle waits a little before its next READ (`node/pacing.rs`: 2 µs
//! doubling up to 50 µs, polling, not sleeping), so each READ brings a batch; a READ that waited
//! and still brought a single message drops the delay (messages come one at a time, waiting only
//! adds latency). Without pacing a few caught-up subscribers kept the publisher's NIC (and, on 2
//! vCPUs, both CPUs) busy serving READs while the publisher starved. `busy_poll` and same-host
//! feeds are unpaced: a same-host READ costs only the subscriber's own copy (pacing cost a 64 B
//! message sent alone 50 µs where it now takes 0.5 µs, p50 in process).
//!
//! READing an empty ring again and again is polling too, and on the same host a busy loop
//! (each READ is a copy that completes as it is posted). So a feed keeps READing an empty ring
//! for `spin` (200 µs) only while its subscription holds the process's spin permit
//! ([`PollPermit`]), and the thread yields after `PROBES_PER_YIELD` (16) rounds of completions
//! that brought no message; without a permit the feed parks after its first empty READ. A
//! same-host READ of a ring the last READ found empty is at most a page (`empty_probe_len`,
//! `RingReader::next_read_at_most`), not the whole next record.
//!
//! Parking: after `spin` of empty READs the feed sends `DoorbellRequest{position}` followed by
//! one more READ (RC ordering puts the READ after the request, so a commit after that READ
//! finds the request armed); if that READ is empty the feed parks until a `Doorbell` arrives,
//! with a `PARK_RECHECK` (100 ms) safety READ. `busy_poll` never parks.
//!
//! A feed that READs asks at connect for doorbells with records
//! (`ConnectFlags::DOORBELL_RECORDS`; its receives take [`DOORBELL_MSG_MAX`] bytes): the
//! publisher's `DoorbellRecords` carries the ring's bytes from the armed position on (up to
//! 960), and the feed takes them as the READ it would have posted, validated the same way
//! (checksums, positions), when nothing else READs for it: no READ in flight, its position
//! the one armed, a buffer free (counter `doorbell_records`). A parked subscriber is then
//! woken with its messages, not with a request to fetch them: one wake-up instead of two (its
//! own, then the publisher's NIC for the READ). Otherwise the doorbell only wakes it.

//!
//! # Reading in place
//!
//! When the connection's data path is shared memory (soft, both ends on this host), the feed takes
//! a read-only view of the publisher's whole ring once, when the publisher accepts
//! (`QueuePair::remote_view`, checked as a READ of it would be; counter `in_place_connects`), and
//! reads the ring in place instead of posting READs: each turn of the subscription (`housekeep`)
//! copies the records committed past its position into a free READ buffer and validates them by
//! their commit words, without a checksum (`RingReader::read_in_place`): no work request, no
//! completion, no checksum per batch. An empty ring costs a load of the next record's commit
//! (position) word and of `floor`, so a busy-polling subscription spins on the next record's header
//! line, never on the control-block line the publisher stores `tail` to per message (a feed more
//! than 8 records behind loads `tail` once per batch instead of walking on); a feed that
//! finds it empty for `spin` parks exactly as above (`DoorbellRequest` SEND, one more read, the
//! publisher's `Doorbell` wakes it), so an idle topic still costs nothing. Acks stay SENDs. Once
//! reading in place the feed tells the publisher (`Control::ReadsInPlace`, from the ack's slot),
//! which then writes its records without a checksum while every subscriber reads in place. A ring
//! that breaks the rules in its committed records, or leaves a record uncommitted below its tail,
//! fails the feed (`PeerMisbehaved`, `RecordTooLarge`); a ring that can no longer be read
//! (deregistered, connection gone) quiesces it, as a flushed READ does.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::reasons::{DropReason, PolicyKind};
use rdma_fabric::{
    ConnId, DataPath, MemoryRegion, ProtectionDomain, QueuePair, ReadBuffer, RemoteAddr, RemoteView, SendOp,
    SendRequest, WcOpcode, WcStatus, WorkCompletion,
};
use rdma_wire::protocol::{AcceptData, Control, CONTROL_MSG_MAX, DOORBELL_MSG_MAX};
use rdma_wire::ring::{
    layout, ControlOutcome, ControlSnapshot, Parsed, ReadPlan, RingError, RingReader, Stop, CONTROL_READ_LEN, PROBE_LEN,
};
use rdma_wire::Topic;

use super::counters::SubscriptionCounters;
use super::events::{EventQueue, LossReason, SubscriptionEvent};
use super::feed_channel::{AcceptExpectation, OpenedFeed};
use super::message::PublisherInfo;
use super::options::SubscriptionOptions;
use crate::error::{Error, Result};
use crate::node::lazy_clock::LazyNow;
use crate::node::pacing::ReadPacer;
use crate::node::spin_permit::PollPermit;
use crate::node::wr_id::{WrId, WrKind};

/// Receive slots of a feed's control region, which holds [ack send, doorbell-request send,
/// receives...].
pub(super) const RECV_SLOTS: usize = 4;
/// Bytes of one send slot of the control region.
const SEND_SLOT: usize = CONTROL_MSG_MAX;
/// Bytes of one receive slot: a control message, or a doorbell with records.
const RECV_SLOT: usize = DOORBELL_MSG_MAX;
/// Bytes of a feed's control region.
pub(super) const CTRL_LEN: usize = 2 * SEND_SLOT + RECV_SLOTS * RECV_SLOT;

/// Offset of receive slot `slot` in the control region.
const fn recv_offset(slot: usize) -> usize {
    2 * SEND_SLOT + slot * RECV_SLOT
}
/// How long a subscription polls (yielding the CPU between polls) for the completion of a READ
/// in flight before it blocks: a 1 MiB READ takes a few hundred microseconds on the soft fabric,
/// and a wake-up from a blocked wait on these machines costs as much again.
pub(super) const READ_SPIN: Duration = Duration::from_micros(300);
/// The longest READ a subscription spins for (`READ_SPIN`) on a fabric whose NIC copies on this
/// host's CPUs (soft); it blocks at once for a longer one, and the completion wakes it. A soft
/// READ response that large is received by the NIC thread, not the poller, so spinning for it
/// only takes a CPU from the threads that move its bytes (the publisher's and both NIC threads).
/// Measured on 2 vCPUs over the network, 8 interleaved rounds: the same msg/s at 64 KiB and
/// 1 MiB (1 and 4 subscribers, ratios 0.94-1.08), the subscriber's CPU per message halved with
/// one subscriber (1 MiB: 179 -> 88 µs; 64 KiB: 15.7 -> 7.1 µs), its p50 1.2x later there (the
/// wake-up) and 0.76-0.90x with four.
const SPIN_READ_MAX: usize = 16 << 10;

/// How long a subscription polls for the completion of its READs in flight, of lengths
/// `in_flight`, before it blocks: [`READ_SPIN`] while one of them is at most [`SPIN_READ_MAX`]
/// bytes or the NIC does not copy on this host's CPUs (`nic_copies_here` false: verbs), else
/// not at all.
pub(super) fn read_spin(in_flight: impl IntoIterator<Item = usize>, nic_copies_here: bool) -> Duration {
    let mut lens = in_flight.into_iter();
    let worth = if nic_copies_here { lens.any(|len| len <= SPIN_READ_MAX) } else { lens.next().is_some() };
    if worth {
        READ_SPIN
    } else {
        Duration::ZERO
    }
}
/// READs a feed has on the wire at most: one, and one planned behind it
/// (`RingReader::plan_behind`).
const READS_IN_FLIGHT: usize = 2;
/// Rounds of completions without a message (empty READs) before the thread yields the CPU.
pub(super) const PROBES_PER_YIELD: u32 = 16;
/// Longest a closed feed waits for the flush of its work requests before it is removed.
const FLUSH_GRACE: Duration = Duration::from_secs(2);
/// Longest a parked feed waits before READing anyway (guards against a lost wake-up).
pub(super) const PARK_RECHECK: Duration = Duration::from_millis(100);
/// A feed reading in place times its spin from, and checks it at, every this many empty reads
/// in a row (see `ActiveFeed::note_empty`): about half a microsecond of loads.
const IN_PLACE_EMPTY_READS_PER_CLOCK: u32 = 8;

/// What a feed's work needs of its subscription, lent for one turn: the options, the
/// protection domain (READ buffers grow), the counters, the spin permit, and the events held
/// for the application.
pub(super) struct FeedContext<'a> {
    options: &'a SubscriptionOptions,
    pd: &'a ProtectionDomain,
    counters: &'a SubscriptionCounters,
    permit: &'a mut PollPermit,
    events: &'a mut EventQueue,
    /// The topic, for logs.
    topic: &'a str,
}

impl<'a> FeedContext<'a> {
    /// Lends the subscription's parts to its feeds.
    pub(super) fn new(
        options: &'a SubscriptionOptions,
        pd: &'a ProtectionDomain,
        counters: &'a SubscriptionCounters,
        permit: &'a mut PollPermit,
        events: &'a mut EventQueue,
        topic: &'a str,
    ) -> FeedContext<'a> {
        FeedContext { options, pd, counters, permit, events, topic }
    }
}

/// What a feed reports to its subscription after a completion.
#[must_use]
pub(super) enum FeedStep {
    /// Nothing for the subscription to do.
    Continue,
    /// The feed failed: the subscription tells the application and closes it.
    Failed(Error),
    /// The publisher's stream ended and everything up to `final_seq` was read (`complete`:
    /// none of it was lost to an overwrite).
    Ended { publisher: PublisherInfo, final_seq: u64, complete: bool },
    /// The publisher dropped this subscription for `reason` (the event is queued already):
    /// close the feed.
    Dropped { publisher: PublisherInfo, reason: DropReason },
}

/// A message taken from a feed for delivery.
pub(super) enum Delivery<'a> {
    /// Its payload in the READ buffer it arrived in.
    InBuffer(&'a [u8]),
    /// Reassembled from fragments.
    Reassembled(Vec<u8>),
}

/// A parsed message waiting for delivery.
enum Payload {
    /// In one of the feed's READ buffers.
    Slice { buf: usize, offset: usize, len: usize },
    /// Reassembled from fragments.
    Owned(Vec<u8>),
}

/// A message ready for delivery, with its sequence number.
struct Ready {
    seq: u64,
    payload: Payload,
}

/// Where the messages of one batch parsed from landing buffer `buf` go, in place or READ: the
/// ready queue, each borrowing the buffer when its payload lies in it, unless a reconnection
/// delivered it already (`skip_through`; counted in `skipped`).
struct Batch<'a> {
    buf: usize,
    /// The addresses of the buffer's bytes.
    range: std::ops::Range<usize>,
    skip_through: u64,
    ready: &'a mut VecDeque<Ready>,
    /// Messages borrowing the buffer.
    pending: &'a mut usize,
    skipped: u64,
    /// Messages parsed, queued or skipped.
    messages: usize,
}

impl<'a> Batch<'a> {
    fn new(
        buf: usize,
        bytes: &[u8],
        skip_through: u64,
        ready: &'a mut VecDeque<Ready>,
        pending: &'a mut usize,
    ) -> Self {
        let base = bytes.as_ptr() as usize;
        Batch { buf, range: base..base + bytes.len(), skip_through, ready, pending, skipped: 0, messages: 0 }
    }

    /// Queues message `seq`.
    fn push(&mut self, seq: u64, payload: &[u8]) {
        self.messages += 1;
        if seq <= self.skip_through {
            self.skipped += 1;
            return;
        }
        let p = payload.as_ptr() as usize;
        let payload = if p >= self.range.start && p + payload.len() <= self.range.end {
            *self.pending += 1;
            Payload::Slice { buf: self.buf, offset: p - self.range.start, len: payload.len() }
        } else {
            Payload::Owned(payload.to_vec())
        };
        self.ready.push_back(Ready { seq, payload });
    }
}

/// Whether a feed READs or waits for a doorbell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Idle {
    /// READing.
    Active,
    /// A doorbell was requested; the READ that follows it decides whether to park.
    Requested,
    /// Waiting for the doorbell.
    Parked { since: Instant },
}

/// The posting side of a feed's connection: its queue pair and control region, and the slab
/// key and generation its work-request ids carry.
struct Link {
    key: usize,
    gen: u32,
    qp: QueuePair,
    ctrl: MemoryRegion,
}

/// A connection to one publisher: the whole of its stream.
pub(super) struct Feed {
    link: Link,
    conn: ConnId,
    addr: SocketAddr,
    /// The publisher's topic (each message is handed a clone: a reference count).
    topic: Topic,
    /// What the publisher's accept must prove.
    expect: AcceptExpectation,
    /// Its reading state, once the publisher accepted.
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

/// A feed's state once established: the ring reader, the two READ buffers, the messages
/// ready, acks and parking.
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
    /// The last READ reached the end of what was written: READ again only once its messages
    /// are delivered (reading ahead then would only bring small batches).
    caught_up: bool,
    ring: RemoteAddr,
    capacity: u64,
    /// The READs in flight, in the order posted (and completed), each with its buffer: at
    /// most [`READS_IN_FLIGHT`], the second planned behind the first (see "Pulling").
    reads: VecDeque<(ReadPlan, usize)>,
    ready: VecDeque<Ready>,
    acked: u64,
    ack_in_flight: bool,
    /// The publisher waits for credit and asked for a solicited ack once the consumed position
    /// reaches this (`Control::CreditWanted`).
    credit_wanted: Option<u64>,
    doorbell_req_in_flight: bool,
    idle: Idle,
    /// Since when the feed has been finding nothing new (see `note_empty`).
    empty_since: Option<Instant>,
    /// Empty READs in a row.
    empty_run: u32,
    /// The publisher announced the end of its stream after this sequence.
    end: Option<u64>,
    /// Messages of this stream lost (overwritten before they were READ).
    lost: u64,
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
    /// The publisher's ring mapped read-only, on the same host: read in place, with no READ
    /// (see "Reading in place" in the module doc).
    in_place: Option<RemoteView>,
}

impl Feed {
    /// Takes a connection its subscription's connector opened, as feed `key` of the
    /// subscription in generation `gen`: posts its receives.
    ///
    /// # Errors
    /// The provider's, when a receive cannot be posted (the connection is then dropped).
    pub(super) fn open(key: usize, gen: u32, opened: OpenedFeed) -> rdma_fabric::Result<Feed> {
        let (qp, conn, addr, topic, ctrl, expect) = opened.into_parts();
        let link = Link { key, gen, qp, ctrl };
        let (mut posted, mut quiesced) = (0, false);
        for slot in 0..RECV_SLOTS {
            match link.post_recv(slot) {
                Ok(()) => posted += 1,
                // Refused or closed before its receives could be posted (a publisher's node
                // that rejects at once): the CM event saying why follows, and the feed waits
                // for it quiesced, so the application learns the refusal, not a failed post.
                Err(rdma_fabric::Error::NotConnected { .. }) => {
                    quiesced = true;
                    break;
                }
                Err(e) => return Err(e),
            }
        }
        Ok(Feed {
            link,
            conn,
            addr,
            topic,
            expect,
            active: None,
            closed: false,
            quiesced,
            outstanding: posted,
            closed_at: None,
        })
    }

    /// What the publisher's accept must prove.
    pub(super) fn expectation(&self) -> AcceptExpectation {
        self.expect
    }

    /// Sets up reading of the publisher's ring from its accept data; messages up to
    /// `skip_through` were delivered already. Counts the connection and the READ buffers.
    ///
    /// # Errors
    /// [`Error::RecordTooLarge`] when the publisher's records exceed the subscription's limit;
    /// the wire's errors for an unusable ring geometry; the fabric's when the READ buffers
    /// cannot be registered.
    pub(super) fn activate(
        &mut self,
        accept: &AcceptData,
        skip_through: u64,
        options: &SubscriptionOptions,
        pd: &ProtectionDomain,
        counters: &SubscriptionCounters,
    ) -> Result<PublisherInfo> {
        // The READ buffers grow to the largest record: bounded by this subscription's limit,
        // never by what the publisher says.
        let limit = options.max_record_payload;
        if accept.max_record_payload as usize > limit {
            let (len, limit) = (accept.max_record_payload.into(), limit as u64);
            return Err(Error::RecordTooLarge { peer: self.addr, len, limit });
        }
        let reader = RingReader::new(accept.reader_config(options.max_message_len)).map_err(|e| {
            Error::PeerMisbehaved { detail: format!("its accept data describes no ring this subscription reads: {e}") }
        })?;
        // Small until a record needs more: a ring that allows large records costs nothing
        // while its messages are small.
        let max_read_len = reader.max_read_len(options.batch);
        let landing_len = options.batch.max(CONTROL_READ_LEN);
        let landings = [ReadBuffer::new(pd, landing_len)?, ReadBuffer::new(pd, landing_len)?];
        let data_path = self.link.qp.data_path();
        // On the same host the ring is read in place: its view is checked once, here, as a
        // READ of the whole region would be (a refusal fails the connection).
        let region_len = layout::region_len(accept.capacity as usize);
        let in_place = self.link.qp.remote_view(accept.ring, region_len)?;
        let info = PublisherInfo {
            id: accept.publisher_id,
            epoch: accept.epoch,
            addr: self.addr,
            policy: accept.policy.into(),
            data_path,
        };
        let connects = match data_path {
            DataPath::SharedMemory => &counters.shared_memory_connects,
            DataPath::Network => &counters.network_connects,
        };
        connects.fetch_add(1, Ordering::Relaxed);
        if in_place.is_some() {
            counters.in_place_connects.fetch_add(1, Ordering::Relaxed);
        }
        let active = Box::new(ActiveFeed {
            info,
            reader,
            landings,
            max_read_len,
            pending: [0, 0],
            caught_up: false,
            ring: accept.ring,
            capacity: accept.capacity,
            reads: VecDeque::with_capacity(READS_IN_FLIGHT),
            ready: VecDeque::new(),
            acked: accept.start_position,
            ack_in_flight: false,
            credit_wanted: None,
            doorbell_req_in_flight: false,
            idle: Idle::Active,
            empty_since: None,
            empty_run: 0,
            end: None,
            lost: 0,
            need_control: false,
            skip_through,
            // Pacing spares the publisher's NIC READs that bring a message or two. On the same
            // host a READ costs only this thread's copy, and a paced READ would only delay a
            // trickle (by up to 50 µs a message); a busy-polling subscription wants no delay.
            pacer: if options.busy_poll || data_path == DataPath::SharedMemory {
                ReadPacer::unpaced()
            } else {
                ReadPacer::default()
            },
            empty_probe_len: match data_path {
                DataPath::SharedMemory => PROBE_LEN,
                DataPath::Network => usize::MAX,
            },
            in_place,
        });
        counters.read_buffer_bytes.fetch_add(active.read_buffer_bytes(), Ordering::Relaxed);
        let in_place = active.in_place.is_some();
        let a = self.active.insert(active);
        if in_place {
            // The publisher then writes its records without a checksum while every subscriber
            // reads in place. From the ack's slot, taken as an ack in flight: the first ack
            // waits for its completion (acks are coalesced anyway).
            self.link.post_control(WrKind::Ack, 0, &Control::ReadsInPlace, false)?;
            a.ack_in_flight = true;
            self.outstanding += 1;
        }
        Ok(info)
    }

    /// The connection's id.
    pub(super) fn conn(&self) -> ConnId {
        self.conn
    }

    /// The publisher's node.
    pub(super) fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The publisher's topic.
    pub(super) fn topic(&self) -> &Topic {
        &self.topic
    }

    /// The publisher, once it accepted.
    pub(super) fn publisher(&self) -> Option<PublisherInfo> {
        self.active.as_ref().map(|a| a.info)
    }

    /// Whether the feed is closed (it READs no more).
    pub(super) fn is_closed(&self) -> bool {
        self.closed
    }

    /// Whether the feed READs its publisher's ring: accepted and not closed.
    pub(super) fn is_reading(&self) -> bool {
        self.active.is_some() && !self.closed
    }

    /// Whether a READ of the ring is in flight.
    pub(super) fn read_in_flight(&self) -> bool {
        self.read_in_flight_len().is_some()
    }

    /// The length of the READ in flight that completes next, if one is.
    pub(super) fn read_in_flight_len(&self) -> Option<usize> {
        self.active.as_ref().and_then(|a| a.reads.front()).map(|(plan, _)| plan.len)
    }

    /// Whether a message is ready for delivery.
    pub(super) fn has_ready(&self) -> bool {
        self.active.as_ref().is_some_and(|a| !a.ready.is_empty())
    }

    /// Whether this feed is an open connection to the publisher of `topic` at `addr` that, if
    /// accepted, reads the publisher's `epoch`.
    pub(super) fn serves(&self, addr: SocketAddr, topic: &Topic, epoch: u64) -> bool {
        !self.closed
            && self.addr == addr
            && self.topic == *topic
            && self.active.as_ref().is_none_or(|a| a.info.epoch == epoch)
    }

    /// The highest sequence this feed read of publisher `id`'s `epoch`, if it reads that.
    pub(super) fn read_through(&self, id: u64, epoch: u64) -> Option<u64> {
        let a = self.active.as_ref().filter(|a| a.info.id == id && a.info.epoch == epoch)?;
        Some(a.reader.next_seq().saturating_sub(1))
    }

    /// The publisher and the highest sequence read, once it accepted; and the bytes of its
    /// READ buffers (for the subscription's gauge when the feed is removed).
    pub(super) fn last_read(&self) -> Option<(PublisherInfo, u64, u64)> {
        let a = self.active.as_ref()?;
        Some((a.info, a.reader.next_seq().saturating_sub(1), a.read_buffer_bytes()))
    }

    /// How soon a READ its pacer holds back may go, if it holds one back (within
    /// microseconds: see `pacing`).
    pub(super) fn paced_read_due(&self, now: Instant) -> Option<Duration> {
        if self.closed || self.quiesced {
            return None;
        }
        self.active.as_ref().filter(|a| a.reads.is_empty()).and_then(|a| a.pacer.left(now))
    }

    /// Whether a closed feed may be removed: its work flushed (or the grace is over) and its
    /// ready messages delivered.
    pub(super) fn is_done(&self) -> bool {
        let flushed = self.outstanding == 0 || self.closed_at.is_some_and(|t| t.elapsed() >= FLUSH_GRACE);
        self.closed && flushed && self.active.as_ref().is_none_or(|a| a.ready.is_empty())
    }

    /// What the application is told when the connection goes away while the feed is open:
    /// the end of the stream when the publisher announced it (with what was never READ
    /// counted lost), else a disconnection. `None` once the feed is closed (that was told
    /// already).
    pub(super) fn disconnect_events(&self) -> Option<Vec<SubscriptionEvent>> {
        if self.closed {
            return None;
        }
        let publisher = self.publisher();
        Some(
            self.unfinished_end()
                .unwrap_or_else(|| vec![SubscriptionEvent::Disconnected { addr: self.addr, publisher }]),
        )
    }

    /// When the publisher announced the end of its stream and the connection went away
    /// before all of it was READ: what was never READ is lost (a `Lost` event counts it, its
    /// reason the publisher's close), then the stream ended incomplete. `None` when no end
    /// was announced.
    pub(super) fn unfinished_end(&self) -> Option<Vec<SubscriptionEvent>> {
        let a = self.active.as_ref()?;
        let final_seq = a.end?;
        let unread = (final_seq + 1).saturating_sub(a.reader.next_seq().max(a.skip_through + 1));
        let mut events = Vec::new();
        if unread > 0 {
            events.push(SubscriptionEvent::Lost {
                publisher: a.info,
                count: unread,
                reason: LossReason::PublisherClosed,
            });
        }
        let complete = unread == 0 && a.lost == 0;
        events.push(SubscriptionEvent::Ended { publisher: a.info, final_seq, complete });
        Some(events)
    }

    /// Posts nothing more: the CM's `Disconnected` event will close the feed.
    pub(super) fn quiesce(&mut self) {
        self.quiesced = true;
    }

    /// Stops READing and disconnects; the feed is removed once its ready messages are
    /// delivered.
    pub(super) fn close(&mut self) {
        self.closed = true;
        self.closed_at.get_or_insert_with(Instant::now);
        let _ = self.link.qp.disconnect();
    }

    /// Takes the next ready message: its publisher, sequence, topic and payload (borrowed from
    /// the READ buffer it arrived in, or reassembled).
    pub(super) fn next_message(&mut self) -> Option<(PublisherInfo, u64, &Topic, Delivery<'_>)> {
        let a = self.active.as_deref_mut()?;
        let ready = a.ready.pop_front()?;
        let data = match ready.payload {
            Payload::Slice { buf, offset, len } => {
                a.pending[buf] -= 1;
                Delivery::InBuffer(&a.landings[buf].bytes()[offset..offset + len])
            }
            Payload::Owned(v) => Delivery::Reassembled(v),
        };
        Some((a.info, ready.seq, &self.topic, data))
    }

    /// Posts the READ, ack and doorbell request the feed needs now; a feed reading in place
    /// reads the ring now instead of posting a READ, and reports what the subscription must do
    /// of what it read (the end of the stream).
    ///
    /// # Errors
    /// When an ack or a READ cannot be posted, or the ring read in place breaks its rules: the
    /// feed has failed.
    pub(super) fn housekeep(&mut self, now: &mut LazyNow, ctx: &mut FeedContext<'_>) -> Result<FeedStep> {
        if self.closed || self.quiesced {
            return Ok(FeedStep::Continue);
        }
        let Feed { link, active, outstanding, .. } = self;
        let Some(a) = active.as_deref_mut() else { return Ok(FeedStep::Continue) };
        let options = ctx.options;
        // Acks are coalesced to a quarter ring; one more goes out once the feed has found
        // nothing new for `spin` (parking or busy-polling), so a publisher flushing or
        // closing sees everything consumed. A feed that merely caught up does not ack at
        // once: with at most a quarter ring unacknowledged the publisher always has room for
        // its largest record, so it never waits on such a feed.
        // (The clock is read only for a feed that has been finding nothing.)
        let mut idle = || {
            a.idle != Idle::Active || a.empty_since.is_some_and(|since| now.get().duration_since(since) >= options.spin)
        };
        // A publisher waiting for credit asked for an ack at a position: that one goes out as
        // soon as it is consumed, solicited (the publisher wakes for it alone).
        if !a.ack_in_flight {
            let consumed = a.reader.consumed_position();
            let wanted = a.credit_wanted.is_some_and(|p| consumed >= p);
            if wanted || (consumed > a.acked && (consumed - a.acked >= a.capacity / 4 || idle())) {
                link.send_ack(a, wanted)?;
                *outstanding += 1;
                ctx.counters.acks.fetch_add(1, Ordering::Relaxed);
                if wanted {
                    a.credit_wanted = None;
                    ctx.counters.solicited_acks.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        if let Some(&(in_flight, _)) = a.reads.front() {
            // Behind a stream of large records, the next READ goes out while this one is on
            // the wire, into the buffer whose messages were delivered.
            let behind = a.reads.len() < READS_IN_FLIGHT && !a.caught_up && !a.need_control;
            let next = behind.then(|| a.reader.plan_behind(&in_flight, options.batch)).flatten();
            if let Some((next, buf)) = next.zip(a.free_buffer()) {
                link.post_read(a, buf, next, ctx.pd, ctx.counters)?;
                *outstanding += 1;
                ctx.counters.reads.fetch_add(1, Ordering::Relaxed);
                ctx.counters.reads_behind.fetch_add(1, Ordering::Relaxed);
            }
            return Ok(FeedStep::Continue);
        }
        if a.caught_up && !a.ready.is_empty() {
            return Ok(FeedStep::Continue);
        }
        // A buffer no queued message points into: the READ lands there while the messages
        // of the other buffer are being delivered.
        let Some(buf) = a.free_buffer() else {
            return Ok(FeedStep::Continue);
        };
        if let Idle::Parked { since } = a.idle {
            if now.get().duration_since(since) < PARK_RECHECK {
                return Ok(FeedStep::Continue);
            }
            a.idle = Idle::Requested;
        }
        if a.in_place.is_some() {
            return self.read_in_place(buf, now, ctx);
        }
        if !a.need_control && !a.pacer.ready(|| now.get()) {
            return Ok(FeedStep::Continue);
        }
        let plan = if a.need_control {
            ReadPlan::control()
        } else {
            let most = if a.empty_since.is_some() { a.empty_probe_len } else { usize::MAX };
            a.reader.next_read_at_most(options.batch, !a.caught_up, most)
        };
        link.post_read(a, buf, plan, ctx.pd, ctx.counters)?;
        *outstanding += 1;
        ctx.counters.reads.fetch_add(1, Ordering::Relaxed);
        Ok(FeedStep::Continue)
    }

    /// Reads the publisher's ring in place into READ buffer `buf` (which no queued message
    /// points into): the records committed past the position, validated without a checksum
    /// (`RingReader::read_in_place`), queued as a READ's would be.
    fn read_in_place(&mut self, buf: usize, now: &mut LazyNow, ctx: &mut FeedContext<'_>) -> Result<FeedStep> {
        let Feed { link, active, outstanding, addr, quiesced, .. } = self;
        let peer = *addr;
        let a = active.as_deref_mut().expect("only an active feed reads");
        // The buffer holds a batch, and at least the whole record at the position.
        let need = a.reader.in_place_need();
        let old = a.landings[buf].capacity();
        if need > old {
            let len = (2 * old).min(a.max_read_len).max(need);
            a.landings[buf] = ReadBuffer::new(ctx.pd, len)?;
            ctx.counters.read_buffer_bytes.fetch_add((len - old) as u64, Ordering::Relaxed);
        }
        let len = a.landings[buf].capacity().min(ctx.options.batch.max(need));
        let ActiveFeed { reader, landings, ready, pending, in_place, skip_through, .. } = a;
        let view = in_place.as_ref().expect("a feed reading in place has its view");
        let mut skipped = 0u64;
        let parsed = landings[buf].fill_with(len, |dst| {
            let mut batch = Batch::new(buf, dst, *skip_through, ready, &mut pending[buf]);
            let parsed = reader.read_in_place(view, dst, |seq, payload| batch.push(seq, payload));
            skipped = batch.skipped;
            parsed
        })?;
        if skipped > 0 {
            ctx.counters.duplicates.fetch_add(skipped, Ordering::Relaxed);
        }
        let empty = |p: &Parsed| p.consumed == 0 && p.stop == Stop::NotYetWritten;
        ctx.counters.count_read_in_place(parsed.as_ref().is_ok_and(empty));
        let parsed: Parsed = match parsed {
            Ok(parsed) => parsed,
            Err(RingError::Memory(e)) => {
                // The ring was deregistered or the connection is going: as a flushed READ,
                // the CM event decides how the stream ended.
                tracing::debug!(%peer, "the ring read in place is gone: {e}");
                *quiesced = true;
                return Ok(FeedStep::Continue);
            }
            Err(e) => return Err(Error::from_peer_ring(e, peer)),
        };
        a.note_overwritten(parsed.lost, ctx);
        // Caught up only when nothing was committed past the position; a lap or a copy that
        // ended at the buffer reads again at once.
        a.caught_up = parsed.stop == Stop::NotYetWritten;
        if !empty(&parsed) {
            a.note_progress();
        } else if a.note_empty(ctx.options, now, ctx.permit, IN_PLACE_EMPTY_READS_PER_CLOCK) {
            link.request_doorbell_counted(outstanding, a, ctx.counters)?;
        }
        Ok(a.ended())
    }

    /// Whether the feed reads its ring in place and polls it (not parked): the subscription
    /// then keeps calling [`housekeep`](Self::housekeep) instead of waiting for a completion.
    pub(super) fn polls_in_place(&self) -> bool {
        !self.closed
            && !self.quiesced
            && self.active.as_ref().is_some_and(|a| a.in_place.is_some() && !matches!(a.idle, Idle::Parked { .. }))
    }

    /// Handles a completion of this feed's work (`id`, decoded from it); one of an earlier
    /// occupant of the feed's key is ignored.
    pub(super) fn complete(&mut self, wc: &WorkCompletion, id: WrId, ctx: &mut FeedContext<'_>) -> FeedStep {
        if self.link.gen & 0xffff != id.generation {
            return FeedStep::Continue;
        }
        self.outstanding = self.outstanding.saturating_sub(1);
        match id.kind {
            WrKind::Read => self.read_completed(wc, ctx),
            WrKind::Ack => {
                if let Some(a) = self.active.as_deref_mut() {
                    a.ack_in_flight = false;
                }
                FeedStep::Continue
            }
            WrKind::DoorbellRequest => {
                if let Some(a) = self.active.as_deref_mut() {
                    a.doorbell_req_in_flight = false;
                }
                FeedStep::Continue
            }
            WrKind::Recv if wc.status == WcStatus::Success && wc.opcode == WcOpcode::Recv && !self.closed => {
                self.on_control(id.slot, wc.byte_len as usize, ctx)
            }
            _ => FeedStep::Continue,
        }
    }

    /// The first READ in flight completed: posts the next one ahead when the headers show
    /// more written data (and no READ is in flight behind it), then validates and queues what
    /// this one brought.
    fn read_completed(&mut self, wc: &WorkCompletion, ctx: &mut FeedContext<'_>) -> FeedStep {
        let Feed { link, active, outstanding, closed, quiesced, .. } = self;
        let Some(a) = active.as_deref_mut() else { return FeedStep::Continue };
        let Some((plan, buf)) = a.reads.pop_front() else { return FeedStep::Continue };
        // SAFETY: `wc` is the completion of a READ of this feed (its queue pair's CQ, its kind
        // and generation), and the READs of one queue pair complete in the order posted: the
        // first in `reads`, into `buf`.
        unsafe { a.landings[buf].complete(wc) };
        if wc.status != WcStatus::Success {
            if wc.status == WcStatus::WorkRequestFlushed {
                // Flushed by a disconnect: the CM event decides how it ended.
                *quiesced = true;
                return FeedStep::Continue;
            }
            let e = rdma_fabric::Error::invalid("RDMA READ", format!("completed with {:?}", wc.status));
            return FeedStep::Failed(e.into());
        }
        if *closed {
            // The stream already ended or failed: what this READ brought is moot.
            return FeedStep::Continue;
        }
        // When the headers show more written data, the next READ goes out before
        // this one is validated (checksums), into the other buffer.
        let other = 1 - buf;
        let other_free = a.is_free(other);
        let ahead = (other_free && plan != ReadPlan::control() && !*quiesced)
            .then(|| a.reader.plan_ahead(a.landings[buf].bytes(), plan.position, ctx.options.batch))
            .flatten();
        if let Some(next) = ahead {
            match link.post_read(a, other, next, ctx.pd, ctx.counters) {
                Ok(()) => {
                    *outstanding += 1;
                    ctx.counters.reads.fetch_add(1, Ordering::Relaxed);
                    ctx.counters.reads_ahead.fetch_add(1, Ordering::Relaxed);
                }
                Err(e) => tracing::debug!(topic = %ctx.topic, "a READ ahead was refused: {e}"),
            }
        }
        match self.on_read(plan, buf, ctx) {
            Ok(step) => step,
            Err(e) => FeedStep::Failed(e),
        }
    }

    /// A READ into buffer `buf` completed: validate and queue what it brought.
    fn on_read(&mut self, plan: ReadPlan, buf: usize, ctx: &mut FeedContext<'_>) -> Result<FeedStep> {
        let Feed { link, active, outstanding, addr, .. } = self;
        let peer = *addr;
        let a = active.as_deref_mut().expect("a READ completes on an active feed");
        if plan == ReadPlan::control() && a.need_control {
            let snapshot = ControlSnapshot::decode(a.landings[buf].bytes()).map_err(Error::from_ring)?;
            a.need_control = false;
            match a.reader.apply_control(&snapshot).map_err(Error::from_ring)? {
                ControlOutcome::Retry => a.need_control = true,
                ControlOutcome::Resync { .. } | ControlOutcome::Behind { .. } => {
                    // Written data waits past the position: READ at once (the reader makes it a
                    // whole batch).
                    a.pacer.reset();
                    a.note_progress();
                }
                ControlOutcome::CaughtUp => {
                    ctx.counters.empty_reads.fetch_add(1, Ordering::Relaxed);
                    if a.note_empty(ctx.options, &mut LazyNow::new(), ctx.permit, 1) {
                        link.request_doorbell_counted(outstanding, a, ctx.counters)?;
                    }
                }
            }
            return Ok(FeedStep::Continue);
        }
        let bytes = a.landings[buf].bytes();
        let mut batch = Batch::new(buf, bytes, a.skip_through, &mut a.ready, &mut a.pending[buf]);
        let parsed = a
            .reader
            .parse(bytes, plan.position, |seq, payload| batch.push(seq, payload))
            .map_err(|e| Error::from_peer_ring(e, peer))?;
        if batch.skipped > 0 {
            ctx.counters.duplicates.fetch_add(batch.skipped, Ordering::Relaxed);
        }
        let messages = batch.messages;
        if parsed.stop == Stop::Stale {
            // A READ ahead past a record the parse of the previous READ did not accept: it
            // says nothing about the ring, and the state that parse left stands.
            return Ok(FeedStep::Continue);
        }
        a.caught_up = parsed.stop != Stop::End;
        // The clock is read only by an enabled pacer that sets a delay (never on the same host).
        a.pacer.after_read(Instant::now, parsed.consumed, plan.len, messages, !a.caught_up);
        a.note_overwritten(parsed.lost, ctx);
        if parsed.stop == Stop::Torn {
            ctx.counters.torn.fetch_add(1, Ordering::Relaxed);
        }
        // Only the control block tells "not written yet" from "overwritten by a later lap" when
        // the publisher may overwrite; otherwise a lap is proven by the record itself.
        let overwrites = a.info.policy == PolicyKind::Overwrite;
        a.need_control = match parsed.stop {
            Stop::NeedControl => true,
            Stop::NotYetWritten | Stop::Torn => overwrites,
            Stop::End | Stop::Stale => false,
        };
        if parsed.consumed > 0 || parsed.stop != Stop::NotYetWritten {
            a.note_progress();
        } else if !a.need_control {
            ctx.counters.empty_reads.fetch_add(1, Ordering::Relaxed);
            if a.note_empty(ctx.options, &mut LazyNow::new(), ctx.permit, 1) {
                link.request_doorbell_counted(outstanding, a, ctx.counters)?;
            }
        }
        Ok(a.ended())
    }

    /// A control message from the publisher arrived in receive slot `slot`: reposts the
    /// receive and acts on the message.
    fn on_control(&mut self, slot: usize, len: usize, ctx: &mut FeedContext<'_>) -> FeedStep {
        let offset = recv_offset(slot);
        let mut bytes = [0u8; CONTROL_MSG_MAX];
        let head = len.min(CONTROL_MSG_MAX);
        let decoded = self
            .link
            .ctrl
            .buffer()
            .read(offset, &mut bytes[..head])
            .map_err(Error::from)
            .and_then(|_| Control::decode(&bytes[..head]).map_err(Error::from_peer_bytes))
            .and_then(|c| {
                c.records_len(len.min(RECV_SLOT)).map(|records| (c, records)).map_err(Error::from_peer_bytes)
            });
        // A doorbell's records leave the slot before its receive is posted again (the
        // publisher's next SEND may land there).
        let took = match decoded {
            Ok((Control::DoorbellRecords { position, .. }, records)) if records > 0 => {
                self.take_doorbell_records(offset + CONTROL_MSG_MAX, position, records)
            }
            _ => None,
        };
        if !self.closed {
            match self.link.post_recv(slot) {
                Ok(()) => self.outstanding += 1,
                Err(e) => tracing::debug!("reposting a receive: {e}"),
            }
        }
        let Some(a) = self.active.as_deref_mut() else { return FeedStep::Continue };
        match decoded.map(|(control, _)| control) {
            Ok(Control::Doorbell { tail } | Control::DoorbellRecords { tail, .. }) => {
                ctx.counters.doorbells.fetch_add(1, Ordering::Relaxed);
                a.note_progress();
                a.pacer.reset();
                if let Some((plan, buf)) = took {
                    ctx.counters.doorbell_records.fetch_add(1, Ordering::Relaxed);
                    let step = self.on_read(plan, buf, ctx).unwrap_or_else(FeedStep::Failed);
                    // Records up to the tail the doorbell named: everything written then is read,
                    // so the next READ is a caught-up feed's probe once these are delivered, not
                    // the batch READ (256 KiB of stale bytes) of a feed behind.
                    if let Some(a) = self.active.as_deref_mut().filter(|a| a.reader.consumed_position() == tail) {
                        a.caught_up = true;
                    }
                    return step;
                }
            }
            Ok(Control::CreditWanted { position }) => {
                ctx.counters.credit_requests.fetch_add(1, Ordering::Relaxed);
                a.credit_wanted = Some(a.credit_wanted.map_or(position, |p| p.max(position)));
            }
            Ok(Control::Dropped { reason }) => {
                let reason = reason.into();
                ctx.events.push_back(SubscriptionEvent::Dropped { publisher: a.info, reason });
                return FeedStep::Dropped { publisher: a.info, reason };
            }
            Ok(Control::EndOfStream { final_seq }) => {
                a.end = Some(final_seq);
                a.idle = Idle::Active;
                return a.ended();
            }
            Ok(other) => {
                tracing::debug!(topic = %ctx.topic, ?other, "the publisher sent a subscriber's control message")
            }
            Err(e) => tracing::debug!(topic = %ctx.topic, "undecodable control message from the publisher: {e}"),
        }
        FeedStep::Continue
    }

    /// Takes the `len` bytes of records a doorbell brought at `offset` of the control region,
    /// the ring's bytes from `position` on, into a free READ buffer, as the READ the feed would
    /// post next; returns that READ's plan and the buffer, to be validated as its completion
    /// would be. `None`, leaving the feed to READ them, when something else reads for it: a
    /// READ in flight, the control block wanted, another position (a READ moved it on since it
    /// armed the doorbell), the ring read in place, or no buffer free and large enough.
    fn take_doorbell_records(&mut self, offset: usize, position: u64, len: usize) -> Option<(ReadPlan, usize)> {
        let Feed { link, active, quiesced, .. } = self;
        let a = active.as_deref_mut()?;
        if *quiesced
            || a.in_place.is_some()
            || !a.reads.is_empty()
            || a.need_control
            || position != a.reader.consumed_position()
        {
            return None;
        }
        let buf = a.free_buffer()?;
        if len > a.landings[buf].capacity() {
            return None;
        }
        match a.landings[buf].fill_with(len, |dst| link.ctrl.buffer().read(offset, dst)) {
            Ok(Ok(())) => {}
            Ok(Err(e)) | Err(e) => {
                tracing::debug!("taking a doorbell's records: {e}");
                return None;
            }
        }
        let ring_offset = layout::data_offset(position, a.capacity as usize);
        Some((ReadPlan { ring_offset, len, position }, buf))
    }

    /// Test support: pretends that the last two READs brought a trickle at `at`, so the pacer
    /// holds the next READ back.
    #[cfg(all(test, feature = "async"))]
    pub(super) fn pace_as_after_a_trickle(&mut self, at: Instant) {
        let a = self.active.as_deref_mut().expect("an active feed");
        assert!(a.reads.is_empty(), "no READ in flight");
        for _ in 0..2 {
            a.pacer.after_read(|| at, 64, 1 << 20, 2, false);
        }
    }
}

impl ActiveFeed {
    /// Whether READ buffer `buf` may take a READ: no queued message points into it and no
    /// READ is landing in it.
    fn is_free(&self, buf: usize) -> bool {
        self.pending[buf] == 0 && !self.landings[buf].in_flight()
    }

    /// A READ buffer that may take a READ, if one may.
    fn free_buffer(&self) -> Option<usize> {
        (0..2).find(|&b| self.is_free(b))
    }

    /// `lost` messages of the stream were overwritten before they were read (none: nothing
    /// to tell): counted, and told to the application.
    fn note_overwritten(&mut self, lost: u64, ctx: &mut FeedContext<'_>) {
        if lost > 0 {
            self.lost += lost;
            ctx.counters.lost.fetch_add(lost, Ordering::Relaxed);
            let event = SubscriptionEvent::Lost { publisher: self.info, count: lost, reason: LossReason::Overwritten };
            ctx.events.push_back(event);
        }
    }

    /// Bytes of the feed's READ buffers.
    fn read_buffer_bytes(&self) -> u64 {
        self.landings.iter().map(|b| b.capacity() as u64).sum()
    }

    /// A READ brought something (or the control block showed data waiting), or a doorbell rang.
    fn note_progress(&mut self) {
        self.empty_since = None;
        self.empty_run = 0;
        self.idle = Idle::Active;
    }

    /// A READ found nothing new; returns whether it is time to ask for a doorbell: after
    /// `options.spin` of empty READs, or at once when the subscription may not poll (no spin
    /// permit for it). The spin is timed from the `reads_per_clock`-th empty READ in a row and
    /// checked at every `reads_per_clock`-th (the clock is read then): a READ in place of an
    /// empty ring is a load, which a clock read per READ would double.
    fn note_empty(
        &mut self,
        options: &SubscriptionOptions,
        now: &mut LazyNow,
        permit: &mut PollPermit,
        reads_per_clock: u32,
    ) -> bool {
        match self.idle {
            Idle::Active => {
                self.empty_run = self.empty_run.wrapping_add(1);
                let spun = self.empty_run % reads_per_clock.max(1) == 0 && {
                    let now = now.get();
                    let since = *self.empty_since.get_or_insert(now);
                    now.duration_since(since) >= options.spin
                };
                !options.busy_poll && (spun || !permit.acquire())
            }
            Idle::Requested | Idle::Parked { .. } => {
                self.idle = Idle::Parked { since: now.get() };
                false
            }
        }
    }

    /// [`FeedStep::Ended`] once everything up to the announced end of the stream was read.
    fn ended(&self) -> FeedStep {
        match self.end {
            Some(final_seq) if self.reader.next_seq() > final_seq => {
                FeedStep::Ended { publisher: self.info, final_seq, complete: self.lost == 0 }
            }
            _ => FeedStep::Continue,
        }
    }
}

impl Link {
    /// The id of this feed's work request of `kind` in `slot`.
    fn wr_id(&self, kind: WrKind, slot: usize) -> u64 {
        WrId::feed(self.key, self.gen, kind, slot).encode()
    }

    /// Posts the receive of control slot `slot`.
    fn post_recv(&self, slot: usize) -> rdma_fabric::Result<()> {
        self.qp.post_recv(self.wr_id(WrKind::Recv, slot), &[self.ctrl.sge(recv_offset(slot), RECV_SLOT)])
    }

    /// Posts a control SEND from `slot` of the control region (`solicited`: the publisher
    /// waits for it alone).
    fn post_control(&self, kind: WrKind, slot: usize, msg: &Control, solicited: bool) -> Result<()> {
        let bytes = msg.encode().map_err(Error::from_own_encoding)?;
        let offset = slot * SEND_SLOT;
        self.ctrl.buffer().write(offset, &bytes)?;
        let sge = [self.ctrl.sge(offset, bytes.len())];
        self.qp
            .post_send(&SendRequest { solicited, ..SendRequest::new(self.wr_id(kind, slot), SendOp::Send, &sge) })?;
        Ok(())
    }

    /// Posts a READ of the publisher's ring as `plan` says into READ buffer `buf`, which has no
    /// READ in flight and no queued message pointing into it; it is then the feed's READ in
    /// flight. A buffer too small for the READ is replaced by a larger one first (at least
    /// twice its size, at most the feed's longest READ), registered in `pd` and counted in
    /// `counters`.
    fn post_read(
        &self,
        a: &mut ActiveFeed,
        buf: usize,
        plan: ReadPlan,
        pd: &ProtectionDomain,
        counters: &SubscriptionCounters,
    ) -> rdma_fabric::Result<()> {
        let old = a.landings[buf].capacity();
        if plan.len > old {
            let len = (2 * old).min(a.max_read_len).max(plan.len);
            a.landings[buf] = ReadBuffer::new(pd, len)?;
            counters.read_buffer_bytes.fetch_add((len - old) as u64, Ordering::Relaxed);
        }
        let remote = RemoteAddr { addr: a.ring.addr + plan.ring_offset as u64, rkey: a.ring.rkey };
        a.landings[buf].post_read(&self.qp, self.wr_id(WrKind::Read, 0), remote, plan.len)?;
        counters.read_bytes.fetch_add(plan.len as u64, Ordering::Relaxed);
        a.reads.push_back((plan, buf));
        Ok(())
    }

    /// Acks what the feed consumed (the publisher's credit).
    fn send_ack(&self, a: &mut ActiveFeed, solicited: bool) -> Result<()> {
        let position = a.reader.consumed_position();
        let ack = Control::Ack { position, seq: a.reader.next_seq() };
        self.post_control(WrKind::Ack, 0, &ack, solicited)?;
        a.ack_in_flight = true;
        a.acked = position;
        Ok(())
    }

    /// Asks the publisher for a doorbell and counts it; the feed then makes one more READ and
    /// parks if that finds nothing.
    fn request_doorbell_counted(
        &self,
        outstanding: &mut u32,
        a: &mut ActiveFeed,
        counters: &SubscriptionCounters,
    ) -> Result<()> {
        if self.request_doorbell(a)? {
            *outstanding += 1;
            counters.doorbell_requests.fetch_add(1, Ordering::Relaxed);
        }
        a.idle = Idle::Requested;
        Ok(())
    }

    /// Asks the publisher for a doorbell; returns whether a request was posted.
    fn request_doorbell(&self, a: &mut ActiveFeed) -> Result<bool> {
        if a.doorbell_req_in_flight {
            return Ok(false);
        }
        let position = a.reader.consumed_position();
        let request = Control::DoorbellRequest { armed: true, position };
        self.post_control(WrKind::DoorbellRequest, 1, &request, false)?;
        a.doorbell_req_in_flight = true;
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_subscription_spins_for_small_reads_and_blocks_for_large_ones_a_soft_nic_copies() {
        assert_eq!(read_spin([], true), Duration::ZERO, "no READ in flight");
        assert_eq!(read_spin([64], true), READ_SPIN);
        assert_eq!(read_spin([SPIN_READ_MAX], true), READ_SPIN);
        assert_eq!(read_spin([1 << 20], true), Duration::ZERO, "the soft NIC thread receives it");
        assert_eq!(read_spin([1 << 20, 4096], true), READ_SPIN, "one small READ is worth a spin");
        assert_eq!(read_spin([1 << 20], false), READ_SPIN, "verbs: the NIC copies, the CPUs are free");
        assert_eq!(read_spin([], false), Duration::ZERO);
    }
}
