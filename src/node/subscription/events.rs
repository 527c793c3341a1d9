//! What happens to a subscription's connections ([`SubscriptionEvent`]), and what it holds
//! for its application in bounded queues (`HeldQueue`): the events until `try_event` takes
//! them (at most [`MAX_EVENTS`]) and the errors about undeliverable messages until `recv`
//! returns them (at most `MAX_UNDELIVERABLE`); past that the oldest is dropped and counted
//! (`events_dropped`), so an application that never looks does not let peers grow its memory.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::counters::SubscriptionCounters;
use super::message::PublisherInfo;
use crate::node::discovery::LostReason;
use crate::node::identity::NodeId;
use crate::reasons::{DropReason, RejectCode};
use rdma_wire::Topic;

/// Something that happened to a subscription's connections.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SubscriptionEvent {
    /// Connected to a publisher.
    Connected(PublisherInfo),
    /// Messages of this publisher were lost, `reason` says how: it overran this subscription
    /// ([`LossReason::Overwritten`], Overwrite policy; they were just before the next one
    /// delivered from it), or it closed (its linger over) before they were READ
    /// ([`LossReason::PublisherClosed`]; an `Ended` with `complete: false` follows).
    Lost {
        /// Which publisher.
        publisher: PublisherInfo,
        /// How many messages.
        count: u64,
        /// Why they were lost.
        reason: LossReason,
    },
    /// The publisher closed its stream (a clean exit): every message up to `final_seq` was
    /// delivered, but for those a `Lost` event of this publisher counted.
    Ended {
        /// Which publisher.
        publisher: PublisherInfo,
        /// Its last sequence number.
        final_seq: u64,
        /// Whether nothing of this publisher's stream was lost: no `Lost` event of this
        /// connection preceded it.
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
    /// ([`SubscriberBuilder::max_message_len`](super::SubscriberBuilder::max_message_len)): the subscription stops reading that
    /// publisher (a `Disconnected` follows), since the stream cannot continue without it. The
    /// next receive returns [`Error::MessageTooLarge`](crate::Error::MessageTooLarge).
    MessageTooLarge {
        /// The publisher.
        publisher: PublisherInfo,
        /// The message's length in bytes.
        len: u64,
        /// This subscription's limit in bytes.
        limit: u64,
    },
    /// A publisher's records are larger than this subscription READs
    /// ([`SubscriberBuilder::max_record_payload`](super::SubscriberBuilder::max_record_payload)): its accept data advertised larger ones
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
    /// A publisher's node refused the subscription to one topic (a pattern subscription is
    /// refused topic by topic: the others go on).
    Rejected {
        /// The node.
        addr: SocketAddr,
        /// The topic it refused.
        topic: Topic,
        /// Why.
        reason: RejectCode,
        /// Its explanation.
        detail: String,
    },
    /// A publisher's node accepted without proving what this subscription requires
    /// ([`Error::Unauthenticated`](crate::Error::Unauthenticated)): with a domain secret or a
    /// credential, a tag answering the connect's challenge; with discovery, the announced
    /// publisher's id. The connection is dropped before anything is READ; with discovery the
    /// subscription tries again later, with back-off, as after a refusal.
    Unauthenticated {
        /// The node.
        addr: SocketAddr,
        /// The topic connected to.
        topic: Topic,
        /// What was missing or wrong.
        detail: String,
    },
    /// A publisher's node could not be reached.
    Unreachable {
        /// The node.
        addr: SocketAddr,
        /// What failed.
        detail: String,
    },
    /// Discovery says a publisher of the topic (or of a topic the pattern includes) is gone.
    /// After [`LostReason::Silent`] and [`LostReason::Restarted`] the connection to it is
    /// closed; the subscription reconnects by itself when the node is announced again. After
    /// [`LostReason::Withdrawn`] and [`LostReason::Goodbye`] the publisher ends its stream
    /// (an `Ended` of its connection, if it was read).
    PublisherLost {
        /// The publisher's node.
        node: NodeId,
        /// The epoch that is gone.
        epoch: u64,
        /// Its address.
        addr: SocketAddr,
        /// The publisher's topic.
        topic: Topic,
        /// How discovery knows.
        reason: LostReason,
    },
    /// Discovery announced a publisher of a topic the subscription reads (or a node whose
    /// topic listing a pattern subscription reads listed one), and the subscription did not
    /// connect to it: it reads [`max_feeds`](super::SubscriberBuilder::max_feeds) publishers
    /// already (counted in `feed_limit_reached`). Told once per publisher; it is connected
    /// when a connection goes and it is still announced or listed. The other publishers go on.
    FeedLimit {
        /// The publisher's node.
        addr: SocketAddr,
        /// Its topic.
        topic: Topic,
        /// The limit.
        limit: usize,
    },
    /// A pattern subscription connected to a node's address
    /// ([`Subscription::connect`](super::Subscription::connect)) no longer learns that node's
    /// topics: the node refused to list them (a node of an older version lists none), its
    /// listing accept did not authenticate, its listing was invalid (counted in
    /// `listing_failures`), or the listing connection broke. The publishers connected already
    /// go on; connect to the address again to read its listing again.
    ListingFailed {
        /// The node.
        addr: SocketAddr,
        /// What failed.
        detail: String,
    },
}

/// Why messages were lost ([`SubscriptionEvent::Lost`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LossReason {
    /// The publisher ([`Policy::Overwrite`](crate::Policy::Overwrite)) wrote over them before
    /// this subscription READ them.
    Overwritten,
    /// The publisher closed (its [`linger`](crate::PublisherBuilder::linger) or
    /// [`Publisher::close`](crate::Publisher::close)'s timeout over) before this subscription
    /// READ them.
    PublisherClosed,
}

/// Most events a subscription holds for its application.
pub const MAX_EVENTS: usize = 1024;

/// Most errors about undeliverable messages a subscription holds for `recv` (older ones are
/// dropped: the events still name each).
pub(super) const MAX_UNDELIVERABLE: usize = 16;

/// What a subscription holds for its application, oldest first, at most `cap` items: when
/// full, the oldest is dropped and counted (`events_dropped`), so an application that never
/// takes them does not let peers grow its memory.
pub(super) struct HeldQueue<T> {
    items: VecDeque<T>,
    cap: usize,
    counters: Arc<SubscriptionCounters>,
}

/// The events held for `try_event` (at most [`MAX_EVENTS`]).
pub(super) type EventQueue = HeldQueue<SubscriptionEvent>;

impl<T> HeldQueue<T> {
    /// An empty queue of at most `cap` items, counting what it drops in `counters`.
    pub(super) fn new(cap: usize, counters: Arc<SubscriptionCounters>) -> HeldQueue<T> {
        HeldQueue { items: VecDeque::new(), cap, counters }
    }

    /// Adds `item` last; when the queue is full, drops (and counts) the oldest first.
    pub(super) fn push_back(&mut self, item: T) {
        if self.items.len() >= self.cap {
            self.items.pop_front();
            self.counters.events_dropped.fetch_add(1, Ordering::Relaxed);
        }
        self.items.push_back(item);
    }

    /// Whether it holds nothing.
    pub(super) fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Takes the oldest item.
    pub(super) fn pop_front(&mut self) -> Option<T> {
        self.items.pop_front()
    }

    /// Takes the oldest item for which `wanted` holds, leaving the others in order.
    pub(super) fn take_first(&mut self, wanted: impl FnMut(&T) -> bool) -> Option<T> {
        let at = self.items.iter().position(wanted)?;
        self.items.remove(at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An event numbered `n` (in its address's port).
    fn event(n: u64) -> SubscriptionEvent {
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], n as u16));
        SubscriptionEvent::Unreachable { addr, detail: String::new() }
    }

    fn number(e: &SubscriptionEvent) -> u64 {
        match e {
            SubscriptionEvent::Unreachable { addr, .. } => u64::from(addr.port()),
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn a_full_queue_drops_and_counts_the_oldest() {
        let counters = Arc::new(SubscriptionCounters::default());
        let mut q = EventQueue::new(MAX_EVENTS, counters.clone());
        for i in 0..MAX_EVENTS as u64 + 10 {
            q.push_back(event(i));
        }
        assert_eq!(counters.events_dropped.load(Ordering::Relaxed), 10);
        let kept: Vec<u64> = std::iter::from_fn(|| q.pop_front()).map(|e| number(&e)).collect();
        assert_eq!(kept, (10..MAX_EVENTS as u64 + 10).collect::<Vec<_>>(), "the newest, in order");
    }

    #[test]
    fn take_first_takes_the_oldest_match_and_keeps_the_order_of_the_rest() {
        let mut q = EventQueue::new(MAX_EVENTS, Arc::default());
        for i in 0..5 {
            q.push_back(event(i));
        }
        assert_eq!(q.take_first(|e| number(e) % 2 == 1).map(|e| number(&e)), Some(1));
        assert!(q.take_first(|e| number(e) > 10).is_none());
        let rest: Vec<u64> = std::iter::from_fn(|| q.pop_front()).map(|e| number(&e)).collect();
        assert_eq!(rest, [0, 2, 3, 4]);
    }
}
