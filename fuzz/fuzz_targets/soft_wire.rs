//! libFuzzer entry of the `soft_wire` target (see `rdma_pubsub_fuzz::soft_wire`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = rdma_pubsub_fuzz::soft_wire(data);
});
