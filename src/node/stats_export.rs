//! The node's side of the stats file: the snapshot of everything the node counts (its own
//! counters, its discovery's, and those of the publishers and subscriptions in its
//! [`Registry`](super::stats_registry::Registry)), each counter set written from its
//! descriptor table ([`crate::counters`]).

use crate::stats::{Kind, Section, Snapshot};

use super::shared::NodeShared;
use super::stats_registry::values_of;

/// A snapshot of everything a node counts.
pub(crate) fn snapshot_of(node: &NodeShared) -> Snapshot {
    let mut sections = vec![
        Section { kind: Kind::Node, topic: None, values: values_of(node.counters()) },
        Section { kind: Kind::Discovery, topic: None, values: values_of(&node.discovery().counters) },
    ];
    sections.extend(node.stats().sections());
    Snapshot {
        pid: std::process::id(),
        node_id: node.id(),
        addr: node.addr().to_string(),
        fabric: node.fabric().kind().to_string(),
        epoch_us: node.epoch(),
        updated_us: now_us(),
        sections,
    }
}

fn now_us() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_micros() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::counters::{CounterSet, Descriptor};
    use crate::node::{DiscoveryCounters, Node, NodeCounters, PublisherCounters, SubscriptionCounters};
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
