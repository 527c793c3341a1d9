//! The Python package `rdma_pubsub` (its native module `rdma_pubsub._native`): nodes,
//! publishers, loans, subscribers and their zero-copy messages, over the Rust library
//! `rdma-pubsub`.
//!
//! One file per Python class ([`node`], [`publisher`], [`loan`], [`subscriber`], [`message`],
//! [`event`]); [`errors`] maps the library's `Error` onto the exception hierarchy of
//! `rdma_pubsub/errors.py`; [`options`] reads the keyword options; [`wait`] is the one way a
//! call blocks: in slices, with the GIL released, checking for signals between slices so
//! that Ctrl-C interrupts it.
//!
//! Zero copy, and why it is safe: a [`message::Message`] lends its payload straight from the
//! subscription's READ buffer through the buffer protocol, and the library keeps that memory
//! only until the next call on the subscription. So the subscriber counts the buffers its
//! current message has exported: a call that would move the subscription on (receive, events,
//! connect, close) first invalidates the current message, and refuses with `BufferError`
//! while one of its exports (a `memoryview`, a numpy array) is alive. A message invalidated
//! exports nothing more. A [`loan::Loan`] is the same on the publishing side: it cannot be
//! sent while a view of it is alive.

mod errors;
mod event;
mod loan;
mod message;
mod node;
mod options;
mod publisher;
mod subscriber;
mod wait;

use pyo3::prelude::*;

/// The native module: its classes (the package `rdma_pubsub` re-exports them).
#[pymodule]
fn _native(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_class::<node::Node>()?;
    module.add_class::<publisher::Publisher>()?;
    module.add_class::<loan::Loan>()?;
    module.add_class::<subscriber::Subscriber>()?;
    module.add_class::<message::Message>()?;
    module.add_class::<message::PublisherInfo>()?;
    module.add_class::<event::Event>()?;
    Ok(())
}
