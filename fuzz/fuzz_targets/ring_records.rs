//! libFuzzer entry of the `ring_records` target (see `rdma_pubsub_fuzz::ring_records`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = rdma_pubsub_fuzz::ring_records(data);
});
