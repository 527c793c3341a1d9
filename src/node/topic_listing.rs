//! The node's topic listing ([`ListingServer`]): the topics of its live publishers, in a region
//! subscribers READ over a listing connection (connect flag `ConnectFlags::LISTING`), so that a
//! pattern subscription connected to this node's address, without discovery, is served every
//! topic of the node its pattern includes (the format, its bounds and its checks:
//! `rdma_wire::protocol::TopicListing`).
//!
//! The region is rewritten in place, body then header, whenever a local publisher is added or
//! removed: a READ that races it fails its checksum and is READ again. It has a protection
//! domain of its own, as each publisher has, so a listing connection reaches that region and no
//! other memory of the node. At most [`MAX_LISTING_CONNECTIONS`] listing connections are served
//! at once; past that a connect is refused (`TooManySubscribers`). A listing accept answers the
//! subscriber's challenge under the domain secret, as a publisher's accept does.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{fence, Ordering};

use parking_lot::Mutex;

use rdma_fabric::{
    Access, CompletionQueue, ConnId, ConnectRequest, Fabric, MemoryRegion, ProtectionDomain, QpCaps, QpInit, QueuePair,
};
use rdma_wire::protocol::{
    ConnectData, ListedTopic, ListingAccept, RejectCode, TopicId, TopicListing, LISTING_HEADER_LEN, LISTING_REGION_LEN,
};
use rdma_wire::Topic;

use super::identity::NodeId;
use super::shared::{NodeShared, Route};
use crate::error::Result;

/// Most listing connections a node serves at once.
pub(crate) const MAX_LISTING_CONNECTIONS: usize = 256;

/// The node's topic listing and the connections that READ it.
pub(crate) struct ListingServer {
    node_id: NodeId,
    epoch: u64,
    /// The region's own protection domain: its listing connections reach nothing else.
    pd: ProtectionDomain,
    /// The CQ of the listing connections (they post nothing: it stays empty).
    cq: CompletionQueue,
    region: MemoryRegion,
    state: Mutex<ListingState>,
}

#[derive(Default)]
struct ListingState {
    /// The local publishers' topics, with their instance.
    topics: BTreeMap<TopicId, ListedTopic>,
    /// The rewrite the region holds.
    generation: u64,
    /// The listing connections served, by connection.
    served: HashMap<ConnId, QueuePair>,
}

impl ListingServer {
    /// The listing of node `node_id` (started at `epoch`), empty, in a region of its own.
    ///
    /// # Errors
    /// The fabric's, when the protection domain, the CQ or the region cannot be made.
    pub(crate) fn new(fabric: &Fabric, node_id: NodeId, epoch: u64) -> Result<ListingServer> {
        let pd = fabric.alloc_pd()?;
        let cq = fabric.create_cq(16.min(fabric.attributes().max_cqe))?;
        let region = pd.register(LISTING_REGION_LEN, Access::REMOTE_READ)?;
        let server = ListingServer { node_id, epoch, pd, cq, region, state: Mutex::new(ListingState::default()) };
        server.rewrite(&mut server.state.lock());
        Ok(server)
    }

    /// A publisher of `topic` was added: listed from now on (a new instance of the topic).
    pub(crate) fn publisher_added(&self, topic: &Topic) {
        let mut state = self.state.lock();
        let instance = state.generation + 1;
        state.topics.insert(topic.id(), ListedTopic { name: topic.as_str().to_owned(), instance });
        self.rewrite(&mut state);
    }

    /// The publisher of `topic` was removed: no longer listed.
    pub(crate) fn publisher_removed(&self, topic: TopicId) {
        let mut state = self.state.lock();
        if state.topics.remove(&topic).is_some() {
            self.rewrite(&mut state);
        }
    }

    /// Rewrites the region with the next generation: the body first, then the header.
    fn rewrite(&self, state: &mut ListingState) {
        state.generation += 1;
        let listing = TopicListing::fitted(self.node_id, self.epoch, state.generation, state.topics.values().cloned());
        if listing.truncated {
            tracing::warn!(
                node = self.node_id,
                topics = state.topics.len(),
                "the topic listing lists only those that fit"
            );
        }
        let bytes = match listing.encode_region() {
            Ok(bytes) => bytes,
            Err(e) => {
                tracing::error!(node = self.node_id, "encoding the topic listing: {e}");
                return;
            }
        };
        let buffer = self.region.buffer();
        let (header, body) = bytes.split_at(LISTING_HEADER_LEN);
        // Both fit: the encoding is at most the region's length.
        let _ = buffer.write(LISTING_HEADER_LEN, body);
        fence(Ordering::Release);
        let _ = buffer.write(0, header);
    }

    /// Accepts a listing connection (`data` asked for the listing): its accept says where the
    /// region is, with a tag answering the subscriber's challenge under the domain secret.
    pub(crate) fn accept(&self, node: &NodeShared, req: ConnectRequest, data: &ConnectData) {
        let mut state = self.state.lock();
        if state.served.len() >= MAX_LISTING_CONNECTIONS {
            drop(state);
            let detail = format!("the node serves {MAX_LISTING_CONNECTIONS} listing connections already");
            node.reject_connect(req, RejectCode::TooManySubscribers, &detail);
            return;
        }
        let accept = ListingAccept {
            node_id: self.node_id,
            epoch: self.epoch,
            region: self.region.remote(),
            region_len: LISTING_REGION_LEN as u32,
            tag: None,
        }
        .with_tag(data.challenge(), node.domain_secret());
        let encoded = match accept.encode() {
            Ok(bytes) => bytes,
            Err(e) => {
                tracing::error!(node = self.node_id, "encoding a listing accept: {e}");
                return;
            }
        };
        let init = QpInit {
            caps: QpCaps { max_send_wr: 1, max_recv_wr: 1, max_send_sge: 1, max_recv_sge: 1 },
            // READ depths: the default, within the device's limits.
            ..QpInit::new(&self.pd, &self.cq)
        };
        let (conn, peer) = (req.conn_id(), req.peer_addr());
        node.routes().insert(conn, Route::ListingServed);
        match req.accept(&init, &encoded) {
            Ok(qp) => {
                state.served.insert(conn, qp);
            }
            Err(e) => {
                node.remove_route(conn);
                tracing::warn!(%peer, "listing accept failed: {e}");
            }
        }
    }

    /// A listing connection ended: its queue pair goes.
    pub(crate) fn disconnected(&self, conn: ConnId) {
        self.state.lock().served.remove(&conn);
    }
}
