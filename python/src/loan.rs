//! `Loan`: ring space lent by a publisher, written in place through the buffer protocol and
//! then sent. It holds its publisher (and the publisher's lock) until sent or dropped, and
//! cannot be sent while a view of its bytes is alive, so no view outlives the loan.

use std::os::raw::c_int;
use std::sync::{Arc, Mutex};
use std::thread::ThreadId;

use pyo3::exceptions::{PyBufferError, PyValueError};
use pyo3::ffi;
use pyo3::prelude::*;
use rdma_pubsub::Error;

use crate::errors::{py_result, to_py};

/// The library's loan of a publisher's ring, until it is sent.
type RingLoan<'a> = Option<rdma_pubsub::Loan<'a>>;

self_cell::self_cell!(
    /// A loan together with the publisher it borrows.
    struct LoanCell {
        owner: Arc<rdma_pubsub::Publisher>,
        #[not_covariant]
        dependent: RingLoan,
    }
);

/// What a loan holds while it is outstanding.
struct Outstanding {
    /// The loan and its publisher.
    cell: LoanCell,
    /// Views of its bytes alive now.
    exports: usize,
}

/// Ring space lent by :meth:`Publisher.loan`: a writable buffer of the message's size
/// (``memoryview(loan)``, ``numpy.frombuffer(loan, dtype)``, ``loan[:] = data``). Send it
/// with :meth:`send` once written, after the views of it are released; drop it (or
/// :meth:`abandon` it) to publish nothing. As a context manager it sends on a clean exit.
#[pyclass(module = "rdma_pubsub", frozen)]
pub struct Loan {
    /// The loan, until sent or abandoned.
    outstanding: Mutex<Option<Outstanding>>,
    /// The length of the message.
    len: usize,
    /// Where the publisher records the thread holding its loan (cleared when it ends).
    loan_holder: Arc<Mutex<Option<ThreadId>>>,
}

impl Loan {
    /// Lends `len` bytes of `publisher`'s ring (waits for room under the Block policy), on
    /// behalf of `thread`.
    ///
    /// # Errors
    /// As the library's `Publisher::loan`.
    pub(crate) fn make(
        publisher: Arc<rdma_pubsub::Publisher>,
        len: usize,
        thread: ThreadId,
        loan_holder: Arc<Mutex<Option<ThreadId>>>,
    ) -> rdma_pubsub::Result<Loan> {
        let cell = LoanCell::try_new(publisher, |publisher| publisher.loan(len).map(Some))?;
        *loan_holder.lock().map_err(|_| Error::Closed("a lock was poisoned"))? = Some(thread);
        Ok(Loan { outstanding: Mutex::new(Some(Outstanding { cell, exports: 0 })), len, loan_holder })
    }

    /// Ends the loan: sends it (`send`) or abandons it; refused while views are alive.
    fn end(&self, py: Python<'_>, send: bool) -> PyResult<Option<u64>> {
        let mut outstanding = self.outstanding.lock().map_err(|_| to_py(Error::Closed("a lock was poisoned")))?;
        match outstanding.as_ref() {
            None => return Err(PyValueError::new_err("the loan was sent or abandoned already")),
            Some(o) if o.exports > 0 => {
                return Err(PyBufferError::new_err(
                    "views of the loan (memoryview, numpy array) are still alive: release them first",
                ))
            }
            Some(_) => {}
        }
        let Some(Outstanding { cell, .. }) = outstanding.take() else { return Ok(None) };
        drop(outstanding);
        self.clear_holder();
        if !send {
            py.detach(|| drop(cell));
            return Ok(None);
        }
        let sent = py.detach(move || {
            let mut cell = cell;
            cell.with_dependent_mut(|_, loan| loan.take().map_or(Ok(0), rdma_pubsub::Loan::send))
        });
        py_result(sent).map(Some)
    }

    /// The loan has ended: its publisher's thread may publish again.
    fn clear_holder(&self) {
        if let Ok(mut holder) = self.loan_holder.lock() {
            *holder = None;
        }
    }
}

#[pymethods]
impl Loan {
    /// Publishes the message written into the loan; returns its sequence number. Raises
    /// ``BufferError`` while views of the loan are alive, ``ValueError`` once it ended.
    fn send(&self, py: Python<'_>) -> PyResult<u64> {
        Ok(self.end(py, true)?.unwrap_or(0))
    }

    /// Gives the space back without publishing anything.
    fn abandon(&self, py: Python<'_>) -> PyResult<()> {
        self.end(py, false).map(drop)
    }

    /// A writable ``memoryview`` of the loan's bytes (release it before :meth:`send`).
    #[getter]
    fn view<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, pyo3::types::PyMemoryView>> {
        pyo3::types::PyMemoryView::from(slf.as_any())
    }

    /// Whether the loan was neither sent nor abandoned yet.
    #[getter]
    fn outstanding(&self) -> bool {
        self.outstanding.lock().is_ok_and(|o| o.is_some())
    }

    fn __len__(&self) -> usize {
        self.len
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (exc_type, _exc_value, _traceback))]
    fn __exit__(
        &self,
        py: Python<'_>,
        exc_type: Option<&Bound<'_, PyAny>>,
        _exc_value: Option<&Bound<'_, PyAny>>,
        _traceback: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        if !self.outstanding() {
            return Ok(false);
        }
        self.end(py, exc_type.is_none())?;
        Ok(false)
    }

    unsafe fn __getbuffer__(slf: Bound<'_, Self>, view: *mut ffi::Py_buffer, flags: c_int) -> PyResult<()> {
        let this = slf.get();
        let mut outstanding = this.outstanding.lock().map_err(|_| to_py(Error::Closed("a lock was poisoned")))?;
        let Some(o) = outstanding.as_mut() else {
            return Err(PyValueError::new_err("the loan was sent or abandoned: its bytes are gone"));
        };
        let (address, len) = o.cell.with_dependent_mut(|_, loan| {
            loan.as_mut().map_or((std::ptr::null_mut(), 0), |l| (l.as_mut_ptr(), l.len()))
        });
        let len = isize::try_from(len).map_err(|_| PyBufferError::new_err("loan too large for a buffer"))?;
        // SAFETY: `view` is the `Py_buffer` Python asks us to fill (the buffer protocol's
        // contract); `address` points to `len` writable bytes of the ring, which stay valid
        // and lent to this object until the loan ends, and it cannot end while this export
        // is counted (`end` refuses while `exports > 0`); `slf` is owned by the view
        // (`PyBuffer_FillInfo` takes a reference to it) until `__releasebuffer__`.
        let status = unsafe { ffi::PyBuffer_FillInfo(view, slf.as_ptr(), address.cast(), len, 0, flags) };
        if status != 0 {
            return Err(PyErr::fetch(slf.py()));
        }
        o.exports += 1;
        Ok(())
    }

    unsafe fn __releasebuffer__(&self, _view: *mut ffi::Py_buffer) {
        if let Ok(mut outstanding) = self.outstanding.lock() {
            if let Some(o) = outstanding.as_mut() {
                o.exports = o.exports.saturating_sub(1);
            }
        }
    }

    fn __repr__(&self) -> String {
        let state = if self.outstanding() { "outstanding" } else { "ended" };
        format!("<rdma_pubsub.Loan of {} bytes, {state}>", self.len)
    }
}

impl Drop for Loan {
    fn drop(&mut self) {
        self.clear_holder();
    }
}
