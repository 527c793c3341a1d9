#!/usr/bin/env bash
# Builds the verbs test binaries on the host and runs them for real inside the Soft-RoCE
# guest (../shared/rxe-vm), all in one boot, each with `--ignored --test-threads=1`.
# Fails when any of them fails (or when the guest does).
#
#   scripts/verbs-vm-tests.sh                 # every target of TARGETS below
#   scripts/verbs-vm-tests.sh verbs_smoke     # only these integration-test targets
#
# Env: RXE_VM_SH (path of rxe-vm.sh), RXE_VM_TIMEOUT (seconds for the whole guest, default
# 420), CARGO_TARGET_DIR (honoured; the target dir is shared with the guest).
set -euo pipefail
cd "$(dirname "$0")/.."

# Integration-test targets run in the guest, their #[ignore]d device tests included.
# Extend here: fabric_conformance, pubsub, discovery, ...
TARGETS=(verbs_smoke)
# The library's own verbs unit tests run too (the "device present" branches), filtered to:
LIB_FILTER=fabric::verbs::

if [ $# -gt 0 ]; then TARGETS=("$@"); fi
VM=${RXE_VM_SH:-$(cd .. && pwd)/shared/rxe-vm/rxe-vm.sh}
[ -x "$VM" ] || { echo "verbs-vm-tests: $VM not found (set RXE_VM_SH)" >&2; exit 2; }

args=(--lib)
for t in "${TARGETS[@]}"; do
  [ -f "tests/$t.rs" ] || { echo "verbs-vm-tests: tests/$t.rs does not exist" >&2; exit 2; }
  args+=(--test "$t")
done

echo "== building verbs test binaries (${TARGETS[*]} + lib)"
json=$(cargo test --release --features verbs "${args[@]}" --no-run --message-format=json)

# One "name executable" line per test binary (compiler-artifact messages with an executable).
bins=$(printf '%s\n' "$json" | grep '"reason":"compiler-artifact"' | grep -E '"profile":\{[^}]*"test":true' | grep '"executable":"/' |
  sed -E 's/.*"target":\{[^}]*"name":"([^"]+)".*"executable":"([^"]+)".*/\1 \2/')

plan=()
while read -r name exe; do
  [ -n "$name" ] || continue
  if [ "$name" = rdma_pubsub ]; then
    plan+=("$exe --include-ignored --test-threads=1 $LIB_FILTER")
  else
    plan+=("$exe --ignored --test-threads=1")
  fi
done <<<"$bins"
[ ${#plan[@]} -eq $(( ${#TARGETS[@]} + 1 )) ] || {
  echo "verbs-vm-tests: expected $(( ${#TARGETS[@]} + 1 )) test binaries, found: $bins" >&2
  exit 2
}

# The guest runs every binary and exits with the number of failed ones.
guest_script='failed=0
for cmd in "$@"; do
  echo "== rxe guest: $cmd"
  $cmd || { echo "== FAILED: $cmd"; failed=$((failed + 1)); }
done
exit $failed'

first_exe=$(printf '%s\n' "$bins" | head -1 | cut -d' ' -f2)
target_dir=${first_exe%/*/deps/*}
export RXE_VM_SHARE="$target_dir${RXE_VM_SHARE:+:$RXE_VM_SHARE}"
export RXE_VM_TIMEOUT=${RXE_VM_TIMEOUT:-420}

echo "== running ${#plan[@]} test binaries in the rxe guest"
set +e
"$VM" run -- bash -c "$guest_script" verbs-vm-tests "${plan[@]}"
rc=$?
set -e
case $rc in
  0) echo "== verbs tests in the rxe guest: all passed" ;;
  124) echo "== verbs tests in the rxe guest: timed out after ${RXE_VM_TIMEOUT}s" >&2 ;;
  125) echo "== verbs tests: the rxe guest failed to run" >&2 ;;
  *) echo "== verbs tests in the rxe guest: $rc test binaries failed" >&2 ;;
esac
exit $rc
