//! libFuzzer entry of the `listing_accept` target (see `rdma_pubsub_fuzz::listing_accept`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = rdma_pubsub_fuzz::listing_accept(data);
});
