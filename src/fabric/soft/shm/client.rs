//! The requester's side of a same-host connection: its stream to the responder's device, the
//! responder's key table and regions as mapped so far, the copies that replace RDMA READ and
//! WRITE, and the responder's inbox that SENDs are written into.

use std::collections::HashMap;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{fence, Ordering};

use super::bell::PeerBell;
use super::fds::{recv_with_fds, send_with_fds};
use super::inbox::InboxWriter;
use super::keys::{KeySlot, PeerKeys};
use super::map::PeerMapping;
use super::pool::PeerPool;
use super::proto::{Answer, Request, ANSWER_LEN, WANT_KEYS};
use crate::fabric::soft::conn::Seg;
use crate::fabric::types::{Access, WcStatus};

/// Regions of one peer kept mapped; past this, the mappings are dropped and fetched again.
const MAX_REGIONS: usize = 256;

/// A responder's region as mapped here.
struct PeerRegion {
    map: PeerMapping,
    base: u64,
    len: u64,
    access: Access,
    slot: KeySlot,
}

/// The responder's inbox, receive pool and bell, as this end writes SENDs into them.
struct Outbox {
    inbox: InboxWriter,
    pool: PeerPool,
    bell: PeerBell,
}

/// The requester's state of one same-host connection.
pub(crate) struct ShmClient {
    stream: UnixStream,
    keys: Option<PeerKeys>,
    regions: HashMap<u32, PeerRegion>,
    /// The responder's inbox once asked for (`None` inside: it refused).
    outbox: Option<Option<Outbox>>,
    /// The responder's key slot for this connection: live while its queue pair answers.
    conn: Option<KeySlot>,
    /// The stream failed: later operations fail as transport errors.
    broken: bool,
}

impl ShmClient {
    pub(crate) fn new(stream: UnixStream) -> ShmClient {
        ShmClient { stream, keys: None, regions: HashMap::new(), outbox: None, conn: None, broken: false }
    }

    /// Maps the responder's inbox unless asked for already (a round trip to its NIC thread, as
    /// for [`prefetch`](Self::prefetch)).
    pub(crate) fn prefetch_inbox(&mut self) {
        if self.broken || self.outbox.is_some() {
            return;
        }
        match self.fetch_inbox() {
            Ok(outbox) => self.outbox = Some(outbox),
            Err(e) => {
                tracing::debug!("soft same-host: inbox request failed: {e}");
                self.broken = true;
            }
        }
    }

    /// Writes a SEND of `len` bytes gathered from `segs` into the responder's inbox, after
    /// claiming one of its posted receives large enough, and rings its bell. False when that
    /// cannot be done now (no inbox, no receive to claim, no room): the SEND then takes the
    /// connection's stream.
    pub(crate) fn send(&mut self, segs: &[Seg], len: usize, imm: Option<u32>, solicited: bool) -> bool {
        let (Some(Some(out)), Some(keys), Some(conn)) = (self.outbox.as_mut(), self.keys.as_ref(), self.conn) else {
            return false;
        };
        // A responder whose queue pair failed or closed answers nothing: the SEND takes the
        // stream, which fails it as the network path would.
        if !keys.live(conn) || !out.inbox.fits(len) || !out.pool.try_claim(len) {
            return false;
        }
        if !out.inbox.write(segs, len, imm, solicited) {
            // Only a responder that moved its head backwards gets here; the claim is lost.
            return false;
        }
        out.bell.ring(solicited);
        true
    }

    /// Maps the region of `rkey` unless it is mapped, asking the peer (a round trip to its NIC
    /// thread: callers hold no lock of the connection but this client's); a failure is reported
    /// by the copy.
    pub(crate) fn prefetch(&mut self, rkey: u32) {
        if self.broken || self.regions.contains_key(&rkey) {
            return;
        }
        match self.fetch(rkey) {
            Ok(Some(region)) => {
                if self.regions.len() >= MAX_REGIONS {
                    self.regions.clear();
                }
                self.regions.insert(rkey, region);
            }
            Ok(None) => {}
            Err(e) => {
                tracing::debug!("soft same-host: region request for rkey {rkey:#x} failed: {e}");
                self.broken = true;
            }
        }
    }

    /// An RDMA READ (`read`) of `[addr, addr + total)` of region `rkey` into `segs`, or a WRITE
    /// of `segs` there, by this thread, on a region [`prefetch`](Self::prefetch) mapped: one the
    /// peer refused fails as a remote access error, one it never answered for as a transport
    /// error. A region found revoked is unmapped.
    pub(crate) fn copy(&mut self, rkey: u32, addr: u64, segs: &[Seg], read: bool) -> WcStatus {
        let need = if read { Access::REMOTE_READ } else { Access::REMOTE_WRITE };
        let (status, revoked) = match (self.regions.get(&rkey), self.keys.as_ref(), self.conn) {
            (Some(region), Some(keys), Some(conn)) => copy_region(region, keys, conn, addr, segs, need),
            _ if self.broken => return WcStatus::TransportRetryExceeded,
            _ => return WcStatus::RemoteAccessError,
        };
        if revoked {
            self.regions.remove(&rkey);
        }
        status
    }

    /// Asks the responder for region `rkey`: `None` when it refuses (no such region in this
    /// connection's protection domain, or no remote access).
    fn fetch(&mut self, rkey: u32) -> io::Result<Option<PeerRegion>> {
        let want_keys = self.keys.is_none();
        let req = Request::Region { rkey, flags: if want_keys { WANT_KEYS } else { 0 } };
        let (answer, fds) = self.ask(req)?;
        if !answer.granted {
            return Ok(None);
        }
        let expected = 1 + usize::from(want_keys);
        if fds.len() != expected {
            return Err(invalid("answer with the wrong number of descriptors"));
        }
        if want_keys {
            let keys = PeerKeys::map(fds[1].as_fd()).map_err(io::Error::other)?;
            self.keys = Some(keys);
        }
        let slot = KeySlot::from_peer(answer.slot, answer.word).map_err(io::Error::other)?;
        self.learn_conn(&answer)?;
        let access = answer.access();
        if answer.base.checked_add(answer.len).is_none() || answer.len > isize::MAX as u64 {
            return Err(invalid("region out of the address space"));
        }
        let map_len = (answer.len as usize).max(1);
        let map = PeerMapping::new(fds[0].as_fd(), map_len, access.contains(Access::REMOTE_WRITE))
            .map_err(io::Error::other)?;
        Ok(Some(PeerRegion { map, base: answer.base, len: answer.len, access, slot }))
    }

    /// Asks the responder for this connection's inbox: `None` when it refuses.
    fn fetch_inbox(&mut self) -> io::Result<Option<Outbox>> {
        let want_keys = self.keys.is_none();
        let (answer, fds) = self.ask(Request::Inbox { flags: if want_keys { WANT_KEYS } else { 0 } })?;
        if !answer.granted {
            return Ok(None);
        }
        let (inbox, info, claims, bell) = match (&fds[..], want_keys) {
            ([inbox, info, claims, bell], false) => (inbox, info, claims, bell),
            ([inbox, info, claims, bell, keys], true) => {
                self.keys = Some(PeerKeys::map(keys.as_fd()).map_err(io::Error::other)?);
                (inbox, info, claims, bell)
            }
            _ => return Err(invalid("inbox answer with the wrong number of descriptors")),
        };
        self.learn_conn(&answer)?;
        Ok(Some(Outbox {
            inbox: InboxWriter::map(inbox.as_fd()).map_err(io::Error::other)?,
            pool: PeerPool::map(info.as_fd(), claims.as_fd()).map_err(io::Error::other)?,
            bell: PeerBell::map(bell.as_fd()).map_err(io::Error::other)?,
        }))
    }

    /// Takes the connection's key slot from a granted answer (the same in every answer).
    fn learn_conn(&mut self, answer: &Answer) -> io::Result<()> {
        let conn = KeySlot::from_peer(answer.conn_slot, answer.conn_word).map_err(io::Error::other)?;
        if self.conn.is_some_and(|known| known != conn) {
            return Err(invalid("answers name two different connection slots"));
        }
        self.conn = Some(conn);
        Ok(())
    }

    /// Sends a request and reads its answer with the descriptors attached to it.
    fn ask(&mut self, req: Request) -> io::Result<(Answer, Vec<OwnedFd>)> {
        let bytes = req.encode();
        if send_with_fds(&self.stream, &bytes, &[])? != bytes.len() {
            return Err(io::Error::new(io::ErrorKind::WriteZero, "short request"));
        }
        let mut buf = [0u8; ANSWER_LEN];
        let mut got = 0;
        let mut fds: Vec<OwnedFd> = Vec::new();
        while got < ANSWER_LEN {
            let (n, more) = recv_with_fds(&self.stream, &mut buf[got..])?;
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
