//! libFuzzer entry of the `announcement` target (see `rdma_pubsub_fuzz::announcement`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = rdma_pubsub_fuzz::announcement(data);
});
