//! The publisher handle, its copying publish and its zero-copy loans ([`rps_loan`]).

use std::ffi::c_char;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use pubsub::{Loan, Publisher};

use crate::counters::rps_publisher_counters;
use crate::handle::{handle_ref, out_ptr, take_handle};
use crate::node::rps_node;
use crate::options::{rps_publisher_options, rps_publisher_options_init, str_arg};
use crate::status::{guard, guard_void, rps_status, Failure};

/// A publisher of one topic. Any thread may use it, several at once (a loan holds it while
/// outstanding: the other threads' publishes wait). Destroy it before its node.
#[allow(non_camel_case_types)]
pub struct rps_publisher {
    publisher: Publisher,
    /// Loans made and not yet sent or dropped: the publisher is not destroyed under them.
    loans: AtomicUsize,
}

/// A message being written in place in the publisher's ring (zero copy): made by
/// [`rps_publisher_loan`], then sent ([`rps_loan_send`]) or dropped ([`rps_loan_drop`]) on the
/// thread that made it, before the publisher is destroyed.
#[allow(non_camel_case_types)]
pub struct rps_loan {
    /// Borrows the publisher of `owner`: made `'static` here, the publisher is kept alive
    /// while `owner.loans` counts this loan.
    loan: Loan<'static>,
    owner: *const rps_publisher,
}

/// Makes a publisher of `topic` on `node` with `options` (NULL: the defaults) in `*out`.
///
/// # Safety
/// `node` is NULL or a live node; `topic` NULL or a NUL-terminated string; `options` NULL or
/// a valid `rps_publisher_options`; `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn rps_publisher_create(
    node: *const rps_node,
    topic: *const c_char,
    options: *const rps_publisher_options,
    out: *mut *mut rps_publisher,
) -> rps_status {
    guard(|| {
        // SAFETY: the caller's contract, argument by argument.
        let (node, topic, out) = unsafe { (handle_ref(node, "node")?, str_arg(topic, "topic")?, out_ptr(out, "out")?) };
        let mut defaults = std::mem::MaybeUninit::<rps_publisher_options>::uninit();
        let options = if options.is_null() {
            // SAFETY: our own slot, written whole by the init.
            unsafe { rps_publisher_options_init(defaults.as_mut_ptr()) };
            // SAFETY: just initialised.
            unsafe { defaults.assume_init_ref() }
        } else {
            // SAFETY: not NULL, a valid `rps_publisher_options` (the caller's contract).
            unsafe { &*options }
        };
        // SAFETY: its credential is NULL or valid (the caller's contract).
        let publisher = unsafe { options.apply(node.node.publisher(topic)) }?.create()?;
        *out = Box::into_raw(Box::new(rps_publisher { publisher, loans: AtomicUsize::new(0) }));
        Ok(rps_status::RPS_OK)
    })
}

/// Destroys the publisher in `*publisher` (its subscribers get every message, then the end
/// of its stream) and sets `*publisher` to NULL; nothing when either is NULL. With a loan
/// outstanding it destroys nothing and returns `RPS_LOAN_OUTSTANDING`.
///
/// # Safety
/// `publisher` is NULL or points to NULL or a publisher made by `rps_publisher_create`, used
/// by no other thread during or after the call.
#[no_mangle]
pub unsafe extern "C" fn rps_publisher_destroy(publisher: *mut *mut rps_publisher) -> rps_status {
    guard(|| {
        // SAFETY: NULL or a valid slot (the caller's contract).
        if let Some(held) = unsafe { publisher.as_ref() }.and_then(|slot| {
            // SAFETY: NULL or a live publisher (the caller's contract).
            unsafe { slot.as_ref() }
        }) {
            if held.loans.load(Ordering::Acquire) > 0 {
                return Err(Failure::new(rps_status::RPS_LOAN_OUTSTANDING, "send or drop the loan first"));
            }
        }
        // SAFETY: the caller's contract is `take_handle`'s.
        drop(unsafe { take_handle(publisher) });
        Ok(rps_status::RPS_OK)
    })
}

/// Publishes `len` bytes at `data` (copied into the ring); its sequence number in `*seq`
/// (`seq` may be NULL). Under `RPS_POLICY_BLOCK` it waits for room up to the policy's timeout.
///
/// # Safety
/// `publisher` is NULL or a live publisher; `data` NULL (only with `len` 0) or valid for
/// `len` bytes; `seq` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn rps_publisher_publish(
    publisher: *const rps_publisher,
    data: *const u8,
    len: usize,
    seq: *mut u64,
) -> rps_status {
    guard(|| {
        // SAFETY: NULL or a live publisher (the caller's contract).
        let publisher = unsafe { handle_ref(publisher, "publisher") }?;
        // SAFETY: NULL (with `len` 0) or valid for `len` bytes (the caller's contract).
        let data = unsafe { bytes_arg(data, len) }?;
        let sent = publisher.publisher.publish(data)?;
        if !seq.is_null() {
            // SAFETY: not NULL, writable (the caller's contract).
            unsafe { seq.write(sent) };
        }
        Ok(rps_status::RPS_OK)
    })
}

/// Lends `len` bytes of the ring (zeroed) for a message written in place: the loan in
/// `*loan`, its bytes at `*data`. Send it with [`rps_loan_send`] or drop it with
/// [`rps_loan_drop`], on this thread; meanwhile other threads' publishes wait.
///
/// # Safety
/// `publisher` is NULL or a live publisher; `loan` and `data` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn rps_publisher_loan(
    publisher: *const rps_publisher,
    len: usize,
    loan: *mut *mut rps_loan,
    data: *mut *mut u8,
) -> rps_status {
    guard(|| {
        // SAFETY: the caller's contract, argument by argument.
        let (owner, loan_out, data_out) =
            unsafe { (handle_ref(publisher, "publisher")?, out_ptr(loan, "loan")?, out_ptr(data, "data")?) };
        let made = owner.publisher.loan(len)?;
        // SAFETY: only the lifetime changes. The loan borrows the publisher boxed in `owner`,
        // whose address is stable; `rps_publisher_destroy` refuses to free it while
        // `owner.loans` counts this loan, which `rps_loan_send` and `rps_loan_drop` end.
        let made = unsafe { std::mem::transmute::<Loan<'_>, Loan<'static>>(made) };
        owner.loans.fetch_add(1, Ordering::AcqRel);
        let mut boxed = Box::new(rps_loan { loan: made, owner });
        *data_out = boxed.loan.as_mut_ptr();
        *loan_out = Box::into_raw(boxed);
        Ok(rps_status::RPS_OK)
    })
}

/// Publishes the loan in `*loan` (its sequence number in `*seq`, which may be NULL) and sets
/// `*loan` to NULL: the loan is gone whatever the status.
///
/// # Safety
/// `loan` is NULL or points to NULL or a loan made by `rps_publisher_loan` on this thread;
/// `seq` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn rps_loan_send(loan: *mut *mut rps_loan, seq: *mut u64) -> rps_status {
    guard(|| {
        // SAFETY: the caller's contract is `take_handle`'s.
        let taken = unsafe { take_handle(loan) }.ok_or_else(|| Failure::invalid("loan", "NULL"))?;
        let rps_loan { loan, owner } = *taken;
        let sent = loan.send();
        // SAFETY: the publisher lives while it counts this loan (see `rps_publisher_loan`).
        unsafe { &*owner }.loans.fetch_sub(1, Ordering::AcqRel);
        let sent = sent?;
        if !seq.is_null() {
            // SAFETY: not NULL, writable (the caller's contract).
            unsafe { seq.write(sent) };
        }
        Ok(rps_status::RPS_OK)
    })
}

/// Drops the loan in `*loan` unsent (nothing is published) and sets `*loan` to NULL; nothing
/// when either is NULL.
///
/// # Safety
/// As [`rps_loan_send`].
#[no_mangle]
pub unsafe extern "C" fn rps_loan_drop(loan: *mut *mut rps_loan) {
    guard_void(|| {
        // SAFETY: the caller's contract is `take_handle`'s.
        if let Some(taken) = unsafe { take_handle(loan) } {
            let rps_loan { loan, owner } = *taken;
            drop(loan);
            // SAFETY: the publisher lives while it counts this loan (see `rps_publisher_loan`).
            unsafe { &*owner }.loans.fetch_sub(1, Ordering::AcqRel);
        }
    });
}

/// Waits up to `timeout_ms` until at least `n` subscribers are connected; how many are in
/// `*count` (`count` may be NULL). `RPS_TIMEOUT` when fewer came.
///
/// # Safety
/// `publisher` is NULL or a live publisher; `count` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn rps_publisher_wait_for_subscribers(
    publisher: *const rps_publisher,
    n: usize,
    timeout_ms: u64,
    count: *mut usize,
) -> rps_status {
    guard(|| {
        // SAFETY: NULL or a live publisher (the caller's contract).
        let publisher = unsafe { handle_ref(publisher, "publisher") }?;
        let connected = publisher.publisher.wait_for_subscribers(n, Duration::from_millis(timeout_ms));
        let connected = match connected {
            Ok(c) => c,
            Err(e) => {
                if !count.is_null() {
                    // SAFETY: not NULL, writable (the caller's contract).
                    unsafe { count.write(publisher.publisher.subscriber_count()) };
                }
                return Err(e.into());
            }
        };
        if !count.is_null() {
            // SAFETY: not NULL, writable (the caller's contract).
            unsafe { count.write(connected) };
        }
        Ok(rps_status::RPS_OK)
    })
}

/// Waits up to `timeout_ms` until every connected subscriber has acknowledged every message
/// published.
///
/// # Safety
/// `publisher` is NULL or a live publisher.
#[no_mangle]
pub unsafe extern "C" fn rps_publisher_flush(publisher: *const rps_publisher, timeout_ms: u64) -> rps_status {
    guard(|| {
        // SAFETY: NULL or a live publisher (the caller's contract).
        let publisher = unsafe { handle_ref(publisher, "publisher") }?;
        publisher.publisher.flush(Duration::from_millis(timeout_ms))?;
        Ok(rps_status::RPS_OK)
    })
}

/// The publisher's counters, read now, in `*out`.
///
/// # Safety
/// `publisher` is NULL or a live publisher; `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn rps_publisher_get_counters(
    publisher: *const rps_publisher,
    out: *mut rps_publisher_counters,
) -> rps_status {
    guard(|| {
        // SAFETY: the caller's contract, argument by argument.
        let (publisher, out) = unsafe { (handle_ref(publisher, "publisher")?, out_ptr(out, "out")?) };
        *out = rps_publisher_counters::read(publisher.publisher.counters());
        Ok(rps_status::RPS_OK)
    })
}

/// `len` bytes at `data`: empty when `len` is 0 (whatever `data`).
///
/// # Safety
/// `data` is valid for `len` bytes when `len` is not 0.
pub(crate) unsafe fn bytes_arg<'a>(data: *const u8, len: usize) -> Result<&'a [u8], Failure> {
    if len == 0 {
        return Ok(&[]);
    }
    if data.is_null() {
        return Err(Failure::invalid("data", "NULL with a length"));
    }
    // SAFETY: not NULL, valid for `len` bytes (the caller's contract).
    Ok(unsafe { std::slice::from_raw_parts(data, len) })
}
