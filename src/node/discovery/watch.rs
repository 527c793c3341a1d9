//! A subscription's view of the publishers of its topics (one, or those its pattern includes),
//! fed by [`Sighting`]s from its [`Watcher`](super::watcher::Watcher) in the directory: which
//! publishers (a node and a topic) to connect to now, with a retry backoff, and which ones
//! were lost.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crossbeam::channel::Receiver;

use super::directory::Directory;
use super::sighting::{LostReason, Sighting};
use crate::node::identity::NodeId;
use crate::node::topic::TopicFilter;
use rdma_wire::protocol::TopicId;
use rdma_wire::Topic;

/// First retry delay after a failed or closed connection to a node still announced.
const RETRY_MIN: Duration = Duration::from_millis(500);
/// Longest retry delay.
const RETRY_MAX: Duration = Duration::from_secs(8);

/// A publisher (a node and a topic) discovery says is present.
struct Known {
    addr: SocketAddr,
    topic: Topic,
    next_try: Instant,
    backoff: Duration,
}

/// A publisher due for a connection: its node, address and topic.
pub(crate) type DuePublisher = (NodeId, SocketAddr, Topic);

/// A lost publisher, for the subscription's event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Lost {
    pub(crate) node: NodeId,
    pub(crate) epoch: u64,
    pub(crate) addr: SocketAddr,
    pub(crate) topic: Topic,
    pub(crate) reason: LostReason,
}

/// Registered in the node's [`Directory`] for one topic or a pattern.
pub(crate) struct Watch {
    filter: TopicFilter,
    token: u64,
    rx: Receiver<Sighting>,
    known: HashMap<(NodeId, TopicId), Known>,
    /// Publishers (address and topic) that ended their stream since discovery last said
    /// anything of them: a refusal from one (`UnknownTopic`, the topic is gone) is that end,
    /// not news.
    ended: HashSet<(SocketAddr, TopicId)>,
}

impl Watch {
    pub(crate) fn new(dir: &Directory, filter: TopicFilter) -> Watch {
        let (token, rx) = dir.watch(&filter);
        Watch { filter, token, rx, known: HashMap::new(), ended: HashSet::new() }
    }

    /// The channel sightings arrive on (to wait on it).
    pub(crate) fn receiver(&self) -> &Receiver<Sighting> {
        &self.rx
    }

    /// Applies one sighting; returns the loss to report, if any.
    pub(crate) fn apply(&mut self, s: Sighting, now: Instant) -> Option<Lost> {
        match s {
            Sighting::Up { node, addr, topic, .. } => {
                self.ended.remove(&(addr, topic.id()));
                self.known.insert((node, topic.id()), Known { addr, topic, next_try: now, backoff: RETRY_MIN });
                None
            }
            Sighting::Down { node, epoch, addr, topic, reason } => {
                self.known.remove(&(node, topic.id()));
                self.ended.remove(&(addr, topic.id()));
                Some(Lost { node, epoch, addr, topic, reason })
            }
        }
    }

    /// Publishers to connect to now: present, no open connection, retry time reached; at most
    /// `room` of them, each one's next retry pushed back (doubling up to [`RETRY_MAX`]). The
    /// others due past `room` come second, their retry left as it is (due again as soon as
    /// there is room).
    pub(crate) fn due(
        &mut self,
        now: Instant,
        room: usize,
        is_open: impl Fn(SocketAddr, TopicId) -> bool,
    ) -> (Vec<DuePublisher>, Vec<(SocketAddr, Topic)>) {
        let (mut due, mut no_room) = (Vec::new(), Vec::new());
        for (&(node, id), k) in self.known.iter_mut() {
            if now >= k.next_try && !is_open(k.addr, id) {
                if due.len() == room {
                    no_room.push((k.addr, k.topic.clone()));
                    continue;
                }
                due.push((node, k.addr, k.topic.clone()));
                k.next_try = now + k.backoff;
                k.backoff = (k.backoff * 2).min(RETRY_MAX);
            }
        }
        (due, no_room)
    }

    /// The publisher of `topic` at `addr` ended its stream (it closed).
    pub(crate) fn ended(&mut self, addr: SocketAddr, topic: TopicId) {
        self.ended.insert((addr, topic));
    }

    /// Whether the publisher of `topic` at `addr` ended its stream and discovery has said
    /// nothing of it since.
    pub(crate) fn has_ended(&self, addr: SocketAddr, topic: TopicId) -> bool {
        self.ended.contains(&(addr, topic))
    }

    /// A connection to the publisher of `topic` at `addr` is established: reset its backoff.
    pub(crate) fn connected(&mut self, addr: SocketAddr, topic: TopicId) {
        self.ended.remove(&(addr, topic));
        for k in self.known.iter_mut().filter(|((_, id), k)| k.addr == addr && *id == topic).map(|(_, k)| k) {
            k.backoff = RETRY_MIN;
        }
    }

    /// A connection to the publisher of `topic` at `addr` went away: do not retry it before
    /// [`RETRY_MIN`].
    pub(crate) fn closed(&mut self, addr: SocketAddr, topic: TopicId, now: Instant) {
        for k in self.known.iter_mut().filter(|((_, id), k)| k.addr == addr && *id == topic).map(|(_, k)| k) {
            k.next_try = k.next_try.max(now + RETRY_MIN);
        }
    }

    /// The topics of the publishers present, each once, sorted.
    pub(crate) fn matched_topics(&self) -> Vec<Topic> {
        self.matched_publishers().into_iter().map(|(topic, _)| topic).collect()
    }

    /// The topics of the publishers present, sorted, each with how many publishers it has.
    pub(crate) fn matched_publishers(&self) -> Vec<(Topic, usize)> {
        let mut topics: std::collections::BTreeMap<Topic, usize> = std::collections::BTreeMap::new();
        for k in self.known.values() {
            *topics.entry(k.topic.clone()).or_insert(0) += 1;
        }
        topics.into_iter().collect()
    }

    /// How many topics the publishers present have.
    pub(crate) fn matched_topic_count(&self) -> usize {
        let topics: HashSet<TopicId> = self.known.keys().map(|&(_, id)| id).collect();
        topics.len()
    }

    /// Unregisters from the directory.
    pub(crate) fn unwatch(&self, dir: &Directory) {
        dir.unwatch(&self.filter, self.token);
    }
}

#[cfg(test)]
mod tests {
    use super::super::directory::tests::{directory, from, hello, topics};
    use super::super::watcher::WATCH_QUEUE;
    use super::*;
    use rdma_wire::protocol::{AnnounceKind, Announcement};

    /// Past the room given, due publishers are named apart and keep their retry time: they are
    /// due again at once when there is room, not after a backoff that grew while they waited.
    #[test]
    fn publishers_due_past_the_room_keep_their_retry_time() {
        let dir = directory();
        let now = Instant::now();
        let mut watch = Watch::new(&dir, TopicFilter::Pattern(rdma_wire::KeyExpr::new("t-$*").unwrap()));
        dir.apply(hello(2, 0, 1, topics("t", 3)), from(), now);
        let sightings: Vec<Sighting> = watch.receiver().try_iter().collect();
        assert_eq!(sightings.len(), 3);
        for s in sightings {
            assert!(watch.apply(s, now).is_none());
        }
        assert_eq!(watch.matched_topic_count(), 3);
        let (due, no_room) = watch.due(now, 2, |_, _| false);
        assert_eq!((due.len(), no_room.len()), (2, 1));
        for later in [now + Duration::from_millis(1), now + RETRY_MIN / 2] {
            let (due_again, waiting) = watch.due(later, 0, |_, _| false);
            assert!(due_again.is_empty());
            assert_eq!(waiting.iter().map(|(_, t)| t.clone()).collect::<Vec<_>>(), [no_room[0].1.clone()]);
        }
        let (due, no_room_now) = watch.due(now + Duration::from_millis(1), 1, |_, _| false);
        assert_eq!(due.iter().map(|(_, _, t)| t.clone()).collect::<Vec<_>>(), [no_room[0].1.clone()]);
        assert!(no_room_now.is_empty(), "the other two wait for their backoff");
    }

    /// A subscription that does not drain its sightings while peers come and go by the
    /// thousand: its channel stays bounded, and once it drains, it catches up with what is
    /// present, learning of the goodbye of a publisher it knew even though that sighting
    /// found the channel full.
    #[test]
    fn a_subscription_that_does_not_drain_gets_a_bounded_queue_then_catches_up() {
        let dir = directory();
        let now = Instant::now();
        let watched = topics("watched", 1);
        let mut watch = Watch::new(&dir, TopicFilter::Exact(Topic::new(&watched[0].0).unwrap()));
        dir.apply(hello(2, 0, 1, watched.clone()), from(), now);
        for node in 1000..1000 + 2 * WATCH_QUEUE as u64 {
            dir.apply(hello(node, 0, 1, watched.clone()), from(), now);
            dir.apply(Announcement { kind: AnnounceKind::Goodbye, ..hello(node, 0, 1, Vec::new()) }, from(), now);
        }
        // While it lags: node 2 leaves, node 3 arrives.
        dir.apply(Announcement { kind: AnnounceKind::Goodbye, ..hello(2, 0, 1, Vec::new()) }, from(), now);
        dir.apply(hello(3, 0, 1, watched.clone()), from(), now);
        assert!(watch.receiver().len() <= WATCH_QUEUE, "{} sightings queued", watch.receiver().len());

        let drain = |watch: &mut Watch| -> Vec<Lost> {
            let sightings: Vec<Sighting> = watch.receiver().try_iter().collect();
            sightings.into_iter().filter_map(|s| watch.apply(s, now)).collect()
        };
        drain(&mut watch);
        let id = watched[0].1;
        assert!(watch.known.contains_key(&(2, id)) && !watch.known.contains_key(&(3, id)), "what the full queue held");
        dir.expire(now, Duration::from_secs(3600));
        let lost = drain(&mut watch);
        assert_eq!(watch.known.keys().copied().collect::<Vec<_>>(), vec![(3, id)], "caught up with who is present");
        let goodbyes: Vec<NodeId> = lost.iter().filter(|l| l.reason == LostReason::Goodbye).map(|l| l.node).collect();
        assert!(goodbyes.contains(&2), "the goodbye missed while lagging is reported: {lost:?}");
        // Queued normally again.
        dir.apply(hello(4, 0, 1, watched), from(), now);
        drain(&mut watch);
        assert!(watch.known.contains_key(&(4, id)));
    }
}
