//! The public surface of the library as an application sees it: the API and the fabric
//! contract, and none of the internals that the cargo feature `internals` opens to the fuzz
//! targets and to this package's own tests.
//!
//! This package's tests, examples and doc tests all see the library with `internals` (its
//! dev-dependency on itself enables the feature, and cargo builds one library for them all), so
//! nothing compiled here can tell whether an internal leaked. This test therefore writes a probe
//! crate that depends on the library without features, one `use` (or function reference, or
//! field read) per line, and runs `cargo check` on it in the same target directory (after the
//! first run only the library and the probe are checked). Every line naming an internal or a
//! private field of an options type must fail to compile, every public one must not.

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

/// The probe's source: a header line, then one line per path; returns it and the line number
/// (1-based) of each path.
fn probe_source(paths: &[&str]) -> (String, Vec<usize>) {
    let mut source = String::from("#![allow(unused)]\n");
    let lines = paths
        .iter()
        .enumerate()
        .map(|(i, path)| {
            source.push_str(&probe_line(path));
            source.push('\n');
            i + 2
        })
        .collect();
    (source, lines)
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

/// The paths among `paths` (probed on `lines`) whose line has an error when `failing` is
/// false, or has none when it is true: the ones that do not compile as expected.
fn unexpected(paths: &[&str], lines: &[usize], errors: &[usize], failing: bool) -> Vec<String> {
    let named = paths.iter().zip(lines);
    named.filter(|(_, line)| errors.contains(line) != failing).map(|(path, _)| path.replace(' ', "")).collect()
}

#[test]
fn without_the_internals_feature_only_the_api_and_the_fabric_contract_are_public() {
    let private: Vec<&str> = INTERNAL.iter().chain(PRIVATE_FIELDS).copied().collect();
    let paths: Vec<&str> = private.iter().chain(PUBLIC).copied().collect();
    let (source, lines) = probe_source(&paths);
    let target = target_dir();
    let dir = target.join("public-surface-probe");
    write_probe(&dir, &source);
    let diagnostics = check_probe(&dir, &target);
    let errors = error_lines(&diagnostics);
    let (internal, public) = lines.split_at(private.len());
    let leaked = unexpected(&private, internal, &errors, true);
    assert!(
        leaked.is_empty(),
        "internals or private fields reachable without the feature `internals`: {leaked:?}\n{diagnostics}"
    );
    let missing = unexpected(PUBLIC, public, &errors, false);
    assert!(missing.is_empty(), "public items not reachable: {missing:?}\n{diagnostics}");
}
