//! The subscription as an async [`Stream`] of messages (feature `async`).
//!
//! A `poll_next` hands out a message parsed already; otherwise it arms the CQ, makes the
//! progress a `try_recv` makes (events, completions, READs, acks, doorbell requests) without
//! blocking, and when that finds no message returns `Pending` with the task registered where
//! what can make progress will wake it. Each poll does a bounded amount of work (a `try_recv`),
//! so a publisher whose records never validate cannot hold the executor. The wake sources:
//!
//! - the CQ's completion channel ([`CompletionQueue::notify_fd`](rdma_fabric::CompletionQueue::notify_fd)),
//!   registered with tokio's reactor: every completion the subscription waits for arrives
//!   there (READs, acks and doorbell requests sent, and the publisher's SENDs: doorbells,
//!   credit requests, end of stream, drop notices, and the flushes of a closed connection);
//!   a parked feed, waiting for its doorbell, wakes through it;
//! - the subscription's event channel: the CM thread (established, refused, unreachable,
//!   disconnected) and the connector (connections it opened, publishers discovery lost) wake
//!   the task as they send. Discovery's sightings reach the stream that way too: the node's
//!   connector thread turns them into connections;
//! - the task itself, so that the executor polls it again at once, in two cases: a notification
//!   was taken (it may be of a completion that came after the last look), and a feed's READ is
//!   held back by its pacer (a trickle over the network, at most `pacing::MAX_DELAY`, 50 µs,
//!   where the blocking path spins).
//!
//! No thread and no timer wakes it otherwise. Unlike `recv`, the stream does not READ a parked
//! feed again every 100 ms in case its doorbell was lost: a parked stream costs nothing until
//! something arrives.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

use futures_core::Stream;

use super::events::SubscriptionEvent;
use super::message::Message;
use super::Subscription;
use crate::error::Result;
use crate::node::message_type::MessageType;
use rdma_fabric::AsyncNotifier;

/// The messages of a [`Subscription`] as an async [`Stream`] (feature `async`): see
/// [`Subscription::stream`].
#[must_use = "a stream does nothing unless polled"]
pub struct MessageStream<'a, T: ?Sized + MessageType = [u8]> {
    sub: &'a mut Subscription<T>,
    /// The CQ's descriptor in the reactor, registered at the first poll (in the runtime).
    notifier: Option<AsyncNotifier>,
    /// The stream has ended (the subscription closed or failed).
    ended: bool,
}

impl<T: ?Sized + MessageType> std::fmt::Debug for MessageStream<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MessageStream").field("topic", &self.sub.topic()).field("ended", &self.ended).finish()
    }
}

impl<'a, T: ?Sized + MessageType> MessageStream<'a, T> {
    /// The messages of `sub`, once polled ([`Subscription::stream`]).
    pub(super) fn new(sub: &'a mut Subscription<T>) -> MessageStream<'a, T> {
        MessageStream { sub, notifier: None, ended: false }
    }
}

impl<T: ?Sized + MessageType> MessageStream<'_, T> {
    /// The next event about the subscription's connections, if any, read while streaming (as
    /// [`Subscription::try_event`]): a publisher connected, lost messages, a refusal, an end.
    pub fn try_event(&mut self) -> Option<SubscriptionEvent> {
        self.sub.try_event()
    }
}

impl<T: ?Sized + MessageType> Stream for MessageStream<'_, T> {
    type Item = Result<Message<T::Owned>>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        if this.ended {
            return Poll::Ready(None);
        }
        match this.poll_message(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Ok(m)) => Poll::Ready(Some(Ok(m))),
            Poll::Ready(Err(e)) if this.sub.goes_on_after(&e) => Poll::Ready(Some(Err(e))),
            Poll::Ready(Err(e)) => {
                this.ended = true;
                this.sub.event_waker().clear();
                if this.sub.is_end(&e) {
                    Poll::Ready(None)
                } else {
                    Poll::Ready(Some(Err(e)))
                }
            }
        }
    }
}

impl<T: ?Sized + MessageType> MessageStream<'_, T> {
    /// The next message, or `Pending` with the task registered with every wake source.
    fn poll_message(&mut self, cx: &mut Context<'_>) -> Poll<Result<Message<T::Owned>>> {
        // A message parsed already goes out at once: no arm, no look at the CQ.
        if let Some(key) = self.sub.pick_ready() {
            return Poll::Ready(self.sub.take(key));
        }
        let notifier = match &self.notifier {
            Some(n) => n,
            None => self.notifier.insert(AsyncNotifier::new(self.sub.completion_queue())?),
        };
        // Registered before the look at the channel (in `try_recv`): an event sent after that
        // look wakes the task.
        self.sub.event_waker().register(cx.waker());
        // Armed before the look at the CQ: a completion queued before the arm is found by the
        // look, one queued after it raises the notification.
        self.sub.completion_queue().arm()?;
        if let Some(m) = self.sub.try_progress()? {
            return Poll::Ready(Ok(m));
        }
        if self.sub.paced_read_due(Instant::now()).is_some() || self.sub.polls_in_place() {
            // Nothing will wake the task for a READ its pacer holds back for microseconds, nor
            // for a ring read in place (no completion) until its feed parks.
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        match notifier.poll_notified(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(notified) => {
                notified?;
                // The notification taken may be of a completion queued after the look (the arm
                // came before it): look again, on the executor's next turn.
                cx.waker().wake_by_ref();
                Poll::Pending
            }
        }
    }
}

impl<T: ?Sized + MessageType> Drop for MessageStream<'_, T> {
    fn drop(&mut self) {
        self.sub.event_waker().clear();
    }
}

#[cfg(test)]
mod tests {
    use std::future::poll_fn;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::task::{Wake, Waker};
    use std::time::Duration;

    use super::*;
    use crate::{DiscoveryOptions, FabricKind, Node};
    use rdma_fabric::SameHost;

    const WAIT: Duration = Duration::from_secs(10);

    /// Counts the wakes of a task.
    struct Counting(AtomicUsize);

    impl Wake for Counting {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[tokio::test]
    async fn a_read_its_pacer_holds_back_makes_the_task_wake_itself() {
        // Over the network, where READs are paced.
        let node = || {
            let builder = Node::builder().fabric(FabricKind::Soft).same_host(SameHost::Off);
            builder.discovery(DiscoveryOptions::disabled()).build().expect("node")
        };
        let (a, b) = (node(), node());
        let _publisher = a.publisher("stream-paced").create().expect("publisher");
        let mut sub = b.subscriber("stream-paced").create().expect("subscribe");
        sub.connect_wait(a.local_addr(), WAIT).expect("connect");
        {
            // Driven with nothing to read until its feed parks (no READ in flight).
            let mut stream = sub.stream();
            let quiet = poll_fn(|cx| Pin::new(&mut stream).poll_next(cx));
            assert!(tokio::time::timeout(Duration::from_millis(300), quiet).await.is_err(), "nothing was published");
        }
        // A READ posted by the last poll completes: handled by a look that blocks for nothing.
        let deadline = Instant::now() + WAIT;
        while sub.feeds.iter().any(|(_, f)| f.read_in_flight()) {
            assert!(Instant::now() < deadline, "the READ in flight did not complete");
            assert!(sub.try_recv().expect("try_recv").is_none());
            std::thread::yield_now();
        }
        // Two small READs in a row, an hour from now: the pacer holds the next READ till then.
        let later = Instant::now() + Duration::from_secs(3600);
        for (_, feed) in sub.feeds.iter_mut() {
            feed.pace_as_after_a_trickle(later);
        }
        assert!(sub.paced_read_due(Instant::now()).is_some(), "a READ is held back");
        let count = Arc::new(Counting(AtomicUsize::new(0)));
        let waker = Waker::from(count.clone());
        let mut stream = sub.stream();
        assert!(Pin::new(&mut stream).poll_next(&mut Context::from_waker(&waker)).is_pending());
        assert_eq!(count.0.load(Ordering::SeqCst), 1, "the task woke itself for the held-back READ");
    }
}
