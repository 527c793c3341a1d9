//! libFuzzer entry of the `ring_control` target (see `rdma_pubsub_fuzz::ring_control`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = rdma_pubsub_fuzz::ring_control(data);
});
