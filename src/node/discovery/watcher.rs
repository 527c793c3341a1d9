//! The directory's end of one subscription's watch ([`Watcher`]): it queues [`Sighting`]s on a
//! bounded channel ([`WATCH_QUEUE`]). When a subscription does not drain it (its application
//! calls nothing for a while) and it fills, later sightings are not queued; the watcher
//! remembers what it told the subscription instead, and once the channel is empty again it
//! sends what brings the subscription from there to the publishers present then: a `Down` for
//! each it was told of that is gone (with the reason, when the watcher saw it), an `Up` for
//! each new one.

use std::collections::HashMap;
use std::net::SocketAddr;

use crossbeam::channel::{self, Receiver, Sender, TrySendError};

use super::limits::MAX_PEERS;
use super::sighting::{LostReason, Present, Sighting};
use crate::node::identity::NodeId;

/// Most sightings queued for one subscription: more than twice the publishers a directory
/// holds, so that catching up after an overflow always fits in an empty channel.
pub(crate) const WATCH_QUEUE: usize = 4 * MAX_PEERS;

/// The directory's end of one subscription's watch.
pub(super) struct Watcher {
    /// Which watch this is, among those of its topic.
    token: u64,
    tx: Sender<Sighting>,
    /// The publishers the subscription was told are up (and not told down since).
    told: HashMap<NodeId, (u64, SocketAddr)>,
    /// The channel overflowed: sightings wait for [`catch_up`](Self::catch_up).
    lagged: bool,
    /// Why publishers the subscription was told of went down while lagged.
    missed: HashMap<NodeId, LostReason>,
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
        if let Sighting::Down { node, epoch, reason, .. } = *s {
            if self.told.get(&node).is_some_and(|&(e, _)| e == epoch) {
                self.missed.insert(node, reason);
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
        let gone: Vec<Sighting> = self
            .told
            .iter()
            .filter(|&(node, &(epoch, addr))| !present.contains(&(*node, epoch, addr)))
            .map(|(&node, &(epoch, addr))| {
                let reason = self.missed.get(&node).copied().unwrap_or(LostReason::Silent);
                Sighting::Down { node, epoch, addr, reason }
            })
            .collect();
        let new = present
            .iter()
            .filter(|(node, epoch, addr)| self.told.get(node) != Some(&(*epoch, *addr)))
            .map(|&(node, epoch, addr)| Sighting::Up { node, epoch, addr });
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
        let (node, up) = match s {
            Sighting::Up { node, epoch, addr } => (node, Some((epoch, addr))),
            Sighting::Down { node, .. } => (node, None),
        };
        self.tx.try_send(s)?;
        match up {
            Some(up) => self.told.insert(node, up),
            None => self.told.remove(&node),
        };
        Ok(())
    }
}
