//! Conversions between `std::net` addresses and the C socket addresses librdmacm takes.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

/// A C socket address large enough for IPv4 and IPv6, built from a `SocketAddr`.
pub(super) struct CSockAddr(libc::sockaddr_storage);

impl CSockAddr {
    /// Encodes `addr`.
    pub(super) fn new(addr: SocketAddr) -> Self {
        // SAFETY: sockaddr_storage is plain old data; all-zero is a valid (AF_UNSPEC) value.
        let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        match addr {
            SocketAddr::V4(v4) => {
                let sin = libc::sockaddr_in {
                    sin_family: libc::AF_INET as libc::sa_family_t,
                    sin_port: v4.port().to_be(),
                    sin_addr: libc::in_addr { s_addr: u32::from(*v4.ip()).to_be() },
                    sin_zero: [0; 8],
                };
                // SAFETY: sockaddr_storage is larger than and suitably aligned for sockaddr_in.
                unsafe { std::ptr::write(&mut storage as *mut _ as *mut libc::sockaddr_in, sin) };
            }
            SocketAddr::V6(v6) => {
                let sin6 = libc::sockaddr_in6 {
                    sin6_family: libc::AF_INET6 as libc::sa_family_t,
                    sin6_port: v6.port().to_be(),
                    sin6_flowinfo: v6.flowinfo().to_be(),
                    sin6_addr: libc::in6_addr { s6_addr: v6.ip().octets() },
                    sin6_scope_id: v6.scope_id(),
                };
                // SAFETY: sockaddr_storage is larger than and suitably aligned for sockaddr_in6.
                unsafe { std::ptr::write(&mut storage as *mut _ as *mut libc::sockaddr_in6, sin6) };
            }
        }
        CSockAddr(storage)
    }

    /// The pointer librdmacm takes (it does not keep it past the call).
    pub(super) fn as_mut_ptr(&mut self) -> *mut libc::sockaddr {
        &mut self.0 as *mut libc::sockaddr_storage as *mut libc::sockaddr
    }
}

/// Decodes a C socket address; `None` for families other than IPv4/IPv6.
///
/// # Safety
/// `sa` must point to a valid socket address whose storage matches its family.
pub(super) unsafe fn from_c(sa: *const libc::sockaddr) -> Option<SocketAddr> {
    if sa.is_null() {
        return None;
    }
    // SAFETY: the caller guarantees `sa` is valid; the family selects the concrete type.
    unsafe {
        match i32::from((*sa).sa_family) {
            libc::AF_INET => {
                let sin = &*(sa as *const libc::sockaddr_in);
                let ip = Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr));
                Some(SocketAddr::V4(SocketAddrV4::new(ip, u16::from_be(sin.sin_port))))
            }
            libc::AF_INET6 => {
                let sin6 = &*(sa as *const libc::sockaddr_in6);
                let ip = Ipv6Addr::from(sin6.sin6_addr.s6_addr);
                Some(SocketAddr::V6(SocketAddrV6::new(
                    ip,
                    u16::from_be(sin6.sin6_port),
                    u32::from_be(sin6.sin6_flowinfo),
                    sin6.sin6_scope_id,
                )))
            }
            _ => None,
        }
    }
}

/// The unspecified address of `addr`'s family with port 0 (placeholder for unknown addresses).
pub(super) fn unspecified_like(ip: IpAddr) -> SocketAddr {
    match ip {
        IpAddr::V4(_) => SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0),
        IpAddr::V6(_) => SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), 0),
    }
}

/// The IPv4 source address of a received UD datagram, from the 40 bytes in front of it.
///
/// RoCE v2 over IPv4 puts the IPv4 header in the last 20 of the 40 bytes (the first 20 are
/// undefined); InfiniBand and RoCE v1/v2-over-IPv6 put a GRH whose source GID (bytes 8..24)
/// is IPv4-mapped for IP-based GIDs. As libibverbs does, a valid IPv4 header checksum tells
/// the two apart when the first nibble happens to read 6.
pub(super) fn source_of_grh(grh: &[u8; 40]) -> Option<Ipv4Addr> {
    let ip4 = &grh[20..40];
    let is_v4 = if grh[0] >> 4 != 6 { ip4[0] >> 4 == 4 } else { ip4[0] == 0x45 && ipv4_checksum_ok(ip4) };
    if is_v4 {
        return Some(Ipv4Addr::new(ip4[12], ip4[13], ip4[14], ip4[15]));
    }
    if grh[0] >> 4 == 6 {
        let sgid: [u8; 16] = grh[8..24].try_into().ok()?;
        return Ipv6Addr::from(sgid).to_ipv4_mapped();
    }
    None
}

/// Whether a 20-byte IPv4 header's checksum is valid (its one's-complement sum is 0xffff).
fn ipv4_checksum_ok(header: &[u8]) -> bool {
    let mut sum: u32 = header.chunks(2).map(|w| u32::from(u16::from_be_bytes([w[0], w[1]]))).sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum == 0xffff
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn socket_addresses_round_trip_through_c() {
        for addr in ["10.0.2.15:4791", "[fe80::1]:7"] {
            let addr: SocketAddr = addr.parse().unwrap();
            let mut c = CSockAddr::new(addr);
            // SAFETY: `c` was just encoded from a valid address.
            let back = unsafe { from_c(c.as_mut_ptr()) };
            assert_eq!(back, Some(addr));
        }
    }

    #[test]
    fn grh_source_is_decoded_for_roce_v2_and_gid_forms() {
        let mut v2 = [0u8; 40];
        v2[20] = 0x45;
        v2[32..36].copy_from_slice(&[10, 0, 2, 15]);
        assert_eq!(source_of_grh(&v2), Some(Ipv4Addr::new(10, 0, 2, 15)));
        // The undefined first half reading like a GRH: only a valid checksum makes it IPv4.
        v2[0] = 0x60;
        assert_eq!(source_of_grh(&v2), None);
        let sum: u32 = v2[20..40].chunks(2).map(|w| u32::from(u16::from_be_bytes([w[0], w[1]]))).sum();
        let folded = (sum & 0xffff) + (sum >> 16);
        v2[30..32].copy_from_slice(&(!(folded as u16)).to_be_bytes());
        assert_eq!(source_of_grh(&v2), Some(Ipv4Addr::new(10, 0, 2, 15)));

        let mut v1 = [0u8; 40];
        v1[0] = 0x60;
        v1[18..20].copy_from_slice(&[0xff, 0xff]);
        v1[20..24].copy_from_slice(&[192, 168, 1, 2]);
        assert_eq!(source_of_grh(&v1), Some(Ipv4Addr::new(192, 168, 1, 2)));

        assert_eq!(source_of_grh(&[0u8; 40]), None);
    }
}
