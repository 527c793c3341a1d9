//! The output queue of a connection: the frames waiting to be written to its socket, their
//! partial-write state, and the limits on what a peer that does not read makes this end keep.

use std::collections::VecDeque;
use std::io;
use std::os::fd::BorrowedFd;

use crate::memory::{self, IoPart, MAX_IOV};
use crate::soft::seg::{Seg, Segs};
use crate::soft::wire::{FrameType, Header, HEADER_LEN};

/// The payload following a queued header.
pub(crate) enum FramePayload {
    None,
    Bytes(Vec<u8>),
    Segs(Segs),
}

/// What a queued frame is, for the READ depths and the limits of the output queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FrameKind {
    /// A request of our send queue (`read`: an RDMA READ request).
    Request { read: bool },
    /// The answer to a request of the peer: an acknowledgement, or a READ response (`read`).
    Response { read: bool },
    /// A CM frame.
    Control,
}

/// A queued frame.
pub(crate) struct OutFrame {
    hdr: [u8; HEADER_LEN],
    payload: FramePayload,
    kind: FrameKind,
}

impl OutFrame {
    pub(crate) fn new(hdr: &Header, payload: FramePayload) -> Self {
        let kind = match hdr.ty {
            FrameType::Send | FrameType::SendImm | FrameType::Write => FrameKind::Request { read: false },
            FrameType::ReadReq => FrameKind::Request { read: true },
            FrameType::Ack => FrameKind::Response { read: false },
            FrameType::ReadResp => FrameKind::Response { read: true },
            FrameType::ConnectReq
            | FrameType::Accept
            | FrameType::Reject
            | FrameType::Disconnect
            | FrameType::Hello
            | FrameType::Ready => FrameKind::Control,
        };
        OutFrame { hdr: hdr.encode(), payload, kind }
    }

    /// Bytes on the wire.
    fn len(&self) -> usize {
        HEADER_LEN
            + match &self.payload {
                FramePayload::None => 0,
                FramePayload::Bytes(b) => b.len(),
                FramePayload::Segs(s) => s.iter().map(|s| s.len).sum(),
            }
    }

    /// Memory the queue holds for the frame: the frame and its heap parts, not the registered
    /// memory a READ response or a SEND is written from.
    fn memory(&self) -> usize {
        std::mem::size_of::<OutFrame>()
            + match &self.payload {
                FramePayload::None => 0,
                FramePayload::Bytes(b) => b.capacity(),
                FramePayload::Segs(s) if s.spilled() => s.capacity() * std::mem::size_of::<Seg>(),
                FramePayload::Segs(_) => 0,
            }
    }

    /// An RDMA READ request.
    pub(super) fn is_read_request(&self) -> bool {
        self.kind == FrameKind::Request { read: true }
    }

    /// A request of this end's send queue.
    pub(super) fn is_request(&self) -> bool {
        matches!(self.kind, FrameKind::Request { .. })
    }
}

/// Memory of queued responses above which the NIC stops reading the peer's requests until the
/// peer has read enough of them (back to [`OUT_RESUME`]): 1 MiB, about 14,000 acknowledgements.
/// Only the peer's requests fill it, and only while the peer does not read: READ responses are
/// bounded by the responder resources and cost a frame each (their data is written from
/// registered memory), so the figure does not depend on message sizes.
/// Our own requests are not counted: the send queue's depth bounds them, and counting them
/// could stop two ends that both wait to write from ever reading each other.
pub const OUT_CAP: usize = 1 << 20;
/// Memory of queued responses below which a paused connection is read again.
pub const OUT_RESUME: usize = 256 << 10;

/// The frames waiting to be written to the socket, with the partial-write state and what the
/// limits on the output queue need to know.
#[derive(Default)]
pub(crate) struct OutQueue {
    frames: VecDeque<OutFrame>,
    /// Bytes of the front frame already written.
    pos: usize,
    /// The socket is registered for WRITABLE events.
    pub(super) write_armed: bool,
    /// Memory held by queued responses (what a peer that does not read makes this end keep).
    response_memory: usize,
    /// READ responses queued, the front one possibly partly written.
    read_responses: u32,
    /// Bytes written to the socket so far.
    written: u64,
    /// The NIC stopped reading the peer's requests: the responses went over [`OUT_CAP`].
    paused: bool,
    /// `written` when the pause began or was last found making progress.
    stall_mark: u64,
}

impl OutQueue {
    /// Whether no frame waits to be written.
    pub(super) fn is_empty(&self) -> bool {
        self.frames.is_empty()
    }

    /// Queues a frame; returns whether the queue was empty before (the caller then writes).
    pub(super) fn push(&mut self, frame: OutFrame) -> bool {
        let was_empty = self.frames.is_empty();
        self.count(&frame, true);
        self.frames.push_back(frame);
        was_empty
    }

    /// Puts a frame before every other (the answer that opens the stream of a queue pair
    /// connected by hand, ahead of what was posted before the stream was up). Only while
    /// nothing has been written yet.
    pub(super) fn push_first(&mut self, frame: OutFrame) {
        debug_assert_eq!(self.pos, 0, "a frame is partly written");
        self.count(&frame, true);
        self.frames.push_front(frame);
    }

    /// Counts a frame in (`add`) or out of the response totals.
    fn count(&mut self, frame: &OutFrame, add: bool) {
        let FrameKind::Response { read } = frame.kind else { return };
        let (memory, reads) = (frame.memory(), u32::from(read));
        if add {
            self.response_memory += memory;
            self.read_responses += reads;
        } else {
            self.response_memory -= memory;
            self.read_responses -= reads;
        }
    }

    /// Keeps only the frames `keep` accepts, and a partly written frame (to keep the stream
    /// framed).
    pub(super) fn retain(&mut self, mut keep: impl FnMut(&OutFrame) -> bool) {
        let partial = self.pos > 0;
        let mut kept = VecDeque::with_capacity(self.frames.len());
        for (i, f) in std::mem::take(&mut self.frames).into_iter().enumerate() {
            if (i == 0 && partial) || keep(&f) {
                kept.push_back(f);
            } else {
                self.count(&f, false);
            }
        }
        self.frames = kept;
    }

    /// Records `n` more bytes written: frames written whole leave the queue.
    fn advance(&mut self, n: usize) {
        self.written += n as u64;
        let mut n = self.pos + n;
        while let Some(f) = self.frames.front() {
            let l = f.len();
            if n < l {
                break;
            }
            n -= l;
            let f = self.frames.pop_front().expect("front checked");
            self.count(&f, false);
        }
        self.pos = n;
    }

    /// READ responses queued and not yet written whole.
    pub(crate) fn read_responses(&self) -> u32 {
        self.read_responses
    }

    /// Whether reading the peer's requests must pause now (responses over [`OUT_CAP`]); marks
    /// the pause.
    pub(crate) fn pause_if_full(&mut self) -> bool {
        if self.paused || self.response_memory <= OUT_CAP {
            return false;
        }
        self.paused = true;
        self.stall_mark = self.written;
        true
    }

    /// Whether reading is paused.
    pub(crate) fn paused(&self) -> bool {
        self.paused
    }

    /// Whether a paused connection wrote nothing since the pause began or since the last
    /// check; else the check starts over.
    pub(crate) fn stalled(&mut self) -> bool {
        let stalled = self.written == self.stall_mark;
        self.stall_mark = self.written;
        stalled
    }

    /// Ends a pause once the responses fell to [`OUT_RESUME`]; returns whether it ended.
    pub(super) fn resume_if_drained(&mut self) -> bool {
        if !self.paused || self.response_memory > OUT_RESUME {
            return false;
        }
        self.paused = false;
        true
    }

    /// Writes queued frames to `sock` until it is full or the queue is empty (non-blocking).
    #[inline]
    pub(super) fn write_to(&mut self, sock: BorrowedFd<'_>) -> io::Result<()> {
        while !self.frames.is_empty() {
            let sent = {
                // On the stack: a write allocates nothing.
                let mut parts: smallvec::SmallVec<[IoPart<'_>; MAX_IOV]> = smallvec::SmallVec::new();
                let mut skip = self.pos;
                'frames: for f in &self.frames {
                    // Header.
                    if skip >= HEADER_LEN {
                        skip -= HEADER_LEN;
                    } else {
                        parts.push(IoPart::Bytes(&f.hdr[skip..]));
                        skip = 0;
                    }
                    match &f.payload {
                        FramePayload::None => {}
                        FramePayload::Bytes(b) => {
                            if skip >= b.len() {
                                skip -= b.len();
                            } else {
                                parts.push(IoPart::Bytes(&b[skip..]));
                                skip = 0;
                            }
                        }
                        FramePayload::Segs(segs) => {
                            for s in segs {
                                if skip >= s.len {
                                    skip -= s.len;
                                    continue;
                                }
                                let r = s.buf.range(s.off + skip, s.len - skip).map_err(io::Error::other)?;
                                parts.push(IoPart::Region(r));
                                skip = 0;
                                if parts.len() >= MAX_IOV {
                                    break 'frames;
                                }
                            }
                        }
                    }
                    if parts.len() >= MAX_IOV - 4 {
                        break;
                    }
                }
                match memory::send_vectored(sock, &parts) {
                    Ok(n) => n,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(e),
                }
            };
            self.advance(sent);
        }
        Ok(())
    }
}
