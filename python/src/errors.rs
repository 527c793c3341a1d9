//! The library's `Error` as Python exceptions: each variant raises its class of
//! `rdma_pubsub.errors` (defined in Python, so that a class can also derive from the builtin
//! it resembles: `TimeoutError`, `ValueError`, `ConnectionError`), with the variant's fields as
//! attributes.

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyModule;
use rdma_pubsub::{Error, RejectCode};

/// The module `rdma_pubsub.errors`, imported once.
static ERRORS: PyOnceLock<Py<PyModule>> = PyOnceLock::new();

/// Converts a library error into the Python exception of its variant.
pub(crate) fn to_py(error: Error) -> PyErr {
    Python::attach(|py| match exception_of(py, &error) {
        Ok(exception) => exception,
        Err(import_failed) => PyRuntimeError::new_err(format!("{error} (and {import_failed})")),
    })
}

/// A `PyResult` from a library result.
pub(crate) fn py_result<T>(result: rdma_pubsub::Result<T>) -> PyResult<T> {
    result.map_err(to_py)
}

/// The exception of `error`'s variant, its fields set as attributes.
fn exception_of(py: Python<'_>, error: &Error) -> PyResult<PyErr> {
    let module = ERRORS.get_or_try_init(py, || PyModule::import(py, "rdma_pubsub.errors").map(Bound::unbind))?;
    let (class, attributes): (&str, Vec<(&str, Py<PyAny>)>) = match error {
        Error::Fabric(_) => ("FabricError", vec![]),
        Error::PeerMisbehaved { detail } => ("PeerMisbehavedError", vec![("detail", text(py, detail))]),
        Error::InvalidSecret(_) => ("InvalidSecretError", vec![]),
        Error::Internal { detail } => ("InternalError", vec![("detail", text(py, detail))]),
        Error::LoanOutstanding => ("LoanOutstandingError", vec![]),
        Error::Timeout { what, millis } => {
            ("TimeoutError", vec![("what", text(py, what)), ("millis", millis.into_pyobject(py)?.into_any().unbind())])
        }
        Error::InvalidTopic { topic, detail } => {
            ("InvalidTopicError", vec![("topic", text(py, topic)), ("detail", text(py, detail))])
        }
        Error::AlreadyPublishing { topic } => ("AlreadyPublishingError", vec![("topic", text(py, topic))]),
        Error::InvalidOption { option, detail } => {
            ("InvalidOptionError", vec![("option", text(py, option)), ("detail", text(py, detail))])
        }
        Error::Rejected { peer, reason, detail } => {
            let class = match reason {
                RejectCode::Unauthorized => "UnauthorizedError",
                RejectCode::TypeMismatch => "TypeMismatchError",
                _ => "RejectedError",
            };
            let reason = format!("{reason:?}");
            (
                class,
                vec![
                    ("peer", text(py, &peer.to_string())),
                    ("reason", text(py, &reason)),
                    ("detail", text(py, detail)),
                ],
            )
        }
        Error::RecordTooLarge { peer, len, limit } => (
            "RecordTooLargeError",
            vec![
                ("peer", text(py, &peer.to_string())),
                ("len", len.into_pyobject(py)?.into_any().unbind()),
                ("limit", limit.into_pyobject(py)?.into_any().unbind()),
            ],
        ),
        Error::MessageTooLarge { len, limit } => (
            "MessageTooLargeError",
            vec![
                ("len", len.into_pyobject(py)?.into_any().unbind()),
                ("limit", limit.into_pyobject(py)?.into_any().unbind()),
            ],
        ),
        Error::Unreachable { peer, detail } => {
            ("UnreachableError", vec![("peer", text(py, &peer.to_string())), ("detail", text(py, detail))])
        }
        Error::Unauthenticated { peer, detail } => {
            ("UnauthenticatedError", vec![("peer", text(py, &peer.to_string())), ("detail", text(py, detail))])
        }
        Error::NotConnected { topic, discovery } => (
            "NotConnectedError",
            vec![
                ("topic", text(py, topic)),
                ("discovery", discovery.into_pyobject(py)?.to_owned().into_any().unbind()),
            ],
        ),
        Error::Dropped { peer, publisher, reason } => (
            "DroppedError",
            vec![
                ("peer", text(py, &peer.to_string())),
                ("publisher", publisher.into_pyobject(py)?.into_any().unbind()),
                ("reason", text(py, &format!("{reason:?}"))),
            ],
        ),
        Error::MessageOverLimit { peer, publisher, len, limit } => (
            "MessageTooLargeError",
            vec![
                ("peer", text(py, &peer.to_string())),
                ("publisher", publisher.into_pyobject(py)?.into_any().unbind()),
                ("len", len.into_pyobject(py)?.into_any().unbind()),
                ("limit", limit.into_pyobject(py)?.into_any().unbind()),
            ],
        ),
        Error::Encode { detail } => ("EncodeError", vec![("detail", text(py, detail))]),
        Error::Decode { publisher, seq, detail } => (
            "DecodeError",
            vec![
                ("publisher", publisher.into_pyobject(py)?.into_any().unbind()),
                ("seq", seq.into_pyobject(py)?.into_any().unbind()),
                ("detail", text(py, detail)),
            ],
        ),
        Error::Closed(_) => ("ClosedError", vec![]),
        _ => ("Error", vec![]),
    };
    let exception = module.bind(py).getattr(class)?.call1((error.to_string(),))?;
    for (name, value) in attributes {
        exception.setattr(name, value)?;
    }
    Ok(PyErr::from_value(exception))
}

/// A Python `str`.
fn text(py: Python<'_>, s: &str) -> Py<PyAny> {
    pyo3::types::PyString::new(py, s).into_any().unbind()
}
