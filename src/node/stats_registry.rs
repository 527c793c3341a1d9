//! The publishers and subscriptions of a node whose counters go to its stats file, and the
//! values each contributes, from its counters' descriptor table ([`crate::counters`]).

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

use parking_lot::Mutex;

use crate::counters::CounterSet;
use crate::stats::{Kind, Section};

use super::publisher::PublisherCounters;
use super::subscription::{Connector, SubscriptionCounters};

/// The named values of a counter set, from its descriptor table.
pub(crate) fn values_of<C: CounterSet>(counters: &C) -> Vec<(String, u64)> {
    counters.values().into_iter().map(|(d, v)| (d.name().to_owned(), v)).collect()
}

/// A publisher's values: its id, its counters, and its lag (derived from two of them).
fn publisher_values(id: u64, c: &PublisherCounters) -> Vec<(String, u64)> {
    let mut values = vec![("id".to_owned(), id)];
    values.extend(values_of(c));
    let lag = if c.subscribers.load(Ordering::Relaxed) == 0 {
        0
    } else {
        c.position.load(Ordering::Relaxed).saturating_sub(c.slowest_ack.load(Ordering::Relaxed))
    };
    values.push(("lag_bytes".to_owned(), lag));
    values
}

struct PubEntry {
    topic: String,
    id: u64,
    counters: Weak<PublisherCounters>,
}

struct SubEntry {
    topic: String,
    counters: Weak<SubscriptionCounters>,
    /// A pattern subscription's connector: the topics it matched, each a `match` section.
    matches: Option<Weak<Connector>>,
}

/// The publishers and subscriptions of a node whose counters are exported; entries of dropped
/// ones are pruned on every registration and snapshot.
#[derive(Default)]
pub(crate) struct Registry {
    publishers: Mutex<Vec<PubEntry>>,
    subscriptions: Mutex<Vec<SubEntry>>,
}

impl Registry {
    pub(crate) fn add_publisher(&self, topic: &str, id: u64, counters: &Arc<PublisherCounters>) {
        let mut p = self.publishers.lock();
        p.retain(|e| e.counters.strong_count() > 0);
        p.push(PubEntry { topic: topic.to_owned(), id, counters: Arc::downgrade(counters) });
    }

    /// Exports a subscription to `topic` (or a pattern, whose connector `matches` tells the
    /// topics it matched).
    pub(crate) fn add_subscription(
        &self,
        topic: &str,
        counters: &Arc<SubscriptionCounters>,
        matches: Option<Weak<Connector>>,
    ) {
        let mut s = self.subscriptions.lock();
        s.retain(|e| e.counters.strong_count() > 0);
        s.push(SubEntry { topic: topic.to_owned(), counters: Arc::downgrade(counters), matches });
    }

    /// The sections of the live publishers and subscriptions.
    pub(crate) fn sections(&self) -> Vec<Section> {
        let mut out = Vec::new();
        let mut p = self.publishers.lock();
        p.retain(|e| match e.counters.upgrade() {
            Some(c) => {
                out.push(Section {
                    kind: Kind::Publisher,
                    topic: Some(e.topic.clone()),
                    values: publisher_values(e.id, &c),
                });
                true
            }
            None => false,
        });
        drop(p);
        let mut s = self.subscriptions.lock();
        s.retain(|e| match e.counters.upgrade() {
            Some(c) => {
                out.push(Section { kind: Kind::Subscription, topic: Some(e.topic.clone()), values: values_of(&*c) });
                if let Some(connector) = e.matches.as_ref().and_then(Weak::upgrade) {
                    for (topic, publishers) in connector.matched_publishers() {
                        let values = vec![("publishers".to_owned(), publishers as u64)];
                        out.push(Section { kind: Kind::Match, topic: Some(topic.as_str().to_owned()), values });
                    }
                }
                true
            }
            None => false,
        });
        out
    }
}
