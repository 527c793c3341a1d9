//! The directory's end of one subscription's watch ([`Watcher`]): it queues [`Sighting`]s on a
//! bounded channel ([`WATCH_QUEUE`]). When a subscription does not drain it (its application
//! calls nothing for a while) and it fills, later sightings are not queued; the watcher
//! remembers what it told the subscription instead, and once the channel is empty again it
//! sends what brings the subscription from there to the publishers present then: a `Down` for
//! each it was told of that is gone (with the reason, when the watcher saw it), an `Up` for
//! each new one. A publisher is a node and a topic (a pattern's watch sees several topics of
//! one node).

use std::collections::HashMap;
use std::net::SocketAddr;

use crossbeam::channel::{self, Receiver, Sender, TrySendError};

use super::limits::MAX_PEERS;
use super::sighting::{LostReason, Present, Sighting};
use crate::node::identity::NodeId;
use rdma_wire::protocol::TopicId;
use rdma_wire::Topic;

/// Most sightings queued for one subscription: more than twice the publishers of one topic a
/// directory holds, so that catching up after an overflow of an exact watch always fits in an
/// empty channel (a pattern's catch-up that does not fit waits for the next drain).
pub(crate) const WATCH_QUEUE: usize = 4 * MAX_PEERS;

/// A publisher as a watcher knows it: its node and topic.
type PublisherKey = (NodeId, TopicId);

/// The directory's end of one subscription's watch.
pub(super) struct Watcher {
    /// Which watch this is, among those of its topic.
    token: u64,
    tx: Sender<Sighting>,
    /// The publishers the subscription was told are up (and not told down since).
    told: HashMap<PublisherKey, (u64, SocketAddr, Topic)>,
    /// The channel overflowed: sightings wait for [`catch_up`](Self::catch_up).
    lagged: bool,
    /// Why publishers the subscription was told of went down while lagged.
    missed: HashMap<PublisherKey, LostReason>,
}

impl Watcher {
    /// A watcher named `token`, and the channel its subscription receives sightings on.
    pub(super) fn new(token: u64) -> (Watcher, Receiver<Sighting>) {
        let (tx, rx) = channel::bounded(WATCH_QUEUE);
        let watcher = Watcher { token, tx, told: HashMap::new(), lagged: false, missed: HashMap::new() };
        (watcher, rx)
    }

    /// Which watch this is, among those of its topic.
    pub(super) fn token(&self) -> u64 {
        self.token
    }

    /// Queues `s`, or notes it for catching up when the channel is full; false once the
    /// subscription is gone.
    pub(super) fn send(&mut self, s: &Sighting) -> bool {
        if !self.lagged {
            match self.push(s.clone()) {
                Ok(()) => return true,
                Err(TrySendError::Disconnected(_)) => return false,
                Err(TrySendError::Full(_)) => self.lagged = true,
            }
        }
        if let Sighting::Down { node, epoch, reason, ref topic, .. } = *s {
            let key = (node, topic.id());
            if self.told.get(&key).is_some_and(|&(e, _, _)| e == epoch) {
                self.missed.insert(key, reason);
            }
        }
        true
    }

    /// Whether the channel overflowed and the subscription has drained it since.
    pub(super) fn ready_to_catch_up(&self) -> bool {
        self.lagged && self.tx.is_empty()
    }

    /// Sends what brings the subscription from what it was told to `present`, and queues
    /// normally again; false once the subscription is gone.
    pub(super) fn catch_up(&mut self, present: &[Present]) -> bool {
        let is_present = |&(node, _): &PublisherKey, &(epoch, addr, ref topic): &(u64, SocketAddr, Topic)| {
            present.iter().any(|p| p.0 == node && p.1 == epoch && p.2 == addr && p.3 == *topic)
        };
        let gone: Vec<Sighting> = self
            .told
            .iter()
            .filter(|&(key, told)| !is_present(key, told))
            .map(|(key, (epoch, addr, topic))| {
                let reason = self.missed.get(key).copied().unwrap_or(LostReason::Silent);
                Sighting::Down { node: key.0, epoch: *epoch, addr: *addr, topic: topic.clone(), reason }
            })
            .collect();
        let new = present
            .iter()
            .filter(|(node, epoch, addr, topic)| {
                self.told.get(&(*node, topic.id())).is_none_or(|(e, a, _)| (e, a) != (epoch, addr))
            })
            .map(|(node, epoch, addr, topic)| Sighting::Up {
                node: *node,
                epoch: *epoch,
                addr: *addr,
                topic: topic.clone(),
            });
        let sightings: Vec<Sighting> = gone.into_iter().chain(new).collect();
        self.lagged = false;
        self.missed.clear();
        // The channel is empty and holds more than twice the publishers: everything fits (were
        // it full, the rest would wait for the next catch-up).
        for s in sightings {
            match self.push(s) {
                Ok(()) => {}
                Err(TrySendError::Disconnected(_)) => return false,
                Err(TrySendError::Full(_)) => {
                    self.lagged = true;
                    break;
                }
            }
        }
        true
    }

    /// Queues `s` and records what the subscription now knows.
    fn push(&mut self, s: Sighting) -> Result<(), TrySendError<Sighting>> {
        let (key, up) = match &s {
            Sighting::Up { node, epoch, addr, topic } => ((*node, topic.id()), Some((*epoch, *addr, topic.clone()))),
            Sighting::Down { node, topic, .. } => ((*node, topic.id()), None),
        };
        self.tx.try_send(s)?;
        match up {
            Some(up) => self.told.insert(key, up),
            None => self.told.remove(&key),
        };
        Ok(())
    }
}
