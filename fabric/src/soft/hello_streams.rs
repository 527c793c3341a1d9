//! The streams of a device's data port that wait for their hello, or for the queue pair their
//! hello names to reach RTR (NIC thread only). A stream reads exactly one hello frame and not
//! a byte more (what the peer sent after it stays in the socket for the connection the stream
//! is bound to); anything but a well-formed hello is refused. How many may wait, and for how
//! long, is the NIC's to bound (the handshake limits).

use std::collections::HashMap;
use std::io::{self, Read};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsRawFd;

use mio::unix::SourceFd;
use mio::{Interest, Registry, Token};

use super::hello::Hello;
use super::wire::{FrameType, Header, HEADER_LEN, HELLO_LEN};

/// Poll token of the data port.
pub(crate) const DATA_PORT_TOKEN: Token = Token(1 << 59);
/// Poll tokens of waiting streams have this bit set (the rest is the stream's id).
pub(crate) const HELLO_STREAM_BIT: usize = 1 << 58;
/// Bytes of a hello frame.
const FRAME_LEN: usize = HEADER_LEN + HELLO_LEN;

/// What reading a stream's hello came to.
#[derive(Debug)]
pub(crate) enum HelloRead {
    /// More bytes are to come.
    Incomplete,
    /// The hello is in (now or before), with its frame's header (the same-host offer).
    Complete(Header, Hello),
    /// Not a hello, or the stream ended or failed first: why.
    Refused(String),
}

/// A stream waiting for its hello or its queue pair.
pub(crate) struct HelloStream {
    pub(crate) sock: TcpStream,
    pub(crate) peer: SocketAddr,
    buf: [u8; FRAME_LEN],
    have: usize,
    /// The hello, once read whole.
    hello: Option<(Header, Hello)>,
}

impl HelloStream {
    /// Reads what is missing of the hello (nothing once it is in) and checks it.
    fn read(&mut self) -> HelloRead {
        if let Some((h, hello)) = self.hello {
            return HelloRead::Complete(h, hello);
        }
        while self.have < FRAME_LEN {
            match (&self.sock).read(&mut self.buf[self.have..]) {
                Ok(0) => return HelloRead::Refused("the stream ended before its hello".into()),
                Ok(n) => self.have += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return HelloRead::Incomplete,
                Err(e) => return HelloRead::Refused(format!("read: {e}")),
            }
        }
        let mut raw = [0u8; HEADER_LEN];
        raw.copy_from_slice(&self.buf[..HEADER_LEN]);
        let h = match Header::decode(&raw, 0) {
            Ok(h) if h.ty == FrameType::Hello => h,
            Ok(h) => return HelloRead::Refused(format!("a {:?} frame instead of a hello", h.ty)),
            Err(e) => return HelloRead::Refused(format!("not a frame: {e}")),
        };
        let Some(hello) = Hello::decode(&self.buf[HEADER_LEN..]) else {
            return HelloRead::Refused("a malformed hello".into());
        };
        self.hello = Some((h, hello));
        HelloRead::Complete(h, hello)
    }
}

/// The waiting streams of a device, by id.
#[derive(Default)]
pub(crate) struct HelloStreams {
    streams: HashMap<u64, HelloStream>,
}

impl HelloStreams {
    /// Whether a poll token is a waiting stream's; its id.
    pub(crate) fn id_of(token: Token) -> Option<u64> {
        (token.0 & HELLO_STREAM_BIT != 0).then_some((token.0 & !HELLO_STREAM_BIT) as u64)
    }

    /// Adds stream `id` (non-blocking) from `peer` and polls it for reading.
    pub(crate) fn insert(&mut self, id: u64, sock: TcpStream, peer: SocketAddr, registry: &Registry) -> io::Result<()> {
        let token = Token(HELLO_STREAM_BIT | id as usize);
        registry.register(&mut SourceFd(&sock.as_raw_fd()), token, Interest::READABLE)?;
        self.streams.insert(id, HelloStream { sock, peer, buf: [0; FRAME_LEN], have: 0, hello: None });
        Ok(())
    }

    /// Reads stream `id`'s hello; `None` if there is no such stream.
    pub(crate) fn read(&mut self, id: u64) -> Option<HelloRead> {
        self.streams.get_mut(&id).map(HelloStream::read)
    }

    /// Removes stream `id` and stops polling it.
    pub(crate) fn remove(&mut self, id: u64, registry: &Registry) -> Option<HelloStream> {
        let s = self.streams.remove(&id)?;
        let _ = registry.deregister(&mut SourceFd(&s.sock.as_raw_fd()));
        Some(s)
    }

    /// The streams whose hello names queue pair `qp_num`.
    pub(crate) fn waiting_for(&self, qp_num: u32) -> Vec<u64> {
        let names = |s: &HelloStream| s.hello.is_some_and(|(_, h)| h.target_qp_num == qp_num);
        self.streams.iter().filter(|(_, s)| names(s)).map(|(&id, _)| id).collect()
    }

    /// Bytes stream `id` has sent: read of its hello so far, and waiting in its socket
    /// (`peek` says how many).
    pub(crate) fn pending_bytes(&self, id: u64, peek: impl FnOnce(&TcpStream) -> usize) -> usize {
        self.streams.get(&id).map_or(0, |s| s.have + peek(&s.sock))
    }

    /// Every stream's id.
    pub(crate) fn ids(&self) -> Vec<u64> {
        self.streams.keys().copied().collect()
    }
}
