//! Building blocks of fabric tests: an opened node (device, PD, CQ, CM channel), a connected
//! pair of queue pairs, CM events and completions awaited with a bound, and data patterns.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use rdma_fabric::*;

use super::provider::ProviderSpec;

/// Bound of every wait for something that must happen (generous: the verbs suite runs on an
/// emulated device inside a VM).
pub const WAIT: Duration = Duration::from_secs(10);
/// How long a test waits to conclude that something does not happen.
pub const QUIET: Duration = Duration::from_millis(300);
/// How long `poll_wait` spins before it blocks.
pub const SPIN: Duration = Duration::from_micros(20);
/// Depth of the CQ of a [`Node`].
pub const NODE_CQ_DEPTH: u32 = 1024;

/// One opened device with what a connection needs: a PD, one CQ for both queues, a CM channel.
pub struct Node {
    /// The device.
    pub fabric: Fabric,
    /// Its protection domain.
    pub pd: ProtectionDomain,
    /// The CQ of both send and receive completions.
    pub cq: CompletionQueue,
    /// The connection-manager channel.
    pub events: EventChannel,
}

impl Node {
    /// Opens a device of `spec` and creates the PD, CQ and channel.
    pub fn open(spec: &ProviderSpec) -> Node {
        let fabric = spec.open();
        let pd = fabric.alloc_pd().expect("alloc_pd");
        let cq = fabric.create_cq(NODE_CQ_DEPTH).expect("create_cq");
        let events = fabric.create_event_channel().expect("create_event_channel");
        Node { fabric, pd, cq, events }
    }

    /// Default queue-pair settings on this node's PD and CQ.
    pub fn qp_init(&self) -> QpInit<'_> {
        QpInit::new(&self.pd, &self.cq)
    }

    /// Registers `len` zeroed bytes.
    pub fn register(&self, len: usize, access: Access) -> MemoryRegion {
        self.pd.register(len, access).unwrap_or_else(|e| panic!("register {len} bytes {access:?}: {e}"))
    }
}

/// The next CM event on `ch`; panics when none arrives within [`WAIT`].
pub fn next_event(ch: &EventChannel, what: &str) -> CmEvent {
    match ch.get_event(WAIT) {
        Ok(Some(event)) => event,
        Ok(None) => panic!("no CM event within {WAIT:?} while waiting for {what}"),
        Err(e) => panic!("get_event failed while waiting for {what}: {e}"),
    }
}

/// Waits for a connect request.
pub fn expect_connect_request(ch: &EventChannel) -> ConnectRequest {
    match next_event(ch, "a connect request") {
        CmEvent::ConnectRequest(req) => req,
        other => panic!("expected a connect request, got {other:?}"),
    }
}

/// Waits for `Established` of `conn` and returns its private data.
pub fn expect_established(ch: &EventChannel, conn: ConnId) -> Vec<u8> {
    match next_event(ch, "Established") {
        CmEvent::Established { conn: c, private_data } if c == conn => private_data,
        other => panic!("expected Established of connection {conn}, got {other:?}"),
    }
}

/// Waits for `Disconnected` of `conn`.
pub fn expect_disconnected(ch: &EventChannel, conn: ConnId) {
    match next_event(ch, "Disconnected") {
        CmEvent::Disconnected { conn: c } if c == conn => {}
        other => panic!("expected Disconnected of connection {conn}, got {other:?}"),
    }
}

/// Waits for `Disconnected` of each `(channel, conn)`, serving the channels in turn (as an
/// application with one event loop per channel would): with librdmacm the disconnecting side's
/// event needs the peer's DREP, which the peer sends when its own event is delivered.
pub fn expect_disconnected_each(waits: &[(&EventChannel, ConnId)]) {
    let deadline = Instant::now() + WAIT;
    let mut pending = vec![true; waits.len()];
    while pending.contains(&true) {
        let conns: Vec<ConnId> = waits.iter().map(|w| w.1).collect();
        assert!(Instant::now() < deadline, "no Disconnected within {WAIT:?}: pending {pending:?} of {conns:?}");
        for (i, (ch, conn)) in waits.iter().enumerate() {
            if !pending[i] {
                continue;
            }
            match ch.get_event(Duration::from_millis(1)).expect("get_event") {
                None => {}
                Some(CmEvent::Disconnected { conn: c }) if c == *conn => pending[i] = false,
                Some(other) => panic!("expected Disconnected of connection {conn}, got {other:?}"),
            }
        }
    }
}

/// Asserts that no CM event is pending on `ch`.
pub fn assert_no_event(ch: &EventChannel, context: &str) {
    if let Some(event) = ch.get_event(Duration::ZERO).expect("get_event") {
        panic!("{context}: unexpected CM event {event:?}");
    }
}

/// Queue-pair settings of a [`Pair`].
#[derive(Debug, Clone, Copy)]
pub struct PairConfig {
    /// Capacities of the client (active side) queue pair.
    pub client_caps: QpCaps,
    /// Capacities of the server (passive side) queue pair.
    pub server_caps: QpCaps,
    /// RNR retries of the client's SENDs.
    pub client_rnr_retry: u8,
    /// RNR retries of the server's SENDs.
    pub server_rnr_retry: u8,
    /// RNR timer the server asks the client to wait.
    pub server_min_rnr_timer: Duration,
}

impl Default for PairConfig {
    fn default() -> Self {
        PairConfig {
            client_caps: QpCaps::default(),
            server_caps: QpCaps::default(),
            client_rnr_retry: 6,
            server_rnr_retry: 6,
            server_min_rnr_timer: Duration::from_micros(640),
        }
    }
}

/// Two nodes (two opened devices) and an established connection between them.
pub struct Pair {
    /// The active side's queue pair.
    pub client_qp: QueuePair,
    /// The passive side's queue pair.
    pub server_qp: QueuePair,
    /// The listener the client connected to.
    pub listener: Listener,
    /// The active side.
    pub client: Node,
    /// The passive side.
    pub server: Node,
}

impl Pair {
    /// Opens two nodes and connects them with default settings.
    pub fn connect(spec: &ProviderSpec) -> Pair {
        Pair::connect_with(spec, PairConfig::default())
    }

    /// Opens two nodes and connects them with `cfg`.
    pub fn connect_with(spec: &ProviderSpec, cfg: PairConfig) -> Pair {
        let client = Node::open(spec);
        let server = Node::open(spec);
        let listener = server.events.listen(spec.listen_addr(), 16).expect("listen");
        let (client_qp, server_qp) = connect_nodes(&client, &server, listener.local_addr(), &cfg);
        Pair { client_qp, server_qp, listener, client, server }
    }
}

/// Connects `client` to `server` listening at `addr` (empty private data both ways) and waits
/// until both sides are established.
pub fn connect_nodes(client: &Node, server: &Node, addr: SocketAddr, cfg: &PairConfig) -> (QueuePair, QueuePair) {
    let mut init = client.qp_init();
    init.caps = cfg.client_caps;
    init.rnr_retry = cfg.client_rnr_retry;
    let client_qp = client.events.connect(addr, &init, &[], WAIT).expect("connect");
    let req = expect_connect_request(&server.events);
    let server_conn = req.conn_id();
    let mut init = server.qp_init();
    init.caps = cfg.server_caps;
    init.rnr_retry = cfg.server_rnr_retry;
    init.min_rnr_timer = cfg.server_min_rnr_timer;
    let server_qp = req.accept(&init, &[]).expect("accept");
    assert_eq!(server_qp.conn_id(), server_conn, "the accepted queue pair carries the request's conn id");
    expect_established(&client.events, client_qp.conn_id());
    expect_established(&server.events, server_conn);
    (client_qp, server_qp)
}

/// Takes exactly `n` completions from `cq`, waiting up to [`WAIT`] in all; panics with what
/// arrived when fewer do.
pub fn poll_n(cq: &CompletionQueue, n: usize) -> Vec<WorkCompletion> {
    let deadline = Instant::now() + WAIT;
    let mut got = Vec::with_capacity(n);
    let mut buf = [WorkCompletion::default(); 64];
    while got.len() < n {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            panic!("{} of {n} completions within {WAIT:?}: {got:?}", got.len());
        }
        let want = (n - got.len()).min(buf.len());
        let k = cq.poll_wait(&mut buf[..want], SPIN, left).expect("poll_wait");
        got.extend_from_slice(&buf[..k]);
    }
    got
}

/// Takes up to `n` completions from `cq`, waiting up to `timeout` in all.
pub fn poll_up_to(cq: &CompletionQueue, n: usize, timeout: Duration) -> Vec<WorkCompletion> {
    let deadline = Instant::now() + timeout;
    let mut got = Vec::with_capacity(n);
    let mut buf = [WorkCompletion::default(); 64];
    while got.len() < n {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        let want = (n - got.len()).min(buf.len());
        let k = cq.poll_wait(&mut buf[..want], SPIN, left).expect("poll_wait");
        got.extend_from_slice(&buf[..k]);
    }
    got
}

/// Takes exactly one completion from `cq` within [`WAIT`].
pub fn poll_one(cq: &CompletionQueue) -> WorkCompletion {
    poll_n(cq, 1)[0]
}

/// Asserts that `cq` holds no completion right now.
pub fn assert_cq_empty(cq: &CompletionQueue, context: &str) {
    let mut buf = [WorkCompletion::default(); 8];
    let n = cq.poll(&mut buf).expect("poll");
    assert_eq!(n, 0, "{context}: unexpected completions {:?}", &buf[..n]);
}

/// Asserts a successful completion of `wr_id` with `opcode` on queue pair `qp_num`.
pub fn assert_success(wc: &WorkCompletion, wr_id: u64, opcode: WcOpcode, qp_num: u32) {
    assert_eq!(
        (wc.wr_id, wc.status, wc.opcode, wc.qp_num),
        (wr_id, WcStatus::Success, opcode, qp_num),
        "completion {wc:?}"
    );
}

/// A signaled, unsolicited send-queue request.
pub fn wr<'a>(wr_id: u64, op: SendOp, sges: &'a [Sge<'a>]) -> SendRequest<'a> {
    SendRequest::new(wr_id, op, sges)
}

/// `len` bytes of a pattern that differs per `seed` and per position.
pub fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u32).wrapping_mul(2_654_435_761).rotate_right(13) as u8 ^ seed).collect()
}

/// The bytes `[offset, offset + len)` of a region.
pub fn read_mr(mr: &MemoryRegion, offset: usize, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    mr.buffer().read(offset, &mut v).expect("read registered memory");
    v
}

/// `remote` moved `offset` bytes forward.
pub fn at(remote: RemoteAddr, offset: u64) -> RemoteAddr {
    RemoteAddr { addr: remote.addr + offset, rkey: remote.rkey }
}

/// A device with one unreliable-datagram endpoint on a test's multicast slot.
pub struct UdNode {
    /// The device (its fault injector applies to this endpoint).
    pub fabric: Fabric,
    /// The endpoint's protection domain.
    pub pd: ProtectionDomain,
    /// The endpoint.
    pub ep: UdEndpoint,
}

impl UdNode {
    /// Opens a device of `spec` and an endpoint on `slot`'s port, joined to `slot`'s group.
    pub fn joined(spec: &ProviderSpec, slot: &super::provider::McastSlot) -> UdNode {
        let fabric = spec.open();
        let pd = fabric.alloc_pd().expect("alloc_pd");
        let init = UdInit { interface: spec.local_ip, port: slot.port, unicast_port: 0, recv_depth: 256 };
        let ep = fabric.create_ud(&pd, &init).expect("create_ud");
        ep.join(slot.group).unwrap_or_else(|e| panic!("join {}: {e}", slot.group));
        UdNode { fabric, pd, ep }
    }

    /// Sends `slot`'s payload `seq` of `len` bytes to the group.
    pub fn send(&self, slot: &super::provider::McastSlot, seq: u64, len: usize) {
        self.ep.send_to(slot.group, &slot.payload(seq, len)).unwrap_or_else(|e| panic!("send_to {}: {e}", slot.group));
    }

    /// The next datagram of this test within `timeout` (other tests' datagrams are skipped),
    /// with its sequence number.
    pub fn recv(&self, slot: &super::provider::McastSlot, timeout: Duration) -> Option<(u64, Datagram)> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let d = self.ep.recv(left).expect("ud recv")?;
            if let Some(seq) = slot.seq_of(&d.data) {
                return Some((seq, d));
            }
            if left.is_zero() {
                return None;
            }
        }
    }

    /// The next datagram of this test, which must arrive within [`WAIT`].
    pub fn expect(&self, slot: &super::provider::McastSlot, what: &str) -> (u64, Datagram) {
        self.recv(slot, WAIT).unwrap_or_else(|| panic!("no datagram within {WAIT:?} while waiting for {what}"))
    }
}
