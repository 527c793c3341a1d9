//! Posting work allocates nothing on the soft provider: a subscriber posts a READ for every
//! batch (a busy poller, one after another), so an allocation per post is an allocation per
//! poll. Counted by a global allocator that counts, per thread, the allocations made while a
//! post is under way.

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use common::fabric::{at, poll_one, wr, Pair};
use common::provider::ProviderSpec;
use rdma_fabric::{Access, SendOp};

/// The system allocator, counting the allocations of a thread while it is counting.
struct Counting;

thread_local! {
    /// Whether this thread counts its allocations now, and how many it made.
    static COUNTING: Cell<(bool, u64)> = const { Cell::new((false, 0)) };
}

// SAFETY: every call is passed to the system allocator unchanged; the count is a thread-local
// cell, touched without allocating.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = COUNTING.try_with(|c| {
            let (on, n) = c.get();
            if on {
                c.set((on, n + 1));
            }
        });
        // SAFETY: the caller's contract is the system allocator's.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `alloc` above, that is from the system allocator.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Runs `f` and returns how many allocations this thread made meanwhile.
fn allocations_in(f: impl FnOnce()) -> u64 {
    COUNTING.with(|c| c.set((true, 0)));
    f();
    COUNTING.with(|c| {
        let (_, n) = c.get();
        c.set((false, 0));
        n
    })
}

/// Posts READs one at a time (as a polling subscriber does) and counts the allocations of the
/// posts alone, after a few rounds that let queues reach their working size.
fn reads_are_posted_without_allocating(spec: &ProviderSpec) {
    const LEN: usize = 256;
    let p = Pair::connect(spec);
    let remote = p.server.register(64 * 1024, Access::REMOTE_READ);
    let local = p.client.register(LEN, Access::LOCAL_WRITE);
    let mut allocations = 0;
    for i in 0..200u64 {
        let sge = [local.sge(0, LEN)];
        let request = wr(i, SendOp::RdmaRead(at(remote.remote(), (i % 64) * 512)), &sge);
        let n = allocations_in(|| p.client_qp.post_send(&request).expect("post READ"));
        if i >= 20 {
            allocations += n;
        }
        assert_eq!(poll_one(&p.client.cq).wr_id, i);
    }
    assert_eq!(allocations, 0, "allocations in 180 READ posts");
}

#[test]
fn soft_same_host_reads_are_posted_without_allocating() {
    reads_are_posted_without_allocating(&ProviderSpec::soft());
}

#[test]
fn soft_network_reads_are_posted_without_allocating() {
    reads_are_posted_without_allocating(&ProviderSpec::soft_network());
}
