//! What a subscription is created with: where it starts ([`Start`]) and the options a
//! [`SubscriberBuilder`](super::SubscriberBuilder) sets.

use std::time::Duration;

use rdma_wire::protocol::{MessageTypeTag, Secret};

/// Where a new subscription starts in each publisher's stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Start {
    /// Only messages published after the subscription connects.
    #[default]
    Latest,
    /// Every message the publisher still retains.
    Earliest,
}

/// Options of a subscription: what a [`SubscriberBuilder`](super::SubscriberBuilder) sets.
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
    /// The schema id the application gave for its message type, compared instead of the
    /// fingerprint of the type's serde shape (default `None`).
    pub schema_id: Option<u64>,
    /// What the messages must be: set by the typed handle from its type (`None`: raw bytes,
    /// any publisher is read).
    pub message_type: Option<MessageTypeTag>,
    /// Most publisher connections (feeds) open at once, 1 to 65,536 (default 1,024).
    pub max_feeds: usize,
}

/// The default of [`SubscriptionOptions::max_feeds`].
pub(crate) const DEFAULT_MAX_FEEDS: usize = 1024;

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
            schema_id: None,
            message_type: None,
            max_feeds: DEFAULT_MAX_FEEDS,
        }
    }
}
