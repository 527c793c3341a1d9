#!/usr/bin/env bash
# Builds the verbs test binaries on the host and runs them for real inside the Soft-RoCE
# guest (../shared/rxe-vm), all in one boot. Fails when any of them fails (or the guest does).
#
# - TARGETS: the fabric crate's integration tests whose verbs cases are #[ignore]d (they need a
#   device): run with `--ignored --test-threads=1` (fabric_conformance instantiates its suite
#   for soft and for verbs; --ignored selects the verbs half).
# - GENERIC_TARGETS: the pub/sub crate's provider-generic tests (tests/pubsub.rs, discovery.rs,
#   patterns.rs), run normally with
#   RDMA_PUBSUB_TEST_FABRIC=verbs, RXE_IP from the guest and RDMA_PUBSUB_TEST_SCALE (bulk
#   message counts divided by it: the guest is emulated, about 100x slower).
# - the fabric crate's own verbs unit tests (LIB_FILTER), their "device present" branches included.
# - the connected examples rc_ops and rdma_write (EXAMPLES), by RDMA-CM and by hand over TCP, in
#   one process and as two (scripts/verbs-vm-examples.sh).
#
#   scripts/verbs-vm-tests.sh                        # everything below
#   scripts/verbs-vm-tests.sh verbs_smoke pubsub     # only these integration-test targets
#   scripts/verbs-vm-tests.sh verbs_smoke examples   # ... and the examples
#
# Env: RXE_VM_SH (path of rxe-vm.sh), RXE_VM_TIMEOUT (seconds for the whole guest, default
# 300), VERBS_PUBSUB_SCALE (default 100), CARGO_TARGET_DIR (honoured; the target dir is
# shared with the guest).
set -euo pipefail
cd "$(dirname "$0")/.."

# Integration-test targets whose #[ignore]d device tests run in the guest.
TARGETS=(verbs_smoke fabric_conformance)
# Provider-generic integration tests run on verbs through their environment.
GENERIC_TARGETS=(pubsub discovery patterns)
# Soft-only tests of the generic targets (fault injection, raw UDP on the group, unicast peers).
DISCOVERY_SKIP="--skip junk_datagrams --skip a_silent_publisher --skip unicast_peers --skip discovery_survives --skip an_announcement_of_another_domain --skip unicast_to_the_group_port"
SCALE=${VERBS_PUBSUB_SCALE:-100}
# The fabric crate's own verbs unit tests run too (the "device present" branches), filtered to:
LIB_FILTER=verbs::
# The examples run in the guest (by scripts/verbs-vm-examples.sh); empty when not selected.
EXAMPLES=(rc_ops rdma_write)

if [ $# -gt 0 ]; then
  want=("$@")
  TARGETS=()
  GENERIC_TARGETS=()
  selected_examples=("${EXAMPLES[@]}")
  EXAMPLES=()
  for t in "${want[@]}"; do
    case $t in
      examples) EXAMPLES=("${selected_examples[@]}") ;;
      pubsub | discovery | patterns) GENERIC_TARGETS+=("$t") ;;
      *) TARGETS+=("$t") ;;
    esac
  done
fi
is_generic() { case " ${GENERIC_TARGETS[*]:-} " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
VM=${RXE_VM_SH:-$(cd .. && pwd)/shared/rxe-vm/rxe-vm.sh}
[ -x "$VM" ] || { echo "verbs-vm-tests: $VM not found (set RXE_VM_SH)" >&2; exit 2; }

fabric_args=(--lib)
for t in "${TARGETS[@]}"; do
  [ -f "fabric/tests/$t.rs" ] || { echo "verbs-vm-tests: fabric/tests/$t.rs does not exist" >&2; exit 2; }
  fabric_args+=(--test "$t")
done
pubsub_args=()
for t in "${GENERIC_TARGETS[@]}"; do
  [ -f "tests/$t.rs" ] || { echo "verbs-vm-tests: tests/$t.rs does not exist" >&2; exit 2; }
  pubsub_args+=(--test "$t")
done

all_targets=("${TARGETS[@]}" "${GENERIC_TARGETS[@]}")
echo "== building verbs test binaries (${all_targets[*]} + the fabric's lib)"
json=$(cargo test --release -p rdma-fabric --features verbs "${fabric_args[@]}" --no-run --message-format=json)
if [ ${#pubsub_args[@]} -gt 0 ]; then
  json+=$'\n'$(cargo test --release -p rdma-pubsub --features verbs "${pubsub_args[@]}" --no-run --message-format=json)
fi
if [ ${#EXAMPLES[@]} -gt 0 ]; then
  echo "== building the examples ${EXAMPLES[*]}"
  cargo build --release -p rdma-fabric --features verbs $(printf -- '--example %s ' "${EXAMPLES[@]}")
fi

# One "name executable" line per test binary (compiler-artifact messages with an executable).
bins=$(printf '%s\n' "$json" | grep '"reason":"compiler-artifact"' | grep -E '"profile":\{[^}]*"test":true' | grep '"executable":"/' |
  sed -E 's/.*"target":\{[^}]*"name":"([^"]+)".*"executable":"([^"]+)".*/\1 \2/')

plan=()
while read -r name exe; do
  [ -n "$name" ] || continue
  if [ "$name" = rdma_fabric ]; then
    plan+=("$exe --include-ignored --test-threads=1 $LIB_FILTER")
  elif is_generic "$name"; then
    # RXE_IP is set inside the guest; `env` reads it there.
    skip=""
    [ "$name" = discovery ] && skip=$DISCOVERY_SKIP
    plan+=("env RDMA_PUBSUB_TEST_FABRIC=verbs RDMA_PUBSUB_TEST_SCALE=$SCALE $exe --test-threads=1 $skip")
  else
    plan+=("$exe --ignored --test-threads=1")
  fi
done <<<"$bins"
[ ${#plan[@]} -eq $(( ${#all_targets[@]} + 1 )) ] || {
  echo "verbs-vm-tests: expected $(( ${#all_targets[@]} + 1 )) test binaries, found: $bins" >&2
  exit 2
}

# The guest runs every binary and exits with the number of failed ones.
guest_script='failed=0
for cmd in "$@"; do
  echo "== rxe guest: $cmd"
  start=$(date +%s)
  $cmd || { echo "== FAILED: $cmd"; failed=$((failed + 1)); }
  echo "== rxe guest: $(( $(date +%s) - start )) s"
done
exit $failed'

first_exe=$(printf '%s\n' "$bins" | head -1 | cut -d' ' -f2)
target_dir=${first_exe%/*/deps/*}
# The checkout is shared with the guest at the same path: the script runs from there.
if [ ${#EXAMPLES[@]} -gt 0 ]; then
  plan+=("bash $PWD/scripts/verbs-vm-examples.sh $target_dir/release/examples")
fi
export RXE_VM_SHARE="$target_dir${RXE_VM_SHARE:+:$RXE_VM_SHARE}"
export RXE_VM_TIMEOUT=${RXE_VM_TIMEOUT:-300}

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
