#!/usr/bin/env bash
# Runs the connected examples on the rxe device inside the Soft-RoCE guest (scripts/verbs-vm-tests.sh
# calls it there with the directory of the examples it built with `--features verbs`): rc_ops and
# rdma_write, connected by RDMA-CM and by hand over TCP (--bootstrap cm|tcp), in one process
# (--both) and as a server and a client process. Exits with the number of failed runs.
#
#   scripts/verbs-vm-examples.sh <examples-dir>      # inside the guest (RXE_IP set)
set -u
dir=${1:?usage: verbs-vm-examples.sh <examples-dir>}
ip=${RXE_IP:?RXE_IP names the address of the RDMA netdev}
# Bound of one example run (the examples bound each of their own waits by --timeout).
RUN_TIMEOUT=120
failed=0

# Runs one example process, bounded; counts a failure.
run() {
  echo "-- $*"
  timeout "$RUN_TIMEOUT" "$@" || { echo "-- FAILED ($?): $*"; failed=$((failed + 1)); }
}

# Runs example $1 as a server process and a client process connecting to where the server
# says it listens; the remaining arguments go to both.
pair() {
  local name=$1; shift
  local out
  out=$(mktemp)
  timeout "$RUN_TIMEOUT" "$dir/$name" --fabric verbs --bind "$ip" --server --port 0 "$@" >"$out" 2>&1 &
  local server=$! addr=""
  # The server prints its address once it listens; give up when it exits or after 30 s.
  for _ in $(seq 300); do
    addr=$(sed -n 's/^server: listening on //p' "$out")
    [ -n "$addr" ] && break
    kill -0 "$server" 2>/dev/null || break
    sleep 0.1
  done
  if [ -z "$addr" ]; then
    echo "-- FAILED: $name server did not listen: $(cat "$out")"
    failed=$((failed + 1))
  else
    run "$dir/$name" --fabric verbs --bind "$ip" --client "$addr" "$@"
  fi
  wait "$server" || { echo "-- FAILED: $name server $*"; failed=$((failed + 1)); }
  echo "-- server: $(tr '\n' '|' <"$out")"
  rm -f "$out"
}

for boot in cm tcp; do
  run "$dir/rc_ops" --fabric verbs --bind "$ip" --both -z 8192 --bootstrap "$boot"
  run "$dir/rdma_write" --fabric verbs --bind "$ip" --both --bootstrap "$boot"
  pair rc_ops -z 8192 --bootstrap "$boot"
  pair rdma_write --bootstrap "$boot"
done
echo "-- examples: $failed failed"
exit "$failed"
