//! Unreliable datagrams over UDP multicast; no NIC thread is involved. Received datagrams pass
//! through the device's fault injector.
//!
//! Each endpoint owns:
//! - a *unicast* socket on a port of its own on the interface address: everything is sent from
//!   it, and its address is the endpoint's `local_addr`, so a unicast datagram (or a reply to a
//!   datagram's sender address) reaches exactly this endpoint. This is where an endpoint hears
//!   unicast peers;
//! - one *group* socket per joined group, bound to the group's address and the group port
//!   (shared with the other endpoints of the host through SO_REUSEADDR/SO_REUSEPORT). Bound to
//!   the group address, it hears only datagrams sent to that group: a unicast datagram to the
//!   port, from anywhere, never reaches it (bound to `0.0.0.0`, it did, so any host could
//!   reach a multicast-only endpoint). It has `IP_MULTICAST_ALL` off, so it hears only its own
//!   membership, not the groups other sockets of the host joined; the kernel hands every
//!   multicast datagram to each member socket. Leaving a group closes its socket.
//!
//! Received datagrams wait in a queue of at most `recv_depth` (the receives a NIC would have
//! posted): when the fault injector delays them and the queue is full, further ones are dropped,
//! as a NIC drops a datagram that finds no receive posted. Between the sockets, reads take
//! turns, so a flood on one does not starve the others.

use std::collections::VecDeque;
use std::io;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Registry, Token};
use parking_lot::Mutex;
use rand::RngExt;
use socket2::{Domain, Protocol, Socket, Type};

use super::device::{Device, SoftCounters};
use crate::error::{Error, Result};
use crate::types::{Datagram, UdInit};

/// A UD endpoint.
pub(crate) struct SoftUd {
    /// Bound to a port of its own on the interface; sends everything; receives unicast.
    unicast: UdpSocket,
    /// One socket per joined group, bound to the group's address and port.
    groups: Mutex<Vec<GroupSocket>>,
    /// Registers group sockets with the receive side's poll.
    registry: Registry,
    local: SocketAddr,
    interface: Ipv4Addr,
    /// The group port (the unicast socket's when the endpoint was created with port 0).
    port: u16,
    mtu: usize,
    /// Receive buffer size of each socket.
    buffer: usize,
    /// Most datagrams waiting for delivery (the receive depth).
    depth: usize,
    dev: Arc<Device>,
    rx: Mutex<UdRx>,
}

/// The socket of one joined group.
struct GroupSocket {
    group: Ipv4Addr,
    socket: UdpSocket,
    /// The socket's count of kernel drops as last seen.
    drops: u32,
}

struct UdRx {
    /// Datagrams received and not yet delivered (delayed or duplicated by faults), at most
    /// `depth`.
    pending: VecDeque<(Instant, Datagram)>,
    buf: Vec<u8>,
    /// The unicast socket's count of kernel drops as last seen.
    unicast_drops: u32,
    /// Readiness of every socket (edge-triggered: waited on only once all are drained).
    poll: Poll,
    events: Events,
    /// Which socket is read first next time (0: the unicast one, then the groups in turn).
    first: usize,
}

fn unavailable(interface: Ipv4Addr, what: String, e: &io::Error) -> Error {
    Error::MulticastUnavailable {
        interface: interface.to_string(),
        detail: format!(
            "{what}: {e}; enable multicast on that interface (e.g. `ip link set lo multicast on` and \
             `ip route add 224.0.0.0/4 dev lo` for loopback) or use unicast announcements"
        ),
    }
}

fn is_unavailable(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::ENODEV | libc::ENETUNREACH | libc::EADDRNOTAVAIL | libc::EINVAL | libc::EHOSTUNREACH)
    )
}

fn os(verb: &'static str) -> impl Fn(io::Error) -> Error {
    move |e| Error::os(verb, None, e)
}

/// The socket that receives `group` on `port`, joined on `interface`.
fn group_socket(group: Ipv4Addr, port: u16, interface: Ipv4Addr, buffer: usize) -> Result<UdpSocket> {
    let s = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP)).map_err(os("ud join: socket"))?;
    s.set_reuse_address(true).map_err(os("ud join: SO_REUSEADDR"))?;
    s.set_reuse_port(true).map_err(os("ud join: SO_REUSEPORT"))?;
    // Only the membership of this socket: without this, Linux delivers a group to this socket
    // while any socket of the host is a member of it.
    s.set_multicast_all_v4(false).map_err(os("ud join: IP_MULTICAST_ALL"))?;
    let _ = s.set_recv_buffer_size(buffer);
    report_drops(&s);
    // The group's address, not 0.0.0.0: only datagrams sent to the group arrive here.
    let at = SocketAddr::from((group, port));
    s.bind(&at.into()).map_err(|e| Error::os_local("ud join: bind the group address", at, e))?;
    match s.join_multicast_v4(&group, &interface) {
        Ok(()) => {}
        Err(e) if e.raw_os_error() == Some(libc::EADDRINUSE) => {}
        Err(e) => return Err(unavailable(interface, format!("joining {group}"), &e)),
    }
    s.set_nonblocking(true).map_err(os("ud join: O_NONBLOCK"))?;
    Ok(s.into())
}

/// The endpoint's own socket on `interface` and `port` (0: a fresh one; a fixed one is not
/// shared): sends, and receives unicast.
fn unicast_socket(interface: Ipv4Addr, port: u16, buffer: usize) -> Result<UdpSocket> {
    let s = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP)).map_err(os("create_ud: socket"))?;
    let _ = s.set_recv_buffer_size(buffer);
    report_drops(&s);
    let at = SocketAddr::from((interface, port));
    s.bind(&at.into()).map_err(|e| match e.kind() {
        io::ErrorKind::AddrInUse => Error::AddrInUse { verb: "create_ud: bind", addr: at },
        _ if is_unavailable(&e) => unavailable(interface, "binding the unicast socket".into(), &e),
        _ => Error::os_local("create_ud: bind", at, e),
    })?;
    s.set_multicast_if_v4(&interface).map_err(|e| unavailable(interface, "IP_MULTICAST_IF".into(), &e))?;
    s.set_multicast_loop_v4(true).map_err(os("create_ud: IP_MULTICAST_LOOP"))?;
    s.set_multicast_ttl_v4(1).map_err(os("create_ud: IP_MULTICAST_TTL"))?;
    s.set_nonblocking(true).map_err(os("create_ud: O_NONBLOCK"))?;
    Ok(s.into())
}

/// Poll tokens: every readiness leads to reading all sockets in turn, so one per kind will do.
const UNICAST: Token = Token(0);
const GROUP: Token = Token(1);

impl SoftUd {
    pub(crate) fn new(dev: Arc<Device>, init: &UdInit) -> Result<Self> {
        let mtu = dev.state.attrs.ud_mtu;
        let depth = init.recv_depth as usize;
        let buffer = depth.saturating_mul(mtu + 256);
        let unicast = unicast_socket(init.interface, init.unicast_port, buffer)?;
        let local = unicast.local_addr().map_err(os("create_ud: getsockname"))?;
        let port = if init.port == 0 { local.port() } else { init.port };
        let poll = Poll::new().map_err(os("create_ud: epoll_create"))?;
        poll.registry()
            .register(&mut SourceFd(&unicast.as_raw_fd()), UNICAST, Interest::READABLE)
            .map_err(os("create_ud: epoll_ctl"))?;
        let registry = poll.registry().try_clone().map_err(os("create_ud: dup epoll"))?;
        Ok(SoftUd {
            unicast,
            groups: Mutex::new(Vec::new()),
            registry,
            local,
            interface: init.interface,
            port,
            mtu,
            buffer,
            depth,
            dev,
            rx: Mutex::new(UdRx {
                pending: VecDeque::with_capacity(depth),
                buf: vec![0; mtu + 1],
                unicast_drops: 0,
                poll,
                events: Events::with_capacity(8),
                first: 0,
            }),
        })
    }

    fn send(&self, to: SocketAddrV4, payload: &[u8], group: bool) -> Result<()> {
        match self.unicast.send_to(payload, to) {
            Ok(_) => Ok(()),
            Err(e) if group && is_unavailable(&e) => Err(unavailable(self.interface, format!("sending to {to}"), &e)),
            Err(e) => Err(Error::os("ud send", Some(to.into()), e)),
        }
    }

    /// Applies the device's UD faults to a received datagram and queues the result.
    fn admit(&self, rx: &mut UdRx, d: Datagram) {
        let now = Instant::now();
        let mut faults = self.dev.state.ud_faults.lock();
        let Some(gen) = faults.as_mut() else {
            self.queue(rx, now, d);
            return;
        };
        let f = gen.faults;
        if f.drop > 0.0 && gen.rng.random_bool(f.drop.clamp(0.0, 1.0)) {
            return;
        }
        let dup = f.duplicate > 0.0 && gen.rng.random_bool(f.duplicate.clamp(0.0, 1.0));
        let at = now + f.delay;
        if dup {
            self.queue(rx, at, d.clone());
        }
        self.queue(rx, at, d);
    }

    /// Queues `d` for delivery at `at`, unless `depth` datagrams wait already (no receive
    /// posted: dropped).
    fn queue(&self, rx: &mut UdRx, at: Instant, d: Datagram) {
        if rx.pending.len() >= self.depth {
            SoftCounters::bump(&self.dev.state.counters.ud_queue_drops);
            tracing::trace!("soft UD: dropped a datagram from {}: {} waiting", d.from, self.depth);
            return;
        }
        rx.pending.push_back((at, d));
    }

    /// Reads one datagram from any socket without blocking, starting with a different socket
    /// each time; `Ok(false)` when all are drained.
    fn read_one(&self, rx: &mut UdRx) -> Result<bool> {
        let mut groups = self.groups.lock();
        let count = 1 + groups.len();
        let first = rx.first % count;
        rx.first = first + 1;
        for i in (first..count).chain(0..first) {
            let (sock, drops) = if i == 0 {
                (&self.unicast, &mut rx.unicast_drops)
            } else {
                let g = &mut groups[i - 1];
                (&g.socket, &mut g.drops)
            };
            if let Some(d) = self.read_from(sock, drops, &mut rx.buf)? {
                drop(groups);
                self.admit(rx, d);
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// The next datagram of `sock` within the MTU, if any. Larger ones are dropped and
    /// counted, and so are the datagrams the kernel dropped before this one (`SO_RXQ_OVFL`:
    /// `drops` is the socket's count as last seen).
    fn read_from(&self, sock: &UdpSocket, drops: &mut u32, buf: &mut [u8]) -> Result<Option<Datagram>> {
        let counters = &self.dev.state.counters;
        loop {
            match recv_counted(sock, buf) {
                Ok(r) => {
                    if let Some(now) = r.kernel_drops {
                        let new = now.wrapping_sub(*drops);
                        *drops = now;
                        counters.ud_kernel_drops.fetch_add(u64::from(new), Ordering::Relaxed);
                    }
                    if r.len > self.mtu {
                        tracing::debug!(
                            "soft UD: dropped a {}-byte datagram from {} (MTU {})",
                            r.len,
                            r.from,
                            self.mtu
                        );
                        SoftCounters::bump(&counters.ud_oversized_datagrams);
                        continue;
                    }
                    return Ok(Some(Datagram { from: r.from, data: buf[..r.len].to_vec() }));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(None),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(Error::os("ud recv", None, e)),
            }
        }
    }
}

/// A datagram as [`recv_counted`] read it.
struct Received {
    /// Its full length (larger than the buffer when it was truncated).
    len: usize,
    from: SocketAddr,
    /// The socket's count of datagrams the kernel dropped so far (`SO_RXQ_OVFL`), when given.
    kernel_drops: Option<u32>,
}

/// Control-message space for one `SO_RXQ_OVFL` count (a generous constant).
const OVFL_CMSG: usize = 32;

/// Reads one datagram of `sock` into `buf` without blocking, with its full length (even when
/// truncated) and the kernel's drop count.
fn recv_counted(sock: &UdpSocket, buf: &mut [u8]) -> io::Result<Received> {
    let mut iov = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
    let mut cbuf = [0u64; OVFL_CMSG / 8];
    // SAFETY: all-zero is a valid (empty) socket address buffer.
    let mut addr: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    // SAFETY: an all-zero msghdr is a valid "no address, no control data" header.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_name = (&mut addr as *mut libc::sockaddr_storage).cast();
    msg.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf.as_mut_ptr().cast();
    msg.msg_controllen = OVFL_CMSG as _;
    // SAFETY: `msg` points at the caller's buffer, the address and the control buffer, all
    // alive and writable for the call. MSG_TRUNC makes the call return the datagram's length.
    let r = unsafe { libc::recvmsg(sock.as_raw_fd(), &mut msg, libc::MSG_DONTWAIT | libc::MSG_TRUNC) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut kernel_drops = None;
    // SAFETY: the kernel filled `msg_controllen` bytes of the control buffer with well-formed
    // headers; an SO_RXQ_OVFL header carries one u32.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SO_RXQ_OVFL {
                kernel_drops = Some(libc::CMSG_DATA(cmsg).cast::<u32>().read_unaligned());
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
    }
    // SAFETY: the kernel wrote a socket address of `msg_namelen` bytes into `addr`.
    let from = unsafe { socket2::SockAddr::new(addr, msg.msg_namelen) }
        .as_socket()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "a datagram from no IP address"))?;
    Ok(Received { len: r as usize, from, kernel_drops })
}

/// Asks the kernel to report the datagrams it drops on `s` (`SO_RXQ_OVFL`); best effort.
fn report_drops(s: &Socket) {
    let on: libc::c_int = 1;
    // SAFETY: a plain setsockopt of an int option on a socket we own.
    unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RXQ_OVFL,
            (&on as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
    }
}

impl SoftUd {
    /// Joins `group`.
    pub(crate) fn join(&self, group: Ipv4Addr) -> Result<()> {
        let mut groups = self.groups.lock();
        if groups.iter().any(|g| g.group == group) {
            return Ok(());
        }
        let socket = group_socket(group, self.port, self.interface, self.buffer)?;
        self.registry
            .register(&mut SourceFd(&socket.as_raw_fd()), GROUP, Interest::READABLE)
            .map_err(os("ud join: epoll_ctl"))?;
        groups.push(GroupSocket { group, socket, drops: 0 });
        Ok(())
    }

    /// Leaves `group`.
    pub(crate) fn leave(&self, group: Ipv4Addr) -> Result<()> {
        let mut groups = self.groups.lock();
        let Some(i) = groups.iter().position(|g| g.group == group) else {
            let e = io::Error::from_raw_os_error(libc::EADDRNOTAVAIL);
            return Err(Error::os("ud leave: not a member", None, e));
        };
        let left = groups.remove(i);
        // Closing the socket (as `left` drops) ends its membership.
        let _ = self.registry.deregister(&mut SourceFd(&left.socket.as_raw_fd()));
        Ok(())
    }

    /// Sends `payload` (at most `mtu()` bytes, already checked) to `group`.
    pub(crate) fn send_to(&self, group: Ipv4Addr, payload: &[u8]) -> Result<()> {
        self.send(SocketAddrV4::new(group, self.port), payload, true)
    }

    /// Sends `payload` to one endpoint by unicast (where multicast is unavailable).
    pub(crate) fn send_unicast(&self, to: SocketAddrV4, payload: &[u8]) -> Result<()> {
        self.send(to, payload, false)
    }

    /// Waits up to `timeout` for a datagram.
    pub(crate) fn recv(&self, timeout: Duration) -> Result<Option<Datagram>> {
        let deadline = crate::time::deadline_after(timeout);
        let mut rx = self.rx.lock();
        loop {
            let now = Instant::now();
            if let Some(i) = rx.pending.iter().position(|(at, _)| *at <= now) {
                return Ok(rx.pending.remove(i).map(|(_, d)| d));
            }
            if self.read_one(&mut rx)? {
                continue;
            }
            // Both sockets drained: wait for either (or for a delayed datagram's time).
            let mut until = deadline;
            if let Some(first) = rx.pending.iter().map(|(at, _)| *at).min() {
                until = until.min(first);
            }
            if now >= deadline && rx.pending.iter().all(|(at, _)| *at > deadline) {
                return Ok(None);
            }
            let wait = until.saturating_duration_since(now);
            let UdRx { poll, events, .. } = &mut *rx;
            match poll.poll(events, Some(wait)) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(Error::os("ud recv: epoll_wait", None, e)),
            }
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
    use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};
    use std::time::Duration;

    use crate::*;

    const T: Duration = Duration::from_secs(5);

    fn endpoint(port: u16, recv_depth: u32) -> (Fabric, UdEndpoint) {
        let fabric = open(&FabricConfig::new(FabricKind::Soft)).unwrap();
        let pd = fabric.alloc_pd().unwrap();
        let ep = fabric
            .create_ud(&pd, &UdInit { interface: Ipv4Addr::LOCALHOST, port, unicast_port: 0, recv_depth })
            .unwrap();
        (fabric, ep)
    }

    /// A plain UDP socket on loopback that sends multicast through loopback.
    fn raw_sender() -> UdpSocket {
        let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
        sock.set_multicast_loop_v4(true).unwrap();
        socket2::SockRef::from(&sock).set_multicast_if_v4(&Ipv4Addr::LOCALHOST).unwrap();
        sock
    }

    /// Unicast to the group port reaches no member of the group: only what is sent to the
    /// group does. (Its group socket bound to 0.0.0.0 took both, in the order sent.)
    #[test]
    fn unicast_to_the_group_port_does_not_reach_a_member() {
        let port = UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let (_fabric, ep) = endpoint(port, 64);
        let group = Ipv4Addr::new(239, 255, 78, 1);
        match ep.join(group) {
            Ok(()) => {}
            Err(Error::MulticastUnavailable { .. }) => return,
            Err(e) => panic!("unexpected join error {e}"),
        }
        let sender = raw_sender();
        for _ in 0..3 {
            sender.send_to(b"unicast to the port", SocketAddrV4::new(Ipv4Addr::LOCALHOST, port)).unwrap();
        }
        sender.send_to(b"to the group", SocketAddrV4::new(group, port)).unwrap();
        let first = ep.recv(T).unwrap().expect("the group datagram");
        assert_eq!(first.data, b"to the group");
        assert_eq!(ep.recv(Duration::ZERO).unwrap(), None);
        // Unicast reaches the endpoint at its own address.
        let own = match ep.local_addr() {
            SocketAddr::V4(v4) => v4,
            other => panic!("IPv6 address {other}"),
        };
        sender.send_to(b"to the endpoint", own).unwrap();
        assert_eq!(ep.recv(T).unwrap().expect("the unicast datagram").data, b"to the endpoint");
    }

    /// Datagrams held back by the fault injector wait in a queue of the receive depth; the
    /// rest are dropped, as a NIC drops datagrams that find no receive posted.
    #[test]
    fn delayed_datagrams_wait_in_a_queue_of_the_receive_depth() {
        const DEPTH: usize = 16;
        let (fabric, ep) = endpoint(0, DEPTH as u32);
        fabric.faults().unwrap().set_ud_faults(UdFaults {
            delay: Duration::from_secs(1),
            seed: 1,
            ..Default::default()
        });
        let to = match ep.local_addr() {
            SocketAddr::V4(v4) => v4,
            other => panic!("IPv6 address {other}"),
        };
        let sender = raw_sender();
        // Rounds small enough for the socket buffer, each taken off the socket before the next.
        for round in 0..4u8 {
            for i in 0..DEPTH as u8 {
                sender.send_to(&[round, i], to).unwrap();
            }
            assert_eq!(ep.recv(Duration::ZERO).unwrap(), None, "nothing is due before the delay");
        }
        let mut delivered = Vec::new();
        while let Some(d) = ep.recv(Duration::from_millis(1500)).unwrap() {
            delivered.push(d.data);
        }
        let expected: Vec<Vec<u8>> = (0..DEPTH as u8).map(|i| vec![0, i]).collect();
        assert_eq!(delivered, expected, "the first {DEPTH} waited; the rest found the queue full");
    }

    /// A datagram larger than the UD MTU is dropped and counted, and the ones after it still
    /// arrive; datagrams the kernel drops for a full receive buffer are counted too (reported
    /// by `SO_RXQ_OVFL` with the next datagram queued after them).
    #[test]
    fn every_dropped_datagram_is_counted() {
        let (fabric, ep) = endpoint(0, 64);
        let to = match ep.local_addr() {
            SocketAddr::V4(v4) => v4,
            other => panic!("IPv6 address {other}"),
        };
        let mtu = fabric.attributes().ud_mtu;
        let sender = raw_sender();
        sender.send_to(&vec![7u8; mtu + 1], to).unwrap();
        sender.send_to(&vec![9u8; 4 * mtu], to).unwrap();
        sender.send_to(b"small", to).unwrap();
        assert_eq!(ep.recv(T).unwrap().expect("the small datagram").data, b"small");
        assert_eq!(fabric.counters().ud_oversized_datagrams, 2, "both oversized datagrams are counted");
        // Flood the socket (its buffer holds a few datagrams of the receive depth) without
        // reading: the kernel drops most, and the next read reports how many.
        let flood = 2000;
        for _ in 0..flood {
            sender.send_to(&[1u8; 64], to).unwrap();
        }
        let mut delivered = 0u64;
        while ep.recv(Duration::from_millis(200)).unwrap().is_some() {
            delivered += 1;
        }
        // The kernel reports its drops with the next datagram it queues.
        sender.send_to(b"after", to).unwrap();
        assert_eq!(ep.recv(T).unwrap().expect("the datagram after the flood").data, b"after");
        let c = fabric.counters();
        assert!(c.ud_kernel_drops > 0, "the kernel dropped some of {flood}: {delivered} delivered, {c:?}");
        assert_eq!(
            delivered + c.ud_kernel_drops + c.ud_queue_drops,
            flood,
            "every datagram is delivered or counted: {c:?}"
        );
    }
}
