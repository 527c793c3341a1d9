//! The C ABI of rdma-pubsub: `librdma_pubsub.so` and `librdma_pubsub.a`, declared by
//! `include/rdma_pubsub.h` (generated from this crate by cbindgen, `cbindgen.toml`; the test
//! `header::the_committed_header_is_current` fails when it is stale, and
//! `RPS_BLESS_HEADER=1 cargo test -p rdma-pubsub-c header` rewrites it), with a C++17 wrapper,
//! `include/rdma_pubsub.hpp`.
//!
//! The rules every function keeps:
//!
//! - names start with `rps_`; handles are opaque ([`rps_node`], [`rps_publisher`],
//!   [`rps_loan`], [`rps_exclusive`], [`rps_subscription`], [`rps_message`]) and made by `*_create` functions;
//! - every call returns an [`rps_status`]; a failure's detail is the thread-local
//!   [`rps_last_error`]. A NULL handle or out-pointer is `RPS_INVALID_ARGUMENT`, never a crash;
//! - no Rust panic crosses into C: each entry point runs in a guard that catches it
//!   (`RPS_PANIC`);
//! - destroy functions take the address of the handle, set it to NULL, and accept NULL (so a
//!   handle destroyed twice is destroyed once);
//! - zero copy both ways: a publisher's loan ([`rps_publisher_loan`], write, then
//!   [`rps_loan_send`] or [`rps_loan_drop`]) and a subscription's borrow
//!   ([`rps_subscription_recv_ref`], then [`rps_subscription_release`]); copying variants too
//!   ([`rps_publisher_publish`], [`rps_subscription_recv`], [`rps_subscription_recv_into`]);
//! - one publishing thread may hold a publisher: [`rps_publisher_exclusive`], then
//!   [`rps_exclusive_publish`] (no lock per message), then [`rps_exclusive_end`];
//! - receives wait up to a timeout in milliseconds (0: do not block; [`RPS_FOREVER`]), and
//!   [`rps_subscription_ready_fd`] with [`rps_subscription_prepare_wait`] let an event loop
//!   (epoll, libuv, asio) drive a subscription.
//!
//! Files: `status.rs` (statuses, last error, the guard), `handle.rs` (reading C's pointers),
//! `options.rs`, `node.rs`, `publisher.rs` (with loans), `subscription.rs`, `message.rs`
//! (views, owned messages, events), `counters.rs`, `layout.rs` (struct layouts for the C test).
#![warn(missing_docs)]

mod counters;
mod handle;
mod layout;
mod message;
mod node;
mod options;
mod publisher;
mod status;
mod subscription;

#[cfg(test)]
mod header;

pub use counters::{rps_publisher_counters, rps_subscription_counters};
pub use layout::{rps_struct_count, rps_struct_layout_at};
pub use message::{
    rps_event, rps_event_kind, rps_message, rps_message_destroy, rps_message_get_view, rps_message_view,
    rps_reject_code, RPS_EVENT_DETAIL_LEN,
};
pub use node::{rps_node, rps_node_create, rps_node_destroy, rps_node_id, rps_node_local_addr};
pub use options::{
    rps_fabric, rps_node_options, rps_node_options_init, rps_policy, rps_publisher_options, rps_publisher_options_init,
    rps_same_host, rps_start, rps_subscriber_options, rps_subscriber_options_init,
};
pub use publisher::{
    rps_exclusive, rps_exclusive_end, rps_exclusive_publish, rps_loan, rps_loan_drop, rps_loan_send, rps_publisher,
    rps_publisher_create, rps_publisher_destroy, rps_publisher_exclusive, rps_publisher_flush,
    rps_publisher_get_counters, rps_publisher_loan, rps_publisher_publish, rps_publisher_wait_for_subscribers,
};
pub use status::{rps_last_error, rps_status, rps_status_name};
pub use subscription::{
    rps_subscription, rps_subscription_connect, rps_subscription_create, rps_subscription_destroy,
    rps_subscription_get_counters, rps_subscription_prepare_wait, rps_subscription_ready_fd, rps_subscription_recv,
    rps_subscription_recv_into, rps_subscription_recv_ref, rps_subscription_release, rps_subscription_try_event,
    RPS_FOREVER,
};
