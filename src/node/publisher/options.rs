//! What a publisher is created with: its slow-subscriber [`Policy`] and the options a
//! [`PublisherBuilder`](super::PublisherBuilder) sets.

use std::time::Duration;

use crate::reasons::PolicyKind;
use rdma_wire::protocol::{MessageTypeTag, Secret};
use rdma_wire::ring::Checksum;

/// What a publisher does when a subscriber falls behind by a whole ring.
///
/// | policy | publisher | subscriber |
/// |---|---|---|
/// | `Block{timeout}` | waits for the slowest subscriber's credit up to `timeout`, then `Error::Timeout`: nothing of that message was published (a message larger than the free space that was partly written is finished by the next call) | every message exactly once, in order per publisher (`pubsub::policies::block_delivers_a_million_mixed_messages_exactly_once_in_order_to_four_subscribers`: about 1 GiB) |
/// | `DropSlow{grace}` | a subscriber that holds the publisher up longer than `grace` is told `Dropped{TooSlow{lag}}` and disconnected; the others are not slowed further | what it received is complete and in order; then `Dropped` |
/// | `Overwrite` | never waits | in order, no duplicates; after an overrun, `Lost{count}` says exactly how many messages are missing, then it continues from the oldest retained one (`pubsub::policies::overwrite_reports_exact_lost_counts`) |
///
/// Under every policy a subscriber that stops acknowledging (its application stops calling
/// `recv`) while it holds the publisher back is dropped after the publisher's
/// [`idle_timeout`](crate::PublisherBuilder::idle_timeout) (default 30 s) with
/// `Dropped { Idle }`: under `Block` a silent subscriber holds the publisher at most that long.
///
/// Under every policy a publisher that is dropped (or closed) ends its stream: subscribers
/// that READ everything within its linger get every message up to `final_seq` and exactly one
/// `Ended` (never `Disconnected`; `complete` unless a `Lost` preceded it), the others a `Lost
/// { reason: PublisherClosed }` counting what they missed first; then, without discovery,
/// `recv` returns `NotConnected` (`pubsub::streams::a_dropped_publisher_ends_the_stream_after_its_last_message`,
/// `pubsub::streams::an_orderly_end_is_reported_once_and_never_as_a_disconnect`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    /// Lossless: `publish` waits for the slowest subscriber up to `timeout`, then returns
    /// [`Error::Timeout`](crate::Error::Timeout). A subscriber that holds it back without
    /// acknowledging anything for the publisher's
    /// [`idle_timeout`](crate::PublisherBuilder::idle_timeout) (default 30 s) is dropped
    /// (`Dropped { Idle }`), so a silent subscriber does not hold it forever.
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

/// Options of a publisher: what a [`PublisherBuilder`](super::PublisherBuilder) sets.
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
    /// [`DropReason::Idle`]: crate::DropReason::Idle
    pub idle_timeout: Duration,
    /// The topic's credential: when set, only subscribers that prove they hold the same secret
    /// ([`SubscriberBuilder::credential`](crate::SubscriberBuilder::credential)) are
    /// accepted; the others are rejected with [`RejectCode::Unauthorized`](crate::RejectCode::Unauthorized)
    /// before they learn anything of the ring, and counted
    /// ([`PublisherCounters::rejected_unauthorized`](super::PublisherCounters::rejected_unauthorized)). Default `None`: anyone who can reach the
    /// node may subscribe.
    pub credential: Option<Secret>,
    /// The schema id the application gave for its message type, announced instead of the
    /// fingerprint of the type's serde shape (default `None`).
    pub schema_id: Option<u64>,
    /// What the messages are, announced in the accept data: set by the typed handle from
    /// its type (`None`: raw bytes).
    pub message_type: Option<MessageTypeTag>,
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
            schema_id: None,
            message_type: None,
        }
    }
}
