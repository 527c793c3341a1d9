//! `Event`: something that happened to a subscriber's connections (the library's
//! `SubscriptionEvent`), as one Python class with a ``kind`` and the fields that kind has.

use pyo3::prelude::*;
use rdma_pubsub::SubscriptionEvent;

use crate::message::PublisherInfo;

/// Something that happened to a subscriber's connections. ``kind`` is one of
/// ``"connected"``, ``"lost"`` (``count`` messages lost to an overrun), ``"ended"`` (the
/// publisher closed its stream at ``final_seq``; ``complete``), ``"dropped"`` (the publisher
/// dropped this subscriber; ``reason``), ``"message_too_large"`` / ``"record_too_large"``
/// (``len`` over ``limit``), ``"disconnected"``, ``"rejected"`` (``reason``, ``detail``),
/// ``"unreachable"`` (``detail``), ``"publisher_lost"`` (discovery; ``reason``, ``topic``),
/// ``"feed_limit"`` (a publisher of ``topic`` not read: ``limit`` feeds open),
/// ``"listing_failed"`` (a pattern subscriber no longer learns the topics of the node at
/// ``addr``; ``detail``); ``"rejected"``
/// and ``"unauthenticated"`` name their ``topic`` too; fields a kind does not have are
/// ``None``.
#[pyclass(module = "rdma_pubsub", frozen, get_all)]
#[derive(Default)]
pub struct Event {
    /// What happened.
    pub kind: &'static str,
    /// The publisher, when known.
    pub publisher: Option<PublisherInfo>,
    /// The publisher's node, ``"ip:port"``.
    pub addr: Option<String>,
    /// The publisher's topic (``"rejected"``, ``"unauthenticated"``, ``"publisher_lost"``,
    /// ``"feed_limit"``): on a pattern subscriber, which of its topics.
    pub topic: Option<String>,
    /// Messages lost (``"lost"``).
    pub count: Option<u64>,
    /// The last sequence number of an ended stream.
    pub final_seq: Option<u64>,
    /// Whether an ended stream was delivered whole.
    pub complete: Option<bool>,
    /// Why (``"dropped"``, ``"rejected"``, ``"publisher_lost"``, ``"lost"``).
    pub reason: Option<String>,
    /// An explanation (``"rejected"``, ``"unreachable"``, ``"unauthenticated"``,
    /// ``"listing_failed"``).
    pub detail: Option<String>,
    /// A length in bytes over ``limit``.
    pub len: Option<u64>,
    /// A limit in bytes.
    pub limit: Option<u64>,
}

impl From<SubscriptionEvent> for Event {
    fn from(event: SubscriptionEvent) -> Self {
        let info = |p: rdma_pubsub::PublisherInfo| Some(PublisherInfo::from(p));
        match event {
            SubscriptionEvent::Connected(p) => {
                Event { kind: "connected", addr: Some(p.addr.to_string()), publisher: info(p), ..Event::default() }
            }
            SubscriptionEvent::Lost { publisher, count, reason } => Event {
                kind: "lost",
                addr: Some(publisher.addr.to_string()),
                publisher: info(publisher),
                count: Some(count),
                reason: Some(format!("{reason:?}")),
                ..Event::default()
            },
            SubscriptionEvent::Ended { publisher, final_seq, complete } => Event {
                kind: "ended",
                addr: Some(publisher.addr.to_string()),
                publisher: info(publisher),
                final_seq: Some(final_seq),
                complete: Some(complete),
                ..Event::default()
            },
            SubscriptionEvent::Dropped { publisher, reason } => Event {
                kind: "dropped",
                addr: Some(publisher.addr.to_string()),
                publisher: info(publisher),
                reason: Some(format!("{reason:?}")),
                ..Event::default()
            },
            SubscriptionEvent::MessageTooLarge { publisher, len, limit } => Event {
                kind: "message_too_large",
                addr: Some(publisher.addr.to_string()),
                publisher: info(publisher),
                len: Some(len),
                limit: Some(limit),
                ..Event::default()
            },
            SubscriptionEvent::RecordTooLarge { addr, len, limit } => Event {
                kind: "record_too_large",
                addr: Some(addr.to_string()),
                len: Some(len),
                limit: Some(limit),
                ..Event::default()
            },
            SubscriptionEvent::Disconnected { addr, publisher } => Event {
                kind: "disconnected",
                addr: Some(addr.to_string()),
                publisher: publisher.map(PublisherInfo::from),
                ..Event::default()
            },
            SubscriptionEvent::Rejected { addr, topic, reason, detail } => Event {
                kind: "rejected",
                addr: Some(addr.to_string()),
                topic: Some(topic.to_string()),
                reason: Some(format!("{reason:?}")),
                detail: Some(detail),
                ..Event::default()
            },
            SubscriptionEvent::Unreachable { addr, detail } => {
                Event { kind: "unreachable", addr: Some(addr.to_string()), detail: Some(detail), ..Event::default() }
            }
            SubscriptionEvent::PublisherLost { addr, topic, reason, .. } => Event {
                kind: "publisher_lost",
                addr: Some(addr.to_string()),
                topic: Some(topic.to_string()),
                reason: Some(format!("{reason:?}")),
                ..Event::default()
            },
            SubscriptionEvent::Unauthenticated { addr, topic, detail } => Event {
                kind: "unauthenticated",
                addr: Some(addr.to_string()),
                topic: Some(topic.to_string()),
                detail: Some(detail),
                ..Event::default()
            },
            SubscriptionEvent::FeedLimit { addr, topic, limit } => Event {
                kind: "feed_limit",
                addr: Some(addr.to_string()),
                topic: Some(topic.to_string()),
                limit: Some(limit as u64),
                ..Event::default()
            },
            SubscriptionEvent::ListingFailed { addr, detail } => {
                Event { kind: "listing_failed", addr: Some(addr.to_string()), detail: Some(detail), ..Event::default() }
            }
            other => Event { kind: "other", detail: Some(format!("{other:?}")), ..Event::default() },
        }
    }
}

#[pymethods]
impl Event {
    fn __repr__(&self) -> String {
        let mut fields = vec![format!("kind={:?}", self.kind)];
        let optional = [
            ("addr", self.addr.as_ref().map(|a| format!("{a:?}"))),
            ("topic", self.topic.as_ref().map(|t| format!("{t:?}"))),
            ("count", self.count.map(|c| c.to_string())),
            ("final_seq", self.final_seq.map(|s| s.to_string())),
            ("complete", self.complete.map(|c| if c { "True".to_owned() } else { "False".to_owned() })),
            ("reason", self.reason.as_ref().map(|r| format!("{r:?}"))),
            ("detail", self.detail.as_ref().map(|d| format!("{d:?}"))),
            ("len", self.len.map(|l| l.to_string())),
            ("limit", self.limit.map(|l| l.to_string())),
        ];
        fields.extend(optional.into_iter().filter_map(|(name, value)| value.map(|v| format!("{name}={v}"))));
        format!("Event({})", fields.join(", "))
    }
}
