#!/usr/bin/env bash
# Measures pub/sub over verbs against perftest inside ONE Soft-RoCE guest boot
# (../shared/rxe-vm), so that both run on the same emulated machine and only their ratio is
# meaningful:
#
#   1. ib_read_bw -R  (server and client on rxe0 / RXE_IP, 64 B and 64 KiB messages)
#   2. ib_read_lat -R (64 B and 64 KiB)
#   3. pubsub-demo bench --fabric verbs --bind RXE_IP --sizes 64,65536 --subscribers 1 --busy-poll --json
#      (busy-polling subscribers, as ib_read_lat polls: its latency is one message at a time),
#      twice: with the checksum the publisher picks by default (--checksum auto: the faster on
#      this CPU, XXH64 in the emulated guest) and with CRC-32C forced (--checksum crc32c)
#
# and prints, for each size, our goodput / ib_read_bw average, our message rate / ib_read_bw's
# (the small-message figure: one of our READs brings many messages, one of perftest's one) and
# our p50 latency / ib_read_lat typical.
#
#   scripts/verbs-perf.sh
#
# Env: RXE_VM_SH (path of rxe-vm.sh), RXE_VM_TIMEOUT (seconds for the whole guest, default
# 300), PERF_ITERS (perftest iterations, default 500), CARGO_TARGET_DIR (honoured).
# Exit: 0 when every part ran; 3 when perftest ran but the bench did not (its output is
# shown); otherwise the guest's or the failed step's code.
set -euo pipefail
cd "$(dirname "$0")/.."

VM=${RXE_VM_SH:-$(cd .. && pwd)/shared/rxe-vm/rxe-vm.sh}
[ -x "$VM" ] || { echo "verbs-perf: $VM not found (set RXE_VM_SH)" >&2; exit 2; }

echo "== building pubsub-demo (release, verbs)"
cargo build --release -p pubsub-demo --features verbs --bin pubsub-demo
target_dir=${CARGO_TARGET_DIR:-$PWD/target}
target_dir=$(cd "$target_dir" && pwd)
bin=$target_dir/release/pubsub-demo
[ -x "$bin" ] || { echo "verbs-perf: $bin was not built" >&2; exit 2; }

export RXE_VM_SHARE="$target_dir${RXE_VM_SHARE:+:$RXE_VM_SHARE}"
export RXE_VM_TIMEOUT=${RXE_VM_TIMEOUT:-300}
export RXE_VM_ENV="PERF_ITERS${RXE_VM_ENV:+ $RXE_VM_ENV}"
export PERF_ITERS=${PERF_ITERS:-500}

# Runs inside the guest: $1 = the pubsub-demo binary. RXE_DEV and RXE_IP come from the guest.
guest_script='set -u
bin=$1
dev=${RXE_DEV:-rxe0}
ip=${RXE_IP:-10.0.2.15}
iters=${PERF_ITERS:-500}
out=/tmp/verbs-perf
mkdir -p $out

# A perftest pair: the server in the background, the client retried until the server listens.
pair() {
  local name=$1; shift
  timeout 120 "$@" > $out/$name.server 2>&1 &
  local server=$!
  local ok=1
  for _ in $(seq 1 100); do
    if timeout 120 "$@" "$ip" > $out/$name.client 2>&1; then ok=0; break; fi
    kill -0 $server 2>/dev/null || break
    sleep 0.2
  done
  wait $server || ok=1
  echo "== $name (client)"; cat $out/$name.client
  return $ok
}

rc=0
for size in 64 65536; do
  pair read_bw_$size ib_read_bw -R -F -d "$dev" -s $size -n "$iters" || rc=1
  pair read_lat_$size ib_read_lat -R -F -d "$dev" -s $size -n "$iters" || rc=1
done

bench_rc=0
for checksum in auto crc32c; do
  echo "== pubsub-demo bench --checksum $checksum"
  rc_one=0
  timeout 180 "$bin" bench --fabric verbs --bind "$ip" --sizes 64,65536 --subscribers 1 --busy-poll --json \
    --checksum $checksum > $out/bench-$checksum.json 2> $out/bench-$checksum.err || rc_one=$?
  cat $out/bench-$checksum.json
  [ $rc_one -eq 0 ] || { bench_rc=$rc_one; echo "== bench failed ($rc_one):"; tail -20 $out/bench-$checksum.err; }
done

/usr/bin/python3 - "$out" "$bench_rc" <<"PY"
import json, sys
out, bench_rc = sys.argv[1], int(sys.argv[2])

def perftest(path, col, size):
    """The value in column `col` of the result row of `size`-byte messages."""
    try:
        for line in open(path):
            f = line.split()
            if len(f) > col and f[0] == str(size):
                return float(f[col])
    except OSError:
        pass
    return None

SIZES = (64, 65536)
bw = {s: perftest(f"{out}/read_bw_{s}.client", 3, s) for s in SIZES}     # BW average [MB/sec]
mpps = {s: perftest(f"{out}/read_bw_{s}.client", 4, s) for s in SIZES}   # MsgRate [Mpps]
lat = {s: perftest(f"{out}/read_lat_{s}.client", 4, s) for s in SIZES}   # t_typical [usec]
print("== summary (one guest run)")
for s in SIZES:
    print(f"ib_read_bw  {s} B: {bw[s]} MB/s average, {mpps[s]} Mpps")
    print(f"ib_read_lat {s} B: {lat[s]} us typical")

rows = []
for checksum in ("auto", "crc32c"):
    try:
        text = open(f"{out}/bench-{checksum}.json").read()
    except OSError:
        continue
    dec, i = json.JSONDecoder(), 0
    while i < len(text):
        if text[i] in "[{":
            obj, i = dec.raw_decode(text, i)
            for r in obj if isinstance(obj, list) else [obj]:
                r["asked"] = checksum
                rows.append(r)
        else:
            i += 1
for r in rows:
    size = r.get("size")
    if size not in SIZES:
        continue
    mb, p50 = r["mb_per_sec"], r["p50_us"]
    print("pubsub %d B, %d sub, %s, checksum %s (--checksum %s): %.1f MB/s, %.0f msg/s, p50 %.0f us, p99 %.0f us, p99.9 %.0f us, max %.0f us"
          % (r["size"], r["subscribers"], r.get("policy"), r.get("checksum"), r["asked"], mb, r["msgs_per_sec"], p50,
             r["p99_us"], r["p999_us"], r["max_us"]))
    if bw[size]:
        print("  goodput / ib_read_bw:     %.2f" % (mb / bw[size]))
    if mpps[size]:
        print("  msg/s / ib_read_bw msg/s: %.2f" % (r["msgs_per_sec"] / (mpps[size] * 1e6)))
    if lat[size]:
        print("  p50 / ib_read_lat typ.:   %.2f" % (p50 / lat[size]))
if not rows:
    print("pubsub bench: no result (see above)")
PY
[ $rc -eq 0 ] || exit $rc
[ $bench_rc -eq 0 ] || exit 3'

echo "== perftest and pub/sub bench in one rxe guest"
set +e
"$VM" run -- bash -c "$guest_script" verbs-perf "$bin"
rc=$?
set -e
case $rc in
  0) echo "== verbs-perf: done" ;;
  3) echo "== verbs-perf: perftest ran, the pub/sub bench did not" >&2 ;;
  124) echo "== verbs-perf: timed out after ${RXE_VM_TIMEOUT}s" >&2 ;;
  125) echo "== verbs-perf: the rxe guest failed to run" >&2 ;;
  *) echo "== verbs-perf: failed ($rc)" >&2 ;;
esac
exit $rc
