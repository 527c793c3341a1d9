//! Delivery to the application: `recv`, `recv_timeout`, `try_recv`, `recv_ref` and events.
//! A message already parsed is handed out at once (the hot path: no clock read, no
//! housekeeping); only when none is ready does the subscription run its feeds and wait.

use super::events::SubscriptionEvent;
use super::feed::{Payload, PARK_RECHECK, PROBES_PER_YIELD, READ_SPIN};
use super::message::{Message, MessageRef};
use super::Subscription;
use crate::error::{Error, Result};
use crate::node::message_type::MessageType;
use crate::node::shared::RECHECK_INTERVAL;
use crossbeam::channel;
use rdma_fabric::WorkCompletion;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

impl<T: ?Sized + MessageType> Subscription<T> {
    /// The next event about this subscription's connections, if any.
    pub fn try_event(&mut self) -> Option<SubscriptionEvent> {
        self.drain_feed_events();
        self.poll_discovery();
        self.user_events.pop_front()
    }

    /// Waits for the next message (until every publisher has gone: then [`Error::Closed`]).
    ///
    /// A typed subscription decodes each message; one that is not a `T` is an
    /// [`Error::Decode`] naming its publisher and sequence, and the next call goes on with the
    /// next message.
    ///
    /// # Errors
    /// [`Error::Decode`] for a message that is not a `T`; [`Error::MessageTooLarge`], naming
    /// both sizes, for a message over the subscription's
    /// [`max_message_len`](crate::SubscriberBuilder::max_message_len) (its publisher's
    /// connection is closed: [`SubscriptionEvent::MessageTooLarge`] names it); after either,
    /// the next call goes on. [`Error::Closed`] when every publisher it was connected to has gone;
    /// [`Error::NotConnected`] when it has no publisher and discovery is off; [`Error::Fabric`]
    /// when its completion queue fails.
    pub fn recv(&mut self) -> Result<Message<T::Owned>> {
        loop {
            if let Some(m) = self.recv_timeout(Duration::MAX)? {
                return Ok(m);
            }
        }
    }

    /// Waits up to `timeout` for the next message; `None` on timeout.
    ///
    /// # Errors
    /// As [`recv`](Self::recv).
    pub fn recv_timeout(&mut self, timeout: Duration) -> Result<Option<Message<T::Owned>>> {
        self.ready_within(Some(timeout))?.map(|key| self.take(key)).transpose()
    }

    /// Returns a message that has already arrived, making progress without blocking.
    ///
    /// # Errors
    /// As [`recv`](Self::recv).
    pub fn try_recv(&mut self) -> Result<Option<Message<T::Owned>>> {
        self.ready_within(None)?.map(|key| self.take(key)).transpose()
    }

    /// An iterator over messages. It ends when the subscription closes (every publisher it
    /// was connected to has gone, [`Error::Closed`]); a message that cannot be delivered
    /// ([`Error::Decode`], [`Error::MessageTooLarge`]) is yielded as that error and the
    /// iteration goes on; any other error is yielded once, then it ends.
    pub fn iter(&mut self) -> impl Iterator<Item = Result<Message<T::Owned>>> + '_ {
        let mut ended = false;
        std::iter::from_fn(move || {
            if ended {
                return None;
            }
            match self.recv() {
                Ok(m) => Some(Ok(m)),
                Err(Error::Closed(_)) => {
                    ended = true;
                    None
                }
                Err(e) if e.is_undeliverable_message() => Some(Err(e)),
                Err(e) => {
                    ended = true;
                    Some(Err(e))
                }
            }
        })
    }

    /// The key of a feed with a message ready: at once when one was parsed already (no clock
    /// read, no housekeeping), else after running the feeds for up to `timeout` (`None`: one
    /// pass that does not block).
    fn ready_within(&mut self, timeout: Option<Duration>) -> Result<Option<usize>> {
        if let Some(key) = self.pick_ready() {
            return Ok(Some(key));
        }
        self.next_ready(timeout.map(rdma_fabric::time::deadline_after))
    }

    /// Takes the next message of feed `key`, decoded as a `T`.
    pub(super) fn take(&mut self, key: usize) -> Result<Message<T::Owned>> {
        let feed = self.feeds[key].active.as_mut().expect("a ready feed is active");
        let ready = feed.ready.pop_front().expect("a ready feed has a message");
        let (publisher, seq) = (feed.info, ready.seq);
        let (data, len) = match ready.payload {
            Payload::Slice { buf, offset, len } => {
                feed.pending[buf] -= 1;
                (T::decode(&feed.landings[buf].bytes()[offset..offset + len]), len)
            }
            Payload::Owned(v) => {
                let len = v.len();
                (T::decode_vec(v), len)
            }
        };
        self.counters.count_delivery(len);
        let data = data.map_err(|e| match e {
            Error::Decode(detail) => Error::Decode(format!(
                "message {seq} of publisher {:016x} at {}: {detail}",
                publisher.id, publisher.addr
            )),
            e => e,
        })?;
        Ok(Message { publisher, seq, data })
    }
}

impl Subscription<[u8]> {
    /// Waits up to `timeout` for the next message and lends it without copying: the payload
    /// stays in the READ buffer it arrived in (reassembled messages in a buffer of the
    /// subscription) until the next call.
    ///
    /// ```
    /// use std::time::Duration;
    /// use rdma_pubsub::{DiscoveryOptions, Node};
    ///
    /// let without_discovery = || Node::builder().discovery(DiscoveryOptions::disabled()).build();
    /// let (a, b) = (without_discovery()?, without_discovery()?);
    /// let publisher = a.publisher("doc-zero-copy").create()?;
    /// let mut sub = b.subscriber("doc-zero-copy").create()?;
    /// sub.connect_wait(a.local_addr(), Duration::from_secs(10))?;
    /// publisher.publish(b"borrowed")?;
    /// let view = sub.recv_ref(Duration::from_secs(10))?.expect("a message within 10 s");
    /// assert_eq!(view.data, b"borrowed"); // valid until the next call on `sub`
    /// # Ok::<(), rdma_pubsub::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`recv`](Self::recv).
    pub fn recv_ref(&mut self, timeout: Duration) -> Result<Option<MessageRef<'_>>> {
        let Some(key) = self.ready_within(Some(timeout))? else { return Ok(None) };
        let Subscription { feeds, stash, counters, .. } = self;
        let feed = feeds[key].active.as_mut().expect("a ready feed is active");
        let ready = feed.ready.pop_front().expect("a ready feed has a message");
        let data: &[u8] = match ready.payload {
            Payload::Slice { buf, offset, len } => {
                feed.pending[buf] -= 1;
                &feed.landings[buf].bytes()[offset..offset + len]
            }
            Payload::Owned(v) => {
                *stash = v;
                stash
            }
        };
        counters.count_delivery(data.len());
        Ok(Some(MessageRef { publisher: feed.info, seq: ready.seq, data }))
    }
}

impl<T: ?Sized + MessageType> Subscription<T> {
    /// Runs the feeds until one has a message ready and returns its key; `None` when the
    /// deadline passes (with no deadline: after one pass that does not block).
    pub(super) fn next_ready(&mut self, deadline: Option<Instant>) -> Result<Option<usize>> {
        let ready = self.run_feeds(deadline);
        // Polling ends with the call: another subscription may poll while the caller works.
        self.permit.release();
        ready
    }

    /// The loop of [`next_ready`](Self::next_ready).
    fn run_feeds(&mut self, deadline: Option<Instant>) -> Result<Option<usize>> {
        let mut wcs = [WorkCompletion::default(); 64];
        // Rounds of completions that made nothing ready (READs of an empty ring).
        let mut fruitless = 0u32;
        loop {
            self.drain_feed_events();
            self.poll_discovery();
            self.reap_closed();
            if let Some(key) = self.pick_ready() {
                return Ok(Some(key));
            }
            if let Some(e) = self.undeliverable.pop_front() {
                return Err(e);
            }
            if fruitless == PROBES_PER_YIELD {
                // A feed polling an empty ring READs again at once (on the same host every READ
                // completes as it is posted): now and then let a thread sharing this CPU, such
                // as the publisher, have it, as `poll_wait` does while it spins.
                fruitless = 0;
                // Completions keep this loop from the deadline check below: a record that never
                // validates (a publisher that writes garbage) is READ again and again, and the
                // call must still end on time.
                if deadline.is_none_or(|d| Instant::now() >= d) {
                    return Ok(None);
                }
                std::thread::yield_now();
            }
            let may_return = self.connector.expects_publishers();
            if self.feeds.is_empty() && !may_return {
                if self.ever_connected {
                    return Err(Error::Closed("every publisher of this subscription has gone"));
                }
                if self.sightings.is_none() {
                    // Without discovery nothing will ever connect it: waiting would never end.
                    return Err(Error::NotConnected { topic: self.topic.clone() });
                }
            }
            self.housekeeping();
            let n = self.cq.poll(&mut wcs)?;
            if n > 0 {
                self.handle_completions(&wcs[..n]);
                // Fruitless unless the top of the loop finds a message ready.
                fruitless += 1;
                continue;
            }
            let Some(deadline) = deadline else { return Ok(None) };
            let now = Instant::now();
            if now >= deadline {
                return Ok(None);
            }
            let wait = deadline.saturating_duration_since(now).min(RECHECK_INTERVAL);
            let any_active = self.feeds.iter().any(|(_, f)| f.active.is_some() && !f.closed);
            if !any_active {
                self.permit.release();
                match &self.sightings {
                    Some(sightings) => {
                        // Wake on whichever comes first: a connection event or a sighting (it is
                        // handled by `poll_discovery` at the top of the loop).
                        let mut select = channel::Select::new();
                        select.recv(&self.events_rx);
                        select.recv(sightings);
                        let _ = select.ready_timeout(wait);
                    }
                    None => {
                        if let Ok(ev) = self.events_rx.recv_timeout(wait) {
                            self.on_feed_event(ev);
                        }
                    }
                }
                continue;
            }
            let reading = self.feeds.iter().any(|(_, f)| f.active.as_ref().is_some_and(|a| a.plan.is_some()));
            let mut spin = if reading || self.options.busy_poll { READ_SPIN } else { Duration::ZERO };
            let mut wait = if reading || self.options.busy_poll { wait } else { wait.min(PARK_RECHECK) };
            // A paced feed READs again within microseconds: poll (yielding) until then rather
            // than sleep, whose wake-up costs more than the delay.
            if let Some(left) = self.paced_read_due(now) {
                spin = spin.max(left);
                wait = wait.min(left);
            }
            // Only so many subscriptions poll at once; the others block at once (see
            // `spin_permit`). A busy-polling one always polls. A blocking wait holds no permit.
            if spin > Duration::ZERO && !self.options.busy_poll && !self.permit.acquire() {
                spin = Duration::ZERO;
                self.counters.unpolled_waits.fetch_add(1, Ordering::Relaxed);
            }
            if spin.is_zero() {
                self.permit.release();
            }
            let n = self.cq.poll_wait(&mut wcs, spin, wait)?;
            self.permit.release();
            self.handle_completions(&wcs[..n]);
        }
    }

    /// How soon the next READ a feed's pacer holds back may go, if one does (within
    /// microseconds: see `pacing`); nothing else wakes the subscription for it.
    pub(super) fn paced_read_due(&self, now: Instant) -> Option<Duration> {
        self.feeds
            .iter()
            .filter(|(_, f)| !f.closed && !f.quiesced)
            .filter_map(|(_, f)| f.active.as_ref().filter(|a| a.plan.is_none()).and_then(|a| a.pacer.left(now)))
            .min()
    }

    /// The next feed with a message ready, round-robin from the one after the last served.
    pub(super) fn pick_ready(&mut self) -> Option<usize> {
        let n = self.feeds.capacity();
        let mut key = self.cursor;
        for _ in 0..n {
            if key >= n {
                key = 0;
            }
            if self.feeds.get(key).is_some_and(|f| f.active.as_ref().is_some_and(|a| !a.ready.is_empty())) {
                self.cursor = key + 1;
                return Some(key);
            }
            key += 1;
        }
        None
    }
}
