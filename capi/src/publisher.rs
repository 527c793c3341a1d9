//! The publisher handle, its copying publish, its zero-copy loans ([`rps_loan`]) and its
//! single-threaded handle ([`rps_exclusive`]).

use std::cell::UnsafeCell;
use std::ffi::c_char;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use pubsub::{ExclusivePublisher, Loan, Publisher};

use crate::counters::rps_publisher_counters;
use crate::handle::{handle_mut, handle_ref, out_ptr, take_handle, write_optional};
use crate::node::rps_node;
use crate::options::{rps_publisher_options, rps_publisher_options_init, str_arg};
use crate::status::{guard, guard_void, rps_status, Failure};

/// A publisher of one topic. Any thread may use it, several at once (a loan holds it while
/// outstanding: the other threads' publishes wait), except while an [`rps_exclusive`] holds it.
/// Destroy it before its node.
#[allow(non_camel_case_types)]
pub struct rps_publisher {
    /// Shared by every call (`&Publisher`), or lent mutably to one [`rps_exclusive`] while
    /// `exclusive` is set: then no call reaches it (they return `RPS_EXCLUSIVE_HELD`).
    publisher: UnsafeCell<Publisher>,
    /// An [`rps_exclusive`] holds the publisher.
    exclusive: AtomicBool,
    /// Loans made and not yet sent or dropped: the publisher is not destroyed under them.
    loans: AtomicUsize,
}

impl rps_publisher {
    /// Refuses while a loan of the publisher is outstanding.
    fn check_no_loans(&self) -> Result<(), Failure> {
        if self.loans.load(Ordering::Acquire) > 0 {
            return Err(Failure::new(rps_status::RPS_LOAN_OUTSTANDING, "send or drop the loan first"));
        }
        Ok(())
    }

    /// The publisher, for a call that shares it: refused while an [`rps_exclusive`] holds it
    /// (the call that would wait for it on the thread that holds it would never return).
    fn shared(&self) -> Result<&Publisher, Failure> {
        if self.exclusive.load(Ordering::Acquire) {
            return Err(Failure::new(
                rps_status::RPS_EXCLUSIVE_HELD,
                "an rps_exclusive holds the publisher: end it first",
            ));
        }
        // SAFETY: no `rps_exclusive` holds it, so no `&mut` to it exists: one is made only by
        // `rps_publisher_exclusive`, which no call may overlap (its contract), after setting the
        // flag checked above.
        Ok(unsafe { &*self.publisher.get() })
    }
}

/// A publisher held by one thread, that publishes without a lock per message
/// (`ExclusivePublisher`): made by [`rps_publisher_exclusive`], used and ended
/// ([`rps_exclusive_end`]) on that thread. While it lives every other call on its publisher
/// returns `RPS_EXCLUSIVE_HELD`.
#[allow(non_camel_case_types)]
pub struct rps_exclusive {
    /// Borrows the publisher of `owner` mutably: made `'static` here, the publisher is kept
    /// alive, and lent to no other call, while `owner.exclusive` is set.
    exclusive: ExclusivePublisher<'static>,
    owner: *const rps_publisher,
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
        *out = Box::into_raw(Box::new(rps_publisher {
            publisher: UnsafeCell::new(publisher),
            exclusive: AtomicBool::new(false),
            loans: AtomicUsize::new(0),
        }));
        Ok(rps_status::RPS_OK)
    })
}

/// Destroys the publisher in `*publisher` (its subscribers get every message, then the end
/// of its stream) and sets `*publisher` to NULL; nothing when either is NULL. With a loan
/// outstanding it destroys nothing and returns `RPS_LOAN_OUTSTANDING`; under an
/// [`rps_exclusive`], `RPS_EXCLUSIVE_HELD`.
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
            held.check_no_loans()?;
            held.shared()?;
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
        let sent = publisher.shared()?.publish(data)?;
        // SAFETY: NULL or writable (the caller's contract).
        unsafe { write_optional(seq, sent) };
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
        let made = owner.shared()?.loan(len)?;
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
        // SAFETY: NULL or writable (the caller's contract).
        unsafe { write_optional(seq, sent) };
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
        let shared = publisher.shared()?;
        let connected = shared.wait_for_subscribers(n, Duration::from_millis(timeout_ms));
        let connected = match connected {
            Ok(c) => c,
            Err(e) => {
                // SAFETY: NULL or writable (the caller's contract).
                unsafe { write_optional(count, shared.subscriber_count()) };
                return Err(e.into());
            }
        };
        // SAFETY: NULL or writable (the caller's contract).
        unsafe { write_optional(count, connected) };
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
        publisher.shared()?.flush(Duration::from_millis(timeout_ms))?;
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
        *out = rps_publisher_counters::read(publisher.shared()?.counters());
        Ok(rps_status::RPS_OK)
    })
}

/// Makes the publisher's single-threaded handle in `*out`: until [`rps_exclusive_end`], this
/// thread publishes through it ([`rps_exclusive_publish`]) without a lock per message, and
/// every other call on the publisher returns `RPS_EXCLUSIVE_HELD`. `RPS_LOAN_OUTSTANDING` while
/// a loan of the publisher is outstanding; `RPS_EXCLUSIVE_HELD` when a handle already holds it.
///
/// # Safety
/// `publisher` is NULL or a live publisher that no other thread uses during this call; `out`
/// NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn rps_publisher_exclusive(
    publisher: *mut rps_publisher,
    out: *mut *mut rps_exclusive,
) -> rps_status {
    guard(|| {
        // SAFETY: the caller's contract, argument by argument.
        let (owner, out) = unsafe { (handle_ref(publisher.cast_const(), "publisher")?, out_ptr(out, "out")?) };
        owner.check_no_loans()?;
        if owner.exclusive.swap(true, Ordering::AcqRel) {
            return Err(Failure::new(rps_status::RPS_EXCLUSIVE_HELD, "an rps_exclusive already holds the publisher"));
        }
        // SAFETY: the flag just set keeps every other call from the publisher (`shared`), and
        // none overlaps this one (the caller's contract): this is the only reference to it.
        let held = unsafe { &mut *owner.publisher.get() };
        let made = match held.exclusive() {
            Ok(made) => made,
            Err(e) => {
                owner.exclusive.store(false, Ordering::Release);
                return Err(e.into());
            }
        };
        // SAFETY: only the lifetime changes. The handle borrows the publisher boxed in `owner`,
        // whose address is stable; `rps_publisher_destroy` refuses to free it while
        // `owner.exclusive` is set, which only `rps_exclusive_end` clears.
        let made = unsafe { std::mem::transmute::<ExclusivePublisher<'_>, ExclusivePublisher<'static>>(made) };
        *out = Box::into_raw(Box::new(rps_exclusive { exclusive: made, owner }));
        Ok(rps_status::RPS_OK)
    })
}

/// Publishes `len` bytes at `data` through the single-threaded handle (copied into the ring);
/// its sequence number in `*seq` (`seq` may be NULL). Waits for credit as
/// [`rps_publisher_publish`] does.
///
/// # Safety
/// `exclusive` is NULL or a handle made by [`rps_publisher_exclusive`] on this thread and not
/// ended; `data` NULL (only with `len` 0) or valid for `len` bytes; `seq` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn rps_exclusive_publish(
    exclusive: *mut rps_exclusive,
    data: *const u8,
    len: usize,
    seq: *mut u64,
) -> rps_status {
    guard(|| {
        // SAFETY: the caller's contract, argument by argument.
        let (exclusive, data) = unsafe { (handle_mut(exclusive, "exclusive")?, bytes_arg(data, len)?) };
        let sent = exclusive.exclusive.publish(data)?;
        // SAFETY: NULL or writable (the caller's contract).
        unsafe { write_optional(seq, sent) };
        Ok(rps_status::RPS_OK)
    })
}

/// Ends the single-threaded handle in `*exclusive` (its publisher is shared again) and sets
/// `*exclusive` to NULL; nothing when either is NULL.
///
/// # Safety
/// `exclusive` is NULL or points to NULL or a handle made by [`rps_publisher_exclusive`] on
/// this thread.
#[no_mangle]
pub unsafe extern "C" fn rps_exclusive_end(exclusive: *mut *mut rps_exclusive) {
    guard_void(|| {
        // SAFETY: the caller's contract is `take_handle`'s.
        if let Some(taken) = unsafe { take_handle(exclusive) } {
            let rps_exclusive { exclusive, owner } = *taken;
            drop(exclusive);
            // SAFETY: the publisher lives while its flag is set (see `rps_publisher_exclusive`).
            unsafe { &*owner }.exclusive.store(false, Ordering::Release);
        }
    });
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
