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

    /// A pattern subscription's section carries its pattern, and is followed by a `match`
    /// section for each topic it matched, with its publishers (here this node's own, which
    /// discovery sights locally); topics it does not include have none.
    #[test]
    fn a_pattern_subscription_exports_each_topic_it_matched() {
        let domain = 3000 + (std::process::id() % 1000) as u16;
        let node = Node::builder()
            .fabric(FabricKind::Soft)
            .discovery(DiscoveryOptions::default().domain(domain))
            .build()
            .expect("node");
        let _publishers = ["export/a", "export/b", "exported"].map(|t| node.publisher(t).create().expect("publisher"));
        let mut sub = node.subscriber("export/*").create().expect("a pattern subscription");
        let matched = |snapshot: &Snapshot| -> Vec<(String, u64)> {
            snapshot.of_kind(Kind::Match).map(|s| (s.topic.clone().unwrap_or_default(), s.get("publishers"))).collect()
        };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let snapshot = loop {
            let snapshot = Snapshot::parse(&node.stats().render()).expect("the rendered file parses");
            if matched(&snapshot).len() == 2 {
                break snapshot;
            }
            assert!(std::time::Instant::now() < deadline, "no match sections: {snapshot:?}");
            // Drives the subscription (its discovery) for up to 10 ms.
            let _ = sub.recv_timeout(std::time::Duration::from_millis(10));
        };
        assert_eq!(matched(&snapshot), [("export/a".to_owned(), 1), ("export/b".to_owned(), 1)]);
        let kinds: Vec<(Kind, Option<&str>)> = snapshot
            .sections
            .iter()
            .map(|s| (s.kind, s.topic.as_deref()))
            .filter(|(k, _)| *k != Kind::Publisher)
            .collect();
        let at =
            kinds.iter().position(|k| *k == (Kind::Subscription, Some("export/*"))).expect("the pattern's section");
        assert_eq!(kinds[at + 1..at + 3], [(Kind::Match, Some("export/a")), (Kind::Match, Some("export/b"))]);
        let sub_section = snapshot.of_kind(Kind::Subscription).next().expect("the subscription");
        assert_eq!(sub_section.get("matched_topics"), 2);
        assert!(
            snapshot.topics().iter().all(|t| t.topic != "export/a" || t.publishers == 1),
            "match is no topic total"
        );
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
