//! `Publisher`: publishes buffers on one topic, copying them into the ring, or lends ring space
//! ([`Loan`]) to write a message in place.

use std::sync::{Arc, Mutex};
use std::thread::ThreadId;

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use rdma_pubsub::Error;

use crate::errors::{py_result, to_py};
use crate::loan::Loan;
use crate::node::{counter_values, counters_dict};
use crate::options;

/// A publisher of one topic (made by :meth:`Node.publisher`). Safe to share between threads.
/// A loan held by a thread must be sent or dropped before that thread publishes again
/// (``LoanOutstandingError``); other threads wait for it.
#[pyclass(module = "rdma_pubsub", frozen)]
pub struct Publisher {
    /// The publisher, until it is closed (a loan holds it too, until it ends).
    inner: Mutex<Option<Arc<rdma_pubsub::Publisher>>>,
    /// The thread holding this publisher's loan, if one is outstanding.
    loan_holder: Arc<Mutex<Option<ThreadId>>>,
}

impl Publisher {
    /// The Python object of a new publisher.
    pub(crate) fn new(publisher: rdma_pubsub::Publisher) -> Publisher {
        Publisher { inner: Mutex::new(Some(Arc::new(publisher))), loan_holder: Arc::default() }
    }

    /// The publisher; fails with `Closed` once it is closed, and with `LoanOutstanding` when
    /// the calling thread holds its loan (taking the lock again would wait for itself).
    fn publisher(&self) -> PyResult<Arc<rdma_pubsub::Publisher>> {
        let holder = *self.loan_holder.lock().map_err(|_| to_py(Error::Closed("a lock was poisoned")))?;
        if holder == Some(std::thread::current().id()) {
            return Err(to_py(Error::LoanOutstanding));
        }
        let inner = self.inner.lock().map_err(|_| to_py(Error::Closed("a lock was poisoned")))?;
        inner.clone().ok_or_else(|| to_py(Error::Closed("the publisher is closed")))
    }
}

#[pymethods]
impl Publisher {
    /// Publishes one message: the bytes of ``data``, any object with the buffer protocol
    /// (``bytes``, ``bytearray``, ``memoryview``, a C-contiguous numpy array), copied into the
    /// ring. Returns its sequence number. Under the ``"block"`` policy it waits for room (the
    /// GIL released) up to the publisher's timeout, then raises ``TimeoutError``.
    fn publish(&self, py: Python<'_>, data: &Bound<'_, PyAny>) -> PyResult<u64> {
        let publisher = self.publisher()?;
        let bytes = ContiguousBytes::of(data)?;
        let (address, len) = (bytes.view.buf as usize, bytes.len());
        let published = py.detach(|| {
            if len == 0 {
                return publisher.publish(&[]);
            }
            // SAFETY: the buffer protocol guarantees `len` readable bytes at `address` while
            // the export is held; `bytes` holds it until after this closure returns (it is
            // released below, with the GIL). An empty buffer, whose pointer may be null, was
            // published above without making a slice of it.
            let message = unsafe { std::slice::from_raw_parts(address as *const u8, len) };
            publisher.publish(message)
        });
        drop(bytes);
        py_result(published)
    }

    /// Lends ``size`` bytes of the ring (zeroed) for the next message: write them through the
    /// returned :class:`Loan` (a writable buffer: ``memoryview(loan)``,
    /// ``numpy.frombuffer(loan, ...)``), then :meth:`Loan.send` it. At most one ring record
    /// (publish larger messages with :meth:`publish`). As a context manager it sends on a
    /// clean exit and abandons on an exception.
    fn loan(&self, py: Python<'_>, size: usize) -> PyResult<Loan> {
        let publisher = self.publisher()?;
        let thread = std::thread::current().id();
        let loan_holder = self.loan_holder.clone();
        let loan = py_result(py.detach(|| Loan::make(publisher, size, thread, loan_holder)))?;
        Ok(loan)
    }

    /// Waits (the GIL released) until every connected subscriber consumed everything
    /// published, up to ``timeout`` seconds; raises ``TimeoutError`` otherwise.
    #[pyo3(signature = (timeout = 10.0))]
    fn flush(&self, py: Python<'_>, timeout: f64) -> PyResult<()> {
        let publisher = self.publisher()?;
        let timeout = options::duration("timeout", timeout)?;
        py_result(py.detach(|| publisher.flush(timeout)))
    }

    /// Waits up to ``timeout`` seconds until at least ``n`` subscribers are connected; returns
    /// how many are (raises ``TimeoutError`` when fewer are). Ctrl-C interrupts it.
    #[pyo3(signature = (n = 1, timeout = 10.0))]
    fn wait_for_subscribers(&self, py: Python<'_>, n: usize, timeout: f64) -> PyResult<usize> {
        let publisher = self.publisher()?;
        let millis = u64::try_from(options::duration("timeout", timeout)?.as_millis()).unwrap_or(u64::MAX);
        let deadline = options::deadline(Some(timeout))?;
        let reached = crate::wait::in_slices(py, deadline, |slice| match publisher.wait_for_subscribers(n, slice) {
            Ok(count) => Ok(Some(count)),
            Err(Error::Timeout { .. }) => Ok(None),
            Err(e) => Err(e.into()),
        })?;
        match reached {
            Some(count) => Ok(count),
            None => Err(to_py(Error::Timeout { what: "waiting for subscribers", millis })),
        }
    }

    /// The topic.
    #[getter]
    fn topic(&self) -> PyResult<String> {
        Ok(self.publisher()?.topic().to_owned())
    }

    /// The publisher's id (what subscribers see in :attr:`PublisherInfo.id`).
    #[getter]
    fn id(&self) -> PyResult<u64> {
        Ok(self.publisher()?.id())
    }

    /// Subscribers connected now.
    #[getter]
    fn subscriber_count(&self) -> PyResult<usize> {
        Ok(self.publisher()?.subscriber_count())
    }

    /// The sequence number the next message gets.
    #[getter]
    fn next_seq(&self) -> PyResult<u64> {
        Ok(self.publisher()?.next_seq())
    }

    /// The publisher's counters, by name.
    #[getter]
    fn counters<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        counters_dict(py, counter_values(self.publisher()?.counters()))
    }

    /// Closes the publisher: its subscribers get what was published, then the end of the
    /// stream. Idempotent (an outstanding loan keeps it open until the loan ends).
    fn close(&self, py: Python<'_>) {
        let publisher = self.inner.lock().ok().and_then(|mut inner| inner.take());
        py.detach(|| drop(publisher));
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, pyo3::types::PyTuple>) -> bool {
        self.close(py);
        false
    }

    fn __repr__(&self) -> String {
        match self.inner.lock().ok().and_then(|inner| inner.as_ref().map(|p| p.topic().to_owned())) {
            Some(topic) => format!("<rdma_pubsub.Publisher of {topic:?}>"),
            None => "<rdma_pubsub.Publisher (closed)>".into(),
        }
    }
}

/// The bytes of a Python object with the buffer protocol, C-contiguous, held (exported) until
/// this is dropped (with the GIL held).
struct ContiguousBytes {
    view: ffi::Py_buffer,
}

impl ContiguousBytes {
    /// The bytes of `object`.
    ///
    /// # Errors
    /// `TypeError` when `object` has no buffer, `BufferError` when it is not contiguous.
    fn of(object: &Bound<'_, PyAny>) -> PyResult<ContiguousBytes> {
        let mut view = std::mem::MaybeUninit::<ffi::Py_buffer>::uninit();
        // SAFETY: `object` is a live object (the GIL is held: `Bound`); `view` is writable
        // memory for one `Py_buffer`, which `PyObject_GetBuffer` fills when it returns 0.
        // `PyBUF_C_CONTIGUOUS` asks for one C-contiguous block of `len` bytes (any format).
        let status = unsafe { ffi::PyObject_GetBuffer(object.as_ptr(), view.as_mut_ptr(), ffi::PyBUF_C_CONTIGUOUS) };
        if status != 0 {
            return Err(PyErr::fetch(object.py()));
        }
        // SAFETY: filled by the successful call above.
        Ok(ContiguousBytes { view: unsafe { view.assume_init() } })
    }

    /// How many bytes.
    fn len(&self) -> usize {
        usize::try_from(self.view.len).unwrap_or(0)
    }
}

impl Drop for ContiguousBytes {
    fn drop(&mut self) {
        // SAFETY: the view was filled by `PyObject_GetBuffer` and is released once, here;
        // it is dropped only where the GIL is held (`publish` drops it after `detach`).
        Python::attach(|_| unsafe { ffi::PyBuffer_Release(&mut self.view) });
    }
}
