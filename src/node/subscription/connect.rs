//! Connecting to publishers and following their connections: explicit and discovery-driven
//! connects, CM events, activating a feed from the accept private data, closing feeds.

use super::events::SubscriptionEvent;
use super::feed::{ActiveFeed, Feed, Idle, FLUSH_GRACE, RECV_SLOTS, SLOT};
use super::feed_channel::{FeedEvent, OpenedFeed};
use super::message::PublisherInfo;
use super::Subscription;
use crate::error::{Error, Result};
use crate::node::discovery::{Lost, LostReason};
use crate::node::message_type::MessageType;
use crate::node::pacing::ReadPacer;
use crate::node::shared::RECHECK_INTERVAL;
use crate::node::wr_id::{WrId, WrKind};
use rdma_fabric::{ConnectionEvent, DataPath, ReadBuffer, RejectReason as CmReject};
use rdma_wire::protocol::{AcceptData, RejectCode, RejectData};
use rdma_wire::ring::{RingError, RingReader, CONTROL_READ_LEN, PROBE_LEN};
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

impl<T: ?Sized + MessageType> Subscription<T> {
    /// Starts connecting to the publisher of this topic on the node at `addr` (nothing to do
    /// when a connection to `addr` is open or opening, e.g. made by discovery). The outcome
    /// arrives as a [`SubscriptionEvent`] (see [`try_event`](Self::try_event)) while receiving,
    /// or wait for it with [`connect_wait`](Self::connect_wait).
    ///
    /// # Errors
    /// [`Error::Fabric`] when the connection cannot be started (resources, addresses);
    /// [`Error::InvalidOption`] past 65,536 publishers. Refusals and unreachable nodes arrive
    /// as events.
    pub fn connect(&mut self, addr: SocketAddr) -> Result<()> {
        self.connector.connect(&self.node, addr)?;
        self.drain_feed_events();
        Ok(())
    }

    /// Takes a connection its connector opened: posts its receives and follows it.
    fn adopt(&mut self, opened: OpenedFeed) {
        let OpenedFeed { qp, conn, addr, ctrl } = opened;
        let key = self.feeds.vacant_key();
        let gen = self.next_gen;
        self.next_gen = self.next_gen.wrapping_add(1);
        let posted = (0..RECV_SLOTS).try_for_each(|slot| {
            let offset = (2 + slot) * SLOT;
            qp.post_recv(WrId::feed(key, gen, WrKind::Recv, slot).encode(), &[ctrl.sge(offset, SLOT)])
        });
        if let Err(e) = posted {
            self.node.routes.lock().remove(&conn);
            self.connector.removed(addr, conn);
            self.user_events.push_back(SubscriptionEvent::Unreachable { addr, detail: e.to_string() });
            return;
        }
        self.by_conn.insert(conn, key);
        self.feeds.insert(Feed {
            qp,
            conn,
            addr,
            gen,
            ctrl,
            active: None,
            closed: false,
            quiesced: false,
            outstanding: RECV_SLOTS as u32,
            closed_at: None,
        });
    }

    /// Connects to `addr` and waits until the publisher accepted or refused.
    ///
    /// # Errors
    /// [`Error::Rejected`] with the publisher's reason, [`Error::RecordTooLarge`] when its
    /// records are larger than this subscription READs, [`Error::Unreachable`] when no node
    /// answers at `addr`, [`Error::Timeout`] when no answer came within `timeout`, and
    /// [`Error::Closed`] when the connection closed while it was set up.
    pub fn connect_wait(&mut self, addr: SocketAddr, timeout: Duration) -> Result<PublisherInfo> {
        self.connect(addr)?;
        let deadline = rdma_fabric::time::deadline_after(timeout);
        loop {
            self.drain_feed_events();
            let open = self.feeds.iter().find(|(_, f)| !f.closed && f.addr == addr);
            if let Some(info) = open.and_then(|(_, f)| f.active.as_ref()).map(|a| a.info) {
                return Ok(info);
            }
            if let Some(event) = self.user_events.take_first(|e| match e {
                SubscriptionEvent::Connected(info) => info.addr == addr,
                SubscriptionEvent::Rejected { addr: a, .. }
                | SubscriptionEvent::Unreachable { addr: a, .. }
                | SubscriptionEvent::RecordTooLarge { addr: a, .. } => *a == addr,
                SubscriptionEvent::Disconnected { addr: a, .. } => *a == addr,
                _ => false,
            }) {
                return match event {
                    SubscriptionEvent::Connected(info) => {
                        self.user_events.push_back(SubscriptionEvent::Connected(info));
                        Ok(info)
                    }
                    SubscriptionEvent::Rejected { addr, reason, detail } => {
                        Err(Error::Rejected { peer: addr, reason, detail })
                    }
                    SubscriptionEvent::Unreachable { detail, .. } => Err(Error::Unreachable { peer: addr, detail }),
                    SubscriptionEvent::RecordTooLarge { len, limit, .. } => {
                        Err(Error::RecordTooLarge { peer: addr, len, limit })
                    }
                    _ => Err(Error::Closed("the connection closed while it was being set up")),
                };
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(Error::Timeout { what: "connect", millis: rdma_fabric::time::millis(timeout) });
            }
            if let Ok(ev) = self.events_rx.recv_timeout(left.min(RECHECK_INTERVAL)) {
                self.on_feed_event(ev);
            }
        }
    }

    /// A publisher's stream ended, everything read: reports it and closes the feed. Discovery
    /// may announce the publisher a little longer, so a reconnection refused with
    /// `UnknownTopic` before it says anything new is that same end, not reported again.
    pub(super) fn stream_ended(&mut self, key: usize, publisher: PublisherInfo, final_seq: u64) {
        self.user_events.push_back(SubscriptionEvent::Ended { publisher, final_seq, complete: true });
        self.connector.ended(publisher.addr);
        self.close_feed(key);
    }

    /// When discovery said something, runs the connector at once (it applies the sightings
    /// and opens the connections due), then takes what it did.
    pub(super) fn poll_discovery(&mut self) {
        if self.sightings.as_ref().is_some_and(|rx| !rx.is_empty()) {
            self.connector.run(&self.node, true);
            self.drain_feed_events();
        }
    }

    /// Discovery says a publisher is gone: tells the application, and closes the connection
    /// to a silent or restarted one.
    fn publisher_lost(&mut self, l: Lost) {
        self.user_events.push_back(SubscriptionEvent::PublisherLost {
            node: l.node,
            epoch: l.epoch,
            addr: l.addr,
            reason: l.reason,
        });
        if matches!(l.reason, LostReason::Silent | LostReason::Restarted) {
            let gone: Vec<usize> = self
                .feeds
                .iter()
                .filter(|(_, f)| !f.closed && f.addr == l.addr)
                .filter(|(_, f)| f.active.as_ref().is_none_or(|a| a.info.epoch == l.epoch))
                .map(|(k, _)| k)
                .collect();
            for key in gone {
                self.close_feed(key);
            }
        }
    }

    pub(super) fn drain_feed_events(&mut self) {
        while let Ok(ev) = self.events_rx.try_recv() {
            self.on_feed_event(ev);
        }
    }

    pub(super) fn on_feed_event(&mut self, ev: FeedEvent) {
        match ev {
            FeedEvent::Connection(ConnectionEvent::ConnectRequest(never)) => match never {},
            FeedEvent::Connection(ConnectionEvent::Established { conn, private_data }) => {
                let Some(&key) = self.by_conn.get(&conn) else { return };
                match self.activate(key, &private_data) {
                    Ok(info) => {
                        self.ever_connected = true;
                        if self.connector.established(info.addr, info.id) {
                            self.counters.reconnects.fetch_add(1, Ordering::Relaxed);
                        }
                        self.user_events.push_back(SubscriptionEvent::Connected(info));
                    }
                    Err(e) => {
                        let addr = self.feeds[key].addr;
                        tracing::warn!(topic = %self.topic, %addr, "unusable accept from publisher: {e}");
                        let event = match e {
                            Error::RecordTooLarge { len, limit, .. } => {
                                SubscriptionEvent::RecordTooLarge { addr, len, limit }
                            }
                            e => SubscriptionEvent::Rejected {
                                addr,
                                reason: RejectCode::Malformed,
                                detail: format!("the publisher's accept data is unusable: {e}"),
                            },
                        };
                        self.user_events.push_back(event);
                        self.remove_feed(key);
                    }
                }
            }
            FeedEvent::Connection(ConnectionEvent::Rejected { conn, reason, private_data }) => {
                let Some(&key) = self.by_conn.get(&conn) else { return };
                let addr = self.feeds[key].addr;
                let event = match (reason, RejectData::decode(&private_data)) {
                    (_, Ok(r)) => SubscriptionEvent::Rejected { addr, reason: r.reason, detail: r.detail },
                    (CmReject::NoListener, Err(_)) => {
                        SubscriptionEvent::Unreachable { addr, detail: "no node listens at that address".into() }
                    }
                    (other, Err(e)) => SubscriptionEvent::Rejected {
                        addr,
                        reason: RejectCode::Malformed,
                        detail: format!("rejected ({other:?}) without a readable reason: {e}"),
                    },
                };
                let end_already_told =
                    matches!(event, SubscriptionEvent::Rejected { reason: RejectCode::UnknownTopic, .. })
                        && self.connector.has_ended(addr);
                if end_already_told {
                    tracing::debug!(topic = %self.topic, %addr, "the publisher that ended is not there: no event");
                } else {
                    self.user_events.push_back(event);
                }
                self.remove_feed(key);
            }
            FeedEvent::Connection(ConnectionEvent::Unreachable { conn, detail }) => {
                let Some(&key) = self.by_conn.get(&conn) else { return };
                let addr = self.feeds[key].addr;
                self.user_events.push_back(SubscriptionEvent::Unreachable { addr, detail });
                self.remove_feed(key);
            }
            FeedEvent::Connection(ConnectionEvent::Disconnected { conn }) => {
                let Some(&key) = self.by_conn.get(&conn) else { return };
                // What arrived before the disconnect (an end of stream, a drop notice) is in the
                // CQ already: handle it first, so an orderly end is not reported as a failure.
                self.drain_completions();
                let Some(feed) = self.feeds.get_mut(key) else { return };
                if feed.closed {
                    return;
                }
                let event = match &feed.active {
                    Some(a) => match a.end {
                        Some(final_seq) => SubscriptionEvent::Ended { publisher: a.info, final_seq, complete: false },
                        None => SubscriptionEvent::Disconnected { addr: feed.addr, publisher: Some(a.info) },
                    },
                    None => SubscriptionEvent::Disconnected { addr: feed.addr, publisher: None },
                };
                self.user_events.push_back(event);
                self.close_feed(key);
            }
            FeedEvent::Opened(opened) => self.adopt(*opened),
            FeedEvent::PublisherLost(lost) => self.publisher_lost(lost),
            FeedEvent::ConnectFailed { addr, detail } => {
                self.user_events.push_back(SubscriptionEvent::Unreachable { addr, detail });
            }
        }
    }

    /// Sets up reading of the publisher's ring from its accept data.
    pub(super) fn activate(&mut self, key: usize, private_data: &[u8]) -> Result<PublisherInfo> {
        let accept = AcceptData::decode(private_data)?;
        if accept.topic != self.topic_id {
            return Err(Error::Protocol(rdma_wire::protocol::ProtocolError::Malformed {
                what: "accept private data",
                detail: "the publisher accepted another topic".into(),
            }));
        }
        // The READ buffers grow to the largest record: bounded by this subscription's limit,
        // never by what the publisher says.
        let limit = self.options.max_record_payload;
        if accept.max_record_payload as usize > limit {
            let (len, limit) = (accept.max_record_payload.into(), limit as u64);
            return Err(Error::RecordTooLarge { peer: self.feeds[key].addr, len, limit });
        }
        let reader = RingReader::new(accept.reader_config(self.options.max_message_len))?;
        // Small until a record needs more: a ring that allows large records costs nothing
        // while its messages are small.
        let max_read_len = reader.max_read_len(self.options.batch);
        let landing_len = self.options.batch.max(CONTROL_READ_LEN);
        let landings = [ReadBuffer::new(&self.node.pd, landing_len)?, ReadBuffer::new(&self.node.pd, landing_len)?];
        let (id, epoch) = (accept.publisher_id, accept.epoch);
        // What earlier connections to this publisher's epoch delivered (or still hold ready).
        let skip_through = self
            .feeds
            .iter()
            .filter_map(|(k, f)| f.active.as_ref().filter(|a| k != key && a.info.id == id && a.info.epoch == epoch))
            .map(|a| a.reader.next_seq().saturating_sub(1))
            .chain(self.delivered.get(&(id, epoch)).copied())
            .max()
            .unwrap_or(0);
        let feed = &mut self.feeds[key];
        let data_path = feed.qp.data_path();
        let info = PublisherInfo { id, epoch, addr: feed.addr, policy: accept.policy, data_path };
        let connects = match data_path {
            DataPath::SharedMemory => &self.counters.shared_memory_connects,
            DataPath::Network => &self.counters.network_connects,
        };
        connects.fetch_add(1, Ordering::Relaxed);
        feed.active = Some(Box::new(ActiveFeed {
            info,
            reader,
            landings,
            max_read_len,
            pending: [0, 0],
            reading_into: 0,
            caught_up: false,
            ring: accept.ring,
            capacity: accept.capacity,
            plan: None,
            ready: VecDeque::new(),
            acked: accept.start_position,
            ack_in_flight: false,
            credit_wanted: None,
            doorbell_req_in_flight: false,
            idle: Idle::Active,
            empty_since: None,
            end: None,
            need_control: false,
            skip_through,
            // Pacing spares the publisher's NIC READs that bring a message or two. On the same
            // host a READ costs only this thread's copy, and a paced READ would only delay a
            // trickle (by up to 50 µs a message); a busy-polling subscription wants no delay.
            pacer: if self.options.busy_poll || data_path == DataPath::SharedMemory {
                ReadPacer::unpaced()
            } else {
                ReadPacer::default()
            },
            empty_probe_len: match data_path {
                DataPath::SharedMemory => PROBE_LEN,
                DataPath::Network => usize::MAX,
            },
        }));
        let held = feed.active.as_ref().map_or(0, |a| a.read_buffer_bytes());
        self.counters.read_buffer_bytes.fetch_add(held, Ordering::Relaxed);
        Ok(info)
    }

    /// Stops READing a feed; it is removed once its ready messages are delivered.
    pub(super) fn close_feed(&mut self, key: usize) {
        if let Some(feed) = self.feeds.get_mut(key) {
            feed.closed = true;
            feed.closed_at.get_or_insert_with(Instant::now);
            let _ = feed.qp.disconnect();
            self.connector.closed(feed.addr, feed.conn);
        }
    }

    pub(super) fn remove_feed(&mut self, key: usize) {
        if self.feeds.contains(key) {
            let feed = self.feeds.remove(key);
            self.by_conn.remove(&feed.conn);
            self.node.routes.lock().remove(&feed.conn);
            if let Some(a) = &feed.active {
                self.counters.read_buffer_bytes.fetch_sub(a.read_buffer_bytes(), Ordering::Relaxed);
                let last = a.reader.next_seq().saturating_sub(1);
                let entry = self.delivered.entry((a.info.id, a.info.epoch)).or_insert(0);
                *entry = (*entry).max(last);
                // Older epochs of this publisher are never read again.
                self.delivered.retain(|&(id, epoch), _| id != a.info.id || epoch >= a.info.epoch);
            }
            self.connector.removed(feed.addr, feed.conn);
        }
    }

    pub(super) fn reap_closed(&mut self) {
        let done: Vec<usize> = self
            .feeds
            .iter()
            .filter(|(_, f)| {
                let flushed = f.outstanding == 0 || f.closed_at.is_some_and(|t| t.elapsed() >= FLUSH_GRACE);
                f.closed && flushed && f.active.as_ref().is_none_or(|a| a.ready.is_empty())
            })
            .map(|(k, _)| k)
            .collect();
        for key in done {
            self.remove_feed(key);
        }
    }

    pub(super) fn fail_feed(&mut self, key: usize, e: Error) {
        let Some(feed) = self.feeds.get(key) else { return };
        if feed.closed {
            return;
        }
        if matches!(e, Error::Fabric(rdma_fabric::Error::NotConnected { .. })) {
            // The connection is going away: the CM's Disconnected event closes the feed, with
            // the right event once the CQ was handled.
            tracing::debug!(topic = %self.topic, addr = %feed.addr, "feed quiesced: {e}");
            if let Some(feed) = self.feeds.get_mut(key) {
                feed.quiesced = true;
            }
            return;
        }
        tracing::warn!(topic = %self.topic, addr = %feed.addr, "feed failed: {e}");
        let publisher = feed.active.as_ref().map(|a| a.info);
        match (&e, publisher) {
            (Error::Ring(RingError::MessageTooLarge { len, max }), Some(publisher)) => {
                self.user_events.push_back(SubscriptionEvent::MessageTooLarge { publisher, len: *len, limit: *max });
                self.undeliverable.push_back(Error::MessageTooLarge { len: *len, limit: *max });
            }
            (Error::Ring(RingError::RecordTooLarge { len, max, .. }), _) => {
                let (addr, len, limit) = (feed.addr, *len, *max);
                self.user_events.push_back(SubscriptionEvent::RecordTooLarge { addr, len, limit });
            }
            _ => {}
        }
        self.user_events.push_back(SubscriptionEvent::Disconnected { addr: feed.addr, publisher });
        self.close_feed(key);
    }
}
