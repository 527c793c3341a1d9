//! Unreliable-datagram multicast: an RDMA_PS_UDP CM id bound to the interface, a UD queue
//! pair, groups joined through `rdma_join_multicast`, sends through the group's address
//! handle, receives with the 40-byte GRH area stripped.
//!
//! The group port of [`UdInit`] is folded into the Q_Key, so endpoints on different ports do
//! not see each other's datagrams (RoCE multicast addresses carry no port).
//!
//! Unicast: the endpoint's address is that of its SIDR listener (see `sidr`); `send_unicast`
//! resolves a peer once and keeps its address handle. `Datagram::from` carries the sender's IP
//! (from the GRH/IPv4 header) and, when the sender resolved this endpoint (every unicast
//! sender did), its unicast port; otherwise port 0 (the headers carry no port).

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use rdma_sys::*;

use super::addr::{source_of_grh, CSockAddr};
use super::cm_id::{CmId, IdCtx, RawChannel};
use super::cq::{convert, Cq};
use super::device::{mtu_bytes, Device};
use super::mr::{Mr, PdInner};
use super::os::{errno, last_os};
use super::post::post_error;
use super::sidr::{resolve, SidrListener};
use crate::{Access, Datagram, Error, RegisteredBuffer, Result, UdInit, WorkCompletion};

/// Bytes in front of every received datagram (GRH, or the IPv4 header in its last 20 bytes).
const GRH_LEN: usize = 40;
/// Datagrams in flight before a send waits for completions.
const SEND_SLOTS: usize = 64;
/// How long a join waits for the subnet / IGMP machinery.
const JOIN_TIMEOUT: Duration = Duration::from_secs(10);
/// How long resolving a unicast address may take.
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a send waits for a free slot.
const SEND_TIMEOUT: Duration = Duration::from_secs(5);
/// The Q_Key librdmacm uses for RDMA_PS_UDP; the group port is folded into it.
const UDP_QKEY_BASE: u32 = 0x0123_4567;

/// The Q_Key of the groups of `port` (the high bit, "controlled Q_Key", stays clear).
fn qkey_for_port(port: u16) -> u32 {
    UDP_QKEY_BASE ^ u32::from(port)
}

/// A joined group or a resolved unicast peer: its address handle, QPN and Q_Key.
struct Group {
    ah: *mut ibv_ah,
    qpn: u32,
    qkey: u32,
}

impl Drop for Group {
    fn drop(&mut self) {
        // SAFETY: created by ibv_create_ah in `join`, destroyed once; no send using it is in
        // flight past the groups lock (posted sends keep no reference to the AH in rxe/mlx).
        unsafe { ibv_destroy_ah(self.ah) };
    }
}

/// The UD queue pair of an id; destroyed before the memory and CQs it uses.
struct UdQp {
    id: *mut rdma_cm_id,
    qp: *mut ibv_qp,
}

impl Drop for UdQp {
    fn drop(&mut self) {
        // SAFETY: the QP was created on this id (which outlives this guard) and is destroyed once.
        unsafe { rdma_destroy_qp(self.id) };
    }
}

/// Send slots in use: `next` posted, `done` completed.
struct SendRing {
    next: u64,
    done: u64,
}

/// A UD multicast endpoint.
pub(crate) struct UdEndpoint {
    port: u16,
    qkey: u32,
    mtu: usize,
    local: SocketAddr,
    recv_slots: u32,
    groups: Mutex<HashMap<Ipv4Addr, Group>>,
    /// Resolved unicast peers.
    peers: Mutex<HashMap<SocketAddrV4, Group>>,
    join_lock: Mutex<()>,
    ring: Mutex<SendRing>,
    send_buf: Arc<RegisteredBuffer>,
    recv_buf: Arc<RegisteredBuffer>,
    interface: Ipv4Addr,
    // Teardown after the groups are left (Drop::drop): SIDR listener, QP, MRs, CQs, id,
    // channel, PD.
    sidr: SidrListener,
    qp: UdQp,
    send_mr: Mr,
    recv_mr: Mr,
    send_cq: Cq,
    recv_cq: Cq,
    id: CmId,
    pd: Arc<PdInner>,
}

// SAFETY: verbs objects are thread-safe; the raw AH/QP pointers are used only under the
// `groups`/`ring` locks or through thread-safe verbs calls.
unsafe impl Send for UdEndpoint {}
// SAFETY: see Send.
unsafe impl Sync for UdEndpoint {}

impl UdEndpoint {
    /// Creates the endpoint on `init.interface` with `init.recv_depth` receives posted.
    pub(super) fn new(dev: &Arc<Device>, pd: Arc<PdInner>, init: &UdInit) -> Result<Self> {
        let unavailable =
            |detail: String| Error::MulticastUnavailable { interface: init.interface.to_string(), detail };
        let channel = Arc::new(RawChannel::new()?);
        let id = CmId::new(&channel, rdma_port_space::RDMA_PS_UDP, IdCtx::new(0, false, 0))?;
        let mut sa = CSockAddr::new(SocketAddr::new(init.interface.into(), 0));
        // SAFETY: the id is live; sa is valid for the call.
        if unsafe { rdma_bind_addr(id.raw(), sa.as_mut_ptr()) } != 0 {
            return Err(unavailable(format!("rdma_bind_addr: {}", std::io::Error::last_os_error())));
        }
        if id.verbs() != dev.ctx() {
            return Err(unavailable(format!("the interface is not on device {}", dev.name())));
        }
        // SAFETY: plain old data filled by the call.
        let mut port_attr: ibv_port_attr = unsafe { std::mem::zeroed() };
        // SAFETY: context open, valid out-pointer; the id is bound so its port is set.
        let rc = unsafe { ___ibv_query_port(dev.ctx(), (*id.raw()).port_num, &mut port_attr) };
        if rc != 0 {
            return Err(errno("ibv_query_port", rc));
        }
        let mtu = mtu_bytes(port_attr.active_mtu);
        let send_cq = Cq::new(dev, SEND_SLOTS as u32)?;
        let recv_cq = Cq::new(dev, init.recv_depth)?;
        let send_buf = Arc::new(RegisteredBuffer::new(SEND_SLOTS * mtu)?);
        let recv_buf = Arc::new(RegisteredBuffer::new(init.recv_depth as usize * (GRH_LEN + mtu))?);
        let send_mr = pd.register(send_buf.clone(), Access::NONE)?;
        let recv_mr = pd.register(recv_buf.clone(), Access::LOCAL_WRITE)?;
        let mut attr = ibv_qp_init_attr {
            qp_context: std::ptr::null_mut(),
            send_cq: send_cq.raw(),
            recv_cq: recv_cq.raw(),
            srq: std::ptr::null_mut(),
            cap: ibv_qp_cap {
                max_send_wr: SEND_SLOTS as u32,
                max_recv_wr: init.recv_depth,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            qp_type: ibv_qp_type::IBV_QPT_UD,
            sq_sig_all: 0,
        };
        // SAFETY: the id is bound to the PD's context; attr is valid for the call.
        if unsafe { rdma_create_qp(id.raw(), pd.raw(), &mut attr) } != 0 {
            return Err(last_os("rdma_create_qp(UD)"));
        }
        // SAFETY: rdma_create_qp succeeded: the id's QP is live (and in RTS for UD).
        let qp = UdQp { id: id.raw(), qp: unsafe { (*id.raw()).qp } };
        let qkey = qkey_for_port(init.port);
        // SAFETY: plain old data.
        let mut qattr: ibv_qp_attr = unsafe { std::mem::zeroed() };
        qattr.qkey = qkey;
        // SAFETY: the QP is live; only the Q_Key is read.
        let rc = unsafe { ibv_modify_qp(qp.qp, &mut qattr, ibv_qp_attr_mask::IBV_QP_QKEY.0 as i32) };
        if rc != 0 {
            return Err(errno("ibv_modify_qp(qkey)", rc));
        }
        // SAFETY: the QP is live.
        let sidr = SidrListener::start(init.interface, unsafe { (*qp.qp).qp_num }, qkey)?;
        let local = SocketAddr::V4(sidr.local());
        let ep = UdEndpoint {
            port: init.port,
            qkey,
            mtu,
            local,
            recv_slots: init.recv_depth,
            groups: Mutex::new(HashMap::new()),
            peers: Mutex::new(HashMap::new()),
            join_lock: Mutex::new(()),
            ring: Mutex::new(SendRing { next: 0, done: 0 }),
            send_buf,
            recv_buf,
            interface: init.interface,
            sidr,
            qp,
            send_mr,
            recv_mr,
            send_cq,
            recv_cq,
            id,
            pd,
        };
        for slot in 0..ep.recv_slots {
            ep.post_recv_slot(slot)?;
        }
        Ok(ep)
    }

    fn recv_slot_len(&self) -> usize {
        GRH_LEN + self.mtu
    }

    fn post_recv_slot(&self, slot: u32) -> Result<()> {
        let len = self.recv_slot_len();
        let mut sge = ibv_sge {
            addr: self.recv_buf.addr() + (slot as usize * len) as u64,
            length: len as u32,
            lkey: self.recv_mr.lkey(),
        };
        let mut wr = ibv_recv_wr { wr_id: u64::from(slot), next: std::ptr::null_mut(), sg_list: &mut sge, num_sge: 1 };
        let mut bad: *mut ibv_recv_wr = std::ptr::null_mut();
        // SAFETY: the QP is live; the SGE lies inside the registered receive buffer.
        let rc = unsafe { ibv_post_recv(self.qp.qp, &mut wr, &mut bad) };
        post_error(Ok(rc), "ibv_post_recv(UD)", "receive queue", self.recv_slots)
    }

    /// Moves send completions into the ring's count; waits up to `wait` for one when `block`.
    fn reap(&self, ring: &mut SendRing, wait: Option<Duration>) -> Result<()> {
        let mut wcs = [WorkCompletion::default(); 16];
        let n = match wait {
            Some(t) => self.send_cq.poll_blocking(&mut wcs, t)?,
            None => self.send_cq.poll(&mut wcs)?,
        };
        ring.done += n as u64;
        if let Some(bad) = wcs[..n].iter().find(|wc| !wc.status.is_success()) {
            return Err(Error::os(
                "UD send completion",
                None,
                std::io::Error::other(format!("status {:?}", bad.status)),
            ));
        }
        Ok(())
    }

    /// Sends `payload` through `g`'s address handle (the caller holds the lock of the map
    /// `g` is in, so the handle stays alive).
    fn send(&self, g: &Group, payload: &[u8]) -> Result<()> {
        let mut ring = self.ring.lock();
        self.reap(&mut ring, None)?;
        while ring.next - ring.done >= SEND_SLOTS as u64 {
            let before = ring.done;
            self.reap(&mut ring, Some(SEND_TIMEOUT))?;
            if ring.done == before {
                return Err(Error::Timeout { verb: "UD send", millis: SEND_TIMEOUT.as_millis() as u64 });
            }
        }
        let slot = (ring.next % SEND_SLOTS as u64) as usize;
        let offset = slot * self.mtu;
        self.send_buf.write(offset, payload)?;
        let mut sge = ibv_sge {
            addr: self.send_buf.addr() + offset as u64,
            length: payload.len() as u32,
            lkey: self.send_mr.lkey(),
        };
        // SAFETY: plain old data.
        let mut wr: ibv_send_wr = unsafe { std::mem::zeroed() };
        wr.wr_id = slot as u64;
        wr.sg_list = &mut sge;
        wr.num_sge = 1;
        wr.opcode = ibv_wr_opcode::IBV_WR_SEND;
        wr.send_flags = ibv_send_flags::IBV_SEND_SIGNALED.0;
        wr.wr.ud = ud_t { ah: g.ah, remote_qpn: g.qpn, remote_qkey: g.qkey };
        let mut bad: *mut ibv_send_wr = std::ptr::null_mut();
        // SAFETY: QP and AH are live (the lock of its map is held); the SGE lies in the
        // registered send buffer, whose slot is not reused before its completion.
        let rc = unsafe { ibv_post_send(self.qp.qp, &mut wr, &mut bad) };
        post_error(Ok(rc), "ibv_post_send(UD)", "send queue", SEND_SLOTS as u32)?;
        ring.next += 1;
        Ok(())
    }

    fn qp_num(&self) -> u32 {
        // SAFETY: the QP is live while self is.
        unsafe { (*self.qp.qp).qp_num }
    }

    fn group_addr(&self, group: Ipv4Addr) -> CSockAddr {
        CSockAddr::new(SocketAddr::new(group.into(), self.port))
    }
}

impl Drop for UdEndpoint {
    fn drop(&mut self) {
        self.peers.get_mut().clear();
        let groups: Vec<(Ipv4Addr, Group)> = self.groups.get_mut().drain().collect();
        for (group, g) in groups {
            let mut sa = self.group_addr(group);
            // SAFETY: the id is live and joined to the group.
            unsafe { rdma_leave_multicast(self.id.raw(), sa.as_mut_ptr()) };
            drop(g);
        }
        // Fields drop next: QP, MRs, CQs, id (and its channel), PD.
    }
}

impl UdEndpoint {
    /// Joins `group`.
    pub(crate) fn join(&self, group: Ipv4Addr) -> Result<()> {
        let _serial = self.join_lock.lock();
        if self.groups.lock().contains_key(&group) {
            return Ok(());
        }
        let unavailable =
            |detail: String| Error::MulticastUnavailable { interface: self.local.ip().to_string(), detail };
        let mut sa = self.group_addr(group);
        // SAFETY: the id is live with its QP; sa is valid for the call.
        if unsafe { rdma_join_multicast(self.id.raw(), sa.as_mut_ptr(), std::ptr::null_mut()) } != 0 {
            return Err(unavailable(format!("rdma_join_multicast({group}): {}", std::io::Error::last_os_error())));
        }
        let deadline = Instant::now() + JOIN_TIMEOUT;
        let outcome = self.id.channel().next_event(deadline, |ev| {
            if ev.event != rdma_cm_event_type::RDMA_CM_EVENT_MULTICAST_JOIN {
                return Err(format!("event {} status {}", ev.event, ev.status));
            }
            // SAFETY: for MULTICAST_JOIN the ud member of the union is valid until the ack.
            let mut ud = unsafe { ev.param.ud };
            // SAFETY: the PD is live; ah_attr is valid for the call.
            let ah = unsafe { ibv_create_ah(self.pd.raw(), &mut ud.ah_attr) };
            if ah.is_null() {
                return Err(format!("ibv_create_ah: {}", std::io::Error::last_os_error()));
            }
            Ok(Group { ah, qpn: ud.qp_num, qkey: self.qkey })
        })?;
        let joined = match outcome {
            Some(Ok(g)) => g,
            Some(Err(detail)) => return Err(unavailable(format!("joining {group}: {detail}"))),
            None => return Err(unavailable(format!("joining {group}: no answer in {JOIN_TIMEOUT:?}"))),
        };
        self.groups.lock().insert(group, joined);
        Ok(())
    }

    /// Leaves `group`.
    pub(crate) fn leave(&self, group: Ipv4Addr) -> Result<()> {
        let _serial = self.join_lock.lock();
        let Some(g) = self.groups.lock().remove(&group) else {
            return Ok(());
        };
        let mut sa = self.group_addr(group);
        // SAFETY: the id is live and joined to the group.
        let rc = unsafe { rdma_leave_multicast(self.id.raw(), sa.as_mut_ptr()) };
        drop(g);
        if rc != 0 {
            return Err(last_os("rdma_leave_multicast"));
        }
        Ok(())
    }

    /// Sends `payload` (at most `mtu()` bytes, already checked) to `group`.
    pub(crate) fn send_to(&self, group: Ipv4Addr, payload: &[u8]) -> Result<()> {
        let groups = self.groups.lock();
        let g = groups.get(&group).ok_or_else(|| {
            Error::invalid("send_to", format!("join {group} first: verbs sends through the group's address handle"))
        })?;
        self.send(g, payload)
    }

    /// Sends `payload` to one endpoint by unicast (where multicast is unavailable).
    pub(crate) fn send_unicast(&self, to: SocketAddrV4, payload: &[u8]) -> Result<()> {
        if let Some(peer) = self.peers.lock().get(&to) {
            return self.send(peer, payload);
        }
        // Resolve without holding the lock (a SIDR round trip); a racing resolution of the
        // same peer keeps the first handle.
        let r = resolve(self.interface, to, self.sidr.local().port(), self.qp_num(), RESOLVE_TIMEOUT)?;
        let mut ah_attr = r.ah_attr;
        // SAFETY: the PD is live; ah_attr is valid for the call.
        let ah = unsafe { ibv_create_ah(self.pd.raw(), &mut ah_attr) };
        if ah.is_null() {
            return Err(last_os("ibv_create_ah(unicast)"));
        }
        let mut peers = self.peers.lock();
        let peer = peers.entry(to).or_insert(Group { ah, qpn: r.qpn, qkey: r.qkey });
        if peer.ah != ah {
            // SAFETY: created above and never used.
            unsafe { ibv_destroy_ah(ah) };
        }
        self.send(peer, payload)
    }

    /// Waits up to `timeout` for a datagram.
    pub(crate) fn recv(&self, timeout: Duration) -> Result<Option<Datagram>> {
        let deadline = crate::time::deadline_after(timeout);
        // SAFETY: ibv_wc is plain old data; zero is a valid value.
        let mut raw: [ibv_wc; 1] = unsafe { std::mem::zeroed() };
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if self.recv_cq.poll_raw_blocking(&mut raw, left)? == 0 {
                return Ok(None);
            }
            let wc = convert(&raw[0]);
            let slot = wc.wr_id as u32;
            if !wc.status.is_success() {
                if wc.status == crate::WcStatus::WorkRequestFlushed {
                    return Err(Error::Closed);
                }
                self.post_recv_slot(slot)?;
                continue;
            }
            let len = wc.byte_len as usize;
            if len < GRH_LEN || slot >= self.recv_slots {
                self.post_recv_slot(slot.min(self.recv_slots - 1))?;
                continue;
            }
            let base = slot as usize * self.recv_slot_len();
            let mut grh = [0u8; GRH_LEN];
            self.recv_buf.read(base, &mut grh)?;
            let mut data = vec![0u8; len - GRH_LEN];
            self.recv_buf.read(base + GRH_LEN, &mut data)?;
            self.post_recv_slot(slot)?;
            let ip = source_of_grh(&grh).unwrap_or(Ipv4Addr::UNSPECIFIED);
            let port = self.sidr.sender_port(ip, raw[0].src_qp).unwrap_or(0);
            return Ok(Some(Datagram { from: SocketAddr::new(ip.into(), port), data }));
        }
    }

    /// The largest payload.
    pub(crate) fn mtu(&self) -> usize {
        self.mtu
    }

    /// The endpoint's own address (where unicast reaches it).
    pub(crate) fn local_addr(&self) -> SocketAddr {
        self.local
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qkeys_differ_by_port_and_stay_uncontrolled() {
        assert_eq!(qkey_for_port(0), UDP_QKEY_BASE);
        assert_ne!(qkey_for_port(4791), qkey_for_port(4792));
        assert_eq!(qkey_for_port(u16::MAX) & 0x8000_0000, 0);
    }
}
