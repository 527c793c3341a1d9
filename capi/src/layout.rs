//! The size and alignment of every public struct as Rust lays it out, so that a C test can
//! check the header's declarations against the library it links ([`rps_struct_layout`]).

use std::ffi::c_char;
use std::mem::{align_of, size_of};

use crate::counters::{rps_publisher_counters, rps_subscription_counters};
use crate::handle::out_ptr;
use crate::message::{rps_event, rps_message_view};
use crate::options::{rps_node_options, rps_publisher_options, rps_subscriber_options};
use crate::status::{guard, rps_status, Failure};

/// Every public struct: its name and its (size, alignment).
const LAYOUTS: &[(&str, usize, usize)] = &[
    ("rps_node_options", size_of::<rps_node_options>(), align_of::<rps_node_options>()),
    ("rps_publisher_options", size_of::<rps_publisher_options>(), align_of::<rps_publisher_options>()),
    ("rps_subscriber_options", size_of::<rps_subscriber_options>(), align_of::<rps_subscriber_options>()),
    ("rps_message_view", size_of::<rps_message_view>(), align_of::<rps_message_view>()),
    ("rps_event", size_of::<rps_event>(), align_of::<rps_event>()),
    ("rps_publisher_counters", size_of::<rps_publisher_counters>(), align_of::<rps_publisher_counters>()),
    ("rps_subscription_counters", size_of::<rps_subscription_counters>(), align_of::<rps_subscription_counters>()),
];

/// How many public structs there are; [`rps_struct_layout_at`] names each.
#[no_mangle]
pub extern "C" fn rps_struct_count() -> usize {
    LAYOUTS.len()
}

/// The name (a static NUL-terminated string, in `*name`), size and alignment of public struct
/// number `index` (from 0) as the library lays it out. `RPS_INVALID_ARGUMENT` past the last.
///
/// # Safety
/// `name`, `size` and `align` are NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn rps_struct_layout_at(
    index: usize,
    name: *mut *const c_char,
    size: *mut usize,
    align: *mut usize,
) -> rps_status {
    const NAMES: &[&std::ffi::CStr] = &[
        c"rps_node_options",
        c"rps_publisher_options",
        c"rps_subscriber_options",
        c"rps_message_view",
        c"rps_event",
        c"rps_publisher_counters",
        c"rps_subscription_counters",
    ];
    guard(|| {
        // SAFETY: the caller's contract, argument by argument.
        let (name, size, align) = unsafe { (out_ptr(name, "name")?, out_ptr(size, "size")?, out_ptr(align, "align")?) };
        let (&(_, s, a), n) = LAYOUTS
            .get(index)
            .zip(NAMES.get(index))
            .ok_or_else(|| Failure::invalid("index", "past the last struct"))?;
        (*name, *size, *align) = (n.as_ptr(), s, a);
        Ok(rps_status::RPS_OK)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_struct_the_header_defines_is_listed() {
        let header = include_str!("../include/rdma_pubsub.h");
        let mut defined: Vec<&str> =
            header.lines().filter_map(|l| l.strip_prefix("typedef struct ")?.strip_suffix(" {")).collect();
        let mut listed: Vec<&str> = LAYOUTS.iter().map(|(n, _, _)| *n).collect();
        defined.sort_unstable();
        listed.sort_unstable();
        assert_eq!(defined, listed);
    }
}
