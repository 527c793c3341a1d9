//! What every call returns ([`rps_status`]), the thread-local detail of the last failure
//! ([`rps_last_error`]), and the guard every entry point runs its body in: it catches panics,
//! so none crosses into C, and records failures.

use std::cell::RefCell;
use std::ffi::{c_char, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

use pubsub::{Error, RejectCode};

/// What a call did. `RPS_OK` and `RPS_EMPTY` are not failures; every other status is, and
/// [`rps_last_error`] then gives its detail.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(non_camel_case_types)]
pub enum rps_status {
    /// Done.
    RPS_OK = 0,
    /// Nothing to take: no message (or event) arrived within the timeout, or none was there.
    RPS_EMPTY = 1,
    /// A NULL handle or pointer, a string that is not UTF-8, an address that does not parse,
    /// an enum value out of range.
    RPS_INVALID_ARGUMENT = 2,
    /// A blocking call ran out of time (a `BLOCK` publish, a connect, a flush).
    RPS_TIMEOUT = 3,
    /// The subscription (or its node) is closed: every call returns it at once.
    RPS_CLOSED = 4,
    /// The subscription has no publisher now. Without discovery that is the end of its
    /// messages (its last publisher's stream ended, or it was never connected: connect one);
    /// with discovery a publisher may appear later.
    RPS_NOT_CONNECTED = 5,
    /// The publisher refused the subscription's credential (none, or a wrong one).
    RPS_UNAUTHORIZED = 6,
    /// The publisher refused the subscription for another reason (the detail says which).
    RPS_REJECTED = 7,
    /// No node answered at the address.
    RPS_UNREACHABLE = 8,
    /// A message over the subscription's `max_message_len`; the next call goes on.
    RPS_MESSAGE_TOO_LARGE = 9,
    /// The publisher's records are larger than the subscription reads.
    RPS_RECORD_TOO_LARGE = 10,
    /// A loan of this publisher is outstanding: send or drop it first.
    RPS_LOAN_OUTSTANDING = 11,
    /// A borrowed message of this subscription is outstanding: release it first.
    RPS_BORROW_OUTSTANDING = 12,
    /// This node already publishes the topic: share the publisher.
    RPS_ALREADY_PUBLISHING = 13,
    /// The topic name breaks a rule (the detail says which).
    RPS_INVALID_TOPIC = 14,
    /// A domain secret or topic credential is not usable (too short, too long).
    RPS_INVALID_SECRET = 15,
    /// An option is out of range (the detail names it).
    RPS_INVALID_OPTION = 16,
    /// The caller's buffer is too small: the message is kept for the next call, and the
    /// length it needs was written.
    RPS_BUFFER_TOO_SMALL = 17,
    /// The transport failed.
    RPS_FABRIC = 18,
    /// A peer broke the protocol.
    RPS_PEER_MISBEHAVED = 19,
    /// A message did not decode.
    RPS_DECODE = 20,
    /// The library panicked (a bug, to report with the detail); the handle may be unusable.
    RPS_PANIC = 21,
    /// Any other failure (the detail says what).
    RPS_ERROR = 22,
    /// A publisher's accept did not prove what the subscription requires (a tag under the
    /// domain secret or the topic's credential answering its connect, or the publisher
    /// discovery announced): refused before anything was read.
    RPS_UNAUTHENTICATED = 23,
    /// Every publisher the subscription knows dropped it (too slow under DropSlow, idle, a
    /// protocol violation): the detail names the publisher and the reason.
    RPS_DROPPED = 24,
    /// The publisher's messages are of another type than the subscription's (both named in
    /// the detail).
    RPS_TYPE_MISMATCH = 25,
    /// An `rps_exclusive` holds the publisher: end it first.
    RPS_EXCLUSIVE_HELD = 26,
}

/// A failed call: its status and the detail for [`rps_last_error`].
#[derive(Debug)]
pub(crate) struct Failure {
    status: rps_status,
    detail: String,
}

impl Failure {
    /// A failure with `status` and `detail`.
    pub(crate) fn new(status: rps_status, detail: impl Into<String>) -> Failure {
        Failure { status, detail: detail.into() }
    }

    /// An invalid argument: `what` and why.
    pub(crate) fn invalid(what: &str, why: &str) -> Failure {
        Failure::new(rps_status::RPS_INVALID_ARGUMENT, format!("{what}: {why}"))
    }
}

impl From<Error> for Failure {
    fn from(e: Error) -> Failure {
        let status = match &e {
            Error::Fabric(_) => rps_status::RPS_FABRIC,
            Error::PeerMisbehaved { .. } => rps_status::RPS_PEER_MISBEHAVED,
            Error::InvalidSecret(_) => rps_status::RPS_INVALID_SECRET,
            Error::LoanOutstanding => rps_status::RPS_LOAN_OUTSTANDING,
            Error::Timeout { .. } => rps_status::RPS_TIMEOUT,
            Error::InvalidTopic { .. } => rps_status::RPS_INVALID_TOPIC,
            Error::AlreadyPublishing { .. } => rps_status::RPS_ALREADY_PUBLISHING,
            Error::InvalidOption { .. } | Error::PatternNeedsDiscovery { .. } => rps_status::RPS_INVALID_OPTION,
            Error::Rejected { reason: RejectCode::Unauthorized, .. } => rps_status::RPS_UNAUTHORIZED,
            Error::Rejected { reason: RejectCode::TypeMismatch, .. } => rps_status::RPS_TYPE_MISMATCH,
            Error::Rejected { .. } => rps_status::RPS_REJECTED,
            Error::RecordTooLarge { .. } => rps_status::RPS_RECORD_TOO_LARGE,
            Error::MessageTooLarge { .. } | Error::MessageOverLimit { .. } => rps_status::RPS_MESSAGE_TOO_LARGE,
            Error::Dropped { .. } => rps_status::RPS_DROPPED,
            Error::Unreachable { .. } => rps_status::RPS_UNREACHABLE,
            Error::Unauthenticated { .. } => rps_status::RPS_UNAUTHENTICATED,
            Error::NotConnected { .. } => rps_status::RPS_NOT_CONNECTED,
            Error::Decode { .. } => rps_status::RPS_DECODE,
            Error::Closed(_) => rps_status::RPS_CLOSED,
            _ => rps_status::RPS_ERROR,
        };
        Failure::new(status, e.to_string())
    }
}

thread_local! {
    /// The detail of this thread's last failed call.
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

/// Records `detail` as this thread's last error (an inner NUL ends it early).
fn set_last_error(detail: &str) {
    let cut = detail.split('\0').next().unwrap_or_default();
    let detail = CString::new(cut).unwrap_or_default();
    // Not after the thread's storage is gone (a call from a thread-local destructor): then
    // the detail is lost, never a panic.
    let _ = LAST_ERROR.try_with(|last| {
        if let Ok(mut last) = last.try_borrow_mut() {
            *last = detail;
        }
    });
}

/// Runs the body of an entry point: its status, or its failure's (recorded for
/// [`rps_last_error`]); a panic is caught and returned as `RPS_PANIC`.
pub(crate) fn guard(body: impl FnOnce() -> Result<rps_status, Failure>) -> rps_status {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(status)) => status,
        Ok(Err(failure)) => {
            set_last_error(&failure.detail);
            failure.status
        }
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic without a message".into());
            set_last_error(&format!("internal error of rdma-pubsub (please report): {what}"));
            rps_status::RPS_PANIC
        }
    }
}

/// Runs a body that returns nothing (a destroy function): a panic is caught and recorded.
pub(crate) fn guard_void(body: impl FnOnce()) {
    guard(|| {
        body();
        Ok(rps_status::RPS_OK)
    });
}

/// The detail of the calling thread's last failed call: a NUL-terminated UTF-8 string owned by
/// the library, valid until the next failed call on this thread; empty when none failed.
/// Never NULL.
#[no_mangle]
pub extern "C" fn rps_last_error() -> *const c_char {
    // The string lives in the thread's storage until the next failure replaces it; once that
    // storage is gone (a thread-local destructor calling), an empty static string.
    LAST_ERROR.try_with(|last| last.try_borrow().map(|s| s.as_ptr()).unwrap_or(c"".as_ptr())).unwrap_or(c"".as_ptr())
}

/// The name of `status` (`"RPS_OK"`, ...): a static NUL-terminated string. Never NULL.
#[no_mangle]
pub extern "C" fn rps_status_name(status: rps_status) -> *const c_char {
    let name: &'static CStr = match status {
        rps_status::RPS_OK => c"RPS_OK",
        rps_status::RPS_EMPTY => c"RPS_EMPTY",
        rps_status::RPS_INVALID_ARGUMENT => c"RPS_INVALID_ARGUMENT",
        rps_status::RPS_TIMEOUT => c"RPS_TIMEOUT",
        rps_status::RPS_CLOSED => c"RPS_CLOSED",
        rps_status::RPS_NOT_CONNECTED => c"RPS_NOT_CONNECTED",
        rps_status::RPS_UNAUTHORIZED => c"RPS_UNAUTHORIZED",
        rps_status::RPS_REJECTED => c"RPS_REJECTED",
        rps_status::RPS_UNREACHABLE => c"RPS_UNREACHABLE",
        rps_status::RPS_MESSAGE_TOO_LARGE => c"RPS_MESSAGE_TOO_LARGE",
        rps_status::RPS_RECORD_TOO_LARGE => c"RPS_RECORD_TOO_LARGE",
        rps_status::RPS_LOAN_OUTSTANDING => c"RPS_LOAN_OUTSTANDING",
        rps_status::RPS_BORROW_OUTSTANDING => c"RPS_BORROW_OUTSTANDING",
        rps_status::RPS_ALREADY_PUBLISHING => c"RPS_ALREADY_PUBLISHING",
        rps_status::RPS_INVALID_TOPIC => c"RPS_INVALID_TOPIC",
        rps_status::RPS_INVALID_SECRET => c"RPS_INVALID_SECRET",
        rps_status::RPS_INVALID_OPTION => c"RPS_INVALID_OPTION",
        rps_status::RPS_BUFFER_TOO_SMALL => c"RPS_BUFFER_TOO_SMALL",
        rps_status::RPS_FABRIC => c"RPS_FABRIC",
        rps_status::RPS_PEER_MISBEHAVED => c"RPS_PEER_MISBEHAVED",
        rps_status::RPS_DECODE => c"RPS_DECODE",
        rps_status::RPS_PANIC => c"RPS_PANIC",
        rps_status::RPS_ERROR => c"RPS_ERROR",
        rps_status::RPS_UNAUTHENTICATED => c"RPS_UNAUTHENTICATED",
        rps_status::RPS_DROPPED => c"RPS_DROPPED",
        rps_status::RPS_TYPE_MISMATCH => c"RPS_TYPE_MISMATCH",
        rps_status::RPS_EXCLUSIVE_HELD => c"RPS_EXCLUSIVE_HELD",
    };
    name.as_ptr()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn last_error() -> String {
        // SAFETY: `rps_last_error` never returns NULL and its string lives until the next
        // failure on this thread.
        unsafe { CStr::from_ptr(rps_last_error()) }.to_string_lossy().into_owned()
    }

    #[test]
    fn a_panic_is_caught_and_reported() {
        let status = guard(|| panic!("boom"));
        assert_eq!(status, rps_status::RPS_PANIC);
        assert!(last_error().contains("boom"), "{}", last_error());
    }

    #[test]
    fn a_failure_sets_the_detail_and_a_success_keeps_it() {
        assert_eq!(guard(|| Err(Failure::invalid("topic", "NULL"))), rps_status::RPS_INVALID_ARGUMENT);
        assert_eq!(last_error(), "topic: NULL");
        assert_eq!(guard(|| Ok(rps_status::RPS_OK)), rps_status::RPS_OK);
        assert_eq!(last_error(), "topic: NULL");
    }

    #[test]
    fn a_refused_credential_has_its_own_status() {
        let peer = "127.0.0.1:1".parse().unwrap();
        let refused = Error::Rejected { peer, reason: RejectCode::Unauthorized, detail: "wrong proof".into() };
        assert_eq!(Failure::from(refused).status, rps_status::RPS_UNAUTHORIZED);
        let full = Error::Rejected { peer, reason: RejectCode::TooManySubscribers, detail: String::new() };
        assert_eq!(Failure::from(full).status, rps_status::RPS_REJECTED);
        let other_type = Error::Rejected { peer, reason: RejectCode::TypeMismatch, detail: "String, not u64".into() };
        assert_eq!(Failure::from(other_type).status, rps_status::RPS_TYPE_MISMATCH);
        let impostor = Error::Unauthenticated { peer, detail: "no tag".into() };
        let failure = Failure::from(impostor);
        assert_eq!(failure.status, rps_status::RPS_UNAUTHENTICATED);
        // SAFETY: rps_status_name returns a static NUL-terminated string.
        let name = unsafe { std::ffi::CStr::from_ptr(rps_status_name(failure.status)) };
        assert_eq!(name.to_str().unwrap(), "RPS_UNAUTHENTICATED");
    }
}
