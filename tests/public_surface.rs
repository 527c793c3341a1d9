//! The public surface of the library as an application sees it: the API and the fabric
//! contract, and none of the internals that the cargo feature `internals` opens to the fuzz
//! targets and to this package's own tests.
//!
//! This package's tests, examples and doc tests all see the library with `internals` (its
//! dev-dependency on itself enables the feature, and cargo builds one library for them all), so
//! nothing compiled here can tell whether an internal leaked. This test therefore writes a probe
//! crate that depends on the library without features, one `use` (or function reference, or
//! field read, or function using the builders) per line, and runs `cargo check` on it in the
//! same target directory (after the first run only the library and the probe are checked).
//! Every line naming an internal, a private field of an options type or an option struct or
//! entry point the builders replaced must fail to compile; every public one, and every builder
//! chain, must not.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// Longest the nested `cargo check` may take (the first run in a fresh target directory checks
/// the library's dependencies too).
const CHECK_TIMEOUT: Duration = Duration::from_secs(900);

/// Declares a list of paths under `rdma_pubsub::` (items, then associated functions, written
/// with a trailing `()`), and names each in this test's own build, which has the feature
/// `internals`: a path that does not exist at all fails to compile here, so every line of the
/// probe that fails to compile without the feature fails for want of the feature.
macro_rules! paths {
    ($(#[$doc:meta])* $list:ident: [$($($item:ident)::+),* $(,)?], fns [$($($function:ident)::+),* $(,)?]) => {
        $(#[$doc])*
        const $list: &[&str] = &[$(stringify!($($item)::+),)* $(concat!(stringify!($($function)::+), "()"),)*];
        const _: () = {
            $(
                #[allow(unused_imports)]
                use rdma_pubsub::$($item)::+ as _;
            )*
            $(
                let _ = rdma_pubsub::$($function)::+;
            )*
        };
    };
}

paths! {
    /// What an application must not reach.
    INTERNAL: [
        ring,
        ring::RingProducer,
        ring::RingReader,
        protocol,
        protocol::ConnectData,
        protocol::Control,
        fabric::provider,
        fabric::provider::QpOps,
        fabric::memory,
        fabric::memory::RawRange,
        fabric::soft::wire,
        fabric::soft::wire::Header,
        fabric::soft::OUT_CAP,
        fabric::soft::HANDSHAKE_TIMEOUT,
        node::discovery::MAX_PEERS,
        node::discovery::DEFAULT_HEARTBEAT,
        stats::MAGIC,
        stats::process_alive,
    ],
    fns [fabric::RegisteredBuffer::new, fabric::RegisteredBuffer::raw_range, Checksum::start]
}

paths! {
    /// What applications use (the demo's among them): it must stay reachable.
    PUBLIC: [
        Node,
        NodeBuilder,
        Publisher,
        PublisherBuilder,
        Policy,
        Subscription,
        SubscriberBuilder,
        Start,
        Error,
        Result,
        PolicyKind,
        Checksum,
        Secret,
        DropReason,
        RejectCode,
        ProtocolError,
        RingError,
        DiscoveryOptions,
        FabricKind,
        node::discovery::DiscoveryCounters,
        node::discovery::PeerInfo,
        node::discovery::LostReason,
        node::discovery::DEFAULT_GROUP,
        node::discovery::DEFAULT_PORT,
        node::discovery::SECRET_FILE_ENV,
        fabric::open,
        fabric::Fabric,
        fabric::FabricConfig,
        fabric::SoftOptions,
        fabric::SameHost,
        fabric::Error,
        fabric::QpInit,
        fabric::ConnId,
        fabric::SendRequest,
        fabric::Sge,
        fabric::RegisteredBuffer,
        stats::default_dir,
        stats::list,
        stats::remove_dead,
        stats::Found,
        stats::Snapshot,
        stats::Section,
        stats::Kind,
    ],
    fns [
        fabric::RegisteredBuffer::write,
        Checksum::of,
        DiscoveryOptions::heartbeat,
        DiscoveryOptions::peers,
        fabric::SoftOptions::same_host,
    ]
}

/// Fields of option types that applications set with setters only, as `Type.field`: reading
/// one must not compile. (This test cannot name them itself: they are private to it too.)
const PRIVATE_FIELDS: &[&str] = &[
    "DiscoveryOptions.heartbeat",
    "DiscoveryOptions.peers",
    "DiscoveryOptions.secret",
    "fabric::SoftOptions.same_host",
    "fabric::SoftOptions.nic_spin",
];

/// The option structs and the entry points that took them, which the builders replaced
/// (`node.publisher(t)...create()`, `node.subscriber(t)...create()`): naming one must not
/// compile. (This test cannot name them itself either: the structs are crate-private, the
/// functions are gone.)
const RETIRED: &[&str] = &[
    "PublisherOptions",
    "SubscriptionOptions",
    "node::PublisherOptions",
    "node::SubscriptionOptions",
    "Node::publisher_with()",
    "Node::subscribe()",
    "Node::subscribe_with()",
];

/// Declares functions, compiled in this test's own build and listed (as `stringify!` writes
/// them, which may wrap a long one) for the probe, where each must compile too.
macro_rules! compiled {
    ($(#[$doc:meta])* $list:ident: [$($code:item)*]) => {
        $(#[$doc])*
        const $list: &[&str] = &[$(stringify!($code)),*];
        #[allow(dead_code)]
        mod compiled_here {
            $($code)*
        }
    };
}

compiled! {
    /// What an application writes with the builders, every setter used: it must compile
    /// without `internals`.
    BUILDER_CHAINS: [
        fn every_publisher_setter(
            node: &rdma_pubsub::Node,
            secret: rdma_pubsub::Secret,
        ) -> rdma_pubsub::Result<rdma_pubsub::Publisher> {
            node.publisher("t")
                .policy(rdma_pubsub::Policy::DropSlow { grace: std::time::Duration::from_millis(100) })
                .ring_capacity(1 << 20)
                .max_record_payload(64 << 10)
                .max_subscribers(16)
                .linger(std::time::Duration::from_secs(1))
                .checksum(rdma_pubsub::Checksum::Crc32c)
                .idle_timeout(std::time::Duration::from_secs(10))
                .credential(secret)
                .create()
        }
        fn a_typed_publisher(
            node: &rdma_pubsub::Node,
        ) -> rdma_pubsub::Result<rdma_pubsub::Publisher<(u32, String)>> {
            node.publisher("t").typed::<(u32, String)>().create()
        }
        fn every_subscriber_setter(
            node: &rdma_pubsub::Node,
            secret: rdma_pubsub::Secret,
            addr: std::net::SocketAddr,
        ) -> rdma_pubsub::Result<rdma_pubsub::Subscription> {
            node.subscriber("t")
                .start(rdma_pubsub::Start::Earliest)
                .batch(64 << 10)
                .busy_poll(true)
                .spin(std::time::Duration::from_micros(50))
                .max_message_len(1 << 20)
                .max_record_payload(1 << 20)
                .credential(secret)
                .auto_connect(false)
                .connect(addr)
                .create()
        }
        fn a_typed_subscription(
            node: &rdma_pubsub::Node,
        ) -> rdma_pubsub::Result<rdma_pubsub::Subscription<(u32, String)>> {
            node.subscriber("t").typed::<(u32, String)>().create()
        }
        fn a_builder_configured_from_arguments(
            node: &rdma_pubsub::Node,
            busy_poll: bool,
        ) -> rdma_pubsub::Result<rdma_pubsub::Subscription> {
            let mut builder: rdma_pubsub::SubscriberBuilder<'_> = node.subscriber("t");
            if busy_poll {
                builder = builder.busy_poll(true);
            }
            builder.create()
        }
    ]
}

/// One probe line naming `path`: an item, an associated function (`path()`) or a field
/// (`Type.field`).
fn probe_line(path: &str) -> String {
    let path = path.replace(' ', ""); // `stringify!` writes `a :: b`.
    if let Some((ty, field)) = path.split_once('.') {
        return format!("const _: () = {{ fn read(o: &rdma_pubsub::{ty}) {{ let _ = &o.{field}; }} }};");
    }
    match path.strip_suffix("()") {
        Some(function) => format!("const _: () = {{ let _ = rdma_pubsub::{function}; }};"),
        None => format!("use rdma_pubsub::{path} as _;"),
    }
}

/// `code` (without line comments, as `stringify!` writes it) on one line.
fn one_line(code: &str) -> String {
    code.lines().map(str::trim).collect::<Vec<_>>().join(" ")
}

/// The probe's source: a header line, then `lines`, one a line; returns it and the line number
/// (1-based) of each.
fn probe_source(lines: &[String]) -> (String, Vec<usize>) {
    let mut source = String::from("#![allow(unused)]\n");
    let numbers = lines
        .iter()
        .enumerate()
        .map(|(i, line)| {
            source.push_str(line);
            source.push('\n');
            i + 2
        })
        .collect();
    (source, numbers)
}

/// The target directory this test was built in (the ancestor where cargo keeps its
/// `.rustc_info.json`).
fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test executable has a path");
    exe.ancestors()
        .find(|dir| dir.join(".rustc_info.json").is_file())
        .unwrap_or_else(|| panic!("no cargo target directory above {}", exe.display()))
        .to_path_buf()
}

/// Writes the probe crate into `dir`, depending on this package without features.
fn write_probe(dir: &Path, source: &str) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    std::fs::create_dir_all(dir.join("src")).expect("create the probe crate");
    let manifest = format!(
        "[package]\nname = \"public-surface-probe\"\nversion = \"0.0.0\"\nedition = \"2021\"\npublish = false\n\n\
         [dependencies]\nrdma-pubsub = {{ path = {:?} }}\n\n[workspace]\n",
        root.display().to_string()
    );
    std::fs::write(dir.join("Cargo.toml"), manifest).expect("write the probe manifest");
    // The package's own lock file: the same dependency versions, and nothing to fetch.
    std::fs::copy(root.join("Cargo.lock"), dir.join("Cargo.lock")).expect("copy Cargo.lock");
    std::fs::write(dir.join("src/lib.rs"), source).expect("write the probe source");
}

/// Runs `cargo check` on the probe crate in `dir`; returns its diagnostics (short format).
fn check_probe(dir: &Path, target: &Path) -> String {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut child = Command::new(cargo)
        .args(["check", "--offline", "--quiet", "--message-format=short", "--manifest-path"])
        .arg(dir.join("Cargo.toml"))
        .arg("--target-dir")
        .arg(target)
        .env_remove("CARGO_TARGET_DIR")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run cargo check");
    let mut stderr = child.stderr.take().expect("stderr");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        let _ = tx.send(text);
    });
    let Ok(text) = rx.recv_timeout(CHECK_TIMEOUT) else {
        let _ = child.kill();
        let _ = child.wait();
        panic!("cargo check of the probe crate took longer than {CHECK_TIMEOUT:?}");
    };
    child.wait().expect("wait for cargo check");
    text
}

/// The lines of `src/lib.rs` that the diagnostics report an error on.
fn error_lines(diagnostics: &str) -> Vec<usize> {
    diagnostics
        .lines()
        .filter_map(|l| l.strip_prefix("src/lib.rs:"))
        .filter(|l| l.contains(": error"))
        .filter_map(|l| l.split(':').next()?.parse().ok())
        .collect()
}

/// The paths (or code) among `probed` (on `lines`) whose line has an error when `failing` is
/// false, or has none when it is true: the ones that do not compile as expected.
fn unexpected(probed: &[&str], lines: &[usize], errors: &[usize], failing: bool) -> Vec<String> {
    let named = probed.iter().zip(lines);
    named.filter(|(_, line)| errors.contains(line) != failing).map(|(path, _)| path.replace(" :: ", "::")).collect()
}

#[test]
fn without_the_internals_feature_only_the_api_and_the_fabric_contract_are_public() {
    let private: Vec<&str> = INTERNAL.iter().chain(PRIVATE_FIELDS).chain(RETIRED).copied().collect();
    let paths = private.iter().chain(PUBLIC).map(|path| probe_line(path));
    let probed: Vec<String> = paths.chain(BUILDER_CHAINS.iter().map(|code| one_line(code))).collect();
    let (source, lines) = probe_source(&probed);
    let target = target_dir();
    let dir = target.join("public-surface-probe");
    write_probe(&dir, &source);
    let diagnostics = check_probe(&dir, &target);
    let errors = error_lines(&diagnostics);
    let (internal, rest) = lines.split_at(private.len());
    let (public, chains) = rest.split_at(PUBLIC.len());
    let leaked = unexpected(&private, internal, &errors, true);
    assert!(
        leaked.is_empty(),
        "internals, private fields or retired option structs and entry points reachable without the feature \
         `internals`: {leaked:?}\n{diagnostics}"
    );
    let missing = unexpected(PUBLIC, public, &errors, false);
    assert!(missing.is_empty(), "public items not reachable: {missing:?}\n{diagnostics}");
    let broken = unexpected(BUILDER_CHAINS, chains, &errors, false);
    assert!(broken.is_empty(), "builder chains that do not compile without `internals`: {broken:?}\n{diagnostics}");
}
