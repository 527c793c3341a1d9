//! A subscription's view of the publishers of its topic, fed by [`Sighting`]s: which nodes to
//! connect to now, with a retry backoff, and which ones were lost.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crossbeam::channel::Receiver;

use super::{Directory, LostReason, Sighting};
use crate::node::NodeId;
use crate::protocol::TopicId;

/// First retry delay after a failed or closed connection to a node still announced.
const RETRY_MIN: Duration = Duration::from_millis(500);
/// Longest retry delay.
const RETRY_MAX: Duration = Duration::from_secs(8);

/// A publisher node discovery says is present.
struct Known {
    addr: SocketAddr,
    next_try: Instant,
    backoff: Duration,
}

/// A lost publisher, for the subscription's event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Lost {
    pub(crate) node: NodeId,
    pub(crate) epoch: u64,
    pub(crate) addr: SocketAddr,
    pub(crate) reason: LostReason,
}

/// Registered in the node's [`Directory`] for one topic.
pub(crate) struct Watch {
    topic: TopicId,
    token: u64,
    rx: Receiver<Sighting>,
    known: HashMap<NodeId, Known>,
    /// Nodes lost without a goodbye: they may come back, so the subscription keeps waiting.
    awaiting: HashSet<NodeId>,
}

impl Watch {
    pub(crate) fn new(dir: &Directory, topic: TopicId) -> Watch {
        let (token, rx) = dir.watch(topic);
        Watch { topic, token, rx, known: HashMap::new(), awaiting: HashSet::new() }
    }

    /// The channel sightings arrive on (to wait on it).
    pub(crate) fn receiver(&self) -> &Receiver<Sighting> {
        &self.rx
    }

    /// Applies one sighting; returns the loss to report, if any.
    pub(crate) fn apply(&mut self, s: Sighting, now: Instant) -> Option<Lost> {
        match s {
            Sighting::Up { node, addr, .. } => {
                self.awaiting.remove(&node);
                self.known.insert(node, Known { addr, next_try: now, backoff: RETRY_MIN });
                None
            }
            Sighting::Down { node, epoch, addr, reason } => {
                self.known.remove(&node);
                if matches!(reason, LostReason::Silent | LostReason::Restarted) {
                    self.awaiting.insert(node);
                } else {
                    self.awaiting.remove(&node);
                }
                Some(Lost { node, epoch, addr, reason })
            }
        }
    }

    /// Nodes to connect to now: present, no open connection, retry time reached. Each one's
    /// next retry is pushed back (doubling up to [`RETRY_MAX`]).
    pub(crate) fn due(&mut self, now: Instant, is_open: impl Fn(SocketAddr) -> bool) -> Vec<(NodeId, SocketAddr)> {
        let mut out = Vec::new();
        for (&node, k) in self.known.iter_mut() {
            if now >= k.next_try && !is_open(k.addr) {
                out.push((node, k.addr));
                k.next_try = now + k.backoff;
                k.backoff = (k.backoff * 2).min(RETRY_MAX);
            }
        }
        out
    }

    /// A connection to `addr` is established: reset its backoff.
    pub(crate) fn connected(&mut self, addr: SocketAddr) {
        for k in self.known.values_mut().filter(|k| k.addr == addr) {
            k.backoff = RETRY_MIN;
        }
    }

    /// A connection to `addr` went away: do not retry it before [`RETRY_MIN`].
    pub(crate) fn closed(&mut self, addr: SocketAddr, now: Instant) {
        for k in self.known.values_mut().filter(|k| k.addr == addr) {
            k.next_try = k.next_try.max(now + RETRY_MIN);
        }
    }

    /// Whether a publisher may still (re)appear: some are present or were lost without a
    /// goodbye.
    pub(crate) fn expects_publishers(&self) -> bool {
        !self.known.is_empty() || !self.awaiting.is_empty()
    }

    /// Unregisters from the directory.
    pub(crate) fn unwatch(&self, dir: &Directory) {
        dir.unwatch(self.topic, self.token);
    }
}
