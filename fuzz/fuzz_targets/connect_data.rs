//! libFuzzer entry of the `connect_data` target (see `rdma_pubsub_fuzz::connect_data`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = rdma_pubsub_fuzz::connect_data(data);
});
