#!/usr/bin/env bash
# The C API end to end: installs it into a temporary prefix (scripts/install-c.sh), builds the
# examples through pkg-config and through CMake's find_package and runs them, builds and runs
# the C tests (capi/tests/c/test_capi.c), and checks with valgrind that 1,000 create/destroy
# cycles of a node, a publisher and a subscription leak nothing. Needs cc, c++, pkg-config,
# cmake and valgrind (scripts/test.sh installs them). A few minutes at most.
set -euo pipefail
cd "$(dirname "$0")/.."
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
prefix="$work/prefix"
scripts/install-c.sh "$prefix"
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
cflags=(-Wall -Wextra -Werror -O2 -g)

# Runs `pub` and `sub` (from directory $1) against each other: sub reads what pub publishes.
pub_and_sub() {
  local dir="$1" addr pub_pid pub_out
  coproc PUB { timeout 60 "$dir/pub" 20; }
  # Bash unsets PUB and PUB_PID when the coprocess ends, which `pub` may do before the wait
  # below: keep its pid, and a copy of its output's descriptor.
  pub_pid=$PUB_PID
  exec {pub_out}<&"${PUB[0]}"
  read -t 20 -r addr <&"$pub_out" || { echo "pub did not print its address" >&2; exec {pub_out}<&-; return 1; }
  timeout 60 "$dir/sub" "$addr" 20 > "$dir/sub.out"
  wait "$pub_pid"
  exec {pub_out}<&-
  [ "$(wc -l < "$dir/sub.out")" -eq 20 ] && grep -qx '20: message 19' "$dir/sub.out" \
    || { echo "sub did not print the 20 messages" >&2; cat "$dir/sub.out" >&2; return 1; }
}

echo "-- the examples through pkg-config"
pc="$work/pkg-config"
mkdir -p "$pc"
read -r -a flags <<< "$(pkg-config --cflags --libs rdma_pubsub)"
cc -std=c11 "${cflags[@]}" examples/c/pub.c "${flags[@]}" -o "$pc/pub"
cc -std=c11 "${cflags[@]}" examples/c/sub.c "${flags[@]}" -o "$pc/sub"
c++ -std=c++17 "${cflags[@]}" examples/cpp/pubsub.cpp "${flags[@]}" -o "$pc/pubsub"
# Statically: the archive, then what it needs from the system (the .pc file's Libs.private).
read -r -a private_libs <<< "$(pkg-config --static --libs-only-l rdma_pubsub | sed 's/-lrdma_pubsub//')"
c++ -std=c++17 "${cflags[@]}" examples/cpp/pubsub.cpp $(pkg-config --cflags rdma_pubsub) \
  "$(pkg-config --variable=libdir rdma_pubsub)/librdma_pubsub.a" "${private_libs[@]}" -o "$pc/pubsub_static"
timeout 60 "$pc/pubsub"
timeout 60 "$pc/pubsub_static" > /dev/null
pub_and_sub "$pc"

echo "-- the examples through CMake (find_package(rdma_pubsub))"
cmake -S examples -B "$work/cmake" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_C_FLAGS="-Werror" -DCMAKE_CXX_FLAGS="-Werror" > "$work/cmake.log"
cmake --build "$work/cmake" -j2 > "$work/cmake-build.log" || { cat "$work/cmake-build.log"; exit 1; }
timeout 60 "$work/cmake/pubsub" > /dev/null
timeout 60 "$work/cmake/pubsub_static" > /dev/null
pub_and_sub "$work/cmake"

echo "-- the C tests"
cc -std=c11 "${cflags[@]}" capi/tests/c/test_capi.c "${flags[@]}" -lpthread -o "$work/test_capi"
timeout 300 "$work/test_capi"

echo "-- valgrind: 1,000 create/destroy cycles of a node, a publisher and a subscription"
leaks() {
  timeout 600 valgrind --leak-check=full --errors-for-leak-kinds=definite,indirect,possible \
    --suppressions=capi/tests/valgrind.supp --error-exitcode=3 \
    "$work/test_capi" cycles "$1" 2> "$work/valgrind-$1.log" > /dev/null \
    || { cat "$work/valgrind-$1.log" >&2; echo "valgrind found errors or leaks over $1 cycles" >&2; return 1; }
  # What is still reachable at exit (process-wide statics) must not grow with the cycles; the
  # one parking_lot table, made or not by timing, is suppressed (capi/tests/valgrind.supp).
  # (No summary at all when every block was freed.)
  local reachable
  reachable="$(sed -n 's/.*still reachable: \([0-9,]*\) bytes.*/\1/p' "$work/valgrind-$1.log")"
  if [ -z "$reachable" ] && grep -q "All heap blocks were freed" "$work/valgrind-$1.log"; then
    reachable=0
  fi
  echo "$reachable"
}
few="$(leaks 10)"
many="$(leaks 1000)"
echo "still reachable at exit: $few bytes after 10 cycles, $many after 1,000"
[ -n "$few" ] && [ "$few" = "$many" ] || { echo "memory still reachable at exit grows with the cycles" >&2; exit 1; }
echo "C API: examples, C tests and the leak check passed"
