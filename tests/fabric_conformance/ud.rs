//! Unreliable-datagram multicast: delivery, sender address, MTU, leaving a group.

use std::net::{SocketAddr, SocketAddrV4};

use rdma_pubsub::fabric::*;

use crate::common::fabric::*;
use crate::common::provider::ProviderSpec;

/// The IPv4 address of a datagram's sender.
pub fn v4(addr: SocketAddr) -> SocketAddrV4 {
    match addr {
        SocketAddr::V4(a) => a,
        SocketAddr::V6(a) => panic!("an IPv6 address {a} on an IPv4 fabric"),
    }
}

/// A datagram sent to a group reaches the other member with its payload and a sender address
/// on the local interface; a unicast reply to that address reaches the sender. The sender's own
/// copy (multicast loopback), where the provider delivers it, is intact too.
pub fn ud_multicast_delivery(spec: &ProviderSpec) {
    let slot = spec.multicast("ud_multicast_delivery");
    let s = UdNode::joined(spec, &slot);
    let b = UdNode::joined(spec, &slot);
    assert!(matches!(b.ep.join(std::net::Ipv4Addr::new(10, 1, 2, 3)), Err(Error::InvalidArgument { .. })));

    s.send(&slot, 1, 200);
    let (seq, d) = b.expect(&slot, "the multicast datagram");
    assert_eq!(seq, 1);
    assert_eq!(d.data, slot.payload(1, 200));
    assert_eq!(d.from.ip(), std::net::IpAddr::V4(spec.local_ip), "sender address {}", d.from);

    b.ep.send_unicast(v4(d.from), &slot.payload(2, 100)).expect("unicast reply");
    let (mut seq, mut got) = s.expect(&slot, "the unicast reply");
    if seq == 1 {
        assert_eq!(got.data, slot.payload(1, 200), "the sender's loopback copy");
        (seq, got) = s.expect(&slot, "the unicast reply");
    }
    assert_eq!(seq, 2);
    assert_eq!(got.data, slot.payload(2, 100));
    assert_eq!(got.from.ip(), std::net::IpAddr::V4(spec.local_ip));
}

/// The endpoint MTU is at most the device's UD MTU; a payload of exactly the MTU is delivered
/// whole; one byte more is refused with `PayloadTooLarge`, for multicast and unicast.
pub fn ud_mtu_limits(spec: &ProviderSpec) {
    let slot = spec.multicast("ud_mtu_limits");
    let s = UdNode::joined(spec, &slot);
    let b = UdNode::joined(spec, &slot);
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

/// After `leave`, the endpoint no longer receives the group's datagrams: a unicast marker sent
/// after a group datagram (which a still-joined member receives) arrives first at the left one.
pub fn ud_leave_stops_delivery(spec: &ProviderSpec) {
    let slot = spec.multicast("ud_leave_stops_delivery");
    let s = UdNode::joined(spec, &slot);
    let b = UdNode::joined(spec, &slot);
    let l = UdNode::joined(spec, &slot);

    s.send(&slot, 1, 64);
    assert_eq!(b.expect(&slot, "datagram 1 at the member").0, 1);
    assert_eq!(l.expect(&slot, "datagram 1 before leaving").0, 1);

    l.ep.leave(slot.group).expect("leave");
    s.send(&slot, 2, 64);
    assert_eq!(b.expect(&slot, "datagram 2 at the member").0, 2);
    s.ep.send_unicast(v4(l.ep.local_addr()), &slot.payload(3, 64)).expect("unicast marker");
    let (seq, _) = l.expect(&slot, "the unicast marker");
    assert_eq!(seq, 3, "the endpoint that left still received group datagram {seq}");
}
