#!/usr/bin/env bash
# 64 B publish/receive rate from C (capi/bench/rate.c) against `pubsub-demo bench` (Rust), in
# one run, interleaved, each run under `flock /tmp/bench.lock`, 1,000,000 messages (or 60 % of
# 3 s) each: prints the rate and the CPU time per message of the publishing and receiving
# threads of every round, and the medians. Usage: scripts/capi-bench.sh [ROUNDS] (default 3).
set -euo pipefail
cd "$(dirname "$0")/.."
rounds="${1:-3}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
target="${CARGO_TARGET_DIR:-$PWD/target}"
cargo build --release -p pubsub-demo
scripts/install-c.sh "$work/prefix" > /dev/null
cc -std=c11 -O2 capi/bench/rate.c $(PKG_CONFIG_PATH="$work/prefix/lib/pkgconfig" pkg-config --cflags --libs rdma_pubsub) \
  -lpthread -o "$work/rate"
field() { sed -n "s/.*\"\\?$1\"\\?[=:]\\([0-9.]*\\).*/\\1/p"; }
: > "$work/rust" ; : > "$work/c"
for i in $(seq "$rounds"); do
  flock /tmp/bench.lock timeout 120 "$target/release/pubsub-demo" bench --sizes 64 --subscribers 1 --no-limits \
    --json --messages 1000000 --seconds 3 2>/dev/null | grep '"size"' > "$work/r"
  flock /tmp/bench.lock timeout 120 "$work/rate" 64 1000000 3 > "$work/x"
  r="$(field msgs_per_sec < "$work/r") $(field pub_cpu_us < "$work/r") $(field sub_cpu_us < "$work/r")"
  x="$(field msgs_per_sec < "$work/x") $(field pub_cpu_us < "$work/x") $(field sub_cpu_us < "$work/x")"
  echo "$r" >> "$work/rust"; echo "$x" >> "$work/c"
  printf 'round %d: rust %s | C %s   (msgs/s pub_cpu_us sub_cpu_us)\n' "$i" "$r" "$x"
done
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
for col in 1 2 3; do
  name=(x msgs_per_sec pub_cpu_us sub_cpu_us)
  mr="$(cut -d' ' -f$col "$work/rust" | median)" mc="$(cut -d' ' -f$col "$work/c" | median)"
  awk -v n="${name[$col]}" -v r="$mr" -v c="$mc" 'BEGIN { printf "median %s: rust %s, C %s, C/rust %.2f\n", n, r, c, c / r }'
done
