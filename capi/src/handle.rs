//! Reading the pointers C passes: handles, out-parameters, buffers. Each function states the
//! contract its caller keeps, and turns NULL into `RPS_INVALID_ARGUMENT`.

use std::ffi::c_char;

use crate::status::{rps_status, Failure};

/// The handle behind `ptr`.
///
/// # Safety
/// `ptr` is NULL or points to a live `T` that no other thread mutates while `'a` lasts.
pub(crate) unsafe fn handle_ref<'a, T>(ptr: *const T, what: &str) -> Result<&'a T, Failure> {
    // SAFETY: NULL or a live `T` not mutated meanwhile (the caller's contract).
    unsafe { ptr.as_ref() }.ok_or_else(|| Failure::invalid(what, "NULL"))
}

/// The handle behind `ptr`, mutably.
///
/// # Safety
/// `ptr` is NULL or points to a live `T` that no other thread uses while `'a` lasts.
pub(crate) unsafe fn handle_mut<'a, T>(ptr: *mut T, what: &str) -> Result<&'a mut T, Failure> {
    // SAFETY: NULL or a live `T` used by no one else meanwhile (the caller's contract).
    unsafe { ptr.as_mut() }.ok_or_else(|| Failure::invalid(what, "NULL"))
}

/// The out-parameter `ptr`, to write.
///
/// # Safety
/// `ptr` is NULL or valid for writes of a `T` (any content: it is only written).
pub(crate) unsafe fn out_ptr<'a, T>(ptr: *mut T, what: &str) -> Result<&'a mut T, Failure> {
    if ptr.is_null() {
        return Err(Failure::invalid(what, "NULL"));
    }
    // SAFETY: not NULL, writable (the caller's contract); the callers only write through it
    // types without drop glue (numbers, pointers, plain structs).
    Ok(unsafe { &mut *ptr })
}

/// Writes `value` through the optional out-parameter `ptr`; nothing when it is NULL.
///
/// # Safety
/// `ptr` is NULL or valid for writes of a `T` (any content: it is only written).
pub(crate) unsafe fn write_optional<T>(ptr: *mut T, value: T) {
    if !ptr.is_null() {
        // SAFETY: not NULL, writable (the caller's contract).
        unsafe { ptr.write(value) };
    }
}

/// Takes the boxed handle in `*slot` and sets `*slot` to NULL; `None` when `slot` or
/// `*slot` is NULL.
///
/// # Safety
/// `slot` is NULL or points to NULL or to a pointer made by `Box::into_raw` for a `T` that no
/// other thread uses.
pub(crate) unsafe fn take_handle<T>(slot: *mut *mut T) -> Option<Box<T>> {
    // SAFETY: NULL or a valid slot (the caller's contract).
    let slot = unsafe { slot.as_mut() }?;
    let ptr = std::mem::replace(slot, std::ptr::null_mut());
    if ptr.is_null() {
        return None;
    }
    // SAFETY: made by `Box::into_raw` and owned by no one else: taking it back once, the
    // slot now NULL.
    Some(unsafe { Box::from_raw(ptr) })
}

/// Writes `s` and a NUL into `buf` (`cap` bytes).
///
/// # Safety
/// `buf` is NULL or valid for writes of `cap` bytes.
pub(crate) unsafe fn write_c_string(s: &str, buf: *mut c_char, cap: usize) -> Result<rps_status, Failure> {
    if buf.is_null() {
        return Err(Failure::invalid("buf", "NULL"));
    }
    if s.len() >= cap {
        return Err(Failure::new(
            rps_status::RPS_BUFFER_TOO_SMALL,
            format!("{} bytes needed, {cap} given", s.len() + 1),
        ));
    }
    // SAFETY: `buf` holds `cap` > `s.len()` bytes (the caller's contract), and does not
    // overlap `s`, a string of ours.
    unsafe {
        std::ptr::copy_nonoverlapping(s.as_ptr(), buf.cast::<u8>(), s.len());
        buf.add(s.len()).write(0);
    }
    Ok(rps_status::RPS_OK)
}
