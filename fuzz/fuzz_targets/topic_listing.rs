//! libFuzzer entry of the `topic_listing` target (see `rdma_pubsub_fuzz::topic_listing`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = rdma_pubsub_fuzz::topic_listing(data);
});
