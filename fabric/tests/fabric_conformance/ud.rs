//! Unreliable datagrams: multicast delivery, unicast between endpoints, MTU, leaving a group.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, SocketAddrV4};

use rdma_fabric::*;

use crate::common::fabric::*;
use crate::common::provider::ProviderSpec;

/// The IPv4 address of an endpoint or sender.
fn v4(addr: SocketAddr) -> SocketAddrV4 {
    match addr {
        SocketAddr::V4(a) => a,
        SocketAddr::V6(a) => panic!("an IPv6 address {a} on an IPv4 fabric"),
    }
}

/// A datagram sent to a group reaches the other member, both ways, with its payload and a
/// sender address on the local interface. The sender's own copy (multicast loopback), where
/// the provider delivers it, is intact too. Joining a non-multicast address is refused.
pub fn ud_multicast_delivery(spec: &ProviderSpec) {
    let slot = spec.multicast("ud_multicast_delivery");
    let s = UdNode::joined(spec, &slot);
    let b = UdNode::joined(spec, &slot);
    assert!(matches!(b.ep.join(Ipv4Addr::new(10, 1, 2, 3)), Err(Error::InvalidArgument { .. })));

    s.send(&slot, 1, 200);
    let (seq, d) = b.expect(&slot, "the multicast datagram");
    assert_eq!((seq, &d.data), (1, &slot.payload(1, 200)));
    assert_eq!(d.from.ip(), IpAddr::V4(spec.local_ip), "sender address {}", d.from);

    b.send(&slot, 2, 300);
    let (mut seq, mut got) = s.expect(&slot, "the datagram of the other member");
    if seq == 1 {
        assert_eq!(got.data, slot.payload(1, 200), "the sender's loopback copy");
        (seq, got) = s.expect(&slot, "the datagram of the other member");
    }
    assert_eq!((seq, &got.data), (2, &slot.payload(2, 300)));
    assert_eq!(got.from.ip(), IpAddr::V4(spec.local_ip));
}

/// Endpoints have distinct unicast addresses on the local interface, even on the same port; a
/// datagram sent to one reaches that endpoint, and a reply to the datagram's sender address
/// reaches the sender.
pub fn ud_unicast_between_endpoints(spec: &ProviderSpec) {
    let slot = spec.multicast("ud_unicast_between_endpoints");
    let s = UdNode::joined(spec, &slot);
    let b = UdNode::joined(spec, &slot);
    let (sa, ba) = (s.ep.local_addr(), b.ep.local_addr());
    assert_ne!(sa, ba, "two endpoints share one unicast address");
    assert_eq!(ba.ip(), IpAddr::V4(spec.local_ip));

    s.ep.send_unicast(v4(ba), &slot.payload(1, 100)).expect("send_unicast");
    let (seq, d) = b.expect(&slot, "the unicast datagram");
    assert_eq!((seq, &d.data), (1, &slot.payload(1, 100)));
    b.ep.send_unicast(v4(d.from), &slot.payload(2, 100)).expect("reply to the sender address");
    let (seq, d) = s.expect(&slot, "the reply");
    assert_eq!((seq, &d.data), (2, &slot.payload(2, 100)));
}

/// The endpoint MTU is at most the device's UD MTU; a payload of exactly the MTU is delivered
/// whole; one byte more is refused with `PayloadTooLarge`, for multicast and unicast. A receive
/// depth outside the device limits is refused.
pub fn ud_mtu_limits(spec: &ProviderSpec) {
    let slot = spec.multicast("ud_mtu_limits");
    let s = UdNode::joined(spec, &slot);
    let b = UdNode::joined(spec, &slot);
    for depth in [0, s.fabric.attributes().max_qp_wr + 1] {
        let init = UdInit { interface: spec.local_ip, port: slot.port, unicast_port: 0, recv_depth: depth };
        assert!(matches!(s.fabric.create_ud(&s.pd, &init), Err(Error::InvalidArgument { .. })), "recv_depth {depth}");
    }
    let mtu = s.ep.mtu();
    assert!(mtu >= 256 && mtu <= s.fabric.attributes().ud_mtu, "mtu {mtu} vs {:?}", s.fabric.attributes());

    let too_big = slot.payload(9, mtu + 1);
    for r in [s.ep.send_to(slot.group, &too_big), s.ep.send_unicast(v4(b.ep.local_addr()), &too_big)] {
        match r {
            Err(Error::PayloadTooLarge { len, mtu: m }) => assert_eq!((len, m), (mtu + 1, mtu)),
            other => panic!("a payload of mtu + 1 bytes: {other:?}"),
        }
    }
    s.send(&slot, 1, mtu);
    let (seq, d) = b.expect(&slot, "an MTU-sized datagram");
    assert_eq!(seq, 1, "the oversized datagrams were not sent");
    assert_eq!(d.data.len(), mtu);
    assert_eq!(d.data, slot.payload(1, mtu));
}

/// After `leave`, the endpoint no longer receives the group's datagrams: it stays joined to a
/// second group, and a marker sent there after a datagram to the first group (which a
/// still-joined member receives) is the first thing it gets.
pub fn ud_leave_stops_delivery(spec: &ProviderSpec) {
    let slot = spec.multicast("ud_leave_stops_delivery");
    let second = slot.second_group();
    let s = UdNode::joined(spec, &slot);
    let b = UdNode::joined(spec, &slot);
    let l = UdNode::joined(spec, &slot);
    s.ep.join(second).expect("join the second group");
    l.ep.join(second).expect("join the second group");

    s.send(&slot, 1, 64);
    assert_eq!(b.expect(&slot, "datagram 1 at the member").0, 1);
    assert_eq!(l.expect(&slot, "datagram 1 before leaving").0, 1);

    l.ep.leave(slot.group).expect("leave");
    s.send(&slot, 2, 64);
    assert_eq!(b.expect(&slot, "datagram 2 at the member").0, 2);
    s.ep.send_to(second, &slot.payload(3, 64)).expect("marker to the second group");
    let (seq, _) = l.expect(&slot, "the marker on the second group");
    assert_eq!(seq, 3, "the endpoint that left still received group datagram {seq}");
}
