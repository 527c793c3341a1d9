//! The discovery thread of a node: announces it, hears the others, expires the silent ones.
//!
//! Loop, until the node stops: announce if the local topics changed (`Hello`), if a newcomer
//! said hello (rate-limited to one answer per quarter interval) or if the heartbeat is due
//! (`Heartbeat`, every interval ±10 %); expire peers silent for `heartbeat × missed`; wait for
//! a datagram at most until the next of these deadlines and never longer than [`RECHECK_INTERVAL`]; then
//! take up to [`RECV_BATCH`] datagrams that are already there before the next round, so a flood
//! is read as fast as the thread can (per datagram: the gate, then the directory) while the
//! announcing and expiring still run between batches. Each datagram passes the gate first
//! (`auth.rs`: the tag, clock and replay checks with a domain secret); what it refuses is
//! counted and dropped, as is a datagram that does not decode (wrong version, kind, framing,
//! topic id not matching its name: `DiscoveryCounters::bad_datagrams`). On stop: `Goodbye` (sent
//! twice: UD may drop one), leave the group.
//!
//! A flood can still come faster than any receiver reads (one sender on loopback outpaces a
//! receiver that checks a MAC per datagram), and then the socket drops datagrams, the peers'
//! heartbeats among them. So a round that finds a full batch waiting counts the time since the
//! socket was last drained as deaf: it does not count against any peer's silence
//! (`Directory::hold_expiry`, `DiscoveryCounters::backlogged`). That is at most the loop's
//! wait (a slice, 20 ms) per burst, so holding expiry takes a sustained flood (a full batch
//! every slice), not a burst a second. A flood thus cannot make a node drop a live peer; the
//! price is that a peer that dies during one is expired only once it ends.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::RngExt;

use super::auth::{Gate, Refusal, Sealer};
use super::directory::announcement_parts;
use super::options::DiscoveryOptions;
use crate::node::shared::{NodeShared, RECHECK_INTERVAL};
use rdma_fabric::{Datagram, Error as FabricError, UdEndpoint};
use rdma_wire::protocol::wall_clock_ms;
use rdma_wire::protocol::{AnnounceKind, Announcement, SEAL_OVERHEAD};

/// Receives the UD endpoint keeps posted (soft: sizes the socket buffers).
const RECV_DEPTH: u32 = 256;

/// Most datagrams taken per round of the loop: under a flood the thread still announces and
/// expires at least once per this many datagrams. Finding this many waiting means the socket
/// may be dropping datagrams (it holds a few hundred), so it is well below that.
const RECV_BATCH: usize = 64;

/// How often the gate forgets the replay windows of senders long silent.
const FORGET_INTERVAL: Duration = Duration::from_secs(1);

/// What the thread needs besides the node.
pub(crate) struct Setup {
    pub(crate) ud: UdEndpoint,
    pub(crate) options: DiscoveryOptions,
}

/// Creates the endpoint and joins the group: errors surface from `NodeBuilder::build`.
pub(crate) fn setup(node: &NodeShared, options: &DiscoveryOptions) -> crate::Result<Setup> {
    options.check()?;
    let interface = options.interface.unwrap_or(match node.addr().ip() {
        std::net::IpAddr::V4(ip) if !ip.is_unspecified() => ip,
        _ => Ipv4Addr::LOCALHOST,
    });
    // Unicast only: peers on other hosts list `interface:port`, so the node is heard there.
    let unicast_port = if options.multicast { 0 } else { options.domain_port() };
    let init = rdma_fabric::UdInit { interface, port: options.domain_port(), unicast_port, recv_depth: RECV_DEPTH };
    let ud = node.fabric().create_ud(node.pd(), &init)?;
    if options.multicast {
        ud.join(options.group)?;
    }
    Ok(Setup { ud, options: options.clone() })
}

/// The thread body.
pub(crate) fn run(node: Arc<NodeShared>, setup: Setup) {
    let Setup { ud, options } = setup;
    let sealer = options.secret.clone().map(Sealer::new);
    let mut sender = Sender { node: &node, ud: &ud, options: &options, sealer, warned: false };
    let mut gate = Gate::new(options.secret.clone());
    let mut next_forget = Instant::now() + FORGET_INTERVAL;
    let mut rng = rand::rng();
    let interval = options.heartbeat;
    let jitter = |rng: &mut rand::rngs::ThreadRng| interval.mul_f64(rng.random_range(0.9..1.1));
    let mut next_heartbeat = Instant::now();
    let mut answer_due: Option<Instant> = None;
    let mut last_answer = Instant::now() - interval;
    let mut first = true;
    // When the socket was last read empty or drained by a batch.
    let mut drained_at = Instant::now();
    while !node.stopping() {
        let now = Instant::now();
        let dirty = node.discovery().take_dirty();
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
        let next_expiry = node.discovery().expire(now, options.expiry());
        if now >= next_forget {
            gate.forget_silent(now);
            next_forget = now + FORGET_INTERVAL;
        }
        let mut until = next_heartbeat.min(now + RECHECK_INTERVAL);
        if let Some(t) = next_expiry.into_iter().chain(answer_due).min() {
            until = until.min(t);
        }
        let wait = until.saturating_duration_since(Instant::now()).max(Duration::from_micros(100));
        match ud.recv(wait) {
            Ok(Some(d)) => {
                let (newcomer, full) = receive_batch(&node, &ud, &mut gate, d);
                let now = Instant::now();
                if full {
                    // A full batch was waiting: datagrams may have been dropped since the socket
                    // was last drained, so that time does not count against any peer. A burst
                    // holds expiry only as long as the loop's last wait (at most a slice).
                    node.discovery().counters.backlogged.fetch_add(1, Ordering::Relaxed);
                    node.discovery().hold_expiry(now.saturating_duration_since(drained_at), now);
                }
                drained_at = now;
                if newcomer {
                    // Answer a newcomer promptly, at most once per quarter interval.
                    let at = (last_answer + interval / 4).max(Instant::now());
                    answer_due = Some(answer_due.map_or(at, |t| t.min(at)));
                }
            }
            Ok(None) => drained_at = Instant::now(),
            Err(FabricError::Closed) => break,
            Err(e) => {
                tracing::warn!(node = node.id(), "discovery receive: {e}");
                std::thread::sleep(RECHECK_INTERVAL);
            }
        }
    }
    sender.announce(AnnounceKind::Goodbye);
    sender.announce(AnnounceKind::Goodbye);
    if options.multicast {
        if let Err(e) = ud.leave(options.group) {
            tracing::debug!(node = node.id(), "leaving the discovery group: {e}");
        }
    }
}

/// Handles `first` and the datagrams already waiting after it, at most [`RECV_BATCH`] in all;
/// returns whether a newcomer should be answered, and whether the batch was full.
fn receive_batch(node: &NodeShared, ud: &UdEndpoint, gate: &mut Gate, first: Datagram) -> (bool, bool) {
    let (now, now_ms) = (Instant::now(), wall_clock_ms());
    let mut newcomer = handle(node, gate, first, now, now_ms);
    for _ in 1..RECV_BATCH {
        match ud.recv(Duration::ZERO) {
            Ok(Some(d)) => newcomer |= handle(node, gate, d, now, now_ms),
            // Nothing more now; an error shows again on the loop's next wait.
            Ok(None) | Err(_) => return (newcomer, false),
        }
    }
    (newcomer, true)
}

/// Passes one datagram through the gate and applies it; returns whether a newcomer should be
/// answered.
fn handle(node: &NodeShared, gate: &mut Gate, d: Datagram, now: Instant, now_ms: u64) -> bool {
    match gate.admit(&d.data, now_ms, now) {
        Ok(announcement) => node.discovery().apply(announcement, d.from, now).newcomer,
        Err(refusal) => {
            count_refusal(node, &refusal);
            tracing::trace!(from = %d.from, "discovery datagram dropped: {refusal:?}");
            false
        }
    }
}

fn count_refusal(node: &NodeShared, refusal: &Refusal) {
    let counters = &node.discovery().counters;
    let counter = match refusal {
        Refusal::Unauthenticated => &counters.unauthenticated,
        Refusal::SealedWithoutSecret => &counters.sealed_ignored,
        Refusal::Stale => &counters.stale,
        Refusal::Replayed => &counters.replayed,
        Refusal::Undecodable(_) => &counters.bad_datagrams,
    };
    counter.fetch_add(1, Ordering::Relaxed);
}

/// Sends this node's announcements to the group and the unicast peers.
struct Sender<'a> {
    node: &'a NodeShared,
    ud: &'a UdEndpoint,
    options: &'a DiscoveryOptions,
    /// Seals every datagram when the domain has a secret.
    sealer: Option<Sealer>,
    /// A send error was logged at warn level already (later ones go to debug).
    warned: bool,
}

impl Sender<'_> {
    fn announce(&mut self, kind: AnnounceKind) {
        let datagrams = match self.datagrams(kind) {
            Ok(d) => d,
            Err(e) => {
                tracing::error!(node = self.node.id(), "encoding the announcement: {e}");
                return;
            }
        };
        let mut unicast: Vec<SocketAddrV4> = self.options.peers.clone();
        if !self.options.multicast {
            unicast.extend(self.node.discovery().learned());
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

    /// This node's announcement of `kind`, as datagrams within the MTU (sealed with a secret).
    fn datagrams(&mut self, kind: AnnounceKind) -> Result<Vec<Vec<u8>>, rdma_wire::protocol::ProtocolError> {
        let topics = if kind == AnnounceKind::Goodbye { Vec::new() } else { self.node.discovery().local_topics() };
        let overhead = if self.sealer.is_some() { SEAL_OVERHEAD } else { 0 };
        let parts = announcement_parts(self.node.discovery(), kind, &topics, self.ud.mtu().saturating_sub(overhead))?;
        match &mut self.sealer {
            None => parts.iter().map(Announcement::encode).collect(),
            Some(sealer) => {
                let now_ms = wall_clock_ms();
                parts.iter().map(|a| sealer.seal(a, now_ms)).collect()
            }
        }
    }

    fn count(&mut self, r: Result<(), FabricError>, to: &str) {
        let counters = &self.node.discovery().counters;
        match r {
            Ok(()) => {
                counters.sent.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => {
                counters.send_errors.fetch_add(1, Ordering::Relaxed);
                if !self.warned {
                    self.warned = true;
                    tracing::warn!(node = self.node.id(), "sending an announcement to {to}: {e}");
                } else {
                    tracing::debug!(node = self.node.id(), "sending an announcement to {to}: {e}");
                }
            }
        }
    }
}
