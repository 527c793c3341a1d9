//! Conformance suite of the fabric contract (`src/fabric`), run against every provider.
//!
//! Every case is a generic function of a [`ProviderSpec`] (how to open the provider, which local
//! address to use, the few facts the contract leaves to providers). [`for_each_case!`] lists the
//! cases once; each provider module instantiates the whole list as `#[test]`s:
//!
//! - `soft::*`: the user-space provider on 127.0.0.1 with its same-host path (READs and WRITEs
//!   between the two devices of a test are copies through shared memory), and `soft_network::*`:
//!   the same with that path off (everything through the NIC threads and TCP); both run by a plain
//!   `cargo test`;
//! - `verbs::*` (feature `verbs`): libibverbs/librdmacm on the Soft-RoCE device at `RXE_IP`
//!   (default 10.0.2.15); ignored unless run with `--ignored`, as `scripts/verbs-vm-tests.sh`
//!   does inside the rxe VM.
//!
//! Tests of one binary run in parallel: listeners use port 0, each multicast test has its own
//! group, port and payload tag ([`ProviderSpec::multicast`]), and the leak test runs alone in a
//! child process. Every wait is bounded (`common::fabric::WAIT`); absence is checked with an
//! ordering barrier where one exists, otherwise for `common::fabric::QUIET`.
//!
//! Where providers legitimately differ the suite asserts the common part: CM private data is
//! checked as a prefix everywhere and for exact length only where the provider delivers exact
//! lengths (librdmacm pads to the CM field size); queue depths are exact only where the provider
//! does not round them up; rkeys must be distinct only for regions with remote access (Soft-RoCE
//! gives the others rkey 0); both sides' `Disconnected` events are awaited in turn, since with
//! librdmacm the disconnecting side's event needs the peer's DREP, sent when the peer's own event
//! is delivered; soft-only fault injection asserts `faults()` is `None` on verbs.

mod common;

/// The cases, one module per part of the contract (files under `tests/fabric_conformance/`).
#[path = "fabric_conformance"]
mod cases {
    pub mod bootstrap;
    pub mod cm;
    pub mod cq;
    pub mod cq_notify;
    pub mod device;
    pub mod faults;
    pub mod leaks;
    pub mod rc;
    pub mod rc_errors;
    pub mod remote_view;
    pub mod srq;
    pub mod ud;
}

use common::provider::ProviderSpec;

/// Expands `$instantiate! { [spec;] module::case, ... }` with every case of the suite.
macro_rules! for_each_case {
    ($instantiate:ident $(, $spec:path)?) => {
        $instantiate! {
            $($spec;)?
            device::device_attributes,
            device::memory_regions_of_every_access,
            device::remote_write_requires_local_write,
            device::objects_of_another_device_are_refused,
            cq::cq_depth_limits,
            cq::cq_poll_in_batches,
            cq::cq_drain_hands_over_full_batches_then_a_short_one,
            cq::cq_poll_wait_times_out_when_empty,
            cq::cq_arm_wait_poll,
            cq::cq_waits_accept_any_duration,
            cq::cq_arm_solicited_notifies_only_solicited_sends,
            cq::cq_poll_wait_returns_on_completion,
            cq::cq_overrun,
            cq_notify::cq_notify_fd_readable_after_an_armed_completion_until_taken,
            cq_notify::cq_notify_fd_follows_solicited_arming,
            cq_notify::cq_notify_fd_wakes_for_a_peer_process,
            cm::cm_listen_port_zero_and_addr_in_use,
            cm::cm_connect_accept_private_data,
            cm::cm_private_data_at_the_limits,
            cm::cm_reject_with_private_data,
            cm::cm_no_listener,
            cm::cm_private_data_too_long,
            cm::cm_invalid_queue_pair_settings,
            cm::cm_drop_queue_pair_disconnects,
            bootstrap::bootstrap_connect_by_hand_then_send_read_write_and_send_with_immediate,
            bootstrap::bootstrap_reads_beyond_max_rd_atomic_wait_and_complete_in_order,
            bootstrap::bootstrap_rnr_retries_follow_rts_and_rtr,
            bootstrap::bootstrap_wrong_remote_qpn_fails_the_send_with_retry_exceeded,
            bootstrap::bootstrap_transition_out_of_order_is_invalid,
            bootstrap::bootstrap_rtr_before_init_is_invalid,
            bootstrap::bootstrap_destroying_one_side_flushes_the_other,
            bootstrap::bootstrap_init_access_limits_what_the_peer_may_do,
            bootstrap::bootstrap_endpoint_round_trips_through_serde,
            rc::rc_data_path_is_the_providers,
            rc::rc_send_recv,
            rc::rc_send_with_immediate,
            rc::rc_send_gathers_two_sges,
            rc::rc_rdma_read,
            rc::rc_rdma_write,
            rc::rc_unsignaled_success_has_no_completion,
            rc::rc_batched_reads,
            rc::rc_read_behind_a_waiting_send_completes_after_it,
            rc::rc_reads_beyond_the_initiator_depth_wait_and_complete_in_order,
            rc::rc_read_one_mib,
            rc::rc_sends_of_every_size_arrive_in_post_order,
            rc_errors::read_with_forged_rkey,
            rc_errors::remote_access_error_fails_the_responders_queue_pair,
            rc_errors::read_out_of_bounds,
            rc_errors::read_without_remote_read,
            rc_errors::write_without_remote_write,
            rc_errors::read_of_region_in_another_pd,
            rc_errors::pd_isolation_fails_the_responders_queue_pair_and_moves_nothing,
            rc_errors::read_after_remote_deregistered,
            rc_errors::read_from_a_peer_process_killed_mid_read,
            rc_errors::read_into_region_without_local_write,
            rc_errors::send_rnr_retry_exceeded,
            rc_errors::send_queue_full_then_flushed,
            rc_errors::recv_queue_full,
            rc_errors::local_sge_out_of_bounds,
            rc_errors::send_larger_than_recv,
            rc_errors::post_before_established,
            rc_errors::post_after_disconnect,
            rc_errors::disconnect_flushes_and_notifies,
            rc_errors::sends_completed_before_a_disconnect_are_received,
            remote_view::remote_view_reads_the_region_in_place,
            remote_view::remote_view_refused_as_a_read_fails_the_queue_pair,
            remote_view::remote_view_sees_deregistration_and_disconnection,
            srq::srq_shared_by_two_queue_pairs,
            ud::ud_multicast_delivery,
            ud::ud_unicast_between_endpoints,
            ud::ud_mtu_limits,
            ud::ud_leave_stops_delivery,
            faults::fault_drop_all,
            faults::fault_drop_half_deterministic,
            faults::fault_duplicate,
            faults::fault_cut_connection,
            leaks::leak_connect_disconnect_cycles,
        }
    };
}

/// Expands `#[test] fn case() { case(&spec()) }` for each case.
macro_rules! run_on {
    ($spec:path; $($module:ident :: $case:ident),* $(,)?) => {$(
        #[test]
        fn $case() {
            crate::cases::$module::$case(&$spec())
        }
    )*};
}

/// The suite against the soft provider on loopback, same-host path on: both ends of every
/// connection are in this process, so READs and WRITEs are copies through shared memory.
mod soft {
    for_each_case!(run_on, crate::ProviderSpec::soft);
}

/// The suite against the soft provider on loopback, same-host path off: everything through
/// the NIC threads and TCP.
mod soft_network {
    for_each_case!(run_on, crate::ProviderSpec::soft_network);
}

/// The suite against the verbs provider (Soft-RoCE in the test VM).
#[cfg(feature = "verbs")]
mod verbs {
    macro_rules! instantiate {
        ($($module:ident :: $case:ident),* $(,)?) => {$(
            #[test]
            #[ignore = "needs an RDMA device: run in the rxe VM by scripts/verbs-vm-tests.sh"]
            fn $case() {
                super::cases::$module::$case(&super::ProviderSpec::verbs())
            }
        )*};
    }
    for_each_case!(instantiate);
}
