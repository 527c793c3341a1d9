//! `Subscriber`: receives the messages of one topic, lending each payload zero copy
//! ([`Message`]), iterable with ``for``; its events and counters.
//!
//! Lending: the library's `recv_ref` lends a payload until the next call on the subscription.
//! The subscriber numbers its lends ([`Lending::generation`]) and counts the buffers the
//! current message exported ([`Lending::exports`]). Every call that moves the subscription on
//! first bumps the generation, under the subscription's lock, and is refused
//! (`BufferError`) while exports are counted; a message reads its payload only in its own
//! generation. So no Python view ever sees memory the subscription reuses.

use std::collections::VecDeque;
use std::os::fd::AsRawFd;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use pyo3::exceptions::{PyRuntimeError, PyStopIteration};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use rdma_pubsub::node::MAX_EVENTS;
use rdma_pubsub::{Error, Subscription, SubscriptionEvent};

use crate::errors::to_py;
use crate::event::Event;
use crate::message::{LentBytes, Message, PublisherInfo};
use crate::node::{counter_values, counters_dict};
use crate::options;
use crate::wait::{in_slices, SliceError};

/// The subscriber's lends of payloads.
#[derive(Debug, Default)]
pub(crate) struct Lending {
    /// The number of the current lend: a message reads its payload only in its own.
    pub generation: u64,
    /// Buffers of the current message exported and not released.
    pub exports: usize,
}

/// What one receive brought.
enum Received {
    /// A message lent in a generation.
    Message {
        generation: u64,
        bytes: LentBytes,
        seq: u64,
        publisher: rdma_pubsub::PublisherInfo,
        topic: rdma_pubsub::Topic,
    },
    /// The end of the subscription's messages: it is closed (its node or itself), or, without
    /// discovery, its last publisher's stream ended (`NotConnected`).
    End(Error),
}

/// A subscriber of one topic (made by :meth:`Node.subscriber`). Receive with :meth:`recv`,
/// or iterate: ``for msg in sub`` ends when the subscriber is closed or, without discovery, when
/// its last publisher's stream ended (with discovery, publishers that come and go are events).
/// A message's payload is lent zero copy until the next receive (see :class:`Message`).
/// Safe to share between threads (calls take turns).
#[pyclass(module = "rdma_pubsub", frozen)]
pub struct Subscriber {
    /// The subscription, until it is closed.
    subscription: Mutex<Option<Subscription>>,
    /// The lends of payloads.
    lending: Mutex<Lending>,
    /// Events taken from the subscription by [`prepare_wait`](Subscriber::prepare_wait)
    /// (whose protocol takes them all before arming), for `try_event`/`events` (at most
    /// `MAX_EVENTS`, the oldest dropped, as the subscription's own queue does).
    held_events: Mutex<VecDeque<SubscriptionEvent>>,
    /// The topic.
    topic: String,
}

impl Subscriber {
    /// The Python object of a new subscription.
    pub(crate) fn new(subscription: Subscription) -> Subscriber {
        let topic = subscription.topic().to_owned();
        Subscriber {
            subscription: Mutex::new(Some(subscription)),
            lending: Mutex::default(),
            held_events: Mutex::default(),
            topic,
        }
    }

    /// The lending state, locked.
    pub(crate) fn lending(&self) -> PyResult<MutexGuard<'_, Lending>> {
        self.lending.lock().map_err(|_| PyRuntimeError::new_err("the subscriber's lending lock was poisoned"))
    }

    /// Ends the current message's lend: the subscription may move on (the caller holds its
    /// lock). Refused while the message has exports.
    fn move_on(&self) -> Result<u64, SliceError> {
        let mut lending = self.lending.lock().map_err(|_| SliceError::Closed("a lock was poisoned"))?;
        if lending.exports > 0 {
            return Err(SliceError::Exported);
        }
        lending.generation += 1;
        Ok(lending.generation)
    }

    /// Runs `f` on the subscription, with the GIL released; when `moves_on`, the current
    /// message's lend ends first.
    fn with_subscription<R: Send>(
        &self,
        py: Python<'_>,
        moves_on: bool,
        f: impl FnOnce(&mut Subscription) -> rdma_pubsub::Result<R> + Send,
    ) -> PyResult<R> {
        py.detach(|| {
            let mut subscription = self.subscription.lock().map_err(|_| SliceError::Closed("a lock was poisoned"))?;
            let subscription = subscription.as_mut().ok_or(SliceError::Closed("the subscriber is closed"))?;
            if moves_on {
                self.move_on()?;
            }
            f(subscription).map_err(SliceError::from)
        })
        .map_err(SliceError::into_py)
    }

    /// One receive of up to `slice`.
    fn receive(&self, slice: Duration) -> Result<Option<Received>, SliceError> {
        let mut subscription = self.subscription.lock().map_err(|_| SliceError::Closed("a lock was poisoned"))?;
        let subscription = subscription.as_mut().ok_or(SliceError::Closed("the subscriber is closed"))?;
        let generation = self.move_on()?;
        let e = match subscription.recv_ref(slice) {
            Ok(Some(m)) => {
                return Ok(Some(Received::Message {
                    generation,
                    bytes: LentBytes { address: m.data.as_ptr() as usize, len: m.data.len() },
                    seq: m.seq,
                    publisher: m.publisher,
                    topic: m.topic.clone(),
                }))
            }
            Ok(None) => return Ok(None),
            Err(e) => e,
        };
        // The end of the messages as `iter` sees it (closed, or the last stream ended).
        if subscription.is_end(&e) {
            Ok(Some(Received::End(e)))
        } else {
            Err(e.into())
        }
    }

    /// Receives until `deadline`: the message, `None` on time out, or the error that ends the
    /// messages (as the value `Ok(Err(..))`, for iteration to tell it apart).
    fn receive_until(
        slf: &Bound<'_, Self>,
        deadline: Option<std::time::Instant>,
    ) -> PyResult<Result<Option<Message>, Error>> {
        let this = slf.get();
        match in_slices(slf.py(), deadline, |slice| this.receive(slice))? {
            None => Ok(Ok(None)),
            Some(Received::End(e)) => Ok(Err(e)),
            Some(Received::Message { generation, bytes, seq, publisher, topic }) => {
                Ok(Ok(Some(Message::new(slf.clone().unbind(), generation, bytes, seq, publisher, topic))))
            }
        }
    }
}

#[pymethods]
impl Subscriber {
    /// Waits for the next message, up to ``timeout`` seconds (``None``: as long as it takes);
    /// returns it, or ``None`` on time out. The GIL is released while waiting; Ctrl-C raises
    /// ``KeyboardInterrupt``. Raises ``ClosedError`` once the subscriber or its node is closed,
    /// ``NotConnectedError`` when it has no publisher and discovery is off (the last one's
    /// stream ended), the refusal (``RejectedError``, ``DroppedError``, ...) when every
    /// publisher it knows refused or dropped it, and
    /// ``BufferError`` while a view of the previous message is alive.
    #[pyo3(signature = (timeout = None))]
    fn recv(slf: &Bound<'_, Self>, timeout: Option<f64>) -> PyResult<Option<Message>> {
        let deadline = options::deadline(timeout)?;
        Self::receive_until(slf, deadline)?.map_err(to_py)
    }

    /// A message that has arrived already, or ``None``, without blocking.
    fn try_recv(slf: &Bound<'_, Self>) -> PyResult<Option<Message>> {
        Self::recv(slf, Some(0.0))
    }

    fn __iter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __next__(slf: &Bound<'_, Self>) -> PyResult<Message> {
        loop {
            match Self::receive_until(slf, None)? {
                Ok(Some(message)) => return Ok(message),
                Ok(None) => continue,
                Err(_) => return Err(PyStopIteration::new_err(())),
            }
        }
    }

    /// Starts connecting to the publisher of this topic on the node at ``addr``
    /// (``"ip:port"``, a :attr:`Node.local_addr`); the outcome arrives as an event.
    fn connect(&self, py: Python<'_>, addr: &str) -> PyResult<()> {
        let addr = options::socket_addr(addr)?;
        self.with_subscription(py, true, |s| s.connect(addr))
    }

    /// Connects to ``addr`` and waits up to ``timeout`` seconds until its publisher accepted
    /// (returns its :class:`PublisherInfo`) or refused (``RejectedError``,
    /// ``UnauthorizedError`` for a wrong or missing credential, ``UnreachableError``,
    /// ``TimeoutError``). Ctrl-C interrupts it.
    #[pyo3(signature = (addr, timeout = 10.0))]
    fn connect_wait(&self, py: Python<'_>, addr: &str, timeout: f64) -> PyResult<PublisherInfo> {
        let addr = options::socket_addr(addr)?;
        let deadline = options::deadline(Some(timeout))?;
        let connected = in_slices(py, deadline, |slice| {
            let mut subscription = self.subscription.lock().map_err(|_| SliceError::Closed("a lock was poisoned"))?;
            let subscription = subscription.as_mut().ok_or(SliceError::Closed("the subscriber is closed"))?;
            self.move_on()?;
            match subscription.connect_wait(addr, slice) {
                Ok(info) => Ok(Some(info)),
                Err(Error::Timeout { .. }) => Ok(None),
                Err(e) => Err(e.into()),
            }
        })?;
        let millis = u64::try_from(options::duration("timeout", timeout)?.as_millis()).unwrap_or(u64::MAX);
        connected.map(PublisherInfo::from).ok_or_else(|| to_py(Error::Timeout { what: "connect", millis }))
    }

    /// The next event about this subscriber's connections, or ``None``.
    fn try_event(&self, py: Python<'_>) -> PyResult<Option<Event>> {
        let event = self.with_subscription(py, true, |s| {
            let held = self.held_events.lock().map_err(|_| Error::Closed("a lock was poisoned"))?.pop_front();
            Ok(held.or_else(|| s.try_event()))
        })?;
        Ok(event.map(Event::from))
    }

    /// Every event held now, oldest first.
    fn events(&self, py: Python<'_>) -> PyResult<Vec<Event>> {
        let events = self.with_subscription(py, true, |s| {
            let mut events: Vec<_> =
                self.held_events.lock().map_err(|_| Error::Closed("a lock was poisoned"))?.drain(..).collect();
            events.extend(std::iter::from_fn(|| s.try_event()));
            Ok(events)
        })?;
        Ok(events.into_iter().map(Event::from).collect())
    }

    /// The descriptor an event loop waits on (``loop.add_reader``): it polls readable when
    /// something may have arrived since :meth:`prepare_wait`. Never read or close it. The
    /// protocol: take what is there (:meth:`try_recv` until ``None``); then
    /// :meth:`prepare_wait`; if it returns ``True`` take again, else wait until the descriptor
    /// is readable, then take again. :class:`AsyncSubscriber` does this for asyncio.
    fn fileno(&self, py: Python<'_>) -> PyResult<i32> {
        self.with_subscription(py, false, |s| Ok(s.ready_fd()?.as_raw_fd()))
    }

    /// Arms :meth:`fileno` before a wait (it takes the events waiting first, and keeps them
    /// for :meth:`events`). Returns ``True`` when something may be ready already: take it
    /// instead of waiting. Ends the current message's lend, as a receive does.
    fn prepare_wait(&self, py: Python<'_>) -> PyResult<bool> {
        self.with_subscription(py, true, |s| {
            let mut held = self.held_events.lock().map_err(|_| Error::Closed("a lock was poisoned"))?;
            while let Some(event) = s.try_event() {
                if held.len() == MAX_EVENTS {
                    held.pop_front();
                }
                held.push_back(event);
            }
            drop(held);
            s.prepare_wait()
        })
    }

    /// An asynchronous iterator over messages, for ``async for msg in sub`` (see
    /// :class:`AsyncSubscriber`).
    fn __aiter__(slf: Py<Self>, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let asynchronous = py.import("rdma_pubsub._aio")?.getattr("AsyncSubscriber")?.call1((slf,))?;
        Ok(asynchronous.unbind())
    }

    /// The publishers connected now.
    #[getter]
    fn publishers(&self, py: Python<'_>) -> PyResult<Vec<PublisherInfo>> {
        let publishers = self.with_subscription(py, false, |s| Ok(s.publishers()))?;
        Ok(publishers.into_iter().map(PublisherInfo::from).collect())
    }

    /// The subscriber's counters, by name.
    #[getter]
    fn counters<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let values = self.with_subscription(py, false, |s| Ok(counter_values(s.counters())))?;
        counters_dict(py, values)
    }

    /// The topic.
    #[getter]
    fn topic(&self) -> &str {
        &self.topic
    }

    /// Closes the subscriber (refused with ``BufferError`` while a view of its current
    /// message is alive). Idempotent.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        py.detach(|| {
            let mut subscription = self.subscription.lock().map_err(|_| SliceError::Closed("a lock was poisoned"))?;
            if subscription.is_some() {
                self.move_on()?;
            }
            drop(subscription.take());
            Ok(())
        })
        .map_err(SliceError::into_py)
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, pyo3::types::PyTuple>) -> PyResult<bool> {
        self.close(py)?;
        Ok(false)
    }

    fn __repr__(&self) -> String {
        format!("<rdma_pubsub.Subscriber of {:?}>", self.topic)
    }
}
