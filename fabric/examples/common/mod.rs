//! Plumbing shared by the examples: the command line common to all of them, running the server
//! and client as two processes or as two threads of one process (`--both`), waiting for
//! connection-manager events and completions with a deadline, and the wire format of the
//! region descriptors the examples exchange in CM private data; `bootstrap`: connecting queue
//! pairs by hand over a TCP socket instead (`--bootstrap tcp`).
//!
//! Not every example uses every helper.
#![allow(dead_code)]

mod bootstrap;
#[allow(unused_imports, reason = "the examples that connect by CM only use none of it")]
pub use bootstrap::*;

use std::net::{IpAddr, SocketAddr};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam::channel::{self, Receiver, RecvTimeoutError, Sender};
use rdma_fabric::{
    CmEvent, CompletionQueue, ConnId, EventChannel, Fabric, FabricConfig, FabricKind, RemoteAddr, WcOpcode,
    WorkCompletion,
};

/// Error type of the examples: anything, reported on one line.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
/// Result type of the examples.
pub type Res<T> = Result<T, BoxError>;

/// Builds an error from a message.
pub fn err(msg: impl Into<String>) -> BoxError {
    msg.into().into()
}

/// Command-line options common to the connected examples.
#[derive(clap::Args, Debug, Clone)]
pub struct NetArgs {
    /// Fabric provider: soft, verbs or auto.
    #[arg(long, default_value = "auto")]
    pub fabric: FabricKind,
    /// Local address to bind (also selects the RDMA device).
    #[arg(long, default_value = "127.0.0.1")]
    pub bind: IpAddr,
    /// Port to listen on / connect to (default: the example's port; `--both` picks a free one).
    #[arg(long)]
    pub port: Option<u16>,
    /// Run the server side only.
    #[arg(long, conflicts_with_all = ["client", "both"])]
    pub server: bool,
    /// Run the client side only, connecting to ADDR (`ip` or `ip:port`).
    #[arg(long, value_name = "ADDR", conflicts_with = "both")]
    pub client: Option<String>,
    /// Run server and client in this process, each on its own thread with its own fabric.
    #[arg(long)]
    pub both: bool,
    /// Bound of every wait, in seconds.
    #[arg(long, default_value_t = 10)]
    pub timeout: u64,
}

/// Which side(s) to run.
#[derive(Debug, Clone, Copy)]
pub enum Role {
    /// Server only, listening on this address.
    Server(SocketAddr),
    /// Client only, connecting to this address.
    Client(SocketAddr),
    /// Both, the server listening on this address.
    Both(SocketAddr),
}

impl NetArgs {
    /// The role the options select; `default_port` is used when `--port` is absent (except
    /// under `--both`, which lets the system pick a port).
    pub fn role(&self, default_port: u16) -> Res<Role> {
        if self.both {
            return Ok(Role::Both(SocketAddr::new(self.bind, self.port.unwrap_or(0))));
        }
        if self.server {
            return Ok(Role::Server(SocketAddr::new(self.bind, self.port.unwrap_or(default_port))));
        }
        match &self.client {
            Some(addr) => Ok(Role::Client(parse_peer(addr, self.port.unwrap_or(default_port))?)),
            None => Err(err("choose a role: --server, --client <addr> or --both")),
        }
    }

    /// Opens a fabric of the selected provider bound to `--bind`.
    pub fn open(&self) -> Res<Fabric> {
        let config = FabricConfig { kind: self.fabric, bind: self.bind, ..FabricConfig::default() };
        Ok(rdma_fabric::open(&config)?)
    }

    /// The bound of every wait.
    pub fn timeout(&self) -> Duration {
        Duration::from_secs(self.timeout.max(1))
    }
}

/// Parses `ip:port` or a bare `ip` (then `default_port` applies).
pub fn parse_peer(text: &str, default_port: u16) -> Res<SocketAddr> {
    if let Ok(addr) = text.parse::<SocketAddr>() {
        return Ok(addr);
    }
    match text.parse::<IpAddr>() {
        Ok(ip) => Ok(SocketAddr::new(ip, default_port)),
        Err(_) => Err(err(format!("'{text}' is neither ip nor ip:port"))),
    }
}

/// How the server tells where it listens: printed, and passed to the in-process client.
pub struct Ready {
    tx: Option<Sender<SocketAddr>>,
}

impl Ready {
    /// Announces the bound address.
    pub fn announce(&mut self, addr: SocketAddr) {
        println!("server: listening on {addr}");
        if let Some(tx) = self.tx.take() {
            // The client may already have given up; its error is the one reported.
            let _ = tx.send(addr);
        }
    }
}

/// The server side: listens on the address, announces it, serves one client.
pub type ServerFn = Box<dyn FnOnce(SocketAddr, Ready) -> Res<()> + Send>;
/// The client side: connects to the address.
pub type ClientFn = Box<dyn FnOnce(SocketAddr) -> Res<()> + Send>;

/// Runs the selected role(s). Under `--both` the server and the client each run on their own
/// thread; the first error of either is returned.
pub fn run_roles(role: Role, timeout: Duration, server: ServerFn, client: ClientFn) -> Res<()> {
    match role {
        Role::Server(addr) => server(addr, Ready { tx: None }),
        Role::Client(addr) => client(addr),
        Role::Both(addr) => {
            let (tx, rx) = channel::bounded(1);
            let server = spawn("server", move || server(addr, Ready { tx: Some(tx) }))?;
            let client = spawn("client", move || {
                let addr = rx.recv_timeout(timeout).map_err(|_| err("the server did not start listening"))?;
                client(addr)
            })?;
            let client_result = join(client);
            let server_result = join(server);
            // A server failure usually explains the client's; report it first.
            server_result.map_err(|e| err(format!("server: {e}")))?;
            client_result.map_err(|e| err(format!("client: {e}")))
        }
    }
}

/// Spawns a named thread.
pub fn spawn<T: Send + 'static>(name: &str, f: impl FnOnce() -> Res<T> + Send + 'static) -> Res<JoinHandle<Res<T>>> {
    Ok(std::thread::Builder::new().name(name.into()).spawn(f)?)
}

/// Joins a thread, turning a panic into an error.
pub fn join<T>(handle: JoinHandle<Res<T>>) -> Res<T> {
    handle.join().map_err(|_| err("a thread panicked"))?
}

/// Initialises logging (`RUST_LOG`) to stderr.
pub fn init_logging() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .try_init();
}

/// Maps the outcome of `main` to the exit code, printing an error on one line.
pub fn finish(result: Res<()>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let mut line = e.to_string();
            let mut source = e.source();
            while let Some(s) = source {
                let text = s.to_string();
                if !line.contains(&text) {
                    line.push_str(": ");
                    line.push_str(&text);
                }
                source = s.source();
            }
            eprintln!("error: {}", line.replace('\n', " "));
            ExitCode::FAILURE
        }
    }
}

/// A source of connection-manager events with a bounded wait.
pub trait Events {
    /// The next event, or `None` after `timeout`.
    fn next_event(&self, timeout: Duration) -> Res<Option<CmEvent>>;
}

impl Events for EventChannel {
    fn next_event(&self, timeout: Duration) -> Res<Option<CmEvent>> {
        Ok(self.get_event(timeout)?)
    }
}

/// A thread that takes connection-manager events off a channel and forwards them, so the
/// data path never blocks on the CM. Stops when dropped.
pub struct CmThread {
    channel: EventChannel,
    rx: Receiver<Res<CmEvent>>,
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<Res<()>>>,
}

impl CmThread {
    /// Starts forwarding the events of `channel`.
    pub fn start(name: &str, channel: EventChannel) -> Res<Self> {
        let (tx, rx) = channel::unbounded();
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let forwarded = channel.clone();
        let handle = spawn(name, move || {
            let channel = forwarded;
            while !flag.load(Ordering::Acquire) {
                match channel.get_event(Duration::from_millis(50)) {
                    Ok(Some(event)) => {
                        if tx.send(Ok(event)).is_err() {
                            break;
                        }
                    }
                    Ok(None) => {}
                    Err(e) => {
                        let _ = tx.send(Err(e.into()));
                        break;
                    }
                }
            }
            Ok(())
        })?;
        Ok(CmThread { channel, rx, stop, handle: Some(handle) })
    }

    /// The channel whose events this thread takes (to listen and connect on).
    pub fn channel(&self) -> &EventChannel {
        &self.channel
    }
}

impl Events for CmThread {
    fn next_event(&self, timeout: Duration) -> Res<Option<CmEvent>> {
        match self.rx.recv_timeout(timeout) {
            Ok(event) => event.map(Some),
            Err(RecvTimeoutError::Timeout) => Ok(None),
            Err(RecvTimeoutError::Disconnected) => Err(err("the CM event thread stopped")),
        }
    }
}

impl Drop for CmThread {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(handle) = self.handle.take() {
            let _ = handle.join();
        }
    }
}

fn remaining(deadline: Instant, what: &str) -> Res<Duration> {
    let now = Instant::now();
    if now >= deadline {
        return Err(err(format!("timed out waiting for {what}")));
    }
    Ok(deadline - now)
}

/// Waits for the next connect request.
pub fn wait_connect_request(events: &dyn Events, timeout: Duration) -> Res<rdma_fabric::ConnectRequest> {
    let deadline = Instant::now() + timeout;
    loop {
        match events.next_event(remaining(deadline, "a connect request")?)? {
            Some(CmEvent::ConnectRequest(req)) => return Ok(req),
            Some(other) => tracing::debug!("ignoring CM event {other:?} while waiting for a connect request"),
            None => {}
        }
    }
}

/// Waits until connection `conn` is established; returns the accept's private data (active
/// side) or nothing (passive side). Connect requests arriving meanwhile are rejected.
pub fn wait_established(events: &dyn Events, conn: ConnId, timeout: Duration) -> Res<Vec<u8>> {
    let deadline = Instant::now() + timeout;
    loop {
        match events.next_event(remaining(deadline, "the connection to be established")?)? {
            Some(CmEvent::Established { conn: c, private_data }) if c == conn => return Ok(private_data),
            Some(CmEvent::Rejected { conn: c, reason, .. }) if c == conn => {
                return Err(err(format!("connection rejected: {reason:?}")))
            }
            Some(CmEvent::Unreachable { conn: c, detail }) if c == conn => {
                return Err(err(format!("peer unreachable: {detail}")))
            }
            Some(CmEvent::Disconnected { conn: c }) if c == conn => {
                return Err(err("disconnected before the connection was established"))
            }
            Some(other) => tracing::debug!("ignoring CM event {other:?}"),
            None => {}
        }
    }
}

/// Waits until connection `conn` is disconnected.
pub fn wait_disconnected(events: &dyn Events, conn: ConnId, timeout: Duration) -> Res<()> {
    let deadline = Instant::now() + timeout;
    loop {
        match events.next_event(remaining(deadline, "the peer to disconnect")?)? {
            Some(CmEvent::Disconnected { conn: c }) if c == conn => return Ok(()),
            Some(other) => tracing::debug!("ignoring CM event {other:?}"),
            None => {}
        }
    }
}

/// Completions of one CQ, taken with the completion channel (arm, poll, wait) and checked.
pub struct Completions {
    cq: CompletionQueue,
    timeout: Duration,
    spin: Duration,
    batch: Vec<WorkCompletion>,
    pending: std::collections::VecDeque<WorkCompletion>,
}

impl Completions {
    /// Takes completions of `cq`, waiting at most `timeout` for each.
    pub fn new(cq: CompletionQueue, timeout: Duration) -> Self {
        Completions {
            cq,
            timeout,
            spin: Duration::ZERO,
            batch: vec![WorkCompletion::default(); 16],
            pending: Default::default(),
        }
    }

    /// Polls for up to `spin` before arming and blocking (waking a thread blocked on the other
    /// CPU costs far more than a short spin on small machines). Zero: block at once.
    pub fn with_spin(mut self, spin: Duration) -> Self {
        self.spin = spin;
        self
    }

    /// The next completion, successful, whatever it is.
    pub fn next(&mut self, what: &str) -> Res<WorkCompletion> {
        if self.pending.is_empty() {
            let start = Instant::now();
            let deadline = start + self.timeout;
            loop {
                let n = self.cq.poll(&mut self.batch)?;
                if n > 0 {
                    self.pending.extend(&self.batch[..n]);
                    break;
                }
                if start.elapsed() < self.spin {
                    std::hint::spin_loop();
                    continue;
                }
                // Arm, then poll again: a completion that arrived before the arm raises no event.
                self.cq.arm()?;
                let n = self.cq.poll(&mut self.batch)?;
                if n > 0 {
                    self.pending.extend(&self.batch[..n]);
                    break;
                }
                self.cq.wait(remaining(deadline, what)?)?;
            }
        }
        let wc = self.pending.pop_front().ok_or_else(|| err("no completion"))?;
        if !wc.status.is_success() {
            return Err(err(format!("{what}: work request {} completed with {:?}", wc.wr_id, wc.status)));
        }
        Ok(wc)
    }

    /// The next completion, which must be `opcode` for `wr_id`.
    pub fn expect(&mut self, opcode: WcOpcode, wr_id: u64, what: &str) -> Res<WorkCompletion> {
        let wc = self.next(what)?;
        if wc.opcode != opcode || wc.wr_id != wr_id {
            return Err(err(format!(
                "{what}: expected {opcode:?} of wr {wr_id}, got {:?} of wr {}",
                wc.opcode, wc.wr_id
            )));
        }
        Ok(wc)
    }
}

/// A memory region descriptor as sent in CM private data: address, rkey, length, and a 32-bit
/// word of example-specific meaning (little endian, 20 bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RegionInfo {
    /// Where the region is.
    pub remote: RemoteAddr,
    /// Its length.
    pub len: u32,
    /// Example-specific (a pattern seed, an iteration count...).
    pub extra: u32,
}

impl RegionInfo {
    /// Encoded size.
    pub const SIZE: usize = 20;

    /// Encodes.
    pub fn encode(&self) -> [u8; Self::SIZE] {
        let mut out = [0u8; Self::SIZE];
        out[0..8].copy_from_slice(&self.remote.addr.to_le_bytes());
        out[8..12].copy_from_slice(&self.remote.rkey.to_le_bytes());
        out[12..16].copy_from_slice(&self.len.to_le_bytes());
        out[16..20].copy_from_slice(&self.extra.to_le_bytes());
        out
    }

    /// Decodes (trailing bytes, as padded private data may carry, are ignored).
    pub fn decode(bytes: &[u8]) -> Res<Self> {
        let b: &[u8; Self::SIZE] = bytes
            .get(..Self::SIZE)
            .and_then(|b| b.try_into().ok())
            .ok_or_else(|| err(format!("private data of {} bytes is too short for a region", bytes.len())))?;
        let word = |r: std::ops::Range<usize>| u32::from_le_bytes(b[r].try_into().unwrap_or_default());
        Ok(RegionInfo {
            remote: RemoteAddr { addr: u64::from_le_bytes(b[0..8].try_into().unwrap_or_default()), rkey: word(8..12) },
            len: word(12..16),
            extra: word(16..20),
        })
    }
}

/// The byte at `offset` of the test pattern `seed`.
pub fn pattern_byte(seed: u32, offset: usize) -> u8 {
    (offset as u32).wrapping_mul(2_654_435_761).wrapping_add(seed).rotate_right(13) as u8
}

/// The test pattern `seed` over `len` bytes.
pub fn pattern(seed: u32, len: usize) -> Vec<u8> {
    (0..len).map(|i| pattern_byte(seed, i)).collect()
}

/// Checks `data` against the pattern `seed`; describes the first mismatch.
pub fn check_pattern(seed: u32, data: &[u8]) -> Res<()> {
    match data.iter().enumerate().find(|(i, b)| **b != pattern_byte(seed, *i)) {
        None => Ok(()),
        Some((i, b)) => {
            Err(err(format!("data mismatch at byte {i}: got {b:#04x}, expected {:#04x}", pattern_byte(seed, i))))
        }
    }
}

/// Rounded microseconds of a duration, for printing.
pub fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}
