//! The command line: subcommands, their options, and one-line explanations of errors.

use std::net::{IpAddr, SocketAddr, SocketAddrV4};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use rdma_pubsub::fabric::{Error as FabricError, SameHost};
use rdma_pubsub::node::discovery::{DEFAULT_GROUP, DEFAULT_PORT};
use rdma_pubsub::{Checksum, DiscoveryOptions, Error, FabricKind, Node, Policy, PublisherBuilder};
use rdma_pubsub::{RejectCode, Secret};

#[derive(Parser, Debug)]
#[command(
    name = "pubsub-demo",
    version,
    about = "rdma-pubsub demo and tools: pub/sub over RDMA (or its soft emulation)",
    after_help = "Without a subcommand: the embedded demo on the soft fabric (exits 0 only if every message arrived intact)."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    #[command(flatten)]
    pub demo: DemoArgs,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// The embedded demo (the default): publishers and subscribers on a few topics in one process.
    Demo(DemoArgs),
    /// Publish a topic for `sub` processes to find (discovery) or connect to.
    Pub(PubArgs),
    /// Subscribe to `pub` processes (found by discovery, or --connect), verify every message,
    /// print a summary.
    Sub(SubArgs),
    /// Throughput and latency matrix (sizes × subscribers × policy), subscribers in threads of
    /// this process or, with --separate-processes, in processes of their own.
    Bench(BenchArgs),
    /// One publisher to many subscribers for a while, then subscribe/unsubscribe cycles:
    /// checks for loss and for growth of memory, descriptors and threads.
    Soak(SoakArgs),
    /// The counters of the rdma-pubsub nodes running on this host, refreshed live.
    Stat(StatArgs),
}

/// Which fabric and where.
#[derive(Args, Debug, Clone)]
pub struct FabricArgs {
    /// Fabric provider: auto, soft or verbs.
    #[arg(long, default_value = "soft")]
    pub fabric: FabricKind,
    /// RDMA device name (verbs), e.g. rxe0.
    #[arg(long)]
    pub device: Option<String>,
    /// Soft fabric: whether connections between processes of this host use shared memory
    /// (auto) or the NIC threads and TCP loopback (off).
    #[arg(long, default_value = "auto")]
    pub same_host: SameHost,
}

impl FabricArgs {
    /// Builds a node bound to `bind`, discovering its peers as `discovery` says.
    pub fn node(&self, bind: SocketAddr, discovery: DiscoveryOptions) -> Result<Node, Error> {
        let mut b = Node::builder().fabric(self.fabric).bind(bind).discovery(discovery).same_host(self.same_host);
        if let Some(d) = &self.device {
            b = b.device(d.clone());
        }
        b.build()
    }
}

/// How `pub` and `sub` find each other.
#[derive(Args, Debug, Clone)]
pub struct DiscoveryArgs {
    /// Discovery multicast group, IP:PORT (default 239.255.77.77:7477, on the --bind
    /// interface): nodes find each other's topics only within one group and port.
    #[arg(long, value_name = "IP:PORT", value_parser = parse_group)]
    pub group: Option<SocketAddrV4>,
    /// Unicast discovery instead of multicast: the discovery endpoints of the peers, IP:PORT
    /// comma-separated (what `pub` prints after "discovery:"). Given without addresses, the node
    /// only answers the nodes that list it.
    #[arg(long, value_name = "IP:PORT,...", num_args = 0.., value_delimiter = ',', value_parser = parse_endpoint,
          conflicts_with = "group")]
    pub peers: Option<Vec<SocketAddrV4>>,
    /// No discovery at all: subscribers connect with `sub --connect`.
    #[arg(long, conflicts_with_all = ["group", "peers", "domain"])]
    pub no_discovery: bool,
    /// Discovery domain: nodes find only nodes of the same domain (its UD port is the group's
    /// port plus the domain).
    #[arg(long, default_value_t = 0)]
    pub domain: u16,
    /// The domain secret, read from this file (16 to 4096 bytes; surrounding whitespace is
    /// trimmed): announcements are sealed with it and only nodes with the same secret are
    /// heard. Without it, the file named by RDMA_PUBSUB_DOMAIN_SECRET_FILE, if set; else
    /// discovery is unauthenticated (trusted networks only).
    #[arg(long, value_name = "PATH", value_parser = parse_secret_file, conflicts_with = "no_discovery")]
    pub secret_file: Option<SecretFile>,
}

/// A domain secret and the file it was read from.
#[derive(Debug, Clone)]
pub struct SecretFile {
    path: PathBuf,
    secret: Secret,
}

impl DiscoveryArgs {
    /// The node's discovery options.
    pub fn options(&self) -> DiscoveryOptions {
        let options = if self.no_discovery {
            DiscoveryOptions::disabled()
        } else if let Some(peers) = &self.peers {
            DiscoveryOptions::unicast(peers.clone())
        } else {
            let group = self.group.unwrap_or(SocketAddrV4::new(DEFAULT_GROUP, DEFAULT_PORT));
            DiscoveryOptions::default().group(*group.ip()).port(group.port())
        };
        let secret = self.secret_file.as_ref().map(|f| f.secret.clone());
        options.domain(self.domain).secret(secret)
    }

    /// The flags that make another process discover the same way, to print in hints
    /// (`discovery_addr`: this node's unicast endpoint).
    pub fn hint(&self, discovery_addr: Option<SocketAddr>) -> String {
        let mut how = match (&self.peers, self.group, discovery_addr) {
            _ if self.no_discovery => return " --no-discovery".into(),
            (Some(_), _, Some(addr)) => format!(" --peers {addr}"),
            (None, Some(g), _) => format!(" --group {g}"),
            _ => String::new(),
        };
        if self.domain != 0 {
            how += &format!(" --domain {}", self.domain);
        }
        if let Some(file) = &self.secret_file {
            how += &format!(" --secret-file {}", file.path.display());
        }
        how
    }
}

#[derive(Args, Debug, Clone)]
pub struct DemoArgs {
    #[command(flatten)]
    pub fabric: FabricArgs,
    /// How long publishers run, in seconds (1..=60).
    #[arg(long, default_value_t = 6, value_parser = clap::value_parser!(u64).range(1..=60))]
    pub seconds: u64,
}

/// A slow-subscriber policy on the command line.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum PolicyArg {
    /// Lossless: the publisher waits for the slowest subscriber.
    Block,
    /// A subscriber that holds the publisher up too long is disconnected.
    DropSlow,
    /// The publisher never waits; overrun subscribers learn how many messages they lost.
    Overwrite,
}

impl PolicyArg {
    /// The library's policy (Block waits up to 5 s, DropSlow allows 1 s).
    pub fn policy(self) -> Policy {
        match self {
            PolicyArg::Block => Policy::Block { timeout: Duration::from_secs(5) },
            PolicyArg::DropSlow => Policy::DropSlow { grace: Duration::from_secs(1) },
            PolicyArg::Overwrite => Policy::Overwrite,
        }
    }
    /// The name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            PolicyArg::Block => "block",
            PolicyArg::DropSlow => "drop-slow",
            PolicyArg::Overwrite => "overwrite",
        }
    }
}

/// The record checksum on the command line.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChecksumArg {
    /// Whichever is faster on this CPU (timed once per process).
    Auto,
    /// CRC-32C.
    Crc32c,
    /// XXH64 (its low 32 bits).
    Xxhash64,
    /// XXH3 (its low 32 bits) for records of up to 256 bytes, CRC-32C for longer ones.
    Xxh3Crc32c,
}

impl ChecksumArg {
    /// Sets the publisher's checksum on `builder` (`Auto` leaves the library's choice).
    pub fn apply(self, builder: PublisherBuilder<'_>) -> PublisherBuilder<'_> {
        match self {
            ChecksumArg::Auto => builder,
            ChecksumArg::Crc32c => builder.checksum(Checksum::Crc32c),
            ChecksumArg::Xxhash64 => builder.checksum(Checksum::XxHash64),
            ChecksumArg::Xxh3Crc32c => builder.checksum(Checksum::Xxh3Crc32c),
        }
    }
}

/// The ring capacity of a publisher of `size`-byte messages, for `pub` and `bench` alike: room
/// for 16 messages, at least 1 MiB and at most 64 MiB (a power of two, as rings are).
pub fn ring_capacity_for(size: usize) -> usize {
    size.saturating_mul(16).min(64 << 20).next_power_of_two().clamp(1 << 20, 64 << 20)
}

/// The name of a checksum function, as the command line spells it.
pub fn checksum_name(c: Checksum) -> &'static str {
    match c {
        Checksum::Crc32c => "crc32c",
        Checksum::XxHash64 => "xxhash64",
        Checksum::Xxh3Crc32c => "xxh3-crc32c",
    }
}

/// The name of a library policy.
pub fn policy_name(p: Policy) -> &'static str {
    match p {
        Policy::Block { .. } => "block",
        Policy::DropSlow { .. } => "drop-slow",
        Policy::Overwrite => "overwrite",
    }
}

#[derive(Args, Debug, Clone)]
pub struct PubArgs {
    #[command(flatten)]
    pub fabric: FabricArgs,
    /// Address to listen on for subscribers: IP or IP:PORT (port 0 = any free port).
    #[arg(long, default_value = "127.0.0.1:0", value_parser = parse_bind)]
    pub bind: SocketAddr,
    /// Topic to publish.
    #[arg(long, default_value = "demo")]
    pub topic: String,
    /// Message size in bytes (at least 24: sequence, time stamp, length, stream).
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u64).range(24..=(64 << 20)))]
    pub size: u64,
    /// Messages per second (0 = as fast as the subscribers allow).
    #[arg(long, default_value_t = 0)]
    pub rate: u64,
    /// Messages to publish (0 = until killed).
    #[arg(long, default_value_t = 100_000)]
    pub count: u64,
    /// Slow-subscriber policy.
    #[arg(long, value_enum, default_value_t = PolicyArg::Block)]
    pub policy: PolicyArg,
    /// Record checksum function.
    #[arg(long, value_enum, default_value_t = ChecksumArg::Auto)]
    pub checksum: ChecksumArg,
    /// Subscribers to wait for before publishing.
    #[arg(long, default_value_t = 1)]
    pub subscribers: usize,
    /// Longest wait for those subscribers, in seconds.
    #[arg(long, default_value_t = 60)]
    pub wait: u64,
    #[command(flatten)]
    pub discovery: DiscoveryArgs,
}

#[derive(Args, Debug, Clone)]
pub struct SubArgs {
    #[command(flatten)]
    pub fabric: FabricArgs,
    /// Local address: IP or IP:PORT.
    #[arg(long, default_value = "127.0.0.1:0", value_parser = parse_bind)]
    pub bind: SocketAddr,
    /// Connect to the publisher's node at IP:PORT (what `pub` printed) instead of finding the
    /// publishers of the topic by discovery (with a pattern: every topic that node lists that
    /// the pattern includes).
    #[arg(long, value_parser = parse_peer, conflicts_with_all = ["group", "peers"])]
    pub connect: Option<SocketAddr>,
    /// Topic to subscribe to, or a pattern of topics (`sensors/**`, `sensors/*/temp`,
    /// `room-$*`: Zenoh key expressions), whose publishers discovery finds (or the node of
    /// --connect lists).
    #[arg(long, default_value = "demo")]
    pub topic: String,
    /// Expected message size (checked when given).
    #[arg(long)]
    pub size: Option<u64>,
    /// Stop after this many messages (default: when the publisher ends its stream).
    #[arg(long)]
    pub count: Option<u64>,
    /// Give up after this many seconds without a message (or without a publisher found).
    #[arg(long, default_value_t = 30)]
    pub idle: u64,
    #[command(flatten)]
    pub discovery: DiscoveryArgs,
}

#[derive(Args, Debug, Clone)]
pub struct BenchArgs {
    #[command(flatten)]
    pub fabric: FabricArgs,
    /// IP address both nodes bind to.
    #[arg(long, default_value = "127.0.0.1")]
    pub bind: IpAddr,
    /// Message sizes, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "64,1024,65536,1048576",
          value_parser = clap::value_parser!(u64).range(24..=(64 << 20)))]
    pub sizes: Vec<u64>,
    /// Subscriber counts, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,4,16",
          value_parser = clap::value_parser!(u64).range(1..=256))]
    pub subscribers: Vec<u64>,
    /// Slow-subscriber policy.
    #[arg(long, value_enum, default_value_t = PolicyArg::Block)]
    pub policy: PolicyArg,
    /// Record checksum function.
    #[arg(long, value_enum, default_value_t = ChecksumArg::Auto)]
    pub checksum: ChecksumArg,
    /// Most messages per throughput run.
    #[arg(long, default_value_t = 200_000)]
    pub messages: u64,
    /// Longest time per point (throughput run plus latency run), in seconds.
    #[arg(long, default_value_t = 2.0)]
    pub seconds: f64,
    /// Subscribers poll without parking (lowest latency; each keeps a CPU busy), as perftest's
    /// latency tests do.
    #[arg(long)]
    pub busy_poll: bool,
    /// Pause of the latency run between every subscriber's receipt of a message and the next
    /// publish, in µs. Longer than a subscription's spin (200 µs), it makes each subscriber
    /// park between messages, so the latency is that of a parked subscriber woken by the
    /// publisher's doorbell (column `lat_doorbells/msg`; `lat_bell_records/msg`: of those, the
    /// doorbells that brought the message with them).
    #[arg(long, value_name = "MICROS", default_value_t = 0)]
    pub latency_gap: u64,
    /// Print JSON (an array of objects) instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Run the publishing thread alone on this CPU (default: the first allowed one) and every
    /// other thread on the other allowed CPUs: its CPU time per message is then its own work,
    /// without the cost of sharing a CPU with the subscribers and NIC threads it feeds.
    #[arg(long, value_name = "CPU", num_args = 0..=1)]
    pub pin_publisher: Option<Option<usize>>,
    /// Publish through the shared handle (`Publisher::publish`, a lock per message) instead of
    /// an `ExclusivePublisher` held for each run (the default: one thread publishes).
    #[arg(long)]
    pub shared_publisher: bool,
    /// Run each subscriber in a process of its own (this program, re-executed, with a node of
    /// its own) instead of a thread of this process, as peers such as ZeroMQ are measured.
    #[arg(long)]
    pub separate_processes: bool,
    /// Do not measure and print the machine's own limits beside the figures (memcpy of each
    /// size, one TCP stream over --bind; about 0.2 s plus 20 ms per size).
    #[arg(long)]
    pub no_limits: bool,
    /// Also draw msgs/s and MB/s against message size, one line per subscriber count, as an
    /// SVG chart in this file.
    #[arg(long, value_name = "FILE.svg")]
    pub plot: Option<std::path::PathBuf>,
    /// Internal (--separate-processes): run as one subscriber process, connected to the
    /// publisher's node at IP:PORT, reporting to the bench process on stdout.
    #[arg(long, hide = true, value_name = "IP:PORT", value_parser = parse_peer, requires = "topic")]
    pub subscriber_of: Option<SocketAddr>,
    /// Internal: the index of that subscriber process (in error messages).
    #[arg(long, hide = true, default_value_t = 0, requires = "subscriber_of")]
    pub subscriber_index: u64,
    /// Internal: the topic of that subscriber process.
    #[arg(long, hide = true, requires = "subscriber_of")]
    pub topic: Option<String>,
}

#[derive(Args, Debug, Clone)]
pub struct SoakArgs {
    /// How long the publisher runs, in seconds.
    #[arg(long, default_value_t = 60)]
    pub seconds: u64,
    /// Subscribers.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u64).range(1..=256))]
    pub subscribers: u64,
    /// Subscribe/unsubscribe cycles after the run.
    #[arg(long, default_value_t = 10_000)]
    pub cycles: u64,
    /// Message size in bytes.
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u64).range(24..=(1 << 20)))]
    pub size: u64,
}

#[derive(Args, Debug, Clone)]
pub struct StatArgs {
    /// Directory of the stats files (default: $RDMA_PUBSUB_STATS_DIR or /dev/shm/rdma-pubsub-UID, UID being the user id).
    #[arg(long)]
    pub dir: Option<std::path::PathBuf>,
    /// Print one snapshot and exit.
    #[arg(long)]
    pub once: bool,
    /// Refresh interval in milliseconds.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(50..=60_000))]
    pub interval: u64,
}

/// `IP` or `IP:PORT`.
fn parse_bind(s: &str) -> Result<SocketAddr, String> {
    if let Ok(ip) = s.parse::<IpAddr>() {
        return Ok(SocketAddr::new(ip, 0));
    }
    s.parse::<SocketAddr>().map_err(|_| format!("'{s}' is not an address: give IP or IP:PORT, e.g. 127.0.0.1:7000"))
}

/// A multicast `IP:PORT` (IPv4).
fn parse_group(s: &str) -> Result<SocketAddrV4, String> {
    match s.parse::<SocketAddrV4>() {
        Ok(a) if a.ip().is_multicast() && a.port() != 0 => Ok(a),
        _ => Err(format!("'{s}' is not a multicast IPv4 IP:PORT: give e.g. 239.255.77.77:7477")),
    }
}

/// An IPv4 `IP:PORT` with a port.
fn parse_endpoint(s: &str) -> Result<SocketAddrV4, String> {
    match s.parse::<SocketAddrV4>() {
        Ok(a) if a.port() != 0 => Ok(a),
        _ => Err(format!("'{s}' is not an IPv4 IP:PORT: give the discovery address `pubsub-demo pub` printed")),
    }
}

/// The domain secret held in the file at `s`.
fn parse_secret_file(s: &str) -> Result<SecretFile, String> {
    let path = PathBuf::from(s);
    let secret = Secret::from_file(&path).map_err(|e| format!("no domain secret in '{s}': {e}"))?;
    Ok(SecretFile { path, secret })
}

/// `IP:PORT` with a port.
fn parse_peer(s: &str) -> Result<SocketAddr, String> {
    match s.parse::<SocketAddr>() {
        Ok(a) if a.port() != 0 => Ok(a),
        _ => Err(format!("'{s}' is not IP:PORT: give the address `pubsub-demo pub` printed, e.g. 127.0.0.1:7000")),
    }
}

/// Prints a command-line error in one line (help and version as clap prints them).
pub fn usage_error(e: clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
        let _ = e.print();
        return ExitCode::SUCCESS;
    }
    let text = e.render().to_string();
    let first = text.lines().next().unwrap_or("invalid command line").trim_start_matches("error: ");
    eprintln!("pubsub-demo: {first} (see pubsub-demo --help)");
    ExitCode::from(2)
}

/// One line: what went wrong and what to do.
pub fn explain(e: &Error) -> String {
    match e {
        Error::Fabric(FabricError::NoDevice { .. }) => {
            format!("{e}; use --fabric soft, or create a Soft-RoCE device (rdma link add rxe0 type rxe netdev <if>)")
        }
        Error::Fabric(FabricError::ProviderUnavailable { .. }) => format!("{e}; or use --fabric soft"),
        Error::Fabric(FabricError::AddrInUse { .. }) => {
            format!("{e}; choose another port with --bind IP:PORT (port 0 picks a free one) or stop the other process")
        }
        Error::Fabric(f) if f.raw_os_error() == Some(libc::EADDRNOTAVAIL) => {
            format!("{e}; --bind must be an address of this host (e.g. 127.0.0.1)")
        }
        Error::Fabric(f) if f.raw_os_error() == Some(libc::EADDRINUSE) => {
            format!("{e}; choose another port with --bind IP:PORT or stop the other process")
        }
        Error::Fabric(f) if f.raw_os_error() == Some(libc::ECONNREFUSED) => {
            format!("{e}; is `pubsub-demo pub` running at that address? check --connect")
        }
        Error::Fabric(FabricError::InvalidArgument { verb: "connect", .. })
        | Error::Unreachable { .. }
        | Error::Timeout { what: "connect", .. } => {
            format!("{e}; is `pubsub-demo pub` running at that address? check --connect")
        }
        Error::Rejected { reason: RejectCode::UnknownTopic, .. } => {
            format!("{e}; the node there does not publish that topic: check --topic")
        }
        Error::InvalidTopic { .. } => format!("{e}; choose another --topic"),
        _ => e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Parser, Debug)]
    struct Discovery {
        #[command(flatten)]
        discovery: DiscoveryArgs,
    }

    fn parse(args: &[&str]) -> Result<DiscoveryArgs, clap::Error> {
        Discovery::try_parse_from(std::iter::once("test").chain(args.iter().copied())).map(|d| d.discovery)
    }

    #[test]
    fn the_ring_holds_sixteen_messages_within_1_to_64_mib() {
        assert_eq!(ring_capacity_for(64), 1 << 20);
        assert_eq!(ring_capacity_for(100_000), 2 << 20);
        assert_eq!(ring_capacity_for(1 << 20), 16 << 20);
        assert_eq!(ring_capacity_for(usize::MAX), 64 << 20);
    }

    #[test]
    fn a_secret_file_gives_the_node_its_domain_secret_and_appears_in_hints() {
        let dir = std::env::temp_dir().join(format!("pubsub-demo-secret-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (good, short) = (dir.join("good"), dir.join("short"));
        std::fs::write(&good, "0123456789abcdef0123\n").unwrap();
        std::fs::write(&short, "0123").unwrap();
        let args = parse(&["--secret-file", good.to_str().unwrap(), "--domain", "3"]).unwrap();
        let secret = Secret::new(&b"0123456789abcdef0123"[..]).unwrap();
        assert_eq!(args.options(), DiscoveryOptions::default().domain(3).secret(secret));
        assert_eq!(args.hint(None), format!(" --domain 3 --secret-file {}", good.display()));
        assert_eq!(parse(&[]).unwrap().options(), DiscoveryOptions::default());
        let err = parse(&["--secret-file", short.to_str().unwrap()]).unwrap_err().to_string();
        assert!(err.contains("no domain secret in") && err.contains("short"), "{err}");
        assert!(parse(&["--secret-file", good.to_str().unwrap(), "--no-discovery"]).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
