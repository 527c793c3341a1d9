//! The committed header is what cbindgen makes of this crate: the test fails when it is stale
//! (`RPS_BLESS_HEADER=1` rewrites it instead).

use std::path::Path;

#[test]
fn the_committed_header_is_current() {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(crate_dir.join("cbindgen.toml")).expect("cbindgen.toml");
    let mut generated = Vec::new();
    cbindgen::Builder::new()
        .with_crate(crate_dir)
        .with_config(config)
        .generate()
        .expect("cbindgen generates the header")
        .write(&mut generated);
    let generated = String::from_utf8(generated).expect("UTF-8");
    let path = crate_dir.join("include/rdma_pubsub.h");
    if std::env::var_os("RPS_BLESS_HEADER").is_some() {
        std::fs::write(&path, &generated).expect("write the header");
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == generated,
        "include/rdma_pubsub.h is stale: regenerate it with `RPS_BLESS_HEADER=1 cargo test -p rdma-pubsub-c header`"
    );
}
