//! Unreliable datagrams over UDP multicast. Each endpoint owns one socket bound to the group
//! port (shared with other endpoints of the host through SO_REUSEADDR/SO_REUSEPORT); no NIC
//! thread is involved. Received datagrams pass through the device's fault injector.

use std::collections::VecDeque;
use std::io;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use rand::Rng;
use socket2::{Domain, Protocol, Socket, Type};

use super::device::Device;
use crate::fabric::error::{Error, Result};
use crate::fabric::provider::UdOps;
use crate::fabric::types::{Datagram, UdInit};

/// A UD endpoint.
pub(crate) struct SoftUd {
    sock: UdpSocket,
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
    /// The socket's current mode: `None` non-blocking, else its read timeout.
    mode: Option<Duration>,
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

impl SoftUd {
    pub(crate) fn new(dev: Arc<Device>, init: &UdInit) -> Result<Self> {
        let os = |verb, e| Error::os(verb, None, e);
        let s = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP)).map_err(|e| os("create_ud: socket", e))?;
        s.set_reuse_address(true).map_err(|e| os("create_ud: SO_REUSEADDR", e))?;
        s.set_reuse_port(true).map_err(|e| os("create_ud: SO_REUSEPORT", e))?;
        let mtu = dev.shared.attrs.ud_mtu;
        let _ = s.set_recv_buffer_size((init.recv_depth as usize).saturating_mul(mtu + 256));
        s.bind(&SocketAddr::from((Ipv4Addr::UNSPECIFIED, init.port)).into()).map_err(|e| os("create_ud: bind", e))?;
        s.set_multicast_if_v4(&init.interface)
            .map_err(|e| unavailable(init.interface, "IP_MULTICAST_IF".into(), &e))?;
        s.set_multicast_loop_v4(true).map_err(|e| os("create_ud: IP_MULTICAST_LOOP", e))?;
        s.set_multicast_ttl_v4(1).map_err(|e| os("create_ud: IP_MULTICAST_TTL", e))?;
        let sock: UdpSocket = s.into();
        let port = sock.local_addr().map_err(|e| os("create_ud: getsockname", e))?.port();
        Ok(SoftUd {
            sock,
            interface: init.interface,
            port,
            mtu,
            dev,
            rx: Mutex::new(UdRx { pending: VecDeque::new(), buf: vec![0; mtu + 1], mode: Some(Duration::ZERO) }),
        })
    }

    fn send(&self, to: SocketAddrV4, payload: &[u8], group: bool) -> Result<()> {
        match self.sock.send_to(payload, to) {
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

    fn set_mode(&self, rx: &mut UdRx, mode: Option<Duration>) -> io::Result<()> {
        if rx.mode == mode {
            return Ok(());
        }
        match mode {
            None => self.sock.set_nonblocking(true)?,
            Some(t) => {
                if rx.mode.is_none() {
                    self.sock.set_nonblocking(false)?;
                }
                self.sock.set_read_timeout(Some(t))?;
            }
        }
        rx.mode = mode;
        Ok(())
    }
}

impl UdOps for SoftUd {
    fn join(&self, group: Ipv4Addr) -> Result<()> {
        match self.sock.join_multicast_v4(&group, &self.interface) {
            Ok(()) => Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::EADDRINUSE) => Ok(()),
            Err(e) => Err(unavailable(self.interface, format!("joining {group}"), &e)),
        }
    }

    fn leave(&self, group: Ipv4Addr) -> Result<()> {
        self.sock.leave_multicast_v4(&group, &self.interface).map_err(|e| Error::os("ud leave", None, e))
    }

    fn send_to(&self, group: Ipv4Addr, payload: &[u8]) -> Result<()> {
        self.send(SocketAddrV4::new(group, self.port), payload, true)
    }

    fn send_unicast(&self, to: SocketAddrV4, payload: &[u8]) -> Result<()> {
        self.send(to, payload, false)
    }

    fn recv(&self, timeout: Duration) -> Result<Option<Datagram>> {
        let deadline = Instant::now() + timeout;
        let mut rx = self.rx.lock();
        loop {
            let now = Instant::now();
            if let Some(i) = rx.pending.iter().position(|(at, _)| *at <= now) {
                return Ok(rx.pending.remove(i).map(|(_, d)| d));
            }
            let mut until = deadline;
            if let Some(first) = rx.pending.iter().map(|(at, _)| *at).min() {
                until = until.min(first);
            }
            let wait = until.saturating_duration_since(now);
            // SO_RCVTIMEO rounds up to the kernel tick: short waits poll without blocking.
            let mode = (wait >= Duration::from_millis(1)).then_some(wait);
            self.set_mode(&mut rx, mode).map_err(|e| Error::os("ud recv: socket mode", None, e))?;
            let r = {
                let UdRx { buf, .. } = &mut *rx;
                self.sock.recv_from(buf)
            };
            match r {
                Ok((n, from)) => {
                    if n > self.mtu {
                        tracing::debug!("soft UD: dropped a {n}-byte datagram from {from} (MTU {})", self.mtu);
                        continue;
                    }
                    let d = Datagram { from, data: rx.buf[..n].to_vec() };
                    self.admit(&mut rx, d);
                }
                Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {
                    if Instant::now() >= deadline && rx.pending.iter().all(|(at, _)| *at > deadline) {
                        return Ok(None);
                    }
                    if mode.is_none() {
                        std::hint::spin_loop();
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(Error::os("ud recv", None, e)),
            }
        }
    }

    fn mtu(&self) -> usize {
        self.mtu
    }

    fn local_addr(&self) -> SocketAddr {
        SocketAddr::from((self.interface, self.port))
    }
}
