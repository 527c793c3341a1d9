//! The options structs of nodes, publishers and subscriptions, the init functions that fill
//! them with the defaults, and their reading into the library's builders.
//!
//! Enum-valued fields are `uint32_t` holding a constant of the named enum (a C enum field
//! could hold any value, which Rust must not read as its enum); sizes of 0 mean the library's
//! default, so the defaults live in one place.

use std::ffi::{c_char, CStr};
use std::net::SocketAddr;
use std::time::Duration;

use pubsub::fabric::SameHost;
use pubsub::{DiscoveryOptions, FabricKind, NodeBuilder, Policy, PublisherBuilder, Secret, Start, SubscriberBuilder};

use crate::status::{guard, rps_status, Failure};

/// Which fabric a node runs on (`rps_node_options.fabric`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(non_camel_case_types)]
pub enum rps_fabric {
    /// Verbs when an RDMA device is present, otherwise soft (the default).
    RPS_FABRIC_AUTO = 0,
    /// The user-space provider over TCP and UDP.
    RPS_FABRIC_SOFT = 1,
    /// libibverbs and librdmacm (a library built with the `verbs` feature).
    RPS_FABRIC_VERBS = 2,
}

/// Whether soft nodes on one host read each other's rings through shared memory
/// (`rps_node_options.same_host`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(non_camel_case_types)]
pub enum rps_same_host {
    /// Detect same-host peers and use shared memory with them (the default).
    RPS_SAME_HOST_AUTO = 0,
    /// Always use the network path.
    RPS_SAME_HOST_OFF = 1,
}

/// A publisher's slow-subscriber policy (`rps_publisher_options.policy`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(non_camel_case_types)]
pub enum rps_policy {
    /// Lossless: a publish waits for the slowest subscriber up to `policy_timeout_ms`, then
    /// fails with `RPS_TIMEOUT` (the default).
    RPS_POLICY_BLOCK = 0,
    /// A subscriber that holds the publisher up longer than `policy_timeout_ms` is dropped.
    RPS_POLICY_DROP_SLOW = 1,
    /// Never waits; an overrun subscriber learns how many messages it lost.
    RPS_POLICY_OVERWRITE = 2,
}

/// Where a new subscription starts in each publisher's stream (`rps_subscriber_options.start`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(non_camel_case_types)]
pub enum rps_start {
    /// Only messages published after it connects (the default).
    RPS_START_LATEST = 0,
    /// Every message the publisher still retains.
    RPS_START_EARLIEST = 1,
}

/// How a node is made: fill with [`rps_node_options_init`], then change what you need.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
#[allow(non_camel_case_types)]
pub struct rps_node_options {
    /// An [`rps_fabric`] value.
    pub fabric: u32,
    /// An [`rps_same_host`] value.
    pub same_host: u32,
    /// The address to listen on, `"ip:port"` (port 0: any free port); NULL: the fabric's
    /// default address and any free port.
    pub bind: *const c_char,
    /// Discovery of the domain's publishers over UD multicast (default true). Off, a
    /// subscription connects by address only (`rps_subscription_connect`).
    pub discovery: bool,
    /// The discovery domain (default 0): nodes of other domains do not see each other.
    pub domain: u16,
    /// The domain's secret, authenticating discovery (NULL: none; the default).
    pub domain_secret: *const u8,
    /// Its length in bytes.
    pub domain_secret_len: usize,
    /// Write the node's stats file (in the library's default directory; default false).
    pub stats_file: bool,
}

/// How a publisher is made: fill with [`rps_publisher_options_init`].
#[repr(C)]
#[derive(Debug, Clone, Copy)]
#[allow(non_camel_case_types)]
pub struct rps_publisher_options {
    /// An [`rps_policy`] value.
    pub policy: u32,
    /// `RPS_POLICY_BLOCK`: the longest wait of one publish; `RPS_POLICY_DROP_SLOW`: how long
    /// a slow subscriber may hold the publisher up (default 5000).
    pub policy_timeout_ms: u64,
    /// Bytes of the ring (0: the library's default, 64 MiB).
    pub ring_capacity: usize,
    /// Largest payload of one record; larger messages are fragmented (0: the default).
    pub max_record_payload: usize,
    /// Most subscribers served at once (0: the default).
    pub max_subscribers: usize,
    /// The topic's credential: only subscriptions that prove it are accepted (NULL: anyone
    /// is; the default).
    pub credential: *const u8,
    /// Its length in bytes.
    pub credential_len: usize,
}

/// How a subscription is made: fill with [`rps_subscriber_options_init`].
#[repr(C)]
#[derive(Debug, Clone, Copy)]
#[allow(non_camel_case_types)]
pub struct rps_subscriber_options {
    /// An [`rps_start`] value.
    pub start: u32,
    /// Bytes one READ brings at most (0: the default, 256 KiB).
    pub batch: usize,
    /// Never park: keep READing while idle (lowest latency, one busy core; default false).
    pub busy_poll: bool,
    /// Largest message reassembled (0: the default, 64 MiB).
    pub max_message_len: u64,
    /// Largest record payload this subscription READs (0: the default, 16 MiB).
    pub max_record_payload: usize,
    /// The topic's credential, proven (never sent) to publishers that require one (NULL:
    /// none; the default).
    pub credential: *const u8,
    /// Its length in bytes.
    pub credential_len: usize,
    /// Connect by itself to every publisher discovery announces (default true).
    pub auto_connect: bool,
    /// Most publishers read at once (0: the default, 1,024); past it each further matching
    /// publisher is an `RPS_EVENT_FEED_LIMIT` and is read once a connection goes.
    pub max_feeds: usize,
    /// The node to connect to at creation, `"ip:port"` (NULL: none; the default). A pattern
    /// subscription without discovery needs one: it reads that node's topic listing and every
    /// topic there it includes (more nodes: `rps_subscription_connect`).
    pub connect: *const c_char,
}

/// Fills `options` with the defaults. `RPS_INVALID_ARGUMENT` when `options` is NULL.
///
/// # Safety
/// `options` is NULL or points to writable memory for an `rps_node_options`.
#[no_mangle]
pub unsafe extern "C" fn rps_node_options_init(options: *mut rps_node_options) -> rps_status {
    let defaults = rps_node_options {
        fabric: rps_fabric::RPS_FABRIC_AUTO as u32,
        same_host: rps_same_host::RPS_SAME_HOST_AUTO as u32,
        bind: std::ptr::null(),
        discovery: true,
        domain: 0,
        domain_secret: std::ptr::null(),
        domain_secret_len: 0,
        stats_file: false,
    };
    // SAFETY: the caller gives NULL or a writable `rps_node_options`.
    unsafe { write_out(options, defaults, "options") }
}

/// Fills `options` with the defaults. `RPS_INVALID_ARGUMENT` when `options` is NULL.
///
/// # Safety
/// `options` is NULL or points to writable memory for an `rps_publisher_options`.
#[no_mangle]
pub unsafe extern "C" fn rps_publisher_options_init(options: *mut rps_publisher_options) -> rps_status {
    let defaults = rps_publisher_options {
        policy: rps_policy::RPS_POLICY_BLOCK as u32,
        policy_timeout_ms: 5000,
        ring_capacity: 0,
        max_record_payload: 0,
        max_subscribers: 0,
        credential: std::ptr::null(),
        credential_len: 0,
    };
    // SAFETY: the caller gives NULL or a writable `rps_publisher_options`.
    unsafe { write_out(options, defaults, "options") }
}

/// Fills `options` with the defaults. `RPS_INVALID_ARGUMENT` when `options` is NULL.
///
/// # Safety
/// `options` is NULL or points to writable memory for an `rps_subscriber_options`.
#[no_mangle]
pub unsafe extern "C" fn rps_subscriber_options_init(options: *mut rps_subscriber_options) -> rps_status {
    let defaults = rps_subscriber_options {
        start: rps_start::RPS_START_LATEST as u32,
        batch: 0,
        busy_poll: false,
        max_message_len: 0,
        max_record_payload: 0,
        credential: std::ptr::null(),
        credential_len: 0,
        auto_connect: true,
        max_feeds: 0,
        connect: std::ptr::null(),
    };
    // SAFETY: the caller gives NULL or a writable `rps_subscriber_options`.
    unsafe { write_out(options, defaults, "options") }
}

/// Writes `value` to `out` unless it is NULL.
///
/// # Safety
/// `out` is NULL or valid for a write of a `T`.
pub(crate) unsafe fn write_out<T>(out: *mut T, value: T, what: &str) -> rps_status {
    guard(|| {
        if out.is_null() {
            return Err(Failure::invalid(what, "NULL"));
        }
        // SAFETY: not NULL, and valid for a write of a `T` (the caller's contract).
        unsafe { out.write(value) };
        Ok(rps_status::RPS_OK)
    })
}

/// A NUL-terminated UTF-8 string argument.
///
/// # Safety
/// `s` is NULL or a NUL-terminated string that lives for `'a`.
pub(crate) unsafe fn str_arg<'a>(s: *const c_char, what: &str) -> Result<&'a str, Failure> {
    if s.is_null() {
        return Err(Failure::invalid(what, "NULL"));
    }
    // SAFETY: not NULL, NUL-terminated and alive for 'a (the caller's contract).
    let s = unsafe { CStr::from_ptr(s) };
    s.to_str().map_err(|_| Failure::invalid(what, "not UTF-8"))
}

/// A socket address argument, `"ip:port"`.
///
/// # Safety
/// As [`str_arg`].
pub(crate) unsafe fn addr_arg(s: *const c_char, what: &str) -> Result<SocketAddr, Failure> {
    // SAFETY: the caller's contract is `str_arg`'s.
    let text = unsafe { str_arg(s, what) }?;
    text.parse().map_err(|_| Failure::invalid(what, &format!("{text:?} is not an ip:port address")))
}

/// A secret given as bytes and length, if any.
///
/// # Safety
/// `bytes` is NULL or valid for reads of `len` bytes.
unsafe fn secret_arg(bytes: *const u8, len: usize, what: &str) -> Result<Option<Secret>, Failure> {
    if bytes.is_null() {
        return Ok(None);
    }
    // SAFETY: not NULL and valid for `len` bytes (the caller's contract).
    let bytes = unsafe { std::slice::from_raw_parts(bytes, len) };
    Secret::new(bytes.to_vec())
        .map(Some)
        .map_err(|e| Failure::new(rps_status::RPS_INVALID_SECRET, format!("{what}: {e}")))
}

/// An enum-valued field: one of `values`, by its number.
fn enum_field<T: Copy>(value: u32, values: &[T], what: &str) -> Result<T, Failure> {
    values.get(value as usize).copied().ok_or_else(|| Failure::invalid(what, &format!("{value} is out of range")))
}

impl rps_node_options {
    /// A node builder with these options.
    ///
    /// # Safety
    /// `bind` and `domain_secret` are NULL or valid as their fields say.
    pub(crate) unsafe fn builder(&self) -> Result<NodeBuilder, Failure> {
        let kinds = [FabricKind::Auto, FabricKind::Soft, FabricKind::Verbs];
        let mut builder = NodeBuilder::default()
            .fabric(enum_field(self.fabric, &kinds, "fabric")?)
            .same_host(enum_field(self.same_host, &[SameHost::Auto, SameHost::Off], "same_host")?)
            .domain(self.domain);
        if !self.bind.is_null() {
            // SAFETY: not NULL: a NUL-terminated string (the caller's contract).
            builder = builder.bind(unsafe { addr_arg(self.bind, "bind") }?);
        }
        if !self.discovery {
            builder = builder.discovery(DiscoveryOptions::disabled());
        }
        // SAFETY: NULL or valid for `domain_secret_len` bytes (the caller's contract).
        if let Some(secret) = unsafe { secret_arg(self.domain_secret, self.domain_secret_len, "domain_secret") }? {
            builder = builder.domain_secret(secret);
        }
        if !self.stats_file {
            builder = builder.stats_dir(None);
        }
        Ok(builder)
    }
}

impl rps_publisher_options {
    /// `builder` with these options.
    ///
    /// # Safety
    /// `credential` is NULL or valid for `credential_len` bytes.
    pub(crate) unsafe fn apply<'n>(&self, mut builder: PublisherBuilder<'n>) -> Result<PublisherBuilder<'n>, Failure> {
        let timeout = Duration::from_millis(self.policy_timeout_ms);
        let policies = [Policy::Block { timeout }, Policy::DropSlow { grace: timeout }, Policy::Overwrite];
        builder = builder.policy(enum_field(self.policy, &policies, "policy")?);
        if self.ring_capacity != 0 {
            builder = builder.ring_capacity(self.ring_capacity);
        }
        if self.max_record_payload != 0 {
            builder = builder.max_record_payload(self.max_record_payload);
        }
        if self.max_subscribers != 0 {
            builder = builder.max_subscribers(self.max_subscribers);
        }
        // SAFETY: NULL or valid for `credential_len` bytes (the caller's contract).
        if let Some(secret) = unsafe { secret_arg(self.credential, self.credential_len, "credential") }? {
            builder = builder.credential(secret);
        }
        Ok(builder)
    }
}

impl rps_subscriber_options {
    /// `builder` with these options.
    ///
    /// # Safety
    /// `credential` is NULL or valid for `credential_len` bytes; `connect` is NULL or a
    /// NUL-terminated string.
    pub(crate) unsafe fn apply<'n>(
        &self,
        mut builder: SubscriberBuilder<'n>,
    ) -> Result<SubscriberBuilder<'n>, Failure> {
        builder = builder
            .start(enum_field(self.start, &[Start::Latest, Start::Earliest], "start")?)
            .busy_poll(self.busy_poll)
            .auto_connect(self.auto_connect);
        if self.batch != 0 {
            builder = builder.batch(self.batch);
        }
        if self.max_message_len != 0 {
            builder = builder.max_message_len(self.max_message_len);
        }
        if self.max_record_payload != 0 {
            builder = builder.max_record_payload(self.max_record_payload);
        }
        if self.max_feeds != 0 {
            builder = builder.max_feeds(self.max_feeds);
        }
        // SAFETY: NULL or valid for `credential_len` bytes (the caller's contract).
        if let Some(secret) = unsafe { secret_arg(self.credential, self.credential_len, "credential") }? {
            builder = builder.credential(secret);
        }
        if !self.connect.is_null() {
            // SAFETY: not NULL, a NUL-terminated string (the caller's contract).
            builder = builder.connect(unsafe { addr_arg(self.connect, "connect") }?);
        }
        Ok(builder)
    }
}
