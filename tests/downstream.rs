//! The library as a downstream crate builds it: a crate of its own that depends on
//! `rdma-pubsub` with no features, uses every builder setter, and must build without a single
//! warning, neither its own nor the library's (cargo shows a path dependency's warnings to its
//! dependents). The crate boundaries (`rdma-fabric`, `rdma-wire`, `rdma-pubsub`) decide what
//! is public; this test checks what an application writes still compiles, cleanly.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// Longest the nested `cargo check` may take (the first run in a fresh target directory checks
/// the library's dependencies too).
const CHECK_TIMEOUT: Duration = Duration::from_secs(900);

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
    /// cleanly, in a crate of its own.
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

/// `code` (without line comments, as `stringify!` writes it) on one line.
fn one_line(code: &str) -> String {
    code.lines().map(str::trim).collect::<Vec<_>>().join(" ")
}

/// The probe's source: a header line, then `lines`, one a line; returns it and the line number
/// (1-based) of each.
fn probe_source(lines: &[String]) -> (String, Vec<usize>) {
    let mut source = String::from("#![allow(dead_code)]\n");
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
        "[package]\nname = \"downstream-probe\"\nversion = \"0.0.0\"\nedition = \"2021\"\npublish = false\n\n\
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

#[test]
fn a_downstream_crate_builds_every_builder_chain_without_a_warning() {
    let code: Vec<String> = BUILDER_CHAINS.iter().map(|code| one_line(code)).collect();
    let (source, _) = probe_source(&code);
    let target = target_dir();
    let dir = target.join("downstream-probe");
    write_probe(&dir, &source);
    let diagnostics = check_probe(&dir, &target);
    let complaints: Vec<&str> = diagnostics.lines().filter(|l| l.contains("warning") || l.contains("error")).collect();
    assert!(complaints.is_empty(), "a downstream build is not clean: {complaints:#?}\n{diagnostics}");
}
