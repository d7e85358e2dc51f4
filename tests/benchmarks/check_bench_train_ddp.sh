#!/usr/bin/env bash
# bench_train's gradient-sync split under DDP: with two ranks the JSON carries grad_sync_wait_us,
# grad_sync_collective_us and rank_skew_us, all finite and >= 0 (the wait and the collective > 0), and for two ranks the mean wait is exactly the
# smaller wait plus half the spread (mean of {min, max} = min + (max - min) / 2), up to the printed rounding;
# one process prints none of the fields.
# Usage: check_bench_train_ddp.sh <bench_train> <mpiexec>. Exit 77 (CTest skip) without the dataset.
set -euo pipefail
exe="$1"
mpiexec="$2"
data="${VOLT_MNIST_DIR:-/usr/share/datasets/fashion-mnist}"
if [ ! -f "$data/train-images-idx3-ubyte.gz" ] && [ ! -f "$data/train-images-idx3-ubyte" ]; then
  echo "SKIP: no Fashion-MNIST under $data (Debian package dataset-fashion-mnist)"
  exit 77
fi
fail() { echo "FAIL: $*"; exit 1; }
args=(--data "$data" --batch-size 16 --steps 60)
one="$("$exe" "${args[@]}" 2>/dev/null)"
grep -q '"world_size":1' <<<"$one" || fail "one process: no world_size 1 in: $one"
if grep -q 'grad_sync\|rank_skew' <<<"$one"; then fail "one process printed sync fields: $one"; fi
two="$("$mpiexec" -np 2 --oversubscribe "$exe" "${args[@]}" --strategy ddp 2>/dev/null)"
python3 - "$two" <<'PY'
import json, math, sys
lines = [l for l in sys.argv[1].splitlines() if l.startswith("{")]
if len(lines) != 1:
    sys.exit(f"FAIL: expected one JSON line from rank 0, got {len(lines)}: {sys.argv[1]!r}")
r = json.loads(lines[0])
if r["world_size"] != 2:
    sys.exit(f"FAIL: world_size {r['world_size']}")
keys = ("grad_sync_wait_us", "grad_sync_collective_us", "rank_skew_us")
for k in keys:
    if k not in r or not math.isfinite(r[k]) or r[k] < 0:
        sys.exit(f"FAIL: {k} missing, not finite or negative in {r}")
wait, coll, skew = (r[k] for k in keys)
if wait <= 0 or coll <= 0:
    sys.exit(f"FAIL: two ranks waited for nothing (wait {wait}, collective {coll}): the waits were not recorded")
if abs(wait - (coll + skew / 2)) > 0.15:
    sys.exit(f"FAIL: two ranks: wait {wait} != collective {coll} + skew {skew} / 2")
print(f"ok: wait {wait} us = collective {coll} us + skew {skew} us / 2")
PY
