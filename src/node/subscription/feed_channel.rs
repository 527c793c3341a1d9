//! The channel of a subscription's feed events: what other threads (the CM thread, the
//! connector) tell it ([`FeedEvent`], among them the connections opened for it,
//! [`OpenedFeed`]), and waking its async task
//! ([`Subscription::stream`](super::Subscription), feature `async`) or its readiness
//! descriptor (`readiness.rs`) for them: whoever sends one also wakes the waker registered,
//! if any. Without a waiting task a send costs one
//! uncontended lock more.

use std::net::SocketAddr;
use std::sync::Arc;
use std::task::Waker;

use crossbeam::channel::{SendError, Sender};
use parking_lot::Mutex;

use crate::node::discovery::Lost;
use rdma_fabric::{ConnId, ConnectionEvent, MemoryRegion, QueuePair};
use rdma_wire::Topic;

/// An event delivered to a subscription.
#[derive(Debug)]
pub(crate) enum FeedEvent {
    /// An event of one of its connections (established, rejected, unreachable, gone).
    Connection(ConnectionEvent),
    /// A connection opened for the subscription by its connector (ahead of its CM events).
    Opened(Box<OpenedFeed>),
    /// Discovery says a publisher of the topic is gone.
    PublisherLost(Lost),
    /// The connector could not open a connection discovery made due.
    ConnectFailed { addr: SocketAddr, detail: String },
    /// The connector did not connect the publisher of `topic` at `addr`: the subscription
    /// reads `limit` publishers already (told once per publisher).
    FeedLimit { addr: SocketAddr, topic: Topic, limit: usize },
    /// The topic listing of the node at `addr` failed (the connector dropped it).
    ListingFailed { addr: SocketAddr, detail: String },
}

/// A connection opened for a subscription, handed over on its event channel.
#[derive(Debug)]
pub(crate) struct OpenedFeed {
    qp: QueuePair,
    conn: ConnId,
    addr: SocketAddr,
    /// The topic connected to.
    topic: Topic,
    /// The feed's control slots: acks and doorbell requests sent, notices received.
    ctrl: MemoryRegion,
    /// What the publisher's accept must prove.
    expect: AcceptExpectation,
}

/// What a publisher's accept must prove, decided when the connect request went out.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct AcceptExpectation {
    /// The nonce the accept's tags must answer; none when the subscription has no secret (domain
    /// secret or credential) to check them with.
    pub(super) challenge: Option<u64>,
    /// The publisher discovery announced at that address; none for an explicit connect.
    pub(super) publisher: Option<u64>,
}

impl OpenedFeed {
    /// The connection `conn` to the publisher of `topic` at `addr`, on `qp`, with its control
    /// region `ctrl`, whose accept must meet `expect`.
    pub(super) fn new(
        qp: QueuePair,
        conn: ConnId,
        addr: SocketAddr,
        topic: Topic,
        ctrl: MemoryRegion,
        expect: AcceptExpectation,
    ) -> OpenedFeed {
        OpenedFeed { qp, conn, addr, topic, ctrl, expect }
    }

    /// The connection's id.
    pub(super) fn conn(&self) -> ConnId {
        self.conn
    }

    /// The publisher's node.
    pub(super) fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The topic connected to.
    pub(super) fn topic(&self) -> &Topic {
        &self.topic
    }

    /// Its queue pair, id, address, topic, control region and what its accept must prove.
    pub(super) fn into_parts(self) -> (QueuePair, ConnId, SocketAddr, Topic, MemoryRegion, AcceptExpectation) {
        (self.qp, self.conn, self.addr, self.topic, self.ctrl, self.expect)
    }
}

/// The task waiting for a subscription's connection events, if one is.
#[derive(Debug, Default)]
pub(crate) struct EventWaker {
    waker: Mutex<Option<Waker>>,
}

impl EventWaker {
    /// Makes later sends wake `waker`'s task. Register before looking at the channel: an event
    /// sent before the registration is then seen by that look, one sent after wakes the task.
    pub(crate) fn register(&self, waker: &Waker) {
        let mut held = self.waker.lock();
        if !held.as_ref().is_some_and(|w| w.will_wake(waker)) {
            *held = Some(waker.clone());
        }
    }

    /// No task waits any more.
    #[cfg_attr(not(feature = "async"), allow(dead_code))]
    pub(crate) fn clear(&self) {
        *self.waker.lock() = None;
    }

    /// Wakes the waiting task, if any (outside the lock: waking may run the executor's code).
    fn wake(&self) {
        let waker = self.waker.lock().clone();
        if let Some(waker) = waker {
            waker.wake();
        }
    }
}

/// The sending side of a subscription's event channel: sends, then wakes the subscription's
/// async task if one waits.
#[derive(Debug, Clone)]
pub(crate) struct FeedSender {
    tx: Sender<FeedEvent>,
    waker: Arc<EventWaker>,
}

impl FeedSender {
    /// Sends on `tx` and wakes through `waker`.
    pub(crate) fn new(tx: Sender<FeedEvent>, waker: Arc<EventWaker>) -> FeedSender {
        FeedSender { tx, waker }
    }

    /// Hands a CM event of one of the subscription's connections over (the CM thread; dropped
    /// when the subscription is gone).
    pub(crate) fn connection_event(&self, event: ConnectionEvent) {
        let _ = self.send(FeedEvent::Connection(event));
    }

    /// Sends `event` (fails once the subscription is gone), then wakes its waiting task.
    pub(crate) fn send(&self, event: FeedEvent) -> Result<(), SendError<FeedEvent>> {
        self.tx.send(event)?;
        self.waker.wake();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::Wake;

    struct Counting(AtomicUsize);

    impl Wake for Counting {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn a_send_wakes_the_registered_task_and_only_while_it_is_registered() {
        let (tx, rx) = crossbeam::channel::unbounded();
        let event_waker = Arc::new(EventWaker::default());
        let sender = FeedSender::new(tx, event_waker.clone());
        let count = Arc::new(Counting(AtomicUsize::new(0)));
        let waker = Waker::from(count.clone());
        let event = || FeedEvent::Connection(rdma_fabric::ConnectionEvent::Disconnected { conn: 1 });

        sender.send(event()).unwrap();
        assert_eq!(count.0.load(Ordering::SeqCst), 0, "nothing registered");
        event_waker.register(&waker);
        sender.clone().send(event()).unwrap();
        assert_eq!(count.0.load(Ordering::SeqCst), 1, "a send wakes the registered task");
        event_waker.clear();
        sender.send(event()).unwrap();
        assert_eq!(count.0.load(Ordering::SeqCst), 1, "no wake after clear");
        assert_eq!(rx.try_iter().count(), 3, "every event was sent");
    }
}
