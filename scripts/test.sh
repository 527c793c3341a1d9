#!/usr/bin/env bash
# The one test command: installs what it needs (as root, with apt), then runs formatting,
# lints and every test, including the verbs provider inside the Soft-RoCE guest.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(libibverbs-dev librdmacm-dev libclang-dev pkg-config iproute2 g++ cmake valgrind)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -eq 0 ]; then
    echo "== installing ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  else
    echo "missing packages: ${missing[*]} (run as root to install them)" >&2
    exit 1
  fi
fi

echo "== cargo fmt --check"
cargo fmt --all -- --check
cargo fmt --manifest-path fuzz/Cargo.toml -- --check
echo "== cargo clippy (every crate denies undocumented unsafe blocks and unsafe ops outside unsafe blocks)"
cargo clippy --workspace --all-targets --all-features -- -D warnings
cargo clippy --manifest-path fuzz/Cargo.toml --no-default-features --all-targets -- -D warnings
echo "== layers: no cycle between crates or folders, no internals feature"
python3 scripts/layers.py
if grep -n '^internals' Cargo.toml */Cargo.toml; then echo "an internals feature is back: crates give the visibility" >&2; exit 1; fi
for crate in Cargo.toml fabric/Cargo.toml wire/Cargo.toml demo/Cargo.toml capi/Cargo.toml python/Cargo.toml; do
  grep -q '^\[lints\]' "$crate" && grep -A1 '^\[lints\]' "$crate" | grep -q 'workspace = true' \
    || { echo "$crate does not take the workspace's lints" >&2; exit 1; }
done
echo "== cargo test (every crate: unit, integration, examples, doc tests; soft fabric)"
# Plain `cargo test` also builds the example programs that fabric/tests/examples.rs runs.
cargo test --release --workspace --no-fail-fast
echo "== key expressions: every pair of expressions of up to 3 chunks against the brute-force reference"
cargo test --release -p rdma-wire --lib --no-fail-fast -- --ignored key_expr
echo "== end-to-end suites again with the soft same-host path off (the fabric suite runs both ways itself)"
RDMA_PUBSUB_TEST_SAME_HOST=off cargo test --release -p rdma-pubsub --no-fail-fast \
  --test pubsub --test faults --test hostile --test torn_reads --test patterns
echo "== the async stream (feature async), both same-host settings"
cargo test --release -p rdma-pubsub --no-fail-fast --features async --lib --test async_stream -- stream
RDMA_PUBSUB_TEST_SAME_HOST=off cargo test --release -p rdma-pubsub --no-fail-fast --features async --test async_stream
cargo test --release -p rdma-pubsub --no-fail-fast --features async --doc -- stream
echo "== the C API: installed into a temporary prefix, examples built through pkg-config and CMake, C tests, valgrind"
scripts/capi-tests.sh
echo "== the Python package (python/): maturin, pytest and numpy from PyPI into a venv, the package built into it, its pytest suite"
if ! python3 -c 'import ensurepip, venv' 2>/dev/null; then
  if [ "$(id -u)" -eq 0 ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
  else
    echo "python3 cannot make a venv: install python3-venv (as root)" >&2
    exit 1
  fi
fi
venv="$PWD/target/python-venv"
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/python" -m pip install -q --disable-pip-version-check maturin pytest numpy
VIRTUAL_ENV="$venv" PATH="$venv/bin:$PATH" maturin develop --release -q -m python/Cargo.toml
"$venv/bin/python" -m pytest -q -p no:cacheprovider python/tests
echo "== fuzz targets (their own workspace): built, and 20,000 runs of each without libFuzzer"
cargo run --release --manifest-path fuzz/Cargo.toml --no-default-features --bin fuzz-loop -- all 20000
echo "== verbs provider inside the Soft-RoCE guest"
scripts/verbs-vm-tests.sh
