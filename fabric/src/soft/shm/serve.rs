//! The responder's side, run by the NIC thread: accepting streams on the device's socket (of
//! processes of the device's user only), binding each to a connection by the nonce of its
//! hello, and answering region requests with the region's descriptor and inbox requests with
//! the inbox, receive credits and the sender's place at the bell (the owner page, the hint
//! page and the sender's own eventfd).
//!
//! A region request refused (no such rkey in the protection domain of the connection's queue
//! pair, or no remote access) is answered, then the stream is closed and the connection's
//! queue pair fails shortly after, as a remote access error, counted. The delay lets an
//! honest requester's request reach its turn: it then goes to this NIC to be judged in order
//! with the requests before it (failing the queue pair there, as on the network path), so
//! requests posted before it are not failed early. A peer that guesses rkeys thus gets one
//! guess per connection, as on the network path.

use std::collections::{BTreeMap, HashMap};
use std::io::{self, Read};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;

use mio::unix::SourceFd;
use mio::{Interest, Registry, Token};

use super::endpoint::Endpoint;
use super::fds::send_with_fds;
use super::proto::{self, Answer, Request, MSG_LEN, WANT_KEYS};
use crate::provider::ConnId;

/// Poll token of the device's same-host socket.
pub(crate) const LISTENER_TOKEN: Token = Token(1 << 60);
/// Poll tokens of same-host streams have this bit set (the rest is the stream's id).
pub(crate) const STREAM_BIT: usize = 1 << 61;
/// Streams accepted but not yet bound to a connection; the oldest is closed past this.
const MAX_UNBOUND: usize = 64;

/// What the responder knows that the streams need.
pub(crate) trait Owner {
    /// The endpoint (its listener, nonces and key table).
    fn endpoint(&self) -> &Endpoint;
    /// Whether connection `conn` is still open.
    fn conn_open(&self, conn: ConnId) -> bool;
    /// The descriptor and answer for region `rkey` as seen from connection `conn` (naming the
    /// connection's key slot too): `None` unless it exists, belongs to the protection domain of
    /// the connection's queue pair and grants remote access, and the queue pair is live.
    fn grant(&self, conn: ConnId, rkey: u32) -> Option<(OwnedFd, Answer)>;
    /// Opens the inbox of connection `conn` for the peer's SENDs: the descriptors of the inbox,
    /// the peer's receive credits (read-only) and its place at the bell of the queue pair's
    /// receive CQ (the owner page, read-only, the hint page and the peer's own eventfd), and an
    /// answer naming the connection's key slot. `None` unless the connection is established
    /// and has no inbox yet (or the bell has no place left).
    fn open_inbox(&self, conn: ConnId) -> Option<([OwnedFd; 5], Answer)>;
    /// A stream was refused: its peer runs as another user (counted).
    fn refused_peer(&self);
    /// A region request of connection `conn` was refused: the connection's queue pair fails
    /// as a remote access error, unless the peer's NIC judges that request before (see
    /// [`Streams`]).
    fn refused_region(&self, conn: ConnId);
}

struct Stream {
    sock: UnixStream,
    buf: [u8; MSG_LEN],
    have: usize,
    conn: Option<ConnId>,
}

/// The same-host streams of a device (NIC thread only).
#[derive(Default)]
pub(crate) struct Streams {
    next: u64,
    /// Ordered by id, so the oldest unbound stream is the first.
    streams: BTreeMap<u64, Stream>,
    by_conn: HashMap<ConnId, u64>,
}

impl Streams {
    /// Whether a poll token belongs to the same-host path.
    pub(crate) fn owns(token: Token) -> bool {
        token == LISTENER_TOKEN || token.0 & STREAM_BIT != 0
    }

    /// Handles a poll event of the listener or of a stream.
    pub(crate) fn on_event(&mut self, token: Token, owner: &dyn Owner, registry: &Registry) {
        if token == LISTENER_TOKEN {
            self.accept(owner, registry);
        } else {
            self.serve((token.0 & !STREAM_BIT) as u64, owner, registry);
        }
    }

    fn accept(&mut self, owner: &dyn Owner, registry: &Registry) {
        loop {
            let sock = match owner.endpoint().listener.accept() {
                Ok((s, _)) => s,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) => {
                    tracing::debug!("soft same-host: accept failed: {e}");
                    return;
                }
            };
            if let Some(why) = owner.endpoint().refuses_peer_of(sock.as_fd()) {
                tracing::debug!("soft same-host: refused a stream: {why}");
                owner.refused_peer();
                continue;
            }
            if sock.set_nonblocking(true).is_err() {
                continue;
            }
            let mut unbound = self.streams.iter().filter(|(_, s)| s.conn.is_none()).map(|(&id, _)| id);
            let oldest = unbound.next();
            if let Some(oldest) = oldest.filter(|_| 1 + unbound.count() >= MAX_UNBOUND) {
                self.close(oldest, registry);
            }
            let id = self.next;
            self.next += 1;
            let token = Token(STREAM_BIT | id as usize);
            if let Err(e) = registry.register(&mut SourceFd(&sock.as_raw_fd()), token, Interest::READABLE) {
                tracing::debug!("soft same-host: registering a stream: {e}");
                continue;
            }
            self.streams.insert(id, Stream { sock, buf: [0; MSG_LEN], have: 0, conn: None });
            // A hello may already be waiting (edge-triggered poll reports only new arrivals).
            self.serve(id, owner, registry);
        }
    }

    /// Reads and handles whole messages until the stream is empty; closes it on any violation.
    fn serve(&mut self, id: u64, owner: &dyn Owner, registry: &Registry) {
        loop {
            let Some(s) = self.streams.get_mut(&id) else { return };
            let have = s.have;
            match (&s.sock).read(&mut s.buf[have..]) {
                Ok(0) => return self.close(id, registry),
                Ok(n) => s.have += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(_) => return self.close(id, registry),
            }
            if s.have < MSG_LEN {
                continue;
            }
            s.have = 0;
            let msg = s.buf;
            let ok = match s.conn {
                None => self.bind(id, &msg, owner),
                Some(conn) => self.answer(id, conn, &msg, owner),
            };
            if !ok {
                return self.close(id, registry);
            }
        }
    }

    /// Binds a stream to the connection its hello names.
    fn bind(&mut self, id: u64, msg: &[u8; MSG_LEN], owner: &dyn Owner) -> bool {
        let Some(nonce) = proto::parse_hello(msg) else { return false };
        let Some(conn) = owner.endpoint().redeem(nonce) else { return false };
        if !owner.conn_open(conn) || self.by_conn.contains_key(&conn) {
            return false;
        }
        self.by_conn.insert(conn, id);
        if let Some(s) = self.streams.get_mut(&id) {
            s.conn = Some(conn);
        }
        true
    }

    /// Answers a request.
    fn answer(&mut self, id: u64, conn: ConnId, msg: &[u8; MSG_LEN], owner: &dyn Owner) -> bool {
        let Some(req) = Request::decode(msg) else { return false };
        let Some(s) = self.streams.get(&id) else { return false };
        let region = matches!(req, Request::Region { .. });
        let (granted, flags) = match req {
            Request::Region { rkey, flags } => (owner.grant(conn, rkey).map(|(fd, a)| (vec![fd], a)), flags),
            Request::Inbox { flags } => (owner.open_inbox(conn).map(|(fds, a)| (fds.into(), a)), flags),
        };
        let (mut fds, answer) = granted.unwrap_or_default();
        if answer.granted && flags & WANT_KEYS != 0 {
            match owner.endpoint().keys.peer_fd().try_clone_to_owned() {
                Ok(keys) => fds.push(keys),
                Err(_) => return false,
            }
        }
        let bytes = answer.encode();
        let borrowed: Vec<_> = fds.iter().map(|fd| fd.as_fd()).collect();
        // The requester waits for this answer with nothing else outstanding, so the socket
        // has room; a full one means a peer that does not read: drop it.
        let sent = matches!(send_with_fds(&s.sock, &bytes, &borrowed), Ok(n) if n == bytes.len());
        if region && !answer.granted {
            // A wrong rkey (or one of another protection domain) ends the stream, as a remote
            // access error ends a connection on hardware: no second guess on it.
            owner.refused_region(conn);
            return false;
        }
        sent
    }

    /// Closes the stream bound to connection `conn` (the connection is gone).
    pub(crate) fn close_conn(&mut self, conn: ConnId, registry: &Registry) {
        if let Some(id) = self.by_conn.remove(&conn) {
            self.close(id, registry);
        }
    }

    fn close(&mut self, id: u64, registry: &Registry) {
        if let Some(s) = self.streams.remove(&id) {
            let _ = registry.deregister(&mut SourceFd(&s.sock.as_raw_fd()));
            if let Some(conn) = s.conn {
                self.by_conn.remove(&conn);
            }
        }
    }

    /// Closes every stream (the device is closing).
    pub(crate) fn clear(&mut self, registry: &Registry) {
        let ids: Vec<u64> = self.streams.keys().copied().collect();
        for id in ids {
            self.close(id, registry);
        }
    }
}
