//! An address nobody listens on, held for as long as a test needs it.

use std::net::{IpAddr, SocketAddr};

/// A TCP port of `ip` bound but not listening: a connect there is refused, and no other socket
/// (a node of a concurrent test) can take the port while this is alive. A listener dropped at
/// once to "free" a port let concurrent tests' nodes take it, and a connect then found a peer.
pub struct UnusedAddr {
    _held: socket2::Socket,
    /// The address.
    pub addr: SocketAddr,
}

/// A held address of `ip` nobody listens on.
pub fn unused_addr(ip: IpAddr) -> UnusedAddr {
    let held = socket2::Socket::new(socket2::Domain::for_address(SocketAddr::new(ip, 0)), socket2::Type::STREAM, None)
        .expect("a TCP socket");
    held.bind(&SocketAddr::new(ip, 0).into()).expect("bind a free port");
    let addr = held.local_addr().expect("its address").as_socket().expect("an IP address");
    UnusedAddr { _held: held, addr }
}
