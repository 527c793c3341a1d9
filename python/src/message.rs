//! `Message`: a received message whose payload is lent from the subscription's READ buffer
//! (zero copy), and `PublisherInfo`, who published it.
//!
//! The payload is valid while the message is the subscriber's current one: the next call
//! that moves the subscriber on (receive, events, connect, close) or :meth:`Message.release`
//! ends it, and both are refused while views of the payload are alive (see
//! [`crate::subscriber::Lending`]). So memory lent to Python is never reused under a view.

use std::os::raw::c_int;
use std::sync::atomic::{AtomicBool, Ordering};

use pyo3::exceptions::{PyBufferError, PyValueError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyMemoryView};

use crate::subscriber::Subscriber;

/// Who published a message.
#[pyclass(module = "rdma_pubsub", frozen, get_all)]
#[derive(Clone)]
pub struct PublisherInfo {
    /// The publisher's id (stable for a node and topic).
    pub id: u64,
    /// Its node's epoch: a restarted node has a larger one.
    pub epoch: u64,
    /// Its node's ``"ip:port"``.
    pub addr: String,
    /// Its policy: ``"block"``, ``"drop_slow"`` or ``"overwrite"``.
    pub policy: String,
    /// How this subscriber reads its ring: ``"shared_memory"`` or ``"network"``.
    pub data_path: String,
}

impl From<rdma_pubsub::PublisherInfo> for PublisherInfo {
    fn from(info: rdma_pubsub::PublisherInfo) -> Self {
        let policy = match info.policy {
            rdma_pubsub::PolicyKind::Block => "block",
            rdma_pubsub::PolicyKind::DropSlow => "drop_slow",
            rdma_pubsub::PolicyKind::Overwrite => "overwrite",
            _ => "other",
        };
        let data_path = match info.data_path {
            rdma_pubsub::fabric::DataPath::SharedMemory => "shared_memory",
            _ => "network",
        };
        PublisherInfo {
            id: info.id,
            epoch: info.epoch,
            addr: info.addr.to_string(),
            policy: policy.into(),
            data_path: data_path.into(),
        }
    }
}

#[pymethods]
impl PublisherInfo {
    fn __repr__(&self) -> String {
        format!(
            "PublisherInfo(id={:#018x}, epoch={}, addr={:?}, policy={:?}, data_path={:?})",
            self.id, self.epoch, self.addr, self.policy, self.data_path
        )
    }
}

/// Where a lent payload is: an address in the subscription's READ buffer and its length.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LentBytes {
    /// The first byte's address (kept as an integer: it is only dereferenced through the
    /// buffer protocol, while the lending rules hold it valid).
    pub address: usize,
    /// How many bytes.
    pub len: usize,
}

/// A received message (from :meth:`Subscriber.recv`). Its payload is zero copy: the message
/// supports the buffer protocol (``memoryview(msg)``, ``numpy.frombuffer(msg, dtype)``,
/// :attr:`payload`), read only, straight from the memory the subscription READ it into. It
/// stays valid until :meth:`release`, the end of a ``with`` block, or the subscriber's next
/// receive; views of it must be released before then (else that call raises
/// ``BufferError``). Keep the bytes longer with ``bytes(msg)`` (a copy).
#[pyclass(module = "rdma_pubsub", frozen)]
pub struct Message {
    /// The subscriber that lent the payload (kept alive by the message).
    subscriber: Py<Subscriber>,
    /// The subscriber's lending generation in which the payload is valid.
    generation: u64,
    /// The payload.
    bytes: LentBytes,
    /// Released by its application.
    released: AtomicBool,
    /// Its sequence number in its publisher's stream.
    seq: u64,
    /// Who published it (made a Python object only when asked for).
    publisher: rdma_pubsub::PublisherInfo,
    /// Its topic (a shared handle; a Python string only when asked for).
    topic: rdma_pubsub::Topic,
}

impl Message {
    /// A message lent by `subscriber` in its lending `generation`.
    pub(crate) fn new(
        subscriber: Py<Subscriber>,
        generation: u64,
        bytes: LentBytes,
        seq: u64,
        publisher: rdma_pubsub::PublisherInfo,
        topic: rdma_pubsub::Topic,
    ) -> Message {
        Message { subscriber, generation, bytes, released: AtomicBool::new(false), seq, publisher, topic }
    }

    /// Whether the payload may be read now (the caller holds the lending lock or the GIL).
    fn valid_in(&self, generation: u64) -> bool {
        !self.released.load(Ordering::Acquire) && generation == self.generation
    }
}

#[pymethods]
impl Message {
    /// The sequence number in its publisher's stream (1, 2, ...).
    #[getter]
    fn seq(&self) -> u64 {
        self.seq
    }

    /// Who published it.
    #[getter]
    fn publisher(&self) -> PublisherInfo {
        PublisherInfo::from(self.publisher)
    }

    /// Its topic: the subscriber's, or on a subscriber to a pattern (``"sensors/**"``) the
    /// topic of the publisher that matched.
    #[getter]
    fn topic(&self) -> &str {
        self.topic.as_str()
    }

    /// The payload as a read-only ``memoryview`` (zero copy; release it, or let it go, before
    /// the subscriber's next receive).
    #[getter]
    fn payload<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyMemoryView>> {
        PyMemoryView::from(slf.as_any())
    }

    /// Whether the payload is still readable (not released, not superseded by a receive).
    #[getter]
    fn valid(&self) -> bool {
        self.subscriber.get().lending().is_ok_and(|lending| self.valid_in(lending.generation))
    }

    /// Ends the payload's loan now (the subscriber's next receive would). Raises
    /// ``BufferError`` while views of it are alive. Idempotent.
    fn release(&self) -> PyResult<()> {
        let subscriber = self.subscriber.get();
        let lending = subscriber.lending()?;
        if lending.generation == self.generation && lending.exports > 0 {
            return Err(PyBufferError::new_err(
                "views of the message's payload (memoryview, numpy array) are still alive: release them first",
            ));
        }
        self.released.store(true, Ordering::Release);
        Ok(())
    }

    fn __len__(&self) -> usize {
        self.bytes.len
    }

    /// A copy of the payload as ``bytes`` (it outlives the message).
    fn __bytes__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyBytes>> {
        let view = PyMemoryView::from(slf.as_any())?;
        let copy = view.call_method0("tobytes")?.cast_into::<PyBytes>()?;
        view.call_method0("release")?;
        Ok(copy)
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, _exc: &Bound<'_, pyo3::types::PyTuple>) -> PyResult<bool> {
        self.release()?;
        Ok(false)
    }

    unsafe fn __getbuffer__(slf: Bound<'_, Self>, view: *mut ffi::Py_buffer, flags: c_int) -> PyResult<()> {
        let this = slf.get();
        let subscriber = this.subscriber.get();
        let mut lending = subscriber.lending()?;
        if !this.valid_in(lending.generation) {
            return Err(PyValueError::new_err(
                "the message was released (or the subscriber received another): copy with bytes(msg) to keep it",
            ));
        }
        let len = isize::try_from(this.bytes.len).map_err(|_| PyBufferError::new_err("payload too large"))?;
        // SAFETY: `view` is the `Py_buffer` Python asks us to fill (the buffer protocol's
        // contract). The payload's `len` bytes at `address` are in the subscription's READ
        // buffer, unchanged while this message is current (its generation, checked above
        // under the lending lock): the subscription moves on only after bumping the
        // generation, which it does only when no export is counted, and this export is
        // counted below before the lock is released. The view owns a reference to `slf`
        // (taken by `PyBuffer_FillInfo`), which holds the subscriber, until
        // `__releasebuffer__`. Read only: a request for a writable buffer is refused by
        // `PyBuffer_FillInfo`.
        let status = unsafe { ffi::PyBuffer_FillInfo(view, slf.as_ptr(), this.bytes.address as *mut _, len, 1, flags) };
        if status != 0 {
            return Err(PyErr::fetch(slf.py()));
        }
        lending.exports += 1;
        Ok(())
    }

    unsafe fn __releasebuffer__(&self, _view: *mut ffi::Py_buffer) {
        if let Ok(mut lending) = self.subscriber.get().lending() {
            lending.exports = lending.exports.saturating_sub(1);
        }
    }

    fn __repr__(&self) -> String {
        format!("<rdma_pubsub.Message seq={} of {} bytes from {}>", self.seq, self.bytes.len, self.publisher.addr)
    }
}
