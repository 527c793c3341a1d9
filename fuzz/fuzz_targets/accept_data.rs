//! libFuzzer entry of the `accept_data` target (see `rdma_pubsub_fuzz::accept_data`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = rdma_pubsub_fuzz::accept_data(data);
});
