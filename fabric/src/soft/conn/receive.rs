//! The receive state of a connection, used by the NIC thread (and by a thread polling an empty
//! CQ for its READ responses, `responses.rs`, under the same lock): the bytes read ahead, what
//! the next bytes of the stream are (a header; a payload, where it goes and what to do once it
//! is in; or nothing while a SEND waits for a receive).

use crate::memory::{RawRange, MAX_IOV};
use crate::soft::recv::RecvWr;
use crate::soft::seg::Segs;
use crate::soft::wire::{Header, Status};

/// Receive buffer of a connection (headers and small frames).
pub(crate) const RX_BUF: usize = 16 * 1024;

/// Where incoming bytes go.
pub(crate) struct Destination {
    segs: Segs,
    idx: usize,
    pos: usize,
}

impl Destination {
    /// Bytes go into `segs`, in order (none: they are discarded).
    pub(crate) fn new(segs: Segs) -> Self {
        Destination { segs, idx: 0, pos: 0 }
    }

    /// Whether the bytes are discarded.
    pub(crate) fn is_discard(&self) -> bool {
        self.segs.is_empty()
    }

    /// Records `n` bytes written into the segments.
    pub(crate) fn advance(&mut self, mut n: usize) {
        while n > 0 && self.idx < self.segs.len() {
            let room = self.segs[self.idx].len - self.pos;
            let k = room.min(n);
            self.pos += k;
            n -= k;
            if self.pos == self.segs[self.idx].len {
                self.idx += 1;
                self.pos = 0;
            }
        }
    }

    /// Copies buffered bytes into the segments; false if they do not fit.
    pub(crate) fn write(&mut self, mut data: &[u8]) -> bool {
        while !data.is_empty() {
            let Some(s) = self.segs.get(self.idx) else { return false };
            let k = (s.len - self.pos).min(data.len());
            if s.buf.write(s.off + self.pos, &data[..k]).is_err() {
                return false;
            }
            data = &data[k..];
            self.advance(k);
        }
        true
    }

    /// The raw ranges of the next `limit` bytes.
    pub(crate) fn ranges(&self, limit: usize) -> Vec<RawRange<'_>> {
        let mut out = Vec::new();
        let mut left = limit;
        let mut pos = self.pos;
        for s in self.segs.iter().skip(self.idx) {
            if left == 0 || out.len() == MAX_IOV {
                break;
            }
            let k = (s.len - pos).min(left);
            if let Ok(r) = s.buf.range(s.off + pos, k) {
                if k > 0 {
                    out.push(r);
                }
            }
            left -= k;
            pos = 0;
        }
        out
    }
}

/// What to do once a payload is in.
pub(crate) enum AfterPayload {
    /// Complete the READ at the front of the send queue.
    ReadResp,
    /// Complete the receive and acknowledge the SEND.
    Recv { recv: RecvWr, imm: Option<u32>, solicited: bool },
    /// Answer the request `psn` with `status`.
    Reply { psn: u32, status: Status },
    /// Nothing.
    Nothing,
}

/// What the next bytes of the stream are.
pub(crate) enum Expecting {
    Header,
    Payload {
        destination: Destination,
        remaining: usize,
        len: u32,
        after: AfterPayload,
        psn: u32,
    },
    /// A SEND waits for a receive; reading this connection stops (RC ordering).
    Rnr {
        hdr: Header,
        left: u8,
    },
}

/// The receive state of a connection (the NIC thread's, and a polling thread's while it takes
/// READ responses).
pub(crate) struct ReceiveState {
    pub(crate) buf: Vec<u8>,
    pub(crate) start: usize,
    pub(crate) end: usize,
    pub(crate) expecting: Expecting,
    /// The peer closed its side: SENDs without a receive are dropped rather than waited for.
    pub(crate) peer_closed: bool,
    /// The last read returned less than it asked for: the socket is empty, so the next read
    /// of this drive would only return EAGAIN. Safe with edge-triggered epoll on Linux, which
    /// signals every arrival, not only the transition from empty. Not trusted once the peer
    /// closed: its FIN may already be queued behind the data (and signaled), and only a read
    /// returning 0 reveals it.
    pub(crate) drained: bool,
}

impl ReceiveState {
    /// The state of a fresh connection: a header comes next.
    pub(crate) fn new() -> Self {
        ReceiveState {
            buf: Vec::new(),
            start: 0,
            end: 0,
            expecting: Expecting::Header,
            peer_closed: false,
            drained: false,
        }
    }
    /// Bytes read ahead and not yet parsed.
    pub(crate) fn avail(&self) -> usize {
        self.end - self.start
    }

    /// The payload of `hdr` comes next and goes nowhere; then `after` is done.
    pub(crate) fn discard(&mut self, hdr: &Header, after: AfterPayload) {
        self.expecting = Expecting::Payload {
            destination: Destination::new(Segs::new()),
            remaining: hdr.len as usize,
            len: hdr.len,
            after,
            psn: hdr.psn,
        };
    }
}
