//! Unreliable datagrams over UDP multicast; no NIC thread is involved. Received datagrams pass
//! through the device's fault injector.
//!
//! Each endpoint owns two sockets:
//! - a *group* socket bound to the group port (shared with the other endpoints of the host
//!   through SO_REUSEADDR/SO_REUSEPORT) that joins the groups. It has `IP_MULTICAST_ALL` off,
//!   so it hears only the groups it joined itself, not those other sockets of the host joined;
//!   the kernel hands every multicast datagram to each member socket on the port;
//! - a *unicast* socket on a port of its own on the interface: everything is sent from it, and
//!   its address is the endpoint's `local_addr`, so a unicast datagram (or a reply to a
//!   datagram's sender address) reaches exactly this endpoint.

use std::collections::VecDeque;
use std::io;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token};
use parking_lot::Mutex;
use rand::Rng;
use socket2::{Domain, Protocol, Socket, Type};

use super::device::Device;
use crate::fabric::error::{Error, Result};
use crate::fabric::provider::UdOps;
use crate::fabric::types::{Datagram, UdInit};

/// A UD endpoint.
pub(crate) struct SoftUd {
    /// Bound to the group port; joins groups; receives multicast only.
    group: UdpSocket,
    /// Bound to a port of its own; sends everything; receives unicast.
    unicast: UdpSocket,
    local: SocketAddr,
    interface: Ipv4Addr,
    port: u16,
    mtu: usize,
    dev: Arc<Device>,
    rx: Mutex<UdRx>,
}

struct UdRx {
    /// Datagrams received and not yet delivered (delayed or duplicated by faults).
    pending: VecDeque<(Instant, Datagram)>,
    buf: Vec<u8>,
    /// Readiness of both sockets (edge-triggered: waited on only once both are drained).
    poll: Poll,
    events: Events,
    /// Which socket is read first next time (fairness between unicast and multicast).
    unicast_first: bool,
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

/// The socket that receives the groups this endpoint joins on `port`.
fn group_socket(port: u16, buffer: usize) -> Result<UdpSocket> {
    let s = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP)).map_err(os("create_ud: socket"))?;
    s.set_reuse_address(true).map_err(os("create_ud: SO_REUSEADDR"))?;
    s.set_reuse_port(true).map_err(os("create_ud: SO_REUSEPORT"))?;
    // Only the groups joined on this socket: without this, Linux delivers every group any
    // socket of the host joined on this port, and `leave` would not stop delivery.
    s.set_multicast_all_v4(false).map_err(os("create_ud: IP_MULTICAST_ALL"))?;
    let _ = s.set_recv_buffer_size(buffer);
    s.bind(&SocketAddr::from((Ipv4Addr::UNSPECIFIED, port)).into()).map_err(os("create_ud: bind group port"))?;
    s.set_nonblocking(true).map_err(os("create_ud: O_NONBLOCK"))?;
    Ok(s.into())
}

/// The endpoint's own socket on `interface` (a fresh port): sends, and receives unicast.
fn unicast_socket(interface: Ipv4Addr, buffer: usize) -> Result<UdpSocket> {
    let s = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP)).map_err(os("create_ud: socket"))?;
    let _ = s.set_recv_buffer_size(buffer);
    s.bind(&SocketAddr::from((interface, 0)).into()).map_err(|e| match is_unavailable(&e) {
        true => unavailable(interface, "binding the unicast socket".into(), &e),
        false => Error::os_local("create_ud: bind", SocketAddr::from((interface, 0)), e),
    })?;
    s.set_multicast_if_v4(&interface).map_err(|e| unavailable(interface, "IP_MULTICAST_IF".into(), &e))?;
    s.set_multicast_loop_v4(true).map_err(os("create_ud: IP_MULTICAST_LOOP"))?;
    s.set_multicast_ttl_v4(1).map_err(os("create_ud: IP_MULTICAST_TTL"))?;
    s.set_nonblocking(true).map_err(os("create_ud: O_NONBLOCK"))?;
    Ok(s.into())
}

const GROUP: Token = Token(0);
const UNICAST: Token = Token(1);

impl SoftUd {
    pub(crate) fn new(dev: Arc<Device>, init: &UdInit) -> Result<Self> {
        let mtu = dev.shared.attrs.ud_mtu;
        let buffer = (init.recv_depth as usize).saturating_mul(mtu + 256);
        let group = group_socket(init.port, buffer)?;
        let unicast = unicast_socket(init.interface, buffer)?;
        let port = group.local_addr().map_err(os("create_ud: getsockname"))?.port();
        let local = unicast.local_addr().map_err(os("create_ud: getsockname"))?;
        let poll = Poll::new().map_err(os("create_ud: epoll_create"))?;
        for (sock, token) in [(&group, GROUP), (&unicast, UNICAST)] {
            poll.registry()
                .register(&mut SourceFd(&sock.as_raw_fd()), token, Interest::READABLE)
                .map_err(os("create_ud: epoll_ctl"))?;
        }
        Ok(SoftUd {
            group,
            unicast,
            local,
            interface: init.interface,
            port,
            mtu,
            dev,
            rx: Mutex::new(UdRx {
                pending: VecDeque::new(),
                buf: vec![0; mtu + 1],
                poll,
                events: Events::with_capacity(2),
                unicast_first: false,
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
        let mut faults = self.dev.shared.ud_faults.lock();
        let Some(gen) = faults.as_mut() else {
            rx.pending.push_back((now, d));
            return;
        };
        let f = gen.faults;
        if f.drop > 0.0 && gen.rng.gen_bool(f.drop.clamp(0.0, 1.0)) {
            return;
        }
        let dup = f.duplicate > 0.0 && gen.rng.gen_bool(f.duplicate.clamp(0.0, 1.0));
        let at = now + f.delay;
        if dup {
            rx.pending.push_back((at, d.clone()));
        }
        rx.pending.push_back((at, d));
    }

    /// Reads one datagram from either socket without blocking; `Ok(false)` when both are
    /// drained.
    fn read_one(&self, rx: &mut UdRx) -> Result<bool> {
        let order = if rx.unicast_first { [&self.unicast, &self.group] } else { [&self.group, &self.unicast] };
        rx.unicast_first = !rx.unicast_first;
        for sock in order {
            loop {
                match sock.recv_from(&mut rx.buf) {
                    Ok((n, from)) => {
                        if n > self.mtu {
                            tracing::debug!("soft UD: dropped a {n}-byte datagram from {from} (MTU {})", self.mtu);
                            continue;
                        }
                        let d = Datagram { from, data: rx.buf[..n].to_vec() };
                        self.admit(rx, d);
                        return Ok(true);
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(Error::os("ud recv", None, e)),
                }
            }
        }
        Ok(false)
    }
}

impl UdOps for SoftUd {
    fn join(&self, group: Ipv4Addr) -> Result<()> {
        match self.group.join_multicast_v4(&group, &self.interface) {
            Ok(()) => Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::EADDRINUSE) => Ok(()),
            Err(e) => Err(unavailable(self.interface, format!("joining {group}"), &e)),
        }
    }

    fn leave(&self, group: Ipv4Addr) -> Result<()> {
        self.group.leave_multicast_v4(&group, &self.interface).map_err(|e| Error::os("ud leave", None, e))
    }

    fn send_to(&self, group: Ipv4Addr, payload: &[u8]) -> Result<()> {
        self.send(SocketAddrV4::new(group, self.port), payload, true)
    }

    fn send_unicast(&self, to: SocketAddrV4, payload: &[u8]) -> Result<()> {
        self.send(to, payload, false)
    }

    fn recv(&self, timeout: Duration) -> Result<Option<Datagram>> {
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

    fn mtu(&self) -> usize {
        self.mtu
    }

    fn local_addr(&self) -> SocketAddr {
        self.local
    }
}
