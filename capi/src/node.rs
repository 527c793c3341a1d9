//! The node handle: made from [`rps_node_options`], destroyed with [`rps_node_destroy`].

use std::ffi::c_char;

use pubsub::Node;

use crate::handle::{handle_ref, out_ptr, take_handle};
use crate::options::rps_node_options;
use crate::status::{guard, guard_void, rps_status};

/// A node: the fabric, the listener and the threads that serve its publishers and
/// subscriptions. Any thread may use it, several at once. Destroy its publishers and
/// subscriptions first.
#[allow(non_camel_case_types)]
pub struct rps_node {
    pub(crate) node: Node,
}

/// Makes a node with `options` (NULL: the defaults) and stores it in `*out`.
///
/// # Safety
/// `options` is NULL or a valid `rps_node_options` whose pointers are NULL or valid; `out` is
/// NULL (then `RPS_INVALID_ARGUMENT`) or writable.
#[no_mangle]
pub unsafe extern "C" fn rps_node_create(options: *const rps_node_options, out: *mut *mut rps_node) -> rps_status {
    guard(|| {
        // SAFETY: `out` is NULL or writable (the caller's contract).
        let out = unsafe { out_ptr(out, "out") }?;
        let mut defaults = std::mem::MaybeUninit::<rps_node_options>::uninit();
        let options = if options.is_null() {
            // SAFETY: a pointer to our own uninitialised slot, written whole by the init.
            unsafe { crate::options::rps_node_options_init(defaults.as_mut_ptr()) };
            // SAFETY: just initialised.
            unsafe { defaults.assume_init_ref() }
        } else {
            // SAFETY: not NULL, a valid `rps_node_options` (the caller's contract).
            unsafe { &*options }
        };
        // SAFETY: its pointers are NULL or valid (the caller's contract).
        let node = unsafe { options.builder() }?.build()?;
        *out = Box::into_raw(Box::new(rps_node { node }));
        Ok(rps_status::RPS_OK)
    })
}

/// Destroys the node in `*node` and sets `*node` to NULL; nothing when `node` or `*node` is
/// NULL (so destroying twice is harmless).
///
/// # Safety
/// `node` is NULL or points to NULL or to a node made by `rps_node_create`, not used by
/// another thread during the call.
#[no_mangle]
pub unsafe extern "C" fn rps_node_destroy(node: *mut *mut rps_node) {
    // SAFETY: the caller's contract is `take_handle`'s.
    guard_void(|| drop(unsafe { take_handle(node) }));
}

/// Writes the node's listening address, `"ip:port"` and a NUL, into `buf` (`cap` bytes);
/// `RPS_BUFFER_TOO_SMALL` when it does not fit (64 bytes always do).
///
/// # Safety
/// `node` is NULL or a live node; `buf` is NULL or valid for writes of `cap` bytes.
#[no_mangle]
pub unsafe extern "C" fn rps_node_local_addr(node: *const rps_node, buf: *mut c_char, cap: usize) -> rps_status {
    guard(|| {
        // SAFETY: NULL or a live node (the caller's contract).
        let node = unsafe { handle_ref(node, "node") }?;
        // SAFETY: NULL or valid for `cap` bytes (the caller's contract).
        unsafe { crate::handle::write_c_string(&node.node.local_addr().to_string(), buf, cap) }
    })
}

/// The node's id in `*id` (announced by discovery; stable for the node's life).
///
/// # Safety
/// `node` is NULL or a live node; `id` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn rps_node_id(node: *const rps_node, id: *mut u64) -> rps_status {
    guard(|| {
        // SAFETY: NULL or a live node (the caller's contract).
        let node = unsafe { handle_ref(node, "node") }?;
        // SAFETY: NULL or writable (the caller's contract).
        *unsafe { out_ptr(id, "id") }? = node.node.id();
        Ok(rps_status::RPS_OK)
    })
}
