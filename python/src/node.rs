//! `Node`: a node of the library, as a context manager, with its options as keyword
//! arguments; it makes publishers and subscribers.

use std::net::SocketAddrV4;
use std::path::PathBuf;
use std::sync::RwLock;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use rdma_pubsub::counters::CounterSet;
use rdma_pubsub::fabric::SameHost;
use rdma_pubsub::{DiscoveryOptions, Error, Secret};

use crate::errors::{py_result, to_py};
use crate::options;
use crate::publisher::Publisher;
use crate::subscriber::Subscriber;

/// A node: publishes and subscribes on topics over the fabric. Use it as a context manager
/// (``with Node() as node:``) or call :meth:`close`; publishers and subscribers made by it
/// stay safe to use after it closes (they then fail with ``ClosedError`` or stop receiving).
///
/// Keyword options: ``fabric`` (``"auto"``: verbs when an RDMA device is present and the
/// package was built with the ``verbs`` feature, else ``"soft"``; ``"soft"``; ``"verbs"``); ``domain`` (discovery
/// domain: nodes of other domains ignore each other); ``discovery`` (find publishers over UDP
/// multicast, default on); ``peers`` (``"ip:port"`` discovery addresses of other nodes to
/// announce to by unicast instead of multicast, their :attr:`discovery_addr`);
/// ``discovery_port`` (the UDP port discovery listens on: the group's, or with ``peers`` a
/// free one unless given); ``bind`` (``"ip:port"`` of the node's connection manager);
/// ``domain_secret`` (``bytes``/``str``) or ``domain_secret_file`` (a path): authenticates
/// discovery; ``same_host`` (use shared memory with peers on this host, default on);
/// ``stats`` (write the node's stats file, default off).
#[pyclass(module = "rdma_pubsub", frozen)]
pub struct Node {
    /// The node, until it is closed.
    node: RwLock<Option<rdma_pubsub::Node>>,
}

#[pymethods]
impl Node {
    #[new]
    #[pyo3(signature = (*, fabric = "auto", domain = None, discovery = true, peers = None, discovery_port = None,
        bind = None, domain_secret = None, domain_secret_file = None, same_host = true, stats = false))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        fabric: &str,
        domain: Option<u16>,
        discovery: bool,
        peers: Option<Vec<String>>,
        discovery_port: Option<u16>,
        bind: Option<&str>,
        domain_secret: Option<&Bound<'_, PyAny>>,
        domain_secret_file: Option<PathBuf>,
        same_host: bool,
        stats: bool,
    ) -> PyResult<Node> {
        let mut builder = rdma_pubsub::Node::builder().fabric(options::fabric(fabric)?).same_host(if same_host {
            SameHost::Auto
        } else {
            SameHost::Off
        });
        let mut discovery_options = match peers {
            Some(peers) => DiscoveryOptions::unicast(peers.iter().map(|p| peer_addr(p)).collect::<PyResult<_>>()?),
            None => DiscoveryOptions::default(),
        };
        if let Some(port) = discovery_port {
            discovery_options = discovery_options.port(port);
        }
        if !discovery {
            discovery_options = DiscoveryOptions::disabled();
        }
        builder = builder.discovery(discovery_options);
        if let Some(domain) = domain {
            builder = builder.domain(domain);
        }
        if let Some(bind) = bind {
            builder = builder.bind(options::socket_addr(bind)?);
        }
        let secret = match (domain_secret, domain_secret_file) {
            (Some(_), Some(_)) => {
                return Err(PyValueError::new_err("give domain_secret or domain_secret_file, not both"));
            }
            (Some(secret), None) => Some(options::secret(secret)?),
            (None, Some(path)) => Some(Secret::from_file(path).map_err(|e| to_py(e.into()))?),
            (None, None) => None,
        };
        if let Some(secret) = secret {
            builder = builder.domain_secret(secret);
        }
        if !stats {
            builder = builder.stats_dir(None);
        }
        let node = py_result(py.detach(|| builder.build()))?;
        Ok(Node { node: RwLock::new(Some(node)) })
    }

    /// A publisher of ``topic``.
    ///
    /// ``policy``: ``"block"`` (lossless: ``publish`` waits up to ``timeout`` seconds for the
    /// slowest subscriber, then raises ``TimeoutError``), ``"drop_slow"`` (a subscriber that
    /// holds the publisher up longer than ``timeout`` seconds is dropped) or ``"overwrite"``
    /// (never waits; subscribers learn how many messages they lost). ``credential``
    /// (``bytes``/``str``): only subscribers that hold it may subscribe.
    /// ``ring_capacity``, ``max_record_payload``: ring sizes in bytes;
    /// ``max_subscribers``; ``idle_timeout`` (seconds).
    #[pyo3(signature = (topic, *, policy = "block", timeout = 5.0, credential = None, ring_capacity = None,
        max_record_payload = None, max_subscribers = None, idle_timeout = None))]
    #[allow(clippy::too_many_arguments)]
    fn publisher(
        &self,
        py: Python<'_>,
        topic: &str,
        policy: &str,
        timeout: f64,
        credential: Option<&Bound<'_, PyAny>>,
        ring_capacity: Option<usize>,
        max_record_payload: Option<usize>,
        max_subscribers: Option<usize>,
        idle_timeout: Option<f64>,
    ) -> PyResult<Publisher> {
        let policy = options::policy(policy, timeout)?;
        let credential = credential.map(options::secret).transpose()?;
        let idle_timeout = idle_timeout.map(|t| options::duration("idle_timeout", t)).transpose()?;
        let made = py.detach(|| {
            self.with_node(|node| {
                let mut builder = node.publisher(topic).policy(policy);
                if let Some(credential) = credential {
                    builder = builder.credential(credential);
                }
                if let Some(bytes) = ring_capacity {
                    builder = builder.ring_capacity(bytes);
                }
                if let Some(bytes) = max_record_payload {
                    builder = builder.max_record_payload(bytes);
                }
                if let Some(n) = max_subscribers {
                    builder = builder.max_subscribers(n);
                }
                if let Some(timeout) = idle_timeout {
                    builder = builder.idle_timeout(timeout);
                }
                builder.create()
            })
        });
        Ok(Publisher::new(py_result(made)?))
    }

    /// A subscriber of ``topic``, or of every topic a pattern includes (``"sensors/**"``, found
    /// by discovery or listed by the nodes of ``connect``; each message's ``topic`` says
    /// which).
    ///
    /// ``start``: ``"latest"`` (messages published after it connects) or ``"earliest"``
    /// (everything the publisher still holds). ``credential``: the topic's secret, for
    /// publishers that require one. ``auto_connect``: connect to the publishers discovery finds
    /// (default on). ``connect``: ``"ip:port"`` addresses of nodes to connect to at once.
    /// ``batch`` (bytes one READ brings), ``busy_poll``, ``max_message_len``,
    /// ``max_record_payload``, ``max_feeds`` (publishers read at once, default 1,024; past it
    /// a ``"feed_limit"`` event): as the library's ``SubscriberBuilder``.
    #[pyo3(signature = (topic, *, start = "latest", credential = None, auto_connect = true, connect = None,
        batch = None, busy_poll = false, max_message_len = None, max_record_payload = None, max_feeds = None))]
    #[allow(clippy::too_many_arguments)]
    fn subscriber(
        &self,
        py: Python<'_>,
        topic: &str,
        start: &str,
        credential: Option<&Bound<'_, PyAny>>,
        auto_connect: bool,
        connect: Option<Vec<String>>,
        batch: Option<usize>,
        busy_poll: bool,
        max_message_len: Option<u64>,
        max_record_payload: Option<usize>,
        max_feeds: Option<usize>,
    ) -> PyResult<Subscriber> {
        let start = options::start(start)?;
        let credential = credential.map(options::secret).transpose()?;
        let connect =
            connect.unwrap_or_default().iter().map(|a| options::socket_addr(a)).collect::<PyResult<Vec<_>>>()?;
        let made = py.detach(|| {
            self.with_node(|node| {
                let mut builder = node.subscriber(topic).start(start).auto_connect(auto_connect).busy_poll(busy_poll);
                if let Some(credential) = credential {
                    builder = builder.credential(credential);
                }
                for addr in connect {
                    builder = builder.connect(addr);
                }
                if let Some(bytes) = batch {
                    builder = builder.batch(bytes);
                }
                if let Some(bytes) = max_message_len {
                    builder = builder.max_message_len(bytes);
                }
                if let Some(bytes) = max_record_payload {
                    builder = builder.max_record_payload(bytes);
                }
                if let Some(feeds) = max_feeds {
                    builder = builder.max_feeds(feeds);
                }
                builder.create()
            })
        });
        Ok(Subscriber::new(py_result(made)?))
    }

    /// The ``"ip:port"`` other nodes connect to (what :meth:`Subscriber.connect` takes).
    #[getter]
    fn local_addr(&self) -> PyResult<String> {
        py_result(self.with_node(|node| Ok(node.local_addr().to_string())))
    }

    /// The ``"ip:port"`` discovery listens on (``None`` without discovery): what other nodes'
    /// ``peers`` name.
    #[getter]
    fn discovery_addr(&self) -> PyResult<Option<String>> {
        py_result(self.with_node(|node| Ok(node.discovery_addr().map(|a| a.to_string()))))
    }

    /// The node's id.
    #[getter]
    fn id(&self) -> PyResult<u64> {
        py_result(self.with_node(|node| Ok(node.id())))
    }

    /// The node's counters, by name.
    #[getter]
    fn counters<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let values = py_result(self.with_node(|node| Ok(counter_values(node.counters()))))?;
        counters_dict(py, values)
    }

    /// Whether the node is closed.
    #[getter]
    fn closed(&self) -> bool {
        self.node.read().map_or(true, |node| node.is_none())
    }

    /// Closes the node: stops its threads. Idempotent.
    fn close(&self, py: Python<'_>) {
        let node = self.node.write().ok().and_then(|mut node| node.take());
        py.detach(|| drop(node));
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
        match self.with_node(|node| Ok(node.local_addr())) {
            Ok(addr) => format!("<rdma_pubsub.Node at {addr}>"),
            Err(_) => "<rdma_pubsub.Node (closed)>".into(),
        }
    }
}

impl Node {
    /// Runs `f` on the node, or fails with `Closed` once it is closed.
    fn with_node<R>(&self, f: impl FnOnce(&rdma_pubsub::Node) -> rdma_pubsub::Result<R>) -> rdma_pubsub::Result<R> {
        let node = self.node.read().map_err(|_| Error::Closed("the node's lock was poisoned"))?;
        f(node.as_ref().ok_or(Error::Closed("the node is closed"))?)
    }
}

/// A unicast discovery peer from `"ip:port"` (IPv4).
fn peer_addr(text: &str) -> PyResult<SocketAddrV4> {
    match options::socket_addr(text)? {
        std::net::SocketAddr::V4(addr) => Ok(addr),
        std::net::SocketAddr::V6(_) => Err(PyValueError::new_err(format!("discovery peer {text:?} must be IPv4"))),
    }
}

/// Every counter of a set, by name.
pub(crate) fn counter_values(set: &impl CounterSet) -> Vec<(&'static str, u64)> {
    set.values().into_iter().map(|(descriptor, value)| (descriptor.name(), value)).collect()
}

/// Counters as a Python `dict`.
pub(crate) fn counters_dict<'py>(py: Python<'py>, values: Vec<(&'static str, u64)>) -> PyResult<Bound<'py, PyDict>> {
    let dict = PyDict::new(py);
    for (name, value) in values {
        dict.set_item(name, value)?;
    }
    Ok(dict)
}
