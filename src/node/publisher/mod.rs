//! The publishing side of a topic: the [`Publisher`] handle (publish, loan, flush, and the
//! publisher's queries), over its [`PublisherShared`](shared::PublisherShared): the ring in a
//! remote-read-only region, the subscribers connected to it, acks as credits, the
//! slow-subscriber policy, and doorbells for parked subscribers.
//!
//! Files: `shared.rs` (the shared state, whole: publishing, credit, control traffic,
//! accepting), `loan.rs` (a record lent in place), `liveness.rs` (one subscriber's activity),
//! `flow_control.rs` (the policy's rules as pure functions), `builder.rs`, `options.rs`,
//! `counters.rs`.
//!
//! # Publisher
//!
//! `node.publisher(topic).policy(..).ring_capacity(..).max_record_payload(..).max_subscribers(..)
//! .linger(..).checksum(..).idle_timeout(..).credential(..).typed::<T>().create()` registers the ring
//! region (remote read), a shared receive queue with 4 receives per subscriber (or per-QP receives
//! where the device has no SRQ), and one CQ.
//!
//! - Connect (CM thread): `ConnectData` is decoded and checked (version, topic, limits, policy);
//!   bad or foreign private data is rejected with a `RejectData` reason and counted
//!   (`NodeCounters::rejected_connects`), never a panic. On accept, the subscriber's start point
//!   (latest = tail, earliest = head) goes into `AcceptData`, and its credit starts there.
//! - Topic credentials (`protocol/credential.rs`): a publisher with `PublisherBuilder::credential`
//!   checks, before anything else and so before any `AcceptData` (the ring's address and rkey)
//!   exists, that the connect data proves the secret: an HMAC-SHA256 (label `rdma-pubsub connect
//!   v4`, truncated to 16 bytes) over the rest of the request, a random nonce and the subscriber's
//!   clock in ms. A missing or wrong proof, a time more than 30 s off the publisher's clock, or a
//!   nonce the node has accepted within that window is `Unauthorized` with a detail saying which,
//!   counted (`PublisherCounters::rejected_unauthorized`). The node remembers at most 4,096 nonces,
//!   each until its time leaves the window; when that many are live it refuses new ones rather than
//!   grow. Without a credential anyone may subscribe, as before.
//! - `publish(&T)`: raw bytes (`Publisher<[u8]>`, the default) are appended as they are; a serde
//!   value is sized (one encoding pass), then encoded straight into a loan when it fits one record
//!   (else into a buffer, then fragmented). `loan(len)` lends a claimed record, zeroed, as
//!   `&mut [u8]` under the state lock (and the turn, when it waited for room); `send()` commits it,
//!   a drop abandons it. While a claim is outstanding the producer writes nothing else
//!   (`RingError::ClaimOutstanding`); the bytes are written without atomics, which is sound because
//!   no other Rust code of the process touches them before the commit (peers reach them through the
//!   kernel, their own mapping or DMA, and discard what fails the record checksum).
//! - The hot path (`PublisherShared::publish_bytes`, `node/publisher/shared.rs`): one lock, `state` (producer, cached publisher
//!   limit, subscriber table), held for the copy into the ring, the header and its checksum, the
//!   release store of the tail, a look at the CQ (acks, doorbell requests) and one comparison
//!   with the lowest armed doorbell position (`doorbell_floor`). No clock read, no allocation, no
//!   system call, no locked read-modify-write (counters written only under the lock are a load
//!   and a store); the CQ is looked at with a one-entry poll, a batch is set up only when it
//!   holds something. Measured on 64 B messages with the publisher alone on a CPU: about 0.08 µs
//!   of CPU per message, of which the record checksum is about 15 ns. On a fabric whose NIC copies
//!   on this host's CPUs (`DeviceAttributes::copies_on_host_cpus`: soft), a commit of 16 KiB or
//!   more is followed by one `sched_yield`, so that the NIC thread that must copy those bytes gets
//!   a turn on a machine with fewer CPUs than busy threads (64 KiB in one process on 2 vCPUs:
//!   2.28 → 2.75 GB/s).
//! - The publisher limit (`PubState::limit`, Aeron's publisher limit): `min(acked) + capacity`
//!   under Block and DropSlow, no limit under Overwrite or with no subscriber. It is recomputed
//!   when an ack arrives or a subscriber comes or goes (`PubState::refresh_credit`), never per
//!   message. The CM thread accepts under the same lock, so a new subscriber's start point and
//!   its credit are consistent with the producer.
//! - The publishing *turn* (`Turn`, `node/publisher/shared.rs`): a call that cannot publish under the
//!   limit takes the turn (a flag and a condition variable) and releases the lock while it waits
//!   for credit; other publishing calls wait for the turn, so no call's message lands between the
//!   fragments of another's. Calls that fit never touch it.
//! - Credits: each subscriber's acked position. The producer may write up to
//!   `min(acked) + capacity` (Block, DropSlow) or without limit (Overwrite). Acks arrive as SENDs
//!   into the shared receive queue; the publisher drains its CQ after every commit (non-blocking;
//!   on soft a few atomic loads when empty) and while it waits for credit (`poll_wait`). An ack outside `[acked, tail]` is refused and
//!   counted (`bad_acks`).
//! - Credit waits: a publisher with several subscribers that must wait for credit asks the
//!   subscriber holding it back that will probably ack last (`node/ack_clock.rs`: each
//!   subscriber's acks keep a rhythm, a moving average of the gaps between them; one without a
//!   rhythm yet counts as last) with `CreditWanted{position}`: the floor it needs, or a quarter
//!   ring past that subscriber's last ack if further, never past the tail. That subscriber acks
//!   as a solicited SEND once it has consumed that far (at once if it has), and the publisher
//!   waits with its CQ armed for solicited completions only (`poll_wait_solicited`): the acks of
//!   the others are queued without waking it (`solicited_waits`, `credit_requests`). If it wakes
//!   still short, it asks the next one. With one subscriber it waits on every ack (that ack is
//!   the one it needs). Before this, a publisher blocked by 16 subscribers woke for every ack:
//!   1.9 wakes per 64 KiB message and 3.5 per 1 MiB one, against 0.3 and 0.6 now.
//! - Doorbells: a parked subscriber sends `DoorbellRequest{position}`; after a commit that moves
//!   the tail past the lowest armed position, the publisher SENDs `Doorbell{tail}` to every armed
//!   subscriber whose position the tail passed (`PublisherShared::ring_doorbells`).
//! - Control SENDs to subscribers (doorbells, `CreditWanted`, `Dropped`, `EndOfStream`) use
//!   send slots of their own subscriber: 4 each (`node/publisher/liveness.rs`). A subscriber that
//!   posts no receives pins at most its own 4 (the SENDs wait on RNR, forever if it asked for
//!   infinite retries); the others still get their doorbells and end of stream
//!   (`tests/hostile/node.rs`). A completion frees a slot only when it comes from the queue pair
//!   of the subscriber that owns it now.
//! - The service tick: every `SERVICE_INTERVAL` (20 ms) the CM thread services each local
//!   publisher (`PublisherShared::service`): unless a publishing call holds the state (it drains
//!   the CQ itself), it drains the CQ, so receives are reposted and acks and doorbell requests
//!   handled while the application publishes nothing, and drops idle subscribers.
//! - Idle subscribers (`PublisherBuilder::idle_timeout`, default 30 s): one that holds credit back
//!   (acked behind the tail, under Block or DropSlow) and sends nothing, or takes none of the
//!   publisher's SENDs (one outstanding and none completing), for that long is dropped with
//!   `DropReason::Idle`. Sampled at service ticks and credit waits; the hot path only bumps a
//!   counter per control message received. This is the answer for silent subscribers under
//!   Block: they hold the publisher at most `idle_timeout`. One silent while holding credit for
//!   250 ms is probed once with `CreditWanted`: a live one takes it; on a queue pair in the error
//!   state (it made a remote access error) the SEND completes in error, and a control SEND that
//!   completes in error removes its subscriber at once.
//! - Parting notices (`PublisherShared::part_with`): dropped subscribers (DropSlow, idle) get
//!   `Dropped{reason}` and, at close, every subscriber gets `EndOfStream`; all the notices are
//!   posted first, then one bounded wait for all of them (100 ms for drops), then the
//!   disconnects, so subscribers that take no SENDs cost one wait, not one each.
//! - `wait_for_subscribers(n, timeout)` waits on a condition signalled when a subscriber is
//!   accepted or removed.
//! - Drop: stop accepting, wait up to `linger` for subscribers to consume everything (finishing a
//!   partly written message, dropping idle subscribers), then the parting `EndOfStream{final_seq}`
//!   (waiting at most `NOTICE_TIMEOUT`, 2 s, for all of them) and the disconnects.
//!
//!
//! # Guarantees of the policies
//!
//! | policy | publisher | subscriber |
//! |---|---|---|
//! | `Block{timeout}` | waits for the slowest subscriber's credit up to `timeout`, then `Error::Timeout`: nothing of that message was published (a message larger than the free space that was partly written is finished by the next call) | every message exactly once, in order per publisher (`tests/pubsub.rs`: 1,000,000 mixed messages, ~1 GiB, to 4 subscribers) |
//! | `DropSlow{grace}` | a subscriber that holds the publisher up longer than `grace` is told `Dropped{TooSlow{lag}}` and disconnected; the others are not slowed further | what it received is complete and in order; then `Dropped` |
//! | `Overwrite` | never waits | in order, no duplicates; after an overrun, `Lost{count}` says exactly how many messages are missing, then it continues from the oldest retained one (`overwrite_reports_exact_lost_counts`) |
//!
//! A publisher that is dropped ends its stream: subscribers get every message up to `final_seq`
//! and exactly one `Ended{complete: true}` (never `Disconnected`), then `recv` returns `Closed`
//! (`pubsub::a_dropped_publisher_ends_the_stream_after_its_last_message`,
//! `pubsub::an_orderly_end_is_reported_once_and_never_as_a_disconnect`).
//!

mod builder;
mod counters;
mod flow_control;
mod liveness;
mod loan;
mod options;
mod shared;

use rdma_wire::Topic;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use crate::error::Result;
use rdma_wire::ring::Checksum;

use super::message_type::MessageType;
use super::shared::NodeShared;

pub use builder::PublisherBuilder;
pub use counters::PublisherCounters;
pub use loan::Loan;
pub use options::Policy;
pub(crate) use options::PublisherOptions;
pub(crate) use shared::{PublisherShared, SERVICE_INTERVAL};

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
        f.debug_struct("Publisher").field("topic", &self.shared.topic()).field("id", &self.shared.id()).finish()
    }
}

impl<T: ?Sized + MessageType> Publisher<T> {
    /// A publisher of `topic` on `node` (see [`PublisherShared::create`]).
    ///
    /// # Errors
    /// As [`PublisherBuilder::create`].
    pub(crate) fn create(node: Arc<NodeShared>, topic: Topic, options: PublisherOptions) -> Result<Publisher<T>> {
        Ok(Publisher { shared: PublisherShared::create(node, topic, options)?, _type: PhantomData })
    }

    /// Publishes one message (fragmented through the ring when it is large); returns its
    /// sequence number. Raw bytes are copied into the ring as they are; a serde value is
    /// encoded straight into it when it fits one ring record (else through a buffer, then
    /// fragmented). Under [`Policy::Block`] it waits for credit up to the timeout; on
    /// timeout nothing of the message was published, unless it was larger than the free space
    /// and partly written: then it is finished by the next `publish`/`flush` call.
    ///
    /// A message that fits under the publisher limit costs one uncontended lock, the copy into
    /// the ring, the header and its checksum, a release store of the tail, a look at the CQ
    /// and a comparison with the lowest armed doorbell: no clock read, no allocation, no
    /// system call.
    ///
    /// # Errors
    /// [`Error::Timeout`](crate::Error::Timeout) when a Block publisher waited its whole timeout for credit;
    /// [`Error::Encode`](crate::Error::Encode) when a value does not serialize; [`Error::MessageTooLarge`](crate::Error::MessageTooLarge) for a message over
    /// 4 GiB.
    pub fn publish(&self, message: &T) -> Result<u64> {
        if let Some(bytes) = T::as_raw(message) {
            return self.shared.publish_bytes(bytes);
        }
        let len = T::encoded_len(message)?;
        if len > self.shared.max_record_payload() {
            let mut bytes = vec![0; len];
            T::encode_into(message, &mut bytes)?;
            return self.shared.publish_bytes(&bytes);
        }
        let mut loan = self.loan(len)?;
        T::encode_into(message, &mut loan)?;
        loan.send()
    }

    /// Lends `len` bytes of the ring (at most one ring record) for the next message, zeroed:
    /// write them through the loan (`&mut [u8]`) and [`send`](Loan::send) it. Under
    /// [`Policy::Block`] it first waits for room, up to the timeout.
    ///
    /// # Errors
    /// [`Error::MessageTooLarge`](crate::Error::MessageTooLarge) when `len` exceeds one ring record (publish such messages
    /// with [`publish`](Self::publish), which fragments them); [`Error::Timeout`](crate::Error::Timeout) when a Block
    /// publisher waited its whole timeout for room.
    pub fn loan(&self, len: usize) -> Result<Loan<'_>> {
        self.shared.loan(len)
    }

    /// Waits (under Block, up to the timeout) until every connected subscriber has consumed
    /// everything published, and finishes a partly written message first.
    ///
    /// # Errors
    /// [`Error::Timeout`](crate::Error::Timeout) when a subscriber has not consumed everything within `timeout`.
    pub fn flush(&self, timeout: Duration) -> Result<()> {
        self.shared.flush(timeout)
    }

    /// The topic.
    pub fn topic(&self) -> &str {
        self.shared.topic()
    }

    /// This publisher's id (what subscribers see in [`crate::PublisherInfo`]).
    pub fn id(&self) -> u64 {
        self.shared.id()
    }

    /// The function that checksums this publisher's records.
    pub fn checksum(&self) -> Checksum {
        self.shared.checksum()
    }

    /// Subscribers currently connected.
    pub fn subscriber_count(&self) -> usize {
        self.shared.subscriber_count()
    }

    /// Waits up to `timeout` (any `Duration`) until at least `n` subscribers are connected;
    /// returns how many are.
    ///
    /// # Errors
    /// [`Error::Timeout`](crate::Error::Timeout) when fewer than `n` are connected when the time is up.
    pub fn wait_for_subscribers(&self, n: usize, timeout: Duration) -> Result<usize> {
        self.shared.wait_for_subscribers(n, timeout)
    }

    /// The counters.
    pub fn counters(&self) -> &PublisherCounters {
        self.shared.counters()
    }

    /// Sequence number the next message gets.
    pub fn next_seq(&self) -> u64 {
        self.shared.next_seq()
    }
}

impl<T: ?Sized + MessageType> Drop for Publisher<T> {
    fn drop(&mut self) {
        self.shared.close();
    }
}
