//! The same-host endpoint of a device: its abstract Unix socket, key table and the nonces of
//! its offers, and opening a stream to a peer device that offered one.

use std::collections::HashMap;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use rand::RngExt;
use socket2::{Domain, SockAddr, Socket, Type};

use super::client::ShmClient;
use super::keys::KeyTable;
use super::proto;
use crate::error::{Error, Result};
use crate::memory::{send_vectored, IoPart};
use crate::provider::ConnId;
use crate::soft::wire::Header;

/// How long a requester waits for the owner to answer a region request.
pub(crate) const ANSWER_TIMEOUT: Duration = Duration::from_secs(2);

/// What one end of a connection being set up offers: where its device listens, which boot of
/// which kernel it runs on, and the nonce that opens a stream for this connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Offer {
    /// The device's token (names its Unix socket), never 0.
    pub(crate) token: u64,
    /// A hash of the kernel's boot identity.
    pub(crate) boot: u32,
    /// The nonce the other end sends first on its stream.
    pub(crate) nonce: u64,
}

impl Offer {
    /// The offer a CM frame carries in its otherwise unused header fields (token 0: none).
    pub(crate) fn from_header(h: &Header) -> Option<Offer> {
        let nonce = u64::from(h.psn) << 32 | u64::from(h.rkey);
        (h.addr != 0 && nonce != 0).then_some(Offer { token: h.addr, boot: h.imm, nonce })
    }

    /// Writes this offer into a CM frame's header.
    pub(crate) fn stamp(&self, h: &mut Header) {
        (h.addr, h.psn, h.rkey, h.imm) = (self.token, (self.nonce >> 32) as u32, self.nonce as u32, self.boot);
    }
}

/// The same-host endpoint of a device: its Unix socket, key table and open nonces.
pub(crate) struct Endpoint {
    token: u64,
    boot: u32,
    pub(crate) listener: UnixListener,
    pub(crate) keys: Arc<KeyTable>,
    /// Nonces handed out in offers, each good for one stream of one connection.
    nonces: Mutex<HashMap<u64, ConnId>>,
    /// Who may be at the other end of a stream, either way.
    peers: PeerRule,
}

/// The credentials of the process at the other end of a Unix socket (`SO_PEERCRED`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PeerCred {
    pub(crate) pid: i32,
    pub(crate) uid: u32,
    pub(crate) gid: u32,
}

impl PeerCred {
    /// The credentials of the peer of `sock` (for a connected socket: of the process that
    /// listened; for an accepted one: of the process that connected).
    pub(crate) fn of(sock: BorrowedFd<'_>) -> std::io::Result<PeerCred> {
        let mut cred = libc::ucred { pid: 0, uid: 0, gid: 0 };
        let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
        // SAFETY: `cred` and `len` are valid output buffers of the sizes given.
        let r = unsafe {
            libc::getsockopt(
                sock.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_PEERCRED,
                (&mut cred as *mut libc::ucred).cast(),
                &mut len,
            )
        };
        if r != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(PeerCred { pid: cred.pid, uid: cred.uid, gid: cred.gid })
    }
}

/// Which processes a device lets to the other end of its same-host streams: those of its own
/// effective user, and those whose effective group is the one allowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PeerRule {
    pub(crate) uid: u32,
    pub(crate) group: Option<u32>,
}

impl PeerRule {
    /// The rule of this process: its effective user, and `group` if given.
    pub(crate) fn own(group: Option<u32>) -> PeerRule {
        // SAFETY: geteuid has no preconditions and cannot fail.
        PeerRule { uid: unsafe { libc::geteuid() }, group }
    }

    /// Why `peer` may not be at the other end of a stream, if it may not.
    pub(crate) fn refuses(&self, peer: &PeerCred) -> Option<String> {
        if peer.uid == self.uid || self.group == Some(peer.gid) {
            return None;
        }
        Some(format!(
            "process {} runs as user {} (group {}), not as user {}{}",
            peer.pid,
            peer.uid,
            peer.gid,
            self.uid,
            self.group.map(|g| format!(" or in group {g}")).unwrap_or_default()
        ))
    }

    /// Why the peer of `sock` may not be at the other end of a stream, if it may not (also
    /// when its credentials cannot be read).
    pub(crate) fn refuses_peer_of(&self, sock: BorrowedFd<'_>) -> Option<String> {
        match PeerCred::of(sock) {
            Ok(cred) => self.refuses(&cred),
            Err(e) => Some(format!("SO_PEERCRED: {e}")),
        }
    }
}

/// Nonces one device may have outstanding (connections being set up at once); more offers are
/// simply not made.
const MAX_NONCES: usize = 4096;

impl Endpoint {
    /// Opens the endpoint: a key table and an abstract Unix socket with a fresh token. Streams
    /// are opened only with processes of this process's effective user, or of `group`.
    pub(crate) fn open(group: Option<u32>) -> Result<Endpoint> {
        let boot = boot_identity()?;
        let keys = Arc::new(KeyTable::new()?);
        let mut rng = rand::rng();
        for _ in 0..8 {
            let token: u64 = rng.random::<u64>().max(1);
            let sock =
                Socket::new(Domain::UNIX, Type::STREAM, None).map_err(|e| Error::os("same-host: socket", None, e))?;
            if let Err(e) = sock.bind(&socket_name(token)?) {
                if e.kind() == std::io::ErrorKind::AddrInUse {
                    continue;
                }
                return Err(Error::os("same-host: bind", None, e));
            }
            sock.listen(128).map_err(|e| Error::os("same-host: listen", None, e))?;
            sock.set_nonblocking(true).map_err(|e| Error::os("same-host: O_NONBLOCK", None, e))?;
            let listener = UnixListener::from(OwnedFd::from(sock));
            let peers = PeerRule::own(group);
            return Ok(Endpoint { token, boot, listener, keys, nonces: Mutex::new(HashMap::new()), peers });
        }
        Err(Error::invalid("same-host", "no free socket name after 8 tries"))
    }

    /// An offer for connection `conn`, with a fresh nonce; `None` when too many are open.
    pub(crate) fn offer(&self, conn: ConnId) -> Option<Offer> {
        let mut nonces = self.nonces.lock();
        if nonces.len() >= MAX_NONCES {
            return None;
        }
        let mut rng = rand::rng();
        loop {
            let nonce: u64 = rng.random();
            if nonce != 0 && !nonces.contains_key(&nonce) {
                nonces.insert(nonce, conn);
                return Some(Offer { token: self.token, boot: self.boot, nonce });
            }
        }
    }

    /// Forgets an offer (its connection is set up or gone).
    pub(crate) fn withdraw(&self, nonce: u64) {
        self.nonces.lock().remove(&nonce);
    }

    /// The connection a hello's nonce was offered for (the nonce is used up).
    pub(crate) fn redeem(&self, nonce: u64) -> Option<ConnId> {
        self.nonces.lock().remove(&nonce)
    }

    /// Whether a peer's offer comes from this kernel's current boot and another device.
    pub(crate) fn same_boot(&self, offer: &Offer) -> bool {
        offer.boot == self.boot && offer.token != self.token
    }

    /// Opens a stream to the device that made `offer`: connects to its socket without
    /// blocking and sends the hello. `None` when that fails (the peer is elsewhere, gone, or
    /// its backlog is full): the connection then uses the network path.
    pub(crate) fn connect(&self, offer: &Offer) -> Option<ShmClient> {
        if !self.same_boot(offer) {
            return None;
        }
        let attempt = || -> std::io::Result<UnixStream> {
            let sock = Socket::new(Domain::UNIX, Type::STREAM, None)?;
            sock.set_nonblocking(true)?;
            let name = socket_name(offer.token).map_err(std::io::Error::other)?;
            sock.connect(&name)?;
            // The socket may be anyone's (abstract names have no permissions): the device at
            // the other end must run as our user too, or it would see our memory objects.
            if let Some(why) = self.peers.refuses_peer_of(sock.as_fd()) {
                return Err(std::io::Error::new(std::io::ErrorKind::PermissionDenied, why));
            }
            let stream = UnixStream::from(OwnedFd::from(sock));
            let hello = proto::hello(offer.nonce);
            if send_vectored(stream.as_fd(), &[IoPart::Bytes(&hello)])? != hello.len() {
                return Err(std::io::Error::new(std::io::ErrorKind::WriteZero, "short hello"));
            }
            stream.set_nonblocking(false)?;
            stream.set_read_timeout(Some(ANSWER_TIMEOUT))?;
            Ok(stream)
        };
        match attempt() {
            Ok(stream) => Some(ShmClient::new(stream)),
            Err(e) => {
                tracing::debug!("soft same-host: no stream to device {:016x}: {e}", offer.token);
                None
            }
        }
    }

    /// The abstract name of the device's socket.
    #[cfg(test)]
    pub(crate) fn abstract_name(&self) -> Vec<u8> {
        abstract_name(self.token).into_bytes()
    }

    /// Why the peer of an accepted stream may not use it, if it may not.
    pub(crate) fn refuses_peer_of(&self, sock: BorrowedFd<'_>) -> Option<String> {
        self.peers.refuses_peer_of(sock)
    }

    /// The listener's raw descriptor (registered with the NIC's poll).
    pub(crate) fn listener_fd(&self) -> std::os::fd::RawFd {
        self.listener.as_raw_fd()
    }
}

/// The abstract socket name of the device with `token`.
fn socket_name(token: u64) -> Result<SockAddr> {
    SockAddr::unix(format!("\0{}", abstract_name(token)))
        .map_err(|e| Error::invalid("same-host", format!("socket name: {e}")))
}

/// The name of that socket in the abstract namespace (without its leading NUL).
fn abstract_name(token: u64) -> String {
    format!("rdma-pubsub/soft/{token:016x}")
}

/// A hash of this kernel's boot identity (`/proc/sys/kernel/random/boot_id`), never 0.
fn boot_identity() -> Result<u32> {
    let id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map_err(|e| Error::os("same-host: read boot_id", None, e))?;
    let h = xxhash_rust::xxh64::xxh64(id.trim().as_bytes(), 0x5348);
    Ok((h as u32).max(1))
}
