//! The device's asynchronous events (`ibv_get_async_event`): a thread per opened device reads
//! them and marks the completion queues that overran.
//!
//! A CQ that receives more completions than it holds is reported by the device as
//! `IBV_EVENT_CQ_ERR` on the context's async descriptor (rxe, mlx4/5 alike); the CQ's contents
//! are undefined from then on. Counting completions in user space instead cannot be exact:
//! unsignaled requests, error completions and flushes of several queue pairs share one CQ. The
//! event is what the device itself decided, so that is what `poll` reports as `CqOverrun`.
//!
//! librdmacm opens each device once per process, so every [`AsyncEvents`] of the same device
//! reads the same descriptor; the map of watched CQs is therefore process-wide, and whichever
//! thread reads an event marks the CQ.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;
use rdma_sys::*;

use super::os::set_nonblocking;
use super::stoppable::StoppableThread;
use crate::Result;

/// `IBV_EVENT_CQ_ERR`.
const EVENT_CQ_ERR: u32 = 0;

/// `struct ibv_async_event` read with its event type as a plain integer (a value the bindings'
/// Rust enum does not know would be undefined behaviour).
#[repr(C)]
struct RawAsyncEvent {
    element: *mut std::ffi::c_void,
    event_type: u32,
}

const _: () = assert!(std::mem::size_of::<RawAsyncEvent>() == std::mem::size_of::<ibv_async_event>());

/// CQs watched for overrun, by the address of their `ibv_cq`.
fn watched() -> &'static Mutex<HashMap<usize, Arc<AtomicBool>>> {
    static WATCHED: OnceLock<Mutex<HashMap<usize, Arc<AtomicBool>>>> = OnceLock::new();
    WATCHED.get_or_init(|| Mutex::new(HashMap::new()))
}

/// Watches `cq` from now on: the returned flag turns true when the device reports its overrun.
pub(super) fn watch_cq(cq: *mut ibv_cq) -> Arc<AtomicBool> {
    let flag = Arc::new(AtomicBool::new(false));
    watched().lock().insert(cq as usize, flag.clone());
    flag
}

/// Stops watching `cq` (before it is destroyed).
pub(super) fn unwatch_cq(cq: *mut ibv_cq) {
    watched().lock().remove(&(cq as usize));
}

/// The reader of a device's asynchronous events; stops its thread on drop.
pub(super) struct AsyncEvents {
    _thread: StoppableThread,
}

impl AsyncEvents {
    /// Starts reading the async events of `ctx` (which must stay open until this is dropped).
    pub(super) fn start(ctx: *mut ibv_context, device: &str) -> Result<AsyncEvents> {
        // SAFETY: ctx is open; async_fd is its descriptor.
        let fd = unsafe { (*ctx).async_fd };
        set_nonblocking(fd, "async event descriptor")?;
        let ctx_addr = ctx as usize;
        let thread = StoppableThread::spawn(format!("{device}-async"), "spawn async event thread", move |stop| {
            run(ctx_addr as *mut ibv_context, fd, stop)
        })?;
        Ok(AsyncEvents { _thread: thread })
    }
}

/// The thread: waits on the async descriptor and the stop descriptor, handles every event.
fn run(ctx: *mut ibv_context, fd: i32, stop: i32) {
    let mut fds = [
        libc::pollfd { fd, events: libc::POLLIN, revents: 0 },
        libc::pollfd { fd: stop, events: libc::POLLIN, revents: 0 },
    ];
    loop {
        // SAFETY: two valid pollfds for the duration of the call.
        let rc = unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) };
        if rc < 0 {
            if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            tracing::warn!("verbs: polling async events: {}", std::io::Error::last_os_error());
            return;
        }
        if fds[1].revents != 0 {
            return;
        }
        drain(ctx);
    }
}

/// Reads and acknowledges every pending async event of `ctx`.
fn drain(ctx: *mut ibv_context) {
    loop {
        let mut ev = RawAsyncEvent { element: std::ptr::null_mut(), event_type: 0 };
        // SAFETY: ctx stays open while the thread runs (AsyncEvents is dropped first); `ev` has
        // the layout of ibv_async_event (asserted above). The descriptor is non-blocking.
        if unsafe { ibv_get_async_event(ctx, (&mut ev as *mut RawAsyncEvent).cast()) } != 0 {
            return;
        }
        if ev.event_type == EVENT_CQ_ERR {
            match watched().lock().get(&(ev.element as usize)) {
                Some(flag) => flag.store(true, Ordering::Release),
                None => tracing::debug!("verbs: CQ error event for an unknown CQ"),
            }
        } else {
            tracing::debug!("verbs: async event {}", ev.event_type);
        }
        // SAFETY: acknowledges the event just read, once (destroying its object waits for it).
        unsafe { ibv_ack_async_event((&mut ev as *mut RawAsyncEvent).cast()) };
    }
}
