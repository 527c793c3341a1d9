//! A pattern subscription's listing connection to one node's address ([`ListingReader`]):
//! without discovery, the way it learns which topics that node publishes. The connection asks
//! for the node's topic listing (connect flag `LISTING`); the node's accept says where its
//! listing region is (tagged under the domain secret when the subscriber's node has one, as a
//! publisher's accept is), and from then on the reader READs it, one-sided: the 16-byte header
//! every [`LISTING_REFRESH`], and the whole listing when its generation changed. A READ that
//! raced the node's rewrite fails its checksum and is READ again at once; a listing that checks
//! and is invalid (a length or count out of bounds, a name that is no topic, another node's
//! listing), an accept that does not authenticate, a refusal or a broken connection fail the
//! reader with a reason, which the connector tells the subscription (`ListingFailed`). Nothing a
//! node writes is used before it is bounded: a READ is at most the region's length, which is at
//! most [`LISTING_REGION_LEN`] (64 KiB).
//!
//! The connector (`connector.rs`) owns the readers, runs them on its thread and the
//! subscription's calls, and opens one feed per listed topic the pattern includes, exactly as
//! for a publisher discovery announced.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crossbeam::channel::{self, Receiver};

use crate::node::shared::{NodeShared, Route};
use rdma_fabric::{
    Access, CompletionQueue, ConnId, ConnectionEvent, MemoryRegion, QpCaps, QpInit, QueuePair, RejectReason,
    RemoteAddr, SendOp, SendRequest, WcStatus, WorkCompletion,
};
use rdma_wire::protocol::{
    ListingAccept, ListingHeader, ListingReadError, RejectCode, RejectData, Secret, TopicId, TopicListing,
    LISTING_HEADER_LEN, LISTING_REGION_LEN,
};
use rdma_wire::Topic;

/// How often a listing's header is READ to see whether it changed.
pub(super) const LISTING_REFRESH: Duration = Duration::from_millis(100);
/// READs of a listing in a row that may race its rewrite before the listing is given up.
const MAX_TORN_IN_A_ROW: u32 = 64;

/// What a step of a [`ListingReader`] brings.
#[derive(Debug)]
pub(super) enum ListingNews {
    /// Nothing new.
    Nothing,
    /// A new listing was read ([`ListingReader::listed`]).
    Listed,
    /// The reader failed, saying why: its connection is closed.
    Failed(String),
}

/// The listing connection to the node at one address, and what it last read there.
pub(super) struct ListingReader {
    addr: SocketAddr,
    conn: ConnId,
    qp: QueuePair,
    /// The connection's CM events, routed by the CM thread.
    events: Receiver<ConnectionEvent>,
    /// Where READs land.
    landing: MemoryRegion,
    /// The nonce the accept's tag must answer (the subscriber's node has a domain secret).
    challenge: Option<u64>,
    phase: Phase,
    /// The topics of the last valid listing, each with its instance.
    listed: HashMap<TopicId, (Topic, u64)>,
    /// The listed publishers (topic, instance) a connection was opened to (or refused by the
    /// subscription's limit and told of): each is connected once.
    attempted: HashSet<(TopicId, u64)>,
    torn_in_a_row: u32,
}

enum Phase {
    /// The connect request went out.
    Connecting,
    /// Accepted: READing the listing.
    Reading(Region),
    /// Failed: nothing more to do.
    Failed,
}

/// The node's listing region, as its accept said, and the READ state.
struct Region {
    node_id: u64,
    remote: RemoteAddr,
    len: usize,
    /// The generation of the last valid listing.
    generation: Option<u64>,
    next_read: Instant,
    in_flight: Option<InFlight>,
}

#[derive(Clone, Copy)]
enum InFlight {
    Header,
    /// The whole listing, so many bytes.
    Listing(usize),
}

impl ListingReader {
    /// Starts the listing connection to `addr` on `cq` with connect private data `data`, which
    /// carries `challenge` when the subscriber's node has a domain secret.
    ///
    /// # Errors
    /// The fabric's, when the landing region or the connection cannot be made.
    pub(super) fn open(
        node: &NodeShared,
        cq: &CompletionQueue,
        addr: SocketAddr,
        data: &[u8],
        challenge: Option<u64>,
        timeout: Duration,
    ) -> crate::Result<ListingReader> {
        let landing = node.pd().register(LISTING_REGION_LEN, Access::LOCAL_WRITE)?;
        let init = QpInit {
            caps: QpCaps { max_send_wr: 2, max_recv_wr: 1, max_send_sge: 1, max_recv_sge: 1 },
            ..QpInit::new(node.pd(), cq)
        };
        let (tx, events) = channel::unbounded();
        // Hold the routes while connecting, so that the CM thread routes every event of the
        // connection to it.
        let mut routes = node.routes();
        let qp = node.channel().connect(addr, &init, data, timeout)?;
        let conn = qp.conn_id();
        routes.insert(conn, Route::Listing(tx));
        drop(routes);
        Ok(ListingReader {
            addr,
            conn,
            qp,
            events,
            landing,
            challenge,
            phase: Phase::Connecting,
            listed: HashMap::new(),
            attempted: HashSet::new(),
            torn_in_a_row: 0,
        })
    }

    /// The node's address.
    pub(super) fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The connection (also the work-request id of its READs).
    pub(super) fn conn(&self) -> ConnId {
        self.conn
    }

    /// Whether it failed (the connector drops it).
    pub(super) fn failed(&self) -> bool {
        matches!(self.phase, Phase::Failed)
    }

    /// The node's id, once its accept was read.
    pub(super) fn node_id(&self) -> Option<u64> {
        match &self.phase {
            Phase::Reading(r) => Some(r.node_id),
            _ => None,
        }
    }

    /// The topics of the last valid listing, each with its instance.
    pub(super) fn listed(&self) -> impl Iterator<Item = (&Topic, u64)> {
        self.listed.values().map(|(t, i)| (t, *i))
    }

    /// Whether the listed publisher (`topic`, `instance`) was connected already.
    pub(super) fn attempted(&self, topic: TopicId, instance: u64) -> bool {
        self.attempted.contains(&(topic, instance))
    }

    /// The listed publisher (`topic`, `instance`) is connected (or told of): not again.
    pub(super) fn mark_attempted(&mut self, topic: TopicId, instance: u64) {
        self.attempted.insert((topic, instance));
    }

    /// Handles the connection's CM events and READs the header when it is due. `domain` is the
    /// subscriber node's domain secret.
    pub(super) fn poll(&mut self, domain: Option<&Secret>, now: Instant) -> ListingNews {
        if self.failed() {
            return ListingNews::Nothing;
        }
        while let Ok(event) = self.events.try_recv() {
            if let ListingNews::Failed(detail) = self.on_event(event, domain) {
                return self.fail(detail);
            }
        }
        let Phase::Reading(region) = &mut self.phase else { return ListingNews::Nothing };
        if region.in_flight.is_none() && now >= region.next_read {
            let remote = region.remote;
            if let Err(e) = self.post_read(remote, LISTING_HEADER_LEN) {
                return self.fail(format!("a READ of the listing could not be posted: {e}"));
            }
            if let Phase::Reading(region) = &mut self.phase {
                region.in_flight = Some(InFlight::Header);
            }
        }
        ListingNews::Nothing
    }

    /// One CM event of the connection; `Failed` when it ends the reader.
    fn on_event(&mut self, event: ConnectionEvent, domain: Option<&Secret>) -> ListingNews {
        match event {
            ConnectionEvent::ConnectRequest(never) => match never {},
            ConnectionEvent::Established { private_data, .. } => {
                if !matches!(self.phase, Phase::Connecting) {
                    return ListingNews::Nothing;
                }
                let accept = match ListingAccept::decode(&private_data) {
                    Ok(accept) => accept,
                    Err(e) => return ListingNews::Failed(format!("the node's listing accept is unusable: {e}")),
                };
                if let Err(e) = accept.check_tag(self.challenge, domain) {
                    return ListingNews::Failed(format!("the node's listing accept does not authenticate: {e}"));
                }
                self.phase = Phase::Reading(Region {
                    node_id: accept.node_id,
                    remote: accept.region,
                    // At most the region's length (checked by `decode`).
                    len: accept.region_len as usize,
                    generation: None,
                    next_read: Instant::now(),
                    in_flight: None,
                });
                ListingNews::Nothing
            }
            ConnectionEvent::Rejected { reason, private_data, .. } => {
                ListingNews::Failed(match (reason, RejectData::decode(&private_data)) {
                    (_, Ok(r)) if r.reason == RejectCode::Malformed => format!(
                        "the node refused to list its topics ({}): a node of an older version lists none",
                        r.detail
                    ),
                    (_, Ok(r)) => format!("the node refused to list its topics ({:?}: {})", r.reason, r.detail),
                    (RejectReason::NoListener, Err(_)) => "no node listens at that address".into(),
                    (other, Err(e)) => format!("the node refused to list its topics ({other:?}), unreadably: {e}"),
                })
            }
            ConnectionEvent::Unreachable { detail, .. } => ListingNews::Failed(format!("unreachable: {detail}")),
            ConnectionEvent::Disconnected { .. } => ListingNews::Failed("the listing connection closed".into()),
        }
    }

    /// A completion of one of its READs: `Listed` when a new listing was read.
    pub(super) fn complete(&mut self, wc: &WorkCompletion, keep: &dyn Fn(&Topic) -> bool, now: Instant) -> ListingNews {
        let Phase::Reading(region) = &mut self.phase else { return ListingNews::Nothing };
        let Some(read) = region.in_flight.take() else { return ListingNews::Nothing };
        if wc.status != WcStatus::Success {
            return self.fail(format!("a READ of the listing failed: {:?}", wc.status));
        }
        match read {
            InFlight::Header => {
                let mut bytes = [0u8; LISTING_HEADER_LEN];
                if let Err(e) = self.landing.buffer().read(0, &mut bytes) {
                    return self.fail(format!("the listing header: {e}"));
                }
                let header = ListingHeader::read(&bytes);
                if header.is_some_and(|h| Some(h.generation) == region.generation) {
                    region.next_read = now + LISTING_REFRESH;
                    return ListingNews::Nothing;
                }
                match header.and_then(|h| h.region_bytes()).filter(|&n| n <= region.len) {
                    Some(n) => {
                        let remote = region.remote;
                        if let Err(e) = self.post_read(remote, n) {
                            return self.fail(format!("a READ of the listing could not be posted: {e}"));
                        }
                        if let Phase::Reading(region) = &mut self.phase {
                            region.in_flight = Some(InFlight::Listing(n));
                        }
                        ListingNews::Nothing
                    }
                    None => self.torn(now),
                }
            }
            InFlight::Listing(n) => {
                let mut bytes = vec![0u8; n];
                if let Err(e) = self.landing.buffer().read(0, &mut bytes) {
                    return self.fail(format!("the listing: {e}"));
                }
                match TopicListing::decode_region(&bytes) {
                    Ok(listing) => self.apply(listing, keep, now),
                    Err(ListingReadError::Torn) => self.torn(now),
                    Err(ListingReadError::Invalid(e)) => self.fail(e.to_string()),
                }
            }
        }
    }

    /// Takes a valid listing: the topics `keep` says, parsed (a name that is no topic fails
    /// the listing).
    fn apply(&mut self, listing: TopicListing, keep: &dyn Fn(&Topic) -> bool, now: Instant) -> ListingNews {
        let Phase::Reading(region) = &mut self.phase else { return ListingNews::Nothing };
        if listing.node_id != region.node_id {
            let detail = format!("the listing is of node {:016x}, not {:016x}", listing.node_id, region.node_id);
            return self.fail(detail);
        }
        region.generation = Some(listing.generation);
        region.next_read = now + LISTING_REFRESH;
        self.torn_in_a_row = 0;
        let mut listed = HashMap::new();
        for entry in listing.topics {
            let topic = match Topic::new(&entry.name) {
                Ok(topic) => topic,
                Err(e) => return self.fail(format!("the listing names no topic: {e}")),
            };
            if keep(&topic) {
                listed.insert(topic.id(), (topic, entry.instance));
            }
        }
        if listing.truncated {
            tracing::debug!(addr = %self.addr, "the node lists only the topics that fit");
        }
        // Publishers no longer listed are forgotten: listed again, they are new instances.
        self.attempted.retain(|(id, instance)| listed.get(id).is_some_and(|(_, i)| i == instance));
        self.listed = listed;
        ListingNews::Listed
    }

    /// A READ raced the node's rewrite: READ again at once, up to a bound.
    fn torn(&mut self, now: Instant) -> ListingNews {
        self.torn_in_a_row += 1;
        if self.torn_in_a_row > MAX_TORN_IN_A_ROW {
            return self.fail(format!("the listing did not validate in {MAX_TORN_IN_A_ROW} READs in a row"));
        }
        if let Phase::Reading(region) = &mut self.phase {
            region.generation = None;
            region.next_read = now;
        }
        ListingNews::Nothing
    }

    /// Posts a READ of the first `len` bytes of the listing region.
    fn post_read(&self, remote: RemoteAddr, len: usize) -> rdma_fabric::Result<()> {
        let sge = [self.landing.sge(0, len)];
        self.qp.post_send(&SendRequest::new(self.conn, SendOp::RdmaRead(remote), &sge))
    }

    /// The reader failed: it does nothing more, and its queue pair is disconnected.
    fn fail(&mut self, detail: String) -> ListingNews {
        tracing::debug!(addr = %self.addr, "listing connection failed: {detail}");
        self.phase = Phase::Failed;
        let _ = self.qp.disconnect();
        ListingNews::Failed(detail)
    }
}
