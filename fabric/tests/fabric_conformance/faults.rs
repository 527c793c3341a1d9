//! Fault injection (soft provider only; on other providers `faults()` must be `None`).

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use rdma_fabric::*;

use crate::common::fabric::*;
use crate::common::provider::{McastSlot, ProviderSpec};

/// The fault injector of `fabric` where the provider has one (soft); asserts that soft has one
/// and other providers have none.
fn injector(spec: &ProviderSpec, fabric: &Fabric) -> Option<FaultInjector> {
    let faults = fabric.faults();
    assert_eq!(faults.is_some(), spec.kind == FabricKind::Soft, "faults() on {}", spec.kind);
    faults
}

/// Sequence numbers of fences and markers (data use small ones).
const FENCE: u64 = 1 << 40;
const MARKER: u64 = 1 << 41;

/// Clears the faults and waits until a fence datagram sent after everything before it arrives,
/// so that no earlier datagram is still in flight; returns what arrived before the fence.
fn fence(s: &UdNode, r: &UdNode, slot: &McastSlot, faults: &FaultInjector, n: u64) -> Vec<u64> {
    faults.set_ud_faults(UdFaults::default());
    s.send(slot, FENCE + n, 32);
    let mut before = Vec::new();
    loop {
        let (seq, _) = r.expect(slot, "the fence");
        if seq == FENCE + n {
            return before;
        }
        before.push(seq);
        assert!(before.len() < 10_000, "fence {n} not seen");
    }
}

/// With drop = 1.0 nothing arrives (checked for a bounded time); clearing the faults restores
/// delivery.
pub fn fault_drop_all(spec: &ProviderSpec) {
    let slot = spec.multicast("fault_drop_all");
    let s = UdNode::joined(spec, &slot);
    let r = UdNode::joined(spec, &slot);
    let Some(faults) = injector(spec, &r.fabric) else { return };
    s.send(&slot, 0, 32);
    assert_eq!(r.expect(&slot, "datagram before faults").0, 0);

    faults.set_ud_faults(UdFaults { drop: 1.0, ..UdFaults::default() });
    for seq in 1..=20 {
        s.send(&slot, seq, 32);
    }
    if let Some((seq, _)) = r.recv(&slot, QUIET) {
        panic!("datagram {seq} arrived with drop = 1.0");
    }
    fence(&s, &r, &slot, &faults, 0);
}

/// One seeded round: 100 datagrams with drop = 0.5, then markers until one arrives; returns the
/// sequence numbers received.
fn drop_round(
    s: &UdNode,
    r: &UdNode,
    slot: &McastSlot,
    faults: &FaultInjector,
    seed: u64,
    round: u64,
) -> BTreeSet<u64> {
    const N: u64 = 100;
    fence(s, r, slot, faults, round);
    faults.set_ud_faults(UdFaults { drop: 0.5, seed, ..UdFaults::default() });
    for seq in 1..=N {
        s.send(slot, seq, 32);
    }
    let deadline = Instant::now() + WAIT;
    let mut got = BTreeSet::new();
    for k in 0.. {
        assert!(Instant::now() < deadline, "no marker got through within {WAIT:?}");
        s.send(slot, MARKER + k, 32);
        while let Some((seq, _)) = r.recv(slot, Duration::from_millis(20)) {
            if seq >= MARKER {
                return got;
            }
            if (1..=N).contains(&seq) {
                assert!(got.insert(seq), "datagram {seq} delivered twice with duplicate = 0");
            }
        }
    }
    unreachable!()
}

/// With drop = 0.5 about half the datagrams arrive, and the same seed drops the same ones.
pub fn fault_drop_half_deterministic(spec: &ProviderSpec) {
    let slot = spec.multicast("fault_drop_half_deterministic");
    let s = UdNode::joined(spec, &slot);
    let r = UdNode::joined(spec, &slot);
    let Some(faults) = injector(spec, &r.fabric) else { return };
    let first = drop_round(&s, &r, &slot, &faults, 42, 0);
    let again = drop_round(&s, &r, &slot, &faults, 42, 1);
    let other = drop_round(&s, &r, &slot, &faults, 4242, 2);
    assert!((25..=75).contains(&first.len()), "{} of 100 arrived with drop = 0.5", first.len());
    assert_eq!(first, again, "the same seed dropped different datagrams");
    assert_ne!(first, other, "a different seed dropped the same 100 datagrams");
}

/// With duplicate = 1.0 every datagram arrives exactly twice.
pub fn fault_duplicate(spec: &ProviderSpec) {
    let slot = spec.multicast("fault_duplicate");
    let s = UdNode::joined(spec, &slot);
    let r = UdNode::joined(spec, &slot);
    let Some(faults) = injector(spec, &r.fabric) else { return };
    fence(&s, &r, &slot, &faults, 0);
    faults.set_ud_faults(UdFaults { duplicate: 1.0, seed: 1, ..UdFaults::default() });
    s.send(&slot, 1, 48);
    s.send(&slot, 2, 48);
    let mut got: Vec<(u64, Vec<u8>)> =
        (0..4).map(|_| r.expect(&slot, "a duplicated datagram")).map(|(seq, d)| (seq, d.data)).collect();
    got.sort();
    let expect: Vec<(u64, Vec<u8>)> = [1, 1, 2, 2].into_iter().map(|seq| (seq, slot.payload(seq, 48))).collect();
    assert_eq!(got, expect);
    assert_eq!(fence(&s, &r, &slot, &faults, 1), Vec::<u64>::new(), "a third copy arrived");
}

/// Cutting a connection fails its outstanding and later work (TransportRetryExceeded or
/// WorkRequestFlushed) and reports Disconnected on the cut side.
pub fn fault_cut_connection(spec: &ProviderSpec) {
    let p = Pair::connect(spec);
    let Some(faults) = injector(spec, &p.client.fabric) else { return };
    let buf = p.client.register(64, Access::LOCAL_WRITE);
    p.client_qp.post_recv(1, &[buf.sge(0, 64)]).expect("post_recv");
    faults.cut(p.client_qp.conn_id()).expect("cut");

    let failed = [WcStatus::TransportRetryExceeded, WcStatus::WorkRequestFlushed];
    let wc = poll_one(&p.client.cq);
    assert_eq!((wc.wr_id, wc.qp_num), (1, p.client_qp.qp_num()));
    assert!(failed.contains(&wc.status), "outstanding receive after a cut: {wc:?}");
    expect_disconnected(&p.client.events, p.client_qp.conn_id());
    if p.client_qp.post_send(&wr(2, SendOp::Send, &[buf.sge(0, 8)])).is_ok() {
        let wc = poll_one(&p.client.cq);
        assert_eq!(wc.wr_id, 2);
        assert!(failed.contains(&wc.status), "SEND after a cut: {wc:?}");
    }
    assert_cq_empty(&p.server.cq, "nothing reached the server");
}
