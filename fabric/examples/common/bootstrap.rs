//! The out-of-band bootstrap of the seed programs (the RC example of the RDMA Aware Networks
//! Programming manual): instead of RDMA-CM, a TCP socket between server and client
//! ([`SideChannel::accept`] / [`SideChannel::connect`], the manual's `sock_connect`) carries each
//! side's queue pair endpoint and buffer ([`ConData`], its `cm_con_data_t`); each side moves its
//! own queue pair through INIT, RTR and RTS ([`connect_qp`]) and the two synchronise over the
//! socket before and after the operations ([`SideChannel::sync`], its `sock_sync_data`).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use mio::{Events, Interest, Poll, Token};
use rdma_fabric::{
    Access, EventChannel, Fabric, InitAttr, Listener, PathMtu, QpEndpoint, QpInit, QueuePair, RtrAttr, RtsAttr,
    MAX_24_BIT_FIELD,
};

use super::{err, wait_disconnected, Ready, RegionInfo, Res};

/// How the two sides connect their queue pairs.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bootstrap {
    /// RDMA-CM: connect, accept; the buffers travel in the private data.
    Cm,
    /// By hand over a TCP socket, as the seed programs do.
    Tcp,
}

/// The `--bootstrap` option of the examples that offer both ways.
#[derive(clap::Args, Debug, Clone, Copy)]
pub struct BootstrapArgs {
    /// How to connect the queue pairs: `cm` (RDMA-CM) or `tcp` (endpoints exchanged over a TCP
    /// socket, each side moving its queue pair through INIT, RTR and RTS).
    #[arg(long, value_enum, default_value_t = Bootstrap::Cm)]
    pub bootstrap: Bootstrap,
}

/// The path MTUs in the order of their `ibv_mtu` codes (1 = 256 bytes).
const MTUS: [PathMtu; 5] = [PathMtu::Mtu256, PathMtu::Mtu512, PathMtu::Mtu1024, PathMtu::Mtu2048, PathMtu::Mtu4096];

/// What each side sends the other over the socket: its buffer and its queue pair's endpoint
/// (the manual's `cm_con_data_t`), little endian, [`ConData::SIZE`] bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConData {
    /// The buffer the peer may READ or WRITE (address, rkey, length).
    pub region: RegionInfo,
    /// The queue pair's endpoint.
    pub endpoint: QpEndpoint,
}

impl ConData {
    /// Encoded size: the region (20 bytes), QP number, PSN, port, LID, GID, MTU code.
    pub const SIZE: usize = RegionInfo::SIZE + 4 + 4 + 1 + 2 + 16 + 1;

    /// Encodes.
    pub fn encode(&self) -> [u8; Self::SIZE] {
        let e = &self.endpoint;
        let mut out = [0u8; Self::SIZE];
        let mut at = 0;
        let mut put = |bytes: &[u8]| {
            out[at..at + bytes.len()].copy_from_slice(bytes);
            at += bytes.len();
        };
        put(&self.region.encode());
        put(&e.qp_num.to_le_bytes());
        put(&e.psn.to_le_bytes());
        put(&[e.port]);
        put(&e.lid.to_le_bytes());
        put(&e.gid);
        put(&[mtu_code(e.mtu)]);
        out
    }

    /// Decodes exactly [`ConData::SIZE`] bytes from the peer, who is not trusted: the length,
    /// the MTU code and the 24-bit fields are checked.
    pub fn decode(bytes: &[u8]) -> Res<Self> {
        let b: &[u8; Self::SIZE] = bytes
            .try_into()
            .map_err(|_| err(format!("connection data of {} bytes, expected {}", bytes.len(), Self::SIZE)))?;
        let region = RegionInfo::decode(&b[..RegionInfo::SIZE])?;
        let rest = &b[RegionInfo::SIZE..];
        let word = |at: usize| u32::from_le_bytes([rest[at], rest[at + 1], rest[at + 2], rest[at + 3]]);
        let (qp_num, psn) = (word(0), word(4));
        if qp_num > MAX_24_BIT_FIELD || psn > MAX_24_BIT_FIELD {
            return Err(err(format!("the peer's QP number {qp_num:#x} or PSN {psn:#x} exceeds 24 bits")));
        }
        let mut gid = [0u8; 16];
        gid.copy_from_slice(&rest[11..27]);
        let code = rest[27];
        let mtu = code
            .checked_sub(1)
            .and_then(|i| MTUS.get(usize::from(i)))
            .copied()
            .ok_or_else(|| err(format!("the peer's MTU code {code} is not one of verbs' (1..=5)")))?;
        let endpoint =
            QpEndpoint { qp_num, psn, port: rest[8], lid: u16::from_le_bytes([rest[9], rest[10]]), gid, mtu };
        Ok(ConData { region, endpoint })
    }
}

/// The `ibv_mtu` code of a path MTU (1 = 256 bytes ... 5 = 4096).
fn mtu_code(mtu: PathMtu) -> u8 {
    MTUS.iter().position(|&m| m == mtu).map_or(0, |i| i as u8 + 1)
}

/// The TCP socket between server and client, every read and write bounded by the timeout.
pub struct SideChannel {
    stream: TcpStream,
    peer: SocketAddr,
}

impl SideChannel {
    /// Server side of `sock_connect`: waits up to `timeout` for the client on `listener`.
    pub fn accept(listener: TcpListener, timeout: Duration) -> Res<Self> {
        let deadline = Instant::now() + timeout;
        listener.set_nonblocking(true)?;
        let mut listener = mio::net::TcpListener::from_std(listener);
        let mut poll = Poll::new()?;
        poll.registry().register(&mut listener, Token(0), Interest::READABLE)?;
        let mut events = Events::with_capacity(1);
        loop {
            match listener.accept() {
                Ok((stream, _)) => return Self::new(TcpStream::from(stream), timeout),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e.into()),
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(err("timed out waiting for the client's TCP connection"));
            }
            poll.poll(&mut events, Some(left))?;
        }
    }

    /// Client side of `sock_connect`: connects to the server within `timeout`.
    pub fn connect(addr: SocketAddr, timeout: Duration) -> Res<Self> {
        let stream =
            TcpStream::connect_timeout(&addr, timeout).map_err(|e| err(format!("TCP connect to {addr}: {e}")))?;
        Self::new(stream, timeout)
    }

    fn new(stream: TcpStream, timeout: Duration) -> Res<Self> {
        stream.set_nonblocking(false)?;
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(timeout))?;
        stream.set_write_timeout(Some(timeout))?;
        Ok(SideChannel { peer: stream.peer_addr()?, stream })
    }

    /// `sock_sync_data`: sends `mine`, then reads as many bytes from the peer.
    fn sync_data(&mut self, mine: &[u8], theirs: &mut [u8], what: &str) -> Res<()> {
        self.stream.write_all(mine).map_err(|e| err(format!("sending {what}: {e}")))?;
        self.stream.read_exact(theirs).map_err(|e| err(format!("receiving {what}: {e}")))?;
        Ok(())
    }

    /// Exchanges the connection data: sends this side's, returns the peer's.
    pub fn exchange(&mut self, mine: &ConData) -> Res<ConData> {
        let mut theirs = [0u8; ConData::SIZE];
        self.sync_data(&mine.encode(), &mut theirs, "the connection data")?;
        ConData::decode(&theirs)
    }

    /// Waits until the peer reaches the same point (`step`): one byte each way.
    pub fn sync(&mut self, step: &str) -> Res<()> {
        let mut theirs = [0u8; 1];
        self.sync_data(b"S", &mut theirs, &format!("the sync {step}"))?;
        if theirs != *b"S" {
            return Err(err(format!("the peer is out of step at {step}")));
        }
        Ok(())
    }
}

/// Server side of `sock_connect`: listens on `addr`, announces where, and waits up to
/// `timeout` for the client.
pub fn accept_side_channel(addr: SocketAddr, ready: &mut Ready, timeout: Duration) -> Res<SideChannel> {
    let listener = TcpListener::bind(addr).map_err(|e| err(format!("TCP listen on {addr}: {e}")))?;
    ready.announce(listener.local_addr()?);
    SideChannel::accept(listener, timeout)
}

/// The seed flow's steps after `sock_connect`: creates this side's queue pair unconnected
/// from `init`, exchanges the connection data (`region`, the endpoint) over `channel` and
/// moves the queue pair to RTS towards the peer's; `before_rtr` runs in INIT (post receives
/// there). Returns the queue pair and the peer's region.
pub fn connect_by_hand(
    channel: &mut SideChannel,
    fabric: &Fabric,
    init: &QpInit<'_>,
    region: RegionInfo,
    access: Access,
    before_rtr: impl FnOnce(&QueuePair) -> Res<()>,
) -> Res<(QueuePair, RegionInfo)> {
    let qp = fabric.create_qp(init.clone())?;
    let peer = channel.exchange(&ConData { region, endpoint: qp.local_endpoint()? })?;
    connect_qp(&qp, init, access, &peer.endpoint, || before_rtr(&qp))?;
    Ok((qp, peer.region))
}

/// Moves `qp` through INIT, RTR and RTS towards the peer's endpoint `remote`, with the
/// settings of `init` (`modify_qp_to_init`, `modify_qp_to_rtr`, `modify_qp_to_rts`);
/// `before_rtr` runs in INIT, where receives may be posted before the peer can send.
pub fn connect_qp(
    qp: &QueuePair,
    init: &QpInit<'_>,
    access: Access,
    remote: &QpEndpoint,
    before_rtr: impl FnOnce() -> Res<()>,
) -> Res<()> {
    let local = qp.local_endpoint()?;
    qp.modify_to_init(InitAttr { port: local.port, access })?;
    before_rtr()?;
    qp.modify_to_rtr(RtrAttr {
        remote: *remote,
        path_mtu: local.mtu.min(remote.mtu),
        max_dest_rd_atomic: init.responder_resources,
        min_rnr_timer: init.min_rnr_timer,
    })?;
    qp.modify_to_rts(RtsAttr {
        timeout: RETRANSMIT_TIMEOUT,
        retry_count: RETRY_COUNT,
        rnr_retry: init.rnr_retry,
        max_rd_atomic: init.initiator_depth,
    })?;
    Ok(())
}

/// `4.096 µs × 2^14` ≈ 67 ms before a retransmission.
const RETRANSMIT_TIMEOUT: u8 = 14;
/// Retransmissions before a send fails (the CM's default).
const RETRY_COUNT: u8 = 7;

/// What a connected side coordinates with its peer through: the CM's events, or the
/// bootstrap's socket.
pub enum Link {
    /// RDMA-CM: the event channel (and the listener the connection came through, kept open).
    Cm {
        /// The channel of the connection's events.
        channel: EventChannel,
        /// The server's listener.
        listener: Option<Listener>,
    },
    /// The bootstrap's TCP socket.
    Tcp(SideChannel),
}

impl Link {
    /// The peer's address: the connection's (CM), or the socket's (TCP).
    pub fn peer_addr(&self, qp: &QueuePair) -> SocketAddr {
        match self {
            Link::Cm { .. } => qp.peer_addr(),
            Link::Tcp(channel) => channel.peer,
        }
    }

    /// Before the operations: over TCP the two sync (`sock_sync_data`); over the CM the
    /// established event said enough.
    pub fn before_operations(&mut self) -> Res<()> {
        match self {
            Link::Cm { .. } => Ok(()),
            Link::Tcp(channel) => channel.sync("before the operations"),
        }
    }

    /// Ends the connection from the side that finishes last (the client): disconnects (CM), or
    /// syncs so that the peer knows it may tear down (TCP).
    pub fn close(self, qp: &QueuePair) -> Res<()> {
        match self {
            Link::Cm { .. } => Ok(qp.disconnect()?),
            Link::Tcp(mut channel) => channel.sync("after the operations"),
        }
    }

    /// Waits, up to `timeout`, for the peer to end the connection (see [`Link::close`]).
    pub fn await_close(self, qp: &QueuePair, timeout: Duration) -> Res<()> {
        match self {
            Link::Cm { channel, .. } => wait_disconnected(&channel, qp.conn_id(), timeout),
            Link::Tcp(mut channel) => channel.sync("after the operations"),
        }
    }
}
