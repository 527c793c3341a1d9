//! libFuzzer entry of the `reject_data` target (see `rdma_pubsub_fuzz::reject_data`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = rdma_pubsub_fuzz::reject_data(data);
});
