//! A process-wide cap on the subscriptions that poll (spin) while they wait.
//!
//! Polling before blocking saves a wake-up (75–630 µs across CPUs on the 2-vCPU machines this
//! was measured on) when one subscription waits for a READ. With more subscriptions polling
//! than there are CPUs, they only take the CPUs from the threads they wait for: with 16
//! subscribers of 64 B messages on 2 vCPUs the publisher's thread got 3.6% of a CPU and was
//! preempted 28,000 times a second. So at most one subscription per CPU but one polls at a
//! time; the others block at once. Busy-polling subscriptions (`busy_poll`) take no permit:
//! their owner chose to give them a CPU. A subscription holds its permit through a
//! [`PollPermit`] while it polls.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

/// Subscriptions of this process polling now.
static POLLING: AtomicUsize = AtomicUsize::new(0);

/// How many may poll at once: the CPUs this process may use, less one (at least one).
fn limit() -> usize {
    static LIMIT: OnceLock<usize> = OnceLock::new();
    *LIMIT.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get().saturating_sub(1).max(1)))
}

/// The right to poll while it is held.
#[derive(Debug)]
struct SpinPermit(());

impl SpinPermit {
    /// A permit, if fewer than the limit are polling now.
    fn try_acquire() -> Option<SpinPermit> {
        Self::try_acquire_within(limit())
    }

    fn try_acquire_within(limit: usize) -> Option<SpinPermit> {
        POLLING
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < limit).then_some(n + 1))
            .ok()
            .map(|_| SpinPermit(()))
    }
}

impl Drop for SpinPermit {
    fn drop(&mut self) {
        POLLING.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A subscription's hold on a [`SpinPermit`]: it polls only while it holds one, whether it
/// spins on its CQ or READs an empty ring again and again. The latter is polling too: on the
/// same host such a READ is a copy that completes as it is posted, a busy loop of the
/// subscriber's thread that would take the CPU of the publisher it waits for. So a feed READs
/// an empty ring again only while the permit is held (else it parks after its first empty
/// READ). Kept across the rounds of one wait for a message; released before it blocks and
/// when it returns.
#[derive(Debug, Default)]
pub(crate) struct PollPermit {
    held: Option<SpinPermit>,
}

impl PollPermit {
    /// Whether the permit is held, taking it if one is free.
    pub(crate) fn acquire(&mut self) -> bool {
        if self.held.is_none() {
            self.held = SpinPermit::try_acquire();
        }
        self.held.is_some()
    }

    /// Gives the permit back, if held.
    pub(crate) fn release(&mut self) {
        self.held = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// These tests take permits of the one process-wide count: one at a time.
    static SERIAL: parking_lot::Mutex<()> = parking_lot::Mutex::new(());

    #[test]
    fn no_more_than_the_limit_poll_at_once_and_a_dropped_permit_is_returned() {
        let _serial = SERIAL.lock();
        let held = POLLING.load(Ordering::Acquire);
        let cap = held + 2;
        let a = SpinPermit::try_acquire_within(cap).expect("first");
        let b = SpinPermit::try_acquire_within(cap).expect("second");
        assert!(SpinPermit::try_acquire_within(cap).is_none(), "a third is refused");
        drop(a);
        let c = SpinPermit::try_acquire_within(cap).expect("a returned permit is granted again");
        drop((b, c));
        assert!(limit() >= 1);
    }

    /// A publisher and a subscription from the start of its stream, on two soft nodes of this
    /// process (so on the same-host path), connected.
    fn connected(topic: &str) -> ([crate::Node; 2], crate::Publisher, crate::Subscription) {
        use crate::{FabricKind, Node, Start};
        let node = || Node::builder().fabric(FabricKind::Soft).bind("127.0.0.1:0".parse().unwrap()).build().unwrap();
        let (pub_node, sub_node) = (node(), node());
        let publisher = pub_node.publisher(topic).create().unwrap();
        let mut sub = sub_node.subscriber(topic).start(Start::Earliest).create().unwrap();
        sub.connect_wait(pub_node.local_addr(), Duration::from_secs(10)).unwrap();
        ([pub_node, sub_node], publisher, sub)
    }

    /// A subscription whose READ finds nothing while every permit is held does not poll the
    /// empty ring: it asks for a doorbell and parks after one more READ, rather than READing
    /// again and again for `spin` (on the same host, a busy loop of copies). Delivery is
    /// unaffected: each message rings it awake.
    #[test]
    fn a_subscription_without_a_permit_parks_instead_of_polling_an_empty_ring() {
        let _serial = SERIAL.lock();
        let (_nodes, publisher, mut sub) = connected("permits");
        let counted = |sub: &crate::Subscription| {
            let c = sub.counters();
            (c.reads.load(Ordering::Relaxed), c.doorbell_requests.load(Ordering::Relaxed))
        };
        let held: Vec<SpinPermit> = std::iter::from_fn(SpinPermit::try_acquire).take(4096).collect();
        let (reads0, requests0) = counted(&sub);
        assert!(sub.recv_timeout(Duration::from_millis(30)).unwrap().is_none(), "nothing was published");
        let (reads, requests) = counted(&sub);
        assert!(reads - reads0 <= 4, "{} READs of an empty ring without a permit", reads - reads0);
        assert_eq!(requests - requests0, 1, "it parked on a doorbell");
        for seq in 1..=50u64 {
            publisher.publish(&seq.to_le_bytes()).unwrap();
            let m = sub.recv_timeout(Duration::from_secs(10)).unwrap().expect("a message");
            assert_eq!(m.seq, seq);
        }
        drop(held);
    }

    /// On the same host a trickle of small messages is READ as each arrives: no pacing delay
    /// holds the READ back (over the network pacing spares the publisher's NIC; here a READ
    /// costs only the subscriber's copy). With every permit held, any such delay would show as
    /// an unpolled wait.
    #[test]
    fn a_same_host_trickle_is_read_at_once_not_paced() {
        use rdma_fabric::DataPath;
        let _serial = SERIAL.lock();
        let (_nodes, publisher, mut sub) = connected("trickle");
        let held: Vec<SpinPermit> = std::iter::from_fn(SpinPermit::try_acquire).take(4096).collect();
        let unpolled0 = sub.counters().unpolled_waits.load(Ordering::Relaxed);
        for seq in 1..=50u64 {
            publisher.publish(&seq.to_le_bytes()).unwrap();
            let m = sub.recv_timeout(Duration::from_secs(10)).unwrap().expect("a message");
            assert_eq!((m.seq, m.publisher.data_path), (seq, DataPath::SharedMemory));
        }
        let waits = sub.counters().unpolled_waits.load(Ordering::Relaxed) - unpolled0;
        assert_eq!(waits, 0, "READs of messages already published were held back");
        drop(held);
    }
}
