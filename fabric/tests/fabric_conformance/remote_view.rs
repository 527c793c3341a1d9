//! Views of a peer's memory read in place (`QueuePair::remote_view`): only on the same-host
//! data path, checked as a READ of the range is checked, and revoked with the region.

use rdma_fabric::*;

use crate::common::fabric::*;
use crate::common::provider::ProviderSpec;

/// The view of `len` bytes at `remote`, or `None` on a provider whose data path is the
/// network (asserted to have none).
fn view_if_shared(spec: &ProviderSpec, p: &Pair, remote: RemoteAddr, len: usize) -> Option<RemoteView> {
    let view = p.client_qp.remote_view(remote, len).expect("remote_view");
    match spec.data_path {
        DataPath::Network => {
            assert!(view.is_none(), "a network data path gives no view");
            None
        }
        DataPath::SharedMemory => Some(view.expect("a same-host data path gives a view")),
    }
}

/// A view reads the region in place: words with acquire loads and ranges by copy, each
/// bounds-checked against the view (not the region), and sees what the owner writes later.
pub fn remote_view_reads_the_region_in_place(spec: &ProviderSpec) {
    let p = Pair::connect(spec);
    let remote = p.server.register(4096, Access::REMOTE_READ);
    let bytes = pattern(4096, 0x41);
    remote.buffer().write(0, &bytes).expect("write");
    let Some(view) = view_if_shared(spec, &p, at(remote.remote(), 64), 1024) else { return };
    assert_eq!(view.len(), 1024);
    let word = |o: usize| u64::from_le_bytes(bytes[64 + o..72 + o].try_into().unwrap());
    assert_eq!(view.load_acquire(0).unwrap(), word(0));
    assert_eq!(view.load_acquire(1016).unwrap(), word(1016));
    let mut dst = vec![0u8; 100];
    view.copy_to(24, &mut dst).expect("copy");
    assert_eq!(dst, bytes[88..188]);
    for offset in [1017, 1024, usize::MAX - 3] {
        assert!(view.load_acquire(offset).is_err(), "word at {offset}");
    }
    assert!(view.load_acquire(4).is_err(), "an unaligned word");
    assert!(matches!(view.copy_to(1000, &mut dst), Err(Error::RemoteAccess { .. })), "a copy past the view");
    // In place: what the owner writes after the view was made is what the view reads.
    remote
        .buffer()
        .atomic_u64(64 + 8)
        .unwrap()
        .store(0x0123_4567_89ab_cdef_u64.to_le(), std::sync::atomic::Ordering::Release);
    assert_eq!(view.load_acquire(8).unwrap(), 0x0123_4567_89ab_cdef);
    view.check_live().expect("live");
}

/// Makes, on a pair's server, a region and the range of it a case asks a view of.
type RefusedRange = fn(&Pair) -> (MemoryRegion, RemoteAddr, usize);

/// A view is refused as a READ would be (a forged rkey, a range past the region, a region
/// without remote read, one of another protection domain), and the refusal fails the
/// requester's queue pair as a READ's completion would: a READ posted afterwards is flushed.
pub fn remote_view_refused_as_a_read_fails_the_queue_pair(spec: &ProviderSpec) {
    let cases: [(&str, RefusedRange); 4] = [
        ("a forged rkey", |p| {
            let r = p.server.register(4096, Access::REMOTE_READ);
            let forged = RemoteAddr { addr: r.addr(), rkey: r.rkey() ^ 0x00A5_5A00 };
            (r, forged, 64)
        }),
        ("past the region", |p| {
            let r = p.server.register(1000, Access::REMOTE_READ);
            let remote = at(r.remote(), 8);
            (r, remote, 1000)
        }),
        ("without remote read", |p| {
            let r = p.server.register(4096, Access::LOCAL_WRITE | Access::REMOTE_WRITE);
            let remote = r.remote();
            (r, remote, 64)
        }),
        ("of another protection domain", |p| {
            let pd = p.server.fabric.alloc_pd().expect("alloc_pd");
            let r = pd.register(4096, Access::REMOTE_READ).expect("register");
            let remote = r.remote();
            (r, remote, 64)
        }),
    ];
    for (what, make) in cases {
        let p = Pair::connect(spec);
        let (_region, remote, len) = make(&p);
        let got = p.client_qp.remote_view(remote, len);
        if spec.data_path == DataPath::Network {
            assert!(matches!(got, Ok(None)), "{what}: no view on the network path");
            continue;
        }
        assert!(matches!(got, Err(Error::RemoteAccess { .. })), "{what}: {got:?}");
        assert_eq!(p.client_qp.state(), QpState::Error, "{what}: the queue pair failed");
        let own = p.server.register(64, Access::REMOTE_READ);
        let local = p.client.register(64, Access::LOCAL_WRITE);
        if p.client_qp.post_send(&wr(2, SendOp::RdmaRead(own.remote()), &[local.sge(0, 64)])).is_ok() {
            let wc = poll_one(&p.client.cq);
            assert_eq!((wc.wr_id, wc.status), (2, WcStatus::WorkRequestFlushed), "{what}");
        }
        assert!(p.client_qp.remote_view(own.remote(), 64).is_err(), "{what}: no view on a failed queue pair");
    }
}

/// Once the owner deregisters the region, copies through a view fail (never stale bytes) and
/// its words still load without a fault; once the connection is gone, copies fail too.
pub fn remote_view_sees_deregistration_and_disconnection(spec: &ProviderSpec) {
    let p = Pair::connect(spec);
    let remote = p.server.register(4096, Access::REMOTE_READ);
    remote.buffer().fill(0, 4096, 0x3C).expect("fill");
    let kept = p.server.register(4096, Access::REMOTE_READ);
    let Some(view) = view_if_shared(spec, &p, remote.remote(), 4096) else { return };
    let other = p.client_qp.remote_view(kept.remote(), 4096).unwrap().expect("a second view");
    let mut dst = [0u8; 64];
    view.copy_to(0, &mut dst).expect("copy");
    assert_eq!(dst, [0x3C; 64]);
    drop(remote);
    assert!(matches!(view.copy_to(0, &mut dst), Err(Error::RemoteAccess { .. })), "deregistered");
    assert!(view.check_live().is_err());
    view.load_acquire(0).expect("the mapping stays: a load does not fault");
    other.copy_to(0, &mut dst).expect("the other region is still readable");
    p.server_qp.disconnect().expect("disconnect");
    expect_disconnected_each(&[(&p.client.events, p.client_qp.conn_id()), (&p.server.events, p.server_qp.conn_id())]);
    assert!(matches!(other.copy_to(0, &mut dst), Err(Error::RemoteAccess { .. })), "disconnected");
}
