//! The discovery thread of a node: announces it, hears the others, expires the silent ones.
//!
//! Loop, until the node stops: announce if the local topics changed (`Hello`), if a newcomer
//! said hello (rate-limited to one answer per quarter interval) or if the heartbeat is due
//! (`Heartbeat`, every interval ±10 %); expire peers silent for `heartbeat × missed`; wait for
//! a datagram at most until the next of these deadlines and never longer than [`SLICE`]. A
//! datagram that does not decode (wrong version, kind, framing, topic id not matching its name)
//! is counted in `NodeCounters::bad_datagrams` and dropped. On stop: `Goodbye` (sent twice: UD
//! may drop one), leave the group.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::Rng;

use super::{encode_announcement, DiscoveryOptions};
use crate::fabric::{Datagram, Error as FabricError, UdEndpoint};
use crate::node::{NodeShared, SLICE};
use crate::protocol::{AnnounceKind, Announcement, TopicId};

/// What the thread needs besides the node.
pub(crate) struct Setup {
    pub(crate) ud: UdEndpoint,
    pub(crate) options: DiscoveryOptions,
}

/// Creates the endpoint and joins the group: errors surface from `NodeBuilder::build`.
pub(crate) fn setup(node: &NodeShared, options: &DiscoveryOptions) -> crate::Result<Setup> {
    options.check()?;
    let interface = options.interface.unwrap_or(match node.addr.ip() {
        std::net::IpAddr::V4(ip) if !ip.is_unspecified() => ip,
        _ => Ipv4Addr::LOCALHOST,
    });
    let init = crate::fabric::UdInit { interface, port: options.domain_port(), recv_depth: 256 };
    let ud = node.fabric.create_ud(&node.pd, &init)?;
    if options.multicast {
        ud.join(options.group)?;
    }
    Ok(Setup { ud, options: options.clone() })
}

/// The thread body.
pub(crate) fn run(node: Arc<NodeShared>, setup: Setup) {
    let Setup { ud, options } = setup;
    let mut sender = Sender { node: &node, ud: &ud, options: &options, warned: false };
    let mut rng = rand::thread_rng();
    let interval = options.heartbeat;
    let jitter = |rng: &mut rand::rngs::ThreadRng| interval.mul_f64(rng.gen_range(0.9..1.1));
    let mut next_heartbeat = Instant::now();
    let mut answer_due: Option<Instant> = None;
    let mut last_answer = Instant::now() - interval;
    let mut first = true;
    while !node.stop.load(Ordering::Acquire) {
        let now = Instant::now();
        let dirty = node.discovery.take_dirty();
        let answer = answer_due.is_some_and(|t| now >= t);
        if dirty || answer || now >= next_heartbeat {
            let kind = if dirty || first { AnnounceKind::Hello } else { AnnounceKind::Heartbeat };
            sender.announce(kind);
            first = false;
            next_heartbeat = now + jitter(&mut rng);
            if answer {
                last_answer = now;
                answer_due = None;
            }
        }
        let next_expiry = node.discovery.expire(now, options.expiry());
        let mut until = next_heartbeat.min(now + SLICE);
        if let Some(t) = next_expiry.into_iter().chain(answer_due).min() {
            until = until.min(t);
        }
        let wait = until.saturating_duration_since(Instant::now()).max(Duration::from_micros(100));
        match ud.recv(wait) {
            Ok(Some(d)) => {
                if handle(&node, d) {
                    // Answer a newcomer promptly, at most once per quarter interval.
                    let at = (last_answer + interval / 4).max(Instant::now());
                    answer_due = Some(answer_due.map_or(at, |t| t.min(at)));
                }
            }
            Ok(None) => {}
            Err(FabricError::Closed) => break,
            Err(e) => {
                tracing::warn!(node = node.id, "discovery receive: {e}");
                std::thread::sleep(SLICE);
            }
        }
    }
    sender.announce(AnnounceKind::Goodbye);
    sender.announce(AnnounceKind::Goodbye);
    if options.multicast {
        if let Err(e) = ud.leave(options.group) {
            tracing::debug!(node = node.id, "leaving the discovery group: {e}");
        }
    }
}

/// Decodes and applies one datagram; returns whether a newcomer should be answered.
fn handle(node: &NodeShared, d: Datagram) -> bool {
    let announcement = match Announcement::decode(&d.data) {
        Ok(a) if a.topics.iter().all(|(name, id)| TopicId::of(name) == *id) => a,
        Ok(_) => {
            node.counters.bad_datagrams.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(from = %d.from, "announcement with a topic id not matching its name");
            return false;
        }
        Err(e) => {
            node.counters.bad_datagrams.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(from = %d.from, "undecodable discovery datagram: {e}");
            return false;
        }
    };
    node.discovery.apply(announcement, d.from, Instant::now()).newcomer
}

/// Sends this node's announcements to the group and the unicast peers.
struct Sender<'a> {
    node: &'a NodeShared,
    ud: &'a UdEndpoint,
    options: &'a DiscoveryOptions,
    /// A send error was logged at warn level already (later ones go to debug).
    warned: bool,
}

impl Sender<'_> {
    fn announce(&mut self, kind: AnnounceKind) {
        let topics = if kind == AnnounceKind::Goodbye { Vec::new() } else { self.node.discovery.local_topics() };
        let datagrams = match encode_announcement(&self.node.discovery, kind, &topics, self.ud.mtu()) {
            Ok(d) => d,
            Err(e) => {
                tracing::error!(node = self.node.id, "encoding the announcement: {e}");
                return;
            }
        };
        let mut unicast: Vec<SocketAddrV4> = self.options.peers.clone();
        if !self.options.multicast {
            unicast.extend(self.node.discovery.learned());
        }
        unicast.sort_unstable();
        unicast.dedup();
        for bytes in &datagrams {
            if self.options.multicast {
                let r = self.ud.send_to(self.options.group, bytes);
                self.count(r, "the group");
            }
            for to in &unicast {
                let r = self.ud.send_unicast(*to, bytes);
                self.count(r, "a peer");
            }
        }
    }

    fn count(&mut self, r: Result<(), FabricError>, to: &str) {
        let counters = &self.node.discovery.counters;
        match r {
            Ok(()) => {
                counters.sent.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => {
                counters.send_errors.fetch_add(1, Ordering::Relaxed);
                if !self.warned {
                    self.warned = true;
                    tracing::warn!(node = self.node.id, "sending an announcement to {to}: {e}");
                } else {
                    tracing::debug!(node = self.node.id, "sending an announcement to {to}: {e}");
                }
            }
        }
    }
}
