//! The publishing side of a topic: the ring in a remote-read-only region, the subscribers
//! connected to it, acks as credits, the slow-subscriber policy, and doorbells for parked
//! subscribers.
//!
//! One lock, `state`, guards the producer, the cached publisher limit and the subscriber
//! table. A publishing call that fits under the cached limit holds it once, for the copy into
//! the ring and the commit (`publish.rs`); one that must wait for credit takes the publishing
//! *turn* (so that no other call interleaves with a message it wrote partly) and releases the
//! lock while it waits (`credit.rs`), so the CM thread can accept subscribers meanwhile
//! (`accept.rs`). Acks and doorbell requests arrive on the publisher's CQ, drained after each
//! commit without blocking (`control.rs`).

mod accept;
mod builder;
mod control;
pub(super) mod counters;
mod credit;
mod flow_control;
mod liveness;
mod loan;
mod options;
mod publish;
mod state;

use std::collections::HashMap;
use std::marker::PhantomData;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use slab::Slab;

use crate::error::{Error, Result};
use rdma_fabric::Access;
use rdma_wire::protocol::{Control, TopicId};
use rdma_wire::ring::{Checksum, RingConfig, RingProducer, NO_LIMIT};

use super::identity::publisher_id;
use super::message_type::MessageType;
use super::shared::NodeShared;
use super::topic::check_topic;
use super::wr_id::{WrId, WrKind};
use credit::Deadline;
use liveness::SENDS_PER_SUBSCRIBER;
use state::{
    PubState, PublisherShared, MAX_SUBSCRIBERS, MIN_IDLE_TIMEOUT, NOTICE_TIMEOUT, RECVS_PER_SUBSCRIBER, SLOT,
    YIELD_AFTER_BYTES,
};

pub use builder::PublisherBuilder;
pub use counters::PublisherCounters;
pub use loan::Loan;
pub use options::Policy;
pub(crate) use options::PublisherOptions;
pub(crate) use state::SERVICE_INTERVAL;

/// Publishes messages of type `T` on one topic: raw bytes (`Publisher`, that is
/// `Publisher<[u8]>`) or a serde type (`Publisher<Quote>`, from
/// [`PublisherBuilder::typed`](crate::PublisherBuilder::typed)). `Send + Sync`: share it
/// between threads with an `Arc`.
///
/// ```
/// use std::time::Duration;
/// use rdma_pubsub::{DiscoveryOptions, Node, Policy};
///
/// let node = Node::builder().discovery(DiscoveryOptions::disabled()).build()?;
/// let publisher = node.publisher("doc-publisher").policy(Policy::Block { timeout: Duration::from_secs(1) }).create()?;
/// // With no subscriber connected nothing holds the ring back.
/// assert_eq!(publisher.publish(b"first")?, 1);
/// let typed = node.publisher("doc-typed").typed::<(String, u32)>().create()?;
/// assert_eq!(typed.publish(&("second".into(), 2))?, 1);
/// # Ok::<(), rdma_pubsub::Error>(())
/// ```
pub struct Publisher<T: ?Sized + MessageType = [u8]> {
    shared: Arc<PublisherShared>,
    _type: PhantomData<fn(&T)>,
}

impl<T: ?Sized + MessageType> std::fmt::Debug for Publisher<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Publisher").field("topic", &self.shared.topic).field("id", &self.shared.id).finish()
    }
}

impl<T: ?Sized + MessageType> Publisher<T> {
    pub(crate) fn create(node: Arc<NodeShared>, topic: &str, options: PublisherOptions) -> Result<Publisher<T>> {
        check_topic(topic)?;
        if options.max_subscribers == 0 || options.max_subscribers > MAX_SUBSCRIBERS {
            return Err(Error::InvalidOption { option: "max_subscribers", detail: "must be in 1..=4096".into() });
        }
        if options.idle_timeout < MIN_IDLE_TIMEOUT {
            let detail = format!("must be at least {MIN_IDLE_TIMEOUT:?} (Duration::MAX: never)");
            return Err(Error::InvalidOption { option: "idle_timeout", detail });
        }
        let topic_id = TopicId::of(topic);
        let mut config = RingConfig::new(options.ring_capacity, node.epoch);
        if let Some(m) = options.max_record_payload {
            config.max_record_payload = m;
        }
        config.checksum = options.checksum.unwrap_or_else(Checksum::fastest_here);
        rdma_wire::ring::layout::check_geometry(config.capacity, config.max_record_payload)
            .map_err(|e| Error::InvalidOption { option: "ring_capacity/max_record_payload", detail: e.to_string() })?;
        let attrs = node.fabric.attributes().clone();
        let ring = node.pd.register(config.region_len(), Access::REMOTE_READ)?;
        let producer = RingProducer::new(Arc::clone(ring.buffer_arc()), config)?;
        let srq_wanted = (options.max_subscribers as u32 * RECVS_PER_SUBSCRIBER).min(attrs.max_srq_wr);
        let srq = if attrs.max_srq_wr > 0 { Some(node.pd.create_srq(srq_wanted, 1)?) } else { None };
        let recv_slots = if srq.is_some() { srq_wanted } else { options.max_subscribers as u32 * RECVS_PER_SUBSCRIBER };
        let send_slots = options.max_subscribers as u32 * SENDS_PER_SUBSCRIBER;
        let ctrl = node.pd.register((recv_slots + send_slots) as usize * SLOT, Access::LOCAL_WRITE)?;
        let cq_depth = (recv_slots + send_slots + 16).min(attrs.max_cqe);
        let cq = node.fabric.create_cq(cq_depth)?;
        if let Some(srq) = &srq {
            for slot in 0..recv_slots {
                srq.post_recv(WrId::publisher(WrKind::Recv, slot).encode(), &[ctrl.sge(slot as usize * SLOT, SLOT)])?;
            }
        }
        let shared = Arc::new(PublisherShared {
            id: publisher_id(node.id, topic_id),
            topic: topic.to_owned(),
            topic_id,
            max_record_payload: config.max_record_payload,
            yield_after: if attrs.copies_on_host_cpus { YIELD_AFTER_BYTES } else { usize::MAX },
            remote: ring.remote(),
            region_len: ring.len(),
            cq,
            srq,
            recv_slots,
            state: Mutex::new(PubState {
                producer,
                subs: Slab::new(),
                by_conn: HashMap::new(),
                by_qp: HashMap::new(),
                limit: NO_LIMIT,
                overwrite: options.policy == Policy::Overwrite,
                doorbell_floor: u64::MAX,
                publishing: false,
                unfinished: None,
                closing: false,
            }),
            turn: Condvar::new(),
            subscribers_changed: Condvar::new(),
            counters: Arc::new(PublisherCounters::default()),
            ctrl,
            _ring: ring,
            options,
            node: node.clone(),
        });
        {
            let mut publishers = node.publishers.lock();
            if publishers.get(&topic_id).and_then(Weak::upgrade).is_some() {
                return Err(Error::AlreadyPublishing { topic: topic.to_owned() });
            }
            let local: Weak<PublisherShared> = Arc::downgrade(&shared);
            publishers.insert(topic_id, local);
        }
        node.stats.add_publisher(topic, shared.id, &shared.counters);
        node.discovery.publisher_added(topic, topic_id);
        Ok(Publisher { shared, _type: PhantomData })
    }

    /// The topic.
    pub fn topic(&self) -> &str {
        &self.shared.topic
    }

    /// This publisher's id (what subscribers see in [`crate::PublisherInfo`]).
    pub fn id(&self) -> u64 {
        self.shared.id
    }

    /// The function that checksums this publisher's records.
    pub fn checksum(&self) -> Checksum {
        self.shared.state.lock().producer.checksum()
    }

    /// Subscribers currently connected.
    pub fn subscriber_count(&self) -> usize {
        self.shared.state.lock().subs.len()
    }

    /// Waits up to `timeout` (any `Duration`) until at least `n` subscribers are connected;
    /// returns how many are.
    ///
    /// # Errors
    /// [`Error::Timeout`] when fewer than `n` are connected when the time is up.
    pub fn wait_for_subscribers(&self, n: usize, timeout: Duration) -> Result<usize> {
        let deadline = rdma_fabric::time::deadline_after(timeout);
        let mut st = self.shared.state.lock();
        while st.subs.len() < n {
            if self.shared.subscribers_changed.wait_until(&mut st, deadline).timed_out() && st.subs.len() < n {
                return Err(Error::Timeout {
                    what: "waiting for subscribers",
                    millis: rdma_fabric::time::millis(timeout),
                });
            }
        }
        Ok(st.subs.len())
    }

    /// The counters.
    pub fn counters(&self) -> &PublisherCounters {
        &self.shared.counters
    }

    /// Sequence number the next message gets.
    pub fn next_seq(&self) -> u64 {
        self.shared.state.lock().producer.tail_seq()
    }
}

impl<T: ?Sized + MessageType> Drop for Publisher<T> {
    fn drop(&mut self) {
        self.shared.close();
    }
}

impl PublisherShared {
    /// On drop: stop accepting, let subscribers consume (bounded by `linger`), tell them the
    /// stream ended, and disconnect them.
    fn close(&self) {
        let linger = Deadline::flush(self.options.linger);
        let Ok((turn, mut st)) = self.take_turn(self.state.lock(), Deadline::never()) else {
            return;
        };
        st.closing = true;
        drop(st);
        {
            let mut publishers = self.node.publishers.lock();
            if publishers.get(&self.topic_id).is_some_and(|w| std::ptr::addr_eq(w.as_ptr(), self)) {
                publishers.remove(&self.topic_id);
                self.node.discovery.publisher_removed(self.topic_id);
            }
        }
        // Whether or not it could be finished, the subscribers get what is complete.
        if let Ok(st) = self.finish_unfinished(self.state.lock(), linger) {
            drop(st);
        }
        self.wait_consumed(linger.at);
        let mut st = self.state.lock();
        let final_seq = st.producer.tail_seq().saturating_sub(1);
        let parting: Vec<(usize, Control)> =
            st.subs.iter().map(|(k, _)| (k, Control::EndOfStream { final_seq })).collect();
        self.part_with(&mut st, &parting, Instant::now() + NOTICE_TIMEOUT);
        drop(st);
        drop(turn);
    }
}
