//! The one way a call of the package blocks: in slices of at most [`SLICE`], with the GIL
//! released during each, and Python's signal handlers run between them (so Ctrl-C raises
//! `KeyboardInterrupt` within a slice, and other Python threads run meanwhile).

use std::time::{Duration, Instant};

use pyo3::exceptions::PyBufferError;
use pyo3::prelude::*;

use crate::errors::to_py;

/// The longest a blocking call waits without looking at signals.
pub(crate) const SLICE: Duration = Duration::from_millis(50);

/// Why one slice of a wait failed.
pub(crate) enum SliceError {
    /// The library's error.
    Library(rdma_pubsub::Error),
    /// The subscription's current message still has exports: it cannot move on.
    Exported,
    /// The handle was closed.
    Closed(&'static str),
}

impl SliceError {
    /// The Python exception.
    pub(crate) fn into_py(self) -> PyErr {
        match self {
            SliceError::Library(e) => to_py(e),
            SliceError::Exported => PyBufferError::new_err(
                "a view of the previous message's payload (memoryview, numpy array) is still alive: \
                 release it (del it, or memoryview.release()) before the subscriber moves on",
            ),
            SliceError::Closed(what) => to_py(rdma_pubsub::Error::Closed(what)),
        }
    }
}

impl From<rdma_pubsub::Error> for SliceError {
    fn from(e: rdma_pubsub::Error) -> Self {
        SliceError::Library(e)
    }
}

/// Runs `attempt(slice)` with the GIL released until it returns `Some`, or `deadline` passes
/// (then `None`; no deadline: never), or a signal handler raises (then its exception).
///
/// # Errors
/// What `attempt` fails with, and what a signal handler raises (`KeyboardInterrupt`).
pub(crate) fn in_slices<T, F>(py: Python<'_>, deadline: Option<Instant>, mut attempt: F) -> PyResult<Option<T>>
where
    T: Send,
    F: FnMut(Duration) -> Result<Option<T>, SliceError> + Send,
{
    loop {
        let slice = match deadline {
            None => SLICE,
            Some(deadline) => deadline.saturating_duration_since(Instant::now()).min(SLICE),
        };
        if let Some(value) = py.detach(|| attempt(slice)).map_err(SliceError::into_py)? {
            return Ok(Some(value));
        }
        py.check_signals()?;
        if deadline.is_some_and(|deadline| Instant::now() >= deadline) {
            return Ok(None);
        }
    }
}
