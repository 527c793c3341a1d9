//! The subscription handle: connecting, the receives (zero-copy borrow and release, copying
//! into a new message or the caller's buffer; blocking with a timeout or not at all), events,
//! the readiness descriptor for event loops, and counters.
//!
//! Timeouts are in milliseconds: 0 does not block, [`RPS_FOREVER`] waits without end.

use std::ffi::c_char;
use std::os::fd::AsRawFd;
use std::time::Duration;

use pubsub::{Message, Subscription, Topic};

use crate::counters::rps_subscription_counters;
use crate::handle::{handle_mut, handle_ref, out_ptr, take_handle};
use crate::message::{rps_event, rps_message, rps_message_view};
use crate::node::rps_node;
use crate::options::{addr_arg, rps_subscriber_options, rps_subscriber_options_init, str_arg};
use crate::status::{guard, guard_void, rps_status, Failure};

/// A timeout that never ends.
pub const RPS_FOREVER: u64 = u64::MAX;

/// A subscription to one topic. One thread at a time uses it. Destroy it before its node.
#[allow(non_camel_case_types)]
pub struct rps_subscription {
    sub: Subscription,
    /// A borrowed message is outstanding (`rps_subscription_recv_ref`), its bytes in the
    /// subscription's buffer: no receive until `rps_subscription_release`.
    borrowed: bool,
    /// A message `rps_subscription_recv_into` could not fit, for the next receive.
    pending: Option<Message>,
    /// The topic of the message `rps_subscription_recv_into` copied last: its view points into
    /// it until the next receive.
    last_topic: Option<Topic>,
}

impl rps_subscription {
    /// Fails while a borrowed message is outstanding.
    fn check_not_borrowed(&self) -> Result<(), Failure> {
        if self.borrowed {
            return Err(Failure::new(rps_status::RPS_BORROW_OUTSTANDING, "release the borrowed message first"));
        }
        Ok(())
    }

    /// The next message, copied, within `timeout_ms`.
    fn recv_owned(&mut self, timeout_ms: u64) -> Result<Option<Message>, Failure> {
        self.check_not_borrowed()?;
        if self.pending.is_some() {
            return Ok(self.pending.take());
        }
        let received = match timeout_ms {
            0 => self.sub.try_recv()?,
            ms => self.sub.recv_timeout(Duration::from_millis(ms))?,
        };
        Ok(received)
    }
}

/// Makes a subscription to `topic` on `node` with `options` (NULL: the defaults) in `*out`.
/// With discovery, it connects by itself to the topic's publishers; without, connect it with
/// [`rps_subscription_connect`]. `topic` may be a pattern (a key expression with wildcards,
/// `"sensors/**"`): the subscription reads every publisher of a topic it includes, found by
/// discovery or listed by the nodes it connects to; without discovery it needs
/// `options->connect` (else `RPS_INVALID_OPTION`).
///
/// # Safety
/// `node` is NULL or a live node; `topic` NULL or a NUL-terminated string; `options` NULL or
/// a valid `rps_subscriber_options`; `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn rps_subscription_create(
    node: *const rps_node,
    topic: *const c_char,
    options: *const rps_subscriber_options,
    out: *mut *mut rps_subscription,
) -> rps_status {
    guard(|| {
        // SAFETY: the caller's contract, argument by argument.
        let (node, topic, out) = unsafe { (handle_ref(node, "node")?, str_arg(topic, "topic")?, out_ptr(out, "out")?) };
        let mut defaults = std::mem::MaybeUninit::<rps_subscriber_options>::uninit();
        let options = if options.is_null() {
            // SAFETY: our own slot, written whole by the init.
            unsafe { rps_subscriber_options_init(defaults.as_mut_ptr()) };
            // SAFETY: just initialised.
            unsafe { defaults.assume_init_ref() }
        } else {
            // SAFETY: not NULL, a valid `rps_subscriber_options` (the caller's contract).
            unsafe { &*options }
        };
        // SAFETY: its credential is NULL or valid (the caller's contract).
        let sub = unsafe { options.apply(node.node.subscriber(topic)) }?.create()?;
        *out = Box::into_raw(Box::new(rps_subscription { sub, borrowed: false, pending: None, last_topic: None }));
        Ok(rps_status::RPS_OK)
    })
}

/// Destroys the subscription in `*sub` (a borrowed message goes with it) and sets `*sub` to
/// NULL; nothing when either is NULL.
///
/// # Safety
/// `sub` is NULL or points to NULL or to a subscription made by `rps_subscription_create`,
/// used by no other thread during or after the call.
#[no_mangle]
pub unsafe extern "C" fn rps_subscription_destroy(sub: *mut *mut rps_subscription) {
    // SAFETY: the caller's contract is `take_handle`'s.
    guard_void(|| drop(unsafe { take_handle(sub) }));
}

/// Connects to the publisher of the topic on the node at `addr` (`"ip:port"`; for a pattern,
/// to every publisher there of a topic it includes, the first awaited). With
/// `timeout_ms` 0 it only starts connecting (the outcome arrives as an event); otherwise it
/// waits: `RPS_UNAUTHORIZED` when the publisher refused the credential, `RPS_REJECTED`,
/// `RPS_UNREACHABLE`, `RPS_TIMEOUT`.
///
/// # Safety
/// `sub` is NULL or a live subscription; `addr` NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn rps_subscription_connect(
    sub: *mut rps_subscription,
    addr: *const c_char,
    timeout_ms: u64,
) -> rps_status {
    guard(|| {
        // SAFETY: the caller's contract, argument by argument.
        let (sub, addr) = unsafe { (handle_mut(sub, "subscription")?, addr_arg(addr, "addr")?) };
        sub.check_not_borrowed()?;
        match timeout_ms {
            0 => sub.sub.connect(addr)?,
            ms => drop(sub.sub.connect_wait(addr, Duration::from_millis(ms))?),
        }
        Ok(rps_status::RPS_OK)
    })
}

/// Receives the next message without copying it: `*view` points into the subscription's READ
/// buffer until [`rps_subscription_release`], which must come before the next receive.
/// Waits up to `timeout_ms`; `RPS_EMPTY` when none came.
///
/// # Safety
/// `sub` is NULL or a live subscription; `view` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn rps_subscription_recv_ref(
    sub: *mut rps_subscription,
    timeout_ms: u64,
    view: *mut rps_message_view,
) -> rps_status {
    guard(|| {
        // SAFETY: the caller's contract, argument by argument.
        let (sub, view) = unsafe { (handle_mut(sub, "subscription")?, out_ptr(view, "view")?) };
        sub.check_not_borrowed()?;
        if let Some(m) = &sub.pending {
            // A message kept by `recv_into`: lent from the handle until the release.
            *view = rps_message_view::new(&m.data, m.seq, &m.publisher, &m.topic);
            sub.borrowed = true;
            return Ok(rps_status::RPS_OK);
        }
        let Some(m) = sub.sub.recv_ref(Duration::from_millis(timeout_ms))? else {
            return Ok(rps_status::RPS_EMPTY);
        };
        *view = rps_message_view::new(m.data, m.seq, &m.publisher, m.topic);
        sub.borrowed = true;
        Ok(rps_status::RPS_OK)
    })
}

/// Ends the borrow of the message `rps_subscription_recv_ref` lent (its view is invalid from
/// now on); nothing when none is outstanding.
///
/// # Safety
/// `sub` is NULL or a live subscription.
#[no_mangle]
pub unsafe extern "C" fn rps_subscription_release(sub: *mut rps_subscription) -> rps_status {
    guard(|| {
        // SAFETY: NULL or a live subscription (the caller's contract).
        let sub = unsafe { handle_mut(sub, "subscription") }?;
        if sub.borrowed {
            sub.borrowed = false;
            // A kept message that was lent is delivered now.
            if sub.pending.is_some() {
                sub.pending = None;
            }
        }
        Ok(rps_status::RPS_OK)
    })
}

/// Receives the next message as a copy the application owns, in `*message` (free it with
/// `rps_message_destroy`). Waits up to `timeout_ms`; `RPS_EMPTY` when none came.
///
/// # Safety
/// `sub` is NULL or a live subscription; `message` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn rps_subscription_recv(
    sub: *mut rps_subscription,
    timeout_ms: u64,
    message: *mut *mut rps_message,
) -> rps_status {
    guard(|| {
        // SAFETY: the caller's contract, argument by argument.
        let (sub, out) = unsafe { (handle_mut(sub, "subscription")?, out_ptr(message, "message")?) };
        let Some(message) = sub.recv_owned(timeout_ms)? else { return Ok(rps_status::RPS_EMPTY) };
        *out = Box::into_raw(Box::new(rps_message { message }));
        Ok(rps_status::RPS_OK)
    })
}

/// Receives the next message into the caller's buffer (`cap` bytes at `buf`); `*info` gets its
/// length and origin, its `data` pointing to `buf`. When the message is longer than `cap`:
/// `RPS_BUFFER_TOO_SMALL`, `info->len` is the length it needs and the message is kept for the
/// next receive. Waits up to `timeout_ms`; `RPS_EMPTY` when none came.
///
/// # Safety
/// `sub` is NULL or a live subscription; `buf` NULL (only with `cap` 0) or valid for writes of
/// `cap` bytes; `info` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn rps_subscription_recv_into(
    sub: *mut rps_subscription,
    timeout_ms: u64,
    buf: *mut u8,
    cap: usize,
    info: *mut rps_message_view,
) -> rps_status {
    guard(|| {
        // SAFETY: the caller's contract, argument by argument.
        let (sub, info) = unsafe { (handle_mut(sub, "subscription")?, out_ptr(info, "info")?) };
        if buf.is_null() && cap != 0 {
            return Err(Failure::invalid("buf", "NULL with a capacity"));
        }
        let Some(m) = sub.recv_owned(timeout_ms)? else { return Ok(rps_status::RPS_EMPTY) };
        *info = rps_message_view::new(&m.data, m.seq, &m.publisher, &m.topic);
        // The view's topic outlives the message until the next receive.
        sub.last_topic = Some(m.topic.clone());
        if m.data.len() > cap {
            let needed = m.data.len();
            sub.pending = Some(m);
            return Err(Failure::new(
                rps_status::RPS_BUFFER_TOO_SMALL,
                format!("the message has {needed} bytes, the buffer {cap}: it is kept for the next receive"),
            ));
        }
        if !m.data.is_empty() {
            // SAFETY: `buf` holds `cap` >= `m.data.len()` bytes (the caller's contract) and
            // does not overlap the message, which the library owns.
            unsafe { std::ptr::copy_nonoverlapping(m.data.as_ptr(), buf, m.data.len()) };
        }
        info.data = buf;
        Ok(rps_status::RPS_OK)
    })
}

/// The next event about the subscription's connections in `*event`; `RPS_EMPTY` when none.
///
/// # Safety
/// `sub` is NULL or a live subscription; `event` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn rps_subscription_try_event(sub: *mut rps_subscription, event: *mut rps_event) -> rps_status {
    guard(|| {
        // SAFETY: the caller's contract, argument by argument.
        let (sub, out) = unsafe { (handle_mut(sub, "subscription")?, out_ptr(event, "event")?) };
        sub.check_not_borrowed()?;
        let Some(event) = sub.sub.try_event() else { return Ok(rps_status::RPS_EMPTY) };
        *out = rps_event::from_event(&event);
        Ok(rps_status::RPS_OK)
    })
}

/// A descriptor for `poll(2)`, `epoll`, libuv or asio, in `*fd`: it polls readable when the
/// subscription may have something (owned by the subscription: never read or close it). The
/// loop: receive (non-blocking) until `RPS_EMPTY` and take events until `RPS_EMPTY`; then
/// [`rps_subscription_prepare_wait`]; if it says nothing may be ready, wait for the
/// descriptor; repeat.
///
/// # Safety
/// `sub` is NULL or a live subscription; `fd` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn rps_subscription_ready_fd(sub: *const rps_subscription, fd: *mut i32) -> rps_status {
    guard(|| {
        // SAFETY: the caller's contract, argument by argument.
        let (sub, out) = unsafe { (handle_ref(sub, "subscription")?, out_ptr(fd, "fd")?) };
        *out = sub.sub.ready_fd()?.as_raw_fd();
        Ok(rps_status::RPS_OK)
    })
}

/// Arms the descriptor of [`rps_subscription_ready_fd`] before a wait. `*may_be_ready` true:
/// something may be ready already (a message, an error a receive returns, an event): receive
/// again instead of waiting. False: wait for the descriptor.
///
/// # Safety
/// `sub` is NULL or a live subscription; `may_be_ready` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn rps_subscription_prepare_wait(
    sub: *mut rps_subscription,
    may_be_ready: *mut bool,
) -> rps_status {
    guard(|| {
        // SAFETY: the caller's contract, argument by argument.
        let (sub, out) = unsafe { (handle_mut(sub, "subscription")?, out_ptr(may_be_ready, "may_be_ready")?) };
        sub.check_not_borrowed()?;
        *out = sub.pending.is_some() || sub.sub.prepare_wait()?;
        Ok(rps_status::RPS_OK)
    })
}

/// The subscription's counters, read now, in `*out`.
///
/// # Safety
/// `sub` is NULL or a live subscription; `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn rps_subscription_get_counters(
    sub: *const rps_subscription,
    out: *mut rps_subscription_counters,
) -> rps_status {
    guard(|| {
        // SAFETY: the caller's contract, argument by argument.
        let (sub, out) = unsafe { (handle_ref(sub, "subscription")?, out_ptr(out, "out")?) };
        *out = rps_subscription_counters::read(sub.sub.counters());
        Ok(rps_status::RPS_OK)
    })
}
