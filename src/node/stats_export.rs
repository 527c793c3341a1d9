//! The node's side of the stats file: the registry of its publishers' and subscriptions'
//! counters, and the snapshot of everything the node counts, each counter set written from
//! its descriptor table ([`crate::counters`]).

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

use parking_lot::Mutex;

use crate::counters::CounterSet;
use crate::stats::{Kind, Section, Snapshot};

use super::{NodeShared, PublisherCounters, SubscriptionCounters};

/// A snapshot of everything a node counts.
pub(crate) fn snapshot_of(node: &NodeShared) -> Snapshot {
    let mut sections = vec![
        Section { kind: Kind::Node, topic: None, values: values_of(&node.counters) },
        Section { kind: Kind::Discovery, topic: None, values: values_of(&node.discovery.counters) },
    ];
    sections.extend(node.stats.sections());
    Snapshot {
        pid: std::process::id(),
        node_id: node.id,
        addr: node.addr.to_string(),
        fabric: node.fabric.kind().to_string(),
        epoch_us: node.epoch,
        updated_us: now_us(),
        sections,
    }
}

fn now_us() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_micros() as u64)
}

/// The named values of a counter set, from its descriptor table.
fn values_of<C: CounterSet>(counters: &C) -> Vec<(String, u64)> {
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

    pub(crate) fn add_subscription(&self, topic: &str, counters: &Arc<SubscriptionCounters>) {
        let mut s = self.subscriptions.lock();
        s.retain(|e| e.counters.strong_count() > 0);
        s.push(SubEntry { topic: topic.to_owned(), counters: Arc::downgrade(counters) });
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
                true
            }
            None => false,
        });
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::counters::Descriptor;
    use crate::node::{DiscoveryCounters, Node, NodeCounters};
    use crate::{DiscoveryOptions, FabricKind};

    fn names(descriptors: &[Descriptor]) -> Vec<String> {
        descriptors.iter().map(|d| d.name().to_owned()).collect()
    }

    fn section_names(snapshot: &Snapshot, kind: Kind) -> Vec<String> {
        let section = snapshot.of_kind(kind).next().unwrap_or_else(|| panic!("a {kind:?} section"));
        section.values.iter().map(|(n, _)| n.clone()).filter(|n| n != "id" && n != "lag_bytes").collect()
    }

    #[test]
    fn every_declared_counter_reaches_the_stats_file() {
        let node =
            Node::builder().fabric(FabricKind::Soft).discovery(DiscoveryOptions::disabled()).build().expect("node");
        let _publisher = node.publisher("stats-export").create().expect("publisher");
        let _subscription = node.subscriber("stats-export").auto_connect(false).create().expect("subscription");
        let snapshot = Snapshot::parse(&node.stats().render()).expect("the rendered file parses");
        assert_eq!(section_names(&snapshot, Kind::Node), names(NodeCounters::DESCRIPTORS));
        assert_eq!(section_names(&snapshot, Kind::Discovery), names(DiscoveryCounters::DESCRIPTORS));
        assert_eq!(section_names(&snapshot, Kind::Publisher), names(PublisherCounters::DESCRIPTORS));
        assert_eq!(section_names(&snapshot, Kind::Subscription), names(SubscriptionCounters::DESCRIPTORS));
    }
}
