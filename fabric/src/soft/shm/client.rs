//! The requester's side of a same-host connection: its stream to the responder's device, the
//! responder's key table and regions as mapped so far, the copies that replace RDMA READ and
//! WRITE, and the responder's inbox that SENDs are written into.

use std::collections::HashMap;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{fence, AtomicBool, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use super::bell::PeerBell;
use super::fds::recv_with_fds;
use super::inbox::InboxWriter;
use super::keys::{KeySlot, PeerKeys};
use super::map::PeerMapping;
use super::pool::PeerCredits;
use super::proto::{Answer, Request, ANSWER_LEN, WANT_KEYS};
use super::view::{ShmView, ViewRefused};
use crate::memory::{send_vectored, IoPart};
use crate::soft::seg::Seg;
use crate::types::{Access, WcStatus};

/// Regions of one peer kept mapped; past this, the mappings are dropped and fetched again.
const MAX_REGIONS: usize = 256;

/// A responder's region as mapped here.
struct PeerRegion {
    /// Shared with the views handed out ([`ShmView`]), which keep it mapped.
    map: Arc<PeerMapping>,
    base: u64,
    len: u64,
    access: Access,
    slot: KeySlot,
}

/// The responder's inbox, this end's receive credits and this end's place at the responder's
/// bell, as this end writes SENDs into them.
struct Outbox {
    inbox: InboxWriter,
    credits: PeerCredits,
    bell: PeerBell,
}

/// The requester's state of one same-host connection. Requests to the responder (a round
/// trip to its NIC thread) go one at a time under `stream`, which no other lock is held with;
/// what they mapped is kept under `mapped`, whose holders never wait for anything. So a thread
/// that copies or SENDs (the NIC thread among them, under the connection's `st`) never waits
/// for the peer's NIC thread.
pub(crate) struct ShmClient {
    stream: Mutex<UnixStream>,
    mapped: Mutex<Mapped>,
    /// Set when the connection closed: the views handed out read no more.
    closed: Arc<AtomicBool>,
}

/// What a [`ShmClient`] has mapped of the responder.
#[derive(Default)]
struct Mapped {
    /// Shared with the views handed out.
    keys: Option<Arc<PeerKeys>>,
    regions: HashMap<u32, PeerRegion>,
    /// The responder's inbox once asked for (`None` inside: it refused).
    outbox: Option<Option<Outbox>>,
    /// The responder's key slot for this connection: live while its queue pair answers.
    conn: Option<KeySlot>,
    /// The stream failed or the connection closed: later operations fail as transport errors.
    broken: bool,
}

impl ShmClient {
    pub(crate) fn new(stream: UnixStream) -> ShmClient {
        ShmClient {
            stream: Mutex::new(stream),
            mapped: Mutex::new(Mapped::default()),
            closed: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Maps the responder's inbox unless asked for already (a round trip to its NIC thread, as
    /// for [`prefetch`](Self::prefetch)).
    pub(crate) fn prefetch_inbox(&self) {
        self.ask_unless(
            |m| m.outbox.is_some(),
            |stream, want_keys| {
                let (answer, fds) = ask(stream, Request::Inbox { flags: if want_keys { WANT_KEYS } else { 0 } })?;
                Ok(Fetched::Inbox(open_inbox(answer, fds, want_keys)?))
            },
        );
    }

    /// Writes a SEND of `len` bytes gathered from `segs` into the responder's inbox with one of
    /// the receive credits it granted this end, and rings its bell. False when that cannot be
    /// done now (no inbox, no credit, receives too small, no room): the SEND then takes the
    /// connection's stream.
    pub(crate) fn send(&self, segs: &[Seg], len: usize, imm: Option<u32>, solicited: bool) -> bool {
        let mut mapped = self.mapped.lock();
        let Mapped { outbox, keys, conn, .. } = &mut *mapped;
        let (Some(Some(out)), Some(keys), Some(conn)) = (outbox.as_mut(), keys.as_ref(), *conn) else {
            return false;
        };
        // A responder whose queue pair failed or closed answers nothing: the SEND takes the
        // stream, which fails it as the network path would.
        if !keys.live(conn) {
            return false;
        }
        let Some(room) = out.inbox.reserve(len) else { return false };
        if !out.credits.try_claim(len) {
            return false;
        }
        // A copy refused by our own registered buffer or the mapping would lose the credit;
        // the SEND was checked against both when posted.
        if !out.inbox.write(room, segs, imm, solicited) {
            return false;
        }
        out.bell.ring(solicited);
        true
    }

    /// Maps the region of `rkey` unless it is mapped, asking the peer (a round trip to its NIC
    /// thread: callers hold no lock of the connection); a failure is reported by the copy.
    pub(crate) fn prefetch(&self, rkey: u32) {
        self.ask_unless(
            |m| m.regions.contains_key(&rkey),
            |stream, want_keys| {
                let req = Request::Region { rkey, flags: if want_keys { WANT_KEYS } else { 0 } };
                let (answer, fds) = ask(stream, req)?;
                Ok(Fetched::Region(rkey, open_region(answer, fds, want_keys)?))
            },
        );
    }

    /// An RDMA READ (`read`) of `[addr, addr + total)` of region `rkey` into `segs`, or a WRITE
    /// of `segs` there, by this thread, on a region [`prefetch`](Self::prefetch) mapped: one the
    /// peer refused fails as a remote access error, one it never answered for as a transport
    /// error. A region found revoked is unmapped.
    pub(crate) fn copy(&self, rkey: u32, addr: u64, segs: &[Seg], read: bool) -> WcStatus {
        let need = if read { Access::REMOTE_READ } else { Access::REMOTE_WRITE };
        let mut mapped = self.mapped.lock();
        let (status, revoked) = match (mapped.regions.get(&rkey), mapped.keys.as_ref(), mapped.conn) {
            (Some(region), Some(keys), Some(conn)) => copy_region(region, keys, conn, addr, segs, need),
            _ if mapped.broken => return WcStatus::TransportRetryExceeded,
            _ => return WcStatus::RemoteAccessError,
        };
        if revoked {
            mapped.regions.remove(&rkey);
        }
        status
    }

    /// A view of `[addr, addr + len)` of region `rkey`, mapped by [`prefetch`](Self::prefetch),
    /// checked as a READ of that range is checked: the region granted remote read to this
    /// connection's protection domain, the range is inside it, and the key-table words of the
    /// region and of the connection's queue pair are live.
    pub(crate) fn view(&self, rkey: u32, addr: u64, len: usize) -> Result<ShmView, ViewRefused> {
        let mapped = self.mapped.lock();
        let (Some(region), Some(keys), Some(conn)) = (mapped.regions.get(&rkey), mapped.keys.as_ref(), mapped.conn)
        else {
            return Err(if mapped.broken { ViewRefused::Transport } else { ViewRefused::Access });
        };
        let start = addr
            .checked_sub(region.base)
            .filter(|off| {
                region.access.contains(Access::REMOTE_READ)
                    && off.checked_add(len as u64).is_some_and(|end| end <= region.len)
            })
            .ok_or(ViewRefused::Access)?;
        let view = ShmView::new(region.map.clone(), keys.clone(), region.slot, conn, self.closed.clone(), start, len);
        view.check_live()?;
        Ok(view)
    }

    /// The connection closed: unmaps everything of the peer and ends the stream (the peer's
    /// device then forgets it); later operations fail as transport errors.
    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::Release);
        *self.mapped.lock() = Mapped { broken: true, ..Mapped::default() };
        let _ = self.stream.lock().shutdown(std::net::Shutdown::Both);
    }

    /// Unless `known` says so of what is mapped, or the stream broke, asks the responder with
    /// `fetch` (given the stream and whether the key table is still to be asked for) and keeps
    /// what it answers. The request is made under `stream` alone; a thread that asked for the
    /// same thing meanwhile is not asked for again.
    fn ask_unless(
        &self,
        known: impl Fn(&Mapped) -> bool,
        fetch: impl FnOnce(&UnixStream, bool) -> io::Result<Fetched>,
    ) {
        let done = |m: &Mapped| m.broken || known(m);
        if done(&self.mapped.lock()) {
            return;
        }
        let stream = self.stream.lock();
        let want_keys = {
            let m = self.mapped.lock();
            if done(&m) {
                return;
            }
            m.keys.is_none()
        };
        let fetched = fetch(&stream, want_keys);
        drop(stream);
        let mut m = self.mapped.lock();
        if let Err(e) = fetched.and_then(|f| m.keep(f)) {
            tracing::debug!("soft same-host: a request to the peer failed: {e}");
            m.broken = true;
        }
    }
}

/// What a request brought: a region or the inbox (`None`: refused), with the connection's slot
/// and the key table when they came with it.
enum Fetched {
    Region(u32, Option<Granted<PeerRegion>>),
    Inbox(Option<Granted<Outbox>>),
}

/// A granted answer's object, with what every granted answer carries.
struct Granted<T> {
    object: T,
    conn: KeySlot,
    keys: Option<Arc<PeerKeys>>,
}

impl Mapped {
    /// Keeps what a request brought.
    fn keep(&mut self, fetched: Fetched) -> io::Result<()> {
        match fetched {
            Fetched::Region(rkey, granted) => {
                if let Some(region) = granted.map(|g| self.learn(g)).transpose()? {
                    if self.regions.len() >= MAX_REGIONS {
                        self.regions.clear();
                    }
                    self.regions.insert(rkey, region);
                }
            }
            Fetched::Inbox(granted) => self.outbox = Some(granted.map(|g| self.learn(g)).transpose()?),
        }
        Ok(())
    }

    /// Takes a granted answer's key table (if it brought one) and connection slot (the same in
    /// every answer), and returns its object.
    fn learn<T>(&mut self, granted: Granted<T>) -> io::Result<T> {
        if self.conn.is_some_and(|known| known != granted.conn) {
            return Err(invalid("answers name two different connection slots"));
        }
        self.conn = Some(granted.conn);
        if let Some(keys) = granted.keys {
            self.keys.get_or_insert(keys);
        }
        Ok(granted.object)
    }
}

/// The responder's answer to a region request: `None` when it refuses (no such region in this
/// connection's protection domain, or no remote access).
fn open_region(answer: Answer, fds: Vec<OwnedFd>, want_keys: bool) -> io::Result<Option<Granted<PeerRegion>>> {
    if !answer.granted {
        return Ok(None);
    }
    let expected = 1 + usize::from(want_keys);
    if fds.len() != expected {
        return Err(invalid("answer with the wrong number of descriptors"));
    }
    let keys = want_keys.then(|| PeerKeys::map(fds[1].as_fd()).map(Arc::new).map_err(io::Error::other)).transpose()?;
    let slot = KeySlot::from_peer(answer.slot, answer.word).map_err(io::Error::other)?;
    let access = answer.access();
    if answer.base.checked_add(answer.len).is_none() || answer.len > isize::MAX as u64 {
        return Err(invalid("region out of the address space"));
    }
    let map_len = (answer.len as usize).max(1);
    let map = PeerMapping::new(fds[0].as_fd(), map_len, access.contains(Access::REMOTE_WRITE))
        .map(Arc::new)
        .map_err(io::Error::other)?;
    let region = PeerRegion { map, base: answer.base, len: answer.len, access, slot };
    Ok(Some(Granted { object: region, conn: conn_slot(&answer)?, keys }))
}

/// The responder's answer to an inbox request: `None` when it refuses.
fn open_inbox(answer: Answer, fds: Vec<OwnedFd>, want_keys: bool) -> io::Result<Option<Granted<Outbox>>> {
    if !answer.granted {
        return Ok(None);
    }
    let expected = 5 + usize::from(want_keys);
    if fds.len() != expected {
        return Err(invalid("inbox answer with the wrong number of descriptors"));
    }
    let mut fds = fds.into_iter();
    let mut next = || fds.next().expect("counted above");
    let (inbox, credits, owner, hint, event) = (next(), next(), next(), next(), next());
    let keys = want_keys.then(|| PeerKeys::map(next().as_fd()).map(Arc::new).map_err(io::Error::other)).transpose()?;
    let outbox = Outbox {
        inbox: InboxWriter::map(inbox.as_fd()).map_err(io::Error::other)?,
        credits: PeerCredits::map(credits.as_fd()).map_err(io::Error::other)?,
        bell: PeerBell::map(owner.as_fd(), hint.as_fd(), event).map_err(io::Error::other)?,
    };
    Ok(Some(Granted { object: outbox, conn: conn_slot(&answer)?, keys }))
}

/// The connection's key slot a granted answer names.
fn conn_slot(answer: &Answer) -> io::Result<KeySlot> {
    KeySlot::from_peer(answer.conn_slot, answer.conn_word).map_err(io::Error::other)
}

/// Sends a request and reads its answer with the descriptors attached to it.
fn ask(stream: &UnixStream, req: Request) -> io::Result<(Answer, Vec<OwnedFd>)> {
    let bytes = req.encode();
    if send_vectored(stream.as_fd(), &[IoPart::Bytes(&bytes)])? != bytes.len() {
        return Err(io::Error::new(io::ErrorKind::WriteZero, "short request"));
    }
    let mut buf = [0u8; ANSWER_LEN];
    let mut got = 0;
    let mut fds: Vec<OwnedFd> = Vec::new();
    while got < ANSWER_LEN {
        let (n, more) = recv_with_fds(stream, &mut buf[got..])?;
        if n == 0 {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "the responder closed the stream"));
        }
        got += n;
        fds.extend(more);
    }
    let answer = Answer::decode(&buf).ok_or_else(|| invalid("malformed answer"))?;
    if !answer.granted && !fds.is_empty() {
        return Err(invalid("a refusal with descriptors"));
    }
    Ok((answer, fds))
}

/// Copies between `segs` and `[addr, addr + total)` of a mapped region (`need`: READ or WRITE
/// access), checking the key-table words of the region and of the connection's queue pair
/// (`conn`) before and after; also says whether the region was found revoked.
fn copy_region(
    region: &PeerRegion,
    keys: &PeerKeys,
    conn: KeySlot,
    addr: u64,
    segs: &[Seg],
    need: Access,
) -> (WcStatus, bool) {
    let total: u64 = segs.iter().map(|s| s.len as u64).sum();
    let Some(start) = addr
        .checked_sub(region.base)
        .filter(|off| region.access.contains(need) && off.checked_add(total).is_some_and(|end| end <= region.len))
    else {
        return (WcStatus::RemoteAccessError, false);
    };
    if !keys.live(region.slot) {
        return (WcStatus::RemoteAccessError, true);
    }
    if !keys.live(conn) {
        return (WcStatus::TransportRetryExceeded, false);
    }
    let mut off = start as usize;
    for s in segs {
        let Ok(local) = s.buf.raw_range(s.off, s.len) else { return (WcStatus::LocalProtectionError, false) };
        // SAFETY: `local` is a bounds-checked range of a registered buffer kept alive by the
        // segment; registered memory is only accessed through atomics and raw pointers.
        let done = unsafe {
            if need == Access::REMOTE_READ {
                region.map.copy_out(off, local, s.len)
            } else {
                region.map.copy_in(off, local, s.len)
            }
        };
        if !done {
            return (WcStatus::RemoteAccessError, false);
        }
        off += s.len;
    }
    // The copy's loads come before the second look at the slot: a revocation that raced
    // with them is seen (the owner revokes before it writes the region again).
    fence(Ordering::Acquire);
    if !keys.live(region.slot) {
        return (WcStatus::RemoteAccessError, true);
    }
    if !keys.live(conn) {
        return (WcStatus::TransportRetryExceeded, false);
    }
    (WcStatus::Success, false)
}

fn invalid(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.to_string())
}
