//! The keyword options of the Python API, read into the library's types: addresses
//! (`"host:port"`), durations (seconds as `float`), secrets (`bytes` or `str`), and the names
//! of enumerations (`"block"`, `"earliest"`, `"soft"`, ...).

use std::net::{SocketAddr, ToSocketAddrs};
use std::time::{Duration, Instant};

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use rdma_pubsub::{FabricKind, Policy, Secret, Start};

use crate::errors::to_py;

/// A socket address from `"host:port"` (the first the name resolves to).
pub(crate) fn socket_addr(text: &str) -> PyResult<SocketAddr> {
    let resolved = text.to_socket_addrs().map_err(|e| PyValueError::new_err(format!("address {text:?}: {e}")))?;
    resolved.into_iter().next().ok_or_else(|| PyValueError::new_err(format!("address {text:?} resolves to nothing")))
}

/// A duration from seconds (finite, not negative).
pub(crate) fn duration(name: &str, seconds: f64) -> PyResult<Duration> {
    Duration::try_from_secs_f64(seconds)
        .map_err(|_| PyValueError::new_err(format!("{name} must be a finite number of seconds >= 0, not {seconds}")))
}

/// The instant `timeout` seconds from now (`None`: no deadline; one too far away for the
/// clock is none either).
pub(crate) fn deadline(timeout: Option<f64>) -> PyResult<Option<Instant>> {
    match timeout {
        None => Ok(None),
        Some(seconds) => Ok(Instant::now().checked_add(duration("timeout", seconds)?)),
    }
}

/// A secret (a domain secret or a topic credential) from `bytes` or `str` (its UTF-8).
pub(crate) fn secret(value: &Bound<'_, PyAny>) -> PyResult<Secret> {
    let bytes: Vec<u8> = match value.extract::<String>() {
        Ok(text) => text.into_bytes(),
        Err(_) => value.extract::<Vec<u8>>()?,
    };
    Secret::new(bytes).map_err(|e| to_py(e.into()))
}

/// The fabric named `"auto"`, `"soft"` or `"verbs"`.
pub(crate) fn fabric(name: &str) -> PyResult<FabricKind> {
    match name {
        "auto" => Ok(FabricKind::Auto),
        "soft" => Ok(FabricKind::Soft),
        "verbs" => Ok(FabricKind::Verbs),
        _ => Err(PyValueError::new_err(format!("fabric must be 'auto', 'soft' or 'verbs', not {name:?}"))),
    }
}

/// The policy named `"block"` (waiting up to `timeout` seconds), `"drop_slow"` (a grace of
/// `timeout` seconds) or `"overwrite"`.
pub(crate) fn policy(name: &str, timeout: f64) -> PyResult<Policy> {
    match name {
        "block" => Ok(Policy::Block { timeout: duration("timeout", timeout)? }),
        "drop_slow" => Ok(Policy::DropSlow { grace: duration("timeout", timeout)? }),
        "overwrite" => Ok(Policy::Overwrite),
        _ => Err(PyValueError::new_err(format!("policy must be 'block', 'drop_slow' or 'overwrite', not {name:?}"))),
    }
}

/// Where a subscription starts: `"latest"` or `"earliest"`.
pub(crate) fn start(name: &str) -> PyResult<Start> {
    match name {
        "latest" => Ok(Start::Latest),
        "earliest" => Ok(Start::Earliest),
        _ => Err(PyValueError::new_err(format!("start must be 'latest' or 'earliest', not {name:?}"))),
    }
}
