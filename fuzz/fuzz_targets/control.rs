//! libFuzzer entry of the `control` target (see `rdma_pubsub_fuzz::control`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = rdma_pubsub_fuzz::control(data);
});
