//! Where the sequence of a publisher re-created on its node starts.
//!
//! A publisher's id stands for its node and topic, and its epoch is its node's, so a publisher
//! closed and created again on the same node keeps both. A subscription that read the first
//! skips, as duplicates, the sequences it already delivered of that (id, epoch); were the
//! second numbered from 1 again, its first messages would be skipped, lost without a word.
//! The node therefore remembers, per topic, the sequence after the last one its closed
//! publisher used, and the next publisher of the topic starts there.
//!
//! Bounded: at most [`MAX_TOPICS`] topics are remembered. Past that, the largest sequence
//! forgotten becomes the start of every topic not remembered, which stays correct (a sequence
//! is never used twice within the node's epoch) at the price of numbers that skip.

use std::collections::HashMap;

use rdma_wire::protocol::TopicId;

/// Topics whose next sequence a node remembers.
pub(crate) const MAX_TOPICS: usize = 4096;

/// The first sequence of each topic's next publisher on this node.
#[derive(Debug, Default)]
pub(crate) struct SeqFloors {
    /// Per topic whose publisher closed: the sequence after its last.
    next: HashMap<TopicId, u64>,
    /// The largest sequence forgotten to keep within [`MAX_TOPICS`].
    forgotten: u64,
}

impl SeqFloors {
    /// The sequence a new publisher of `topic` starts at (1 for a topic never published here).
    pub(crate) fn first_seq(&self, topic: TopicId) -> u64 {
        self.next.get(&topic).copied().unwrap_or(self.forgotten).max(1)
    }

    /// The publisher of `topic` closed; its next message would have been `next_seq`.
    pub(crate) fn closed(&mut self, topic: TopicId, next_seq: u64) {
        if !self.next.contains_key(&topic) && self.next.len() >= MAX_TOPICS {
            if let Some((&evicted, &seq)) = self.next.iter().next() {
                self.next.remove(&evicted);
                self.forgotten = self.forgotten.max(seq);
            }
        }
        let entry = self.next.entry(topic).or_insert(0);
        *entry = (*entry).max(next_seq).max(self.forgotten);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_topic_starts_after_its_closed_publisher_and_others_at_one() {
        let mut floors = SeqFloors::default();
        let (a, b) = (TopicId::of("a"), TopicId::of("b"));
        assert_eq!(floors.first_seq(a), 1);
        floors.closed(a, 11);
        assert_eq!((floors.first_seq(a), floors.first_seq(b)), (11, 1));
        floors.closed(a, 5);
        assert_eq!(floors.first_seq(a), 11, "never back");
    }

    #[test]
    fn past_the_bound_forgotten_topics_start_after_every_sequence_forgotten() {
        let mut floors = SeqFloors::default();
        for i in 0..MAX_TOPICS as u64 {
            floors.closed(TopicId::of(&format!("t{i}")), 100 + i);
        }
        floors.closed(TopicId::of("one more"), 7);
        assert_eq!(floors.next.len(), MAX_TOPICS);
        let top = 100 + MAX_TOPICS as u64 - 1;
        for i in 0..MAX_TOPICS as u64 {
            let first = floors.first_seq(TopicId::of(&format!("t{i}")));
            assert!(first >= 100 + i, "t{i} starts at {first}");
            assert!(first <= top);
        }
        assert!(floors.first_seq(TopicId::of("one more")) >= 7);
    }
}
