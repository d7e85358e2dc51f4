#!/usr/bin/env bash
# --repeats in every timing program: bench_step, bench_gemm, bench_memory and (with Fashion-MNIST) bench_train
# run each configuration N times and print the median run's figure with its min and max, min <= median <= max,
# "repeats" = N; --repeats 0 is refused. Small configurations, a few seconds in all.
# bench_lockstep (MPI builds) is checked too when its path is given.
# Usage: check_bench_repeats.sh <bench_step> <bench_gemm> <bench_memory> <bench_train> [<bench_lockstep>]
set -euo pipefail
step="$1" gemm="$2" memory="$3" train="$4" lockstep="${5:-}"
source "$(dirname "${BASH_SOURCE[0]}")/bench_check_lib.sh"
# spread JSON_LINES KEY MEDIAN_KEY N: every JSON line has KEY_min <= KEY_median <= KEY_max, KEY == KEY_median
# (MEDIAN_KEY: the plain figure that must equal the median) and repeats == N.
spread() {
  python3 - "$@" <<'PY'
import json, sys
text, key, plain, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
rows = [json.loads(l) for l in text.splitlines() if l.startswith("{") and f'"{key}_min"' in l]
if not rows:
    sys.exit(f"FAIL: no line with {key}_min in {text!r}")
for r in rows:
    lo, mid, hi = r[f"{key}_min"], r[f"{key}_median"], r[f"{key}_max"]
    if not lo <= mid <= hi:
        sys.exit(f"FAIL: {key} min {lo} median {mid} max {hi} out of order: {r}")
    if r[plain] != mid or r["repeats"] != n:
        sys.exit(f"FAIL: {plain} {r[plain]} is not the median {mid}, or repeats {r['repeats']} != {n}: {r}")
print(f"ok: {len(rows)} line(s) with {key} min/median/max over {n} runs")
PY
}
spread "$(run "$step" --repeats 3 --scale 0.02)" us_per_step us_per_step 3
spread "$(run "$gemm" --repeats 2 --min-ms 1)" gflops gflops 2
spread "$(run "$memory" --width 64 --steps 4 --strategy ddp --repeats 3)" step_ms step_ms 3
if [ -n "$lockstep" ]; then
  spread "$(run "$lockstep" --step-us 100 --steps 40 --repeats 3)" us_per_step us_per_step 3
  if "$lockstep" --repeats 0 > /dev/null 2>&1; then fail "bench_lockstep accepted --repeats 0"; fi
fi
for exe in "$step" "$gemm" "$memory"; do
  if "$exe" --repeats 0 > /dev/null 2>&1; then fail "$exe accepted --repeats 0"; fi
done
data="${VOLT_MNIST_DIR:-/usr/share/datasets/fashion-mnist}"
if [ -f "$data/train-images-idx3-ubyte.gz" ] || [ -f "$data/train-images-idx3-ubyte" ]; then
  out="$(run "$train" --data "$data" --batch-size 16 --steps 30 --repeats 3)"
  spread "$out" us_per_step us_per_step 3
  if "$train" --data "$data" --repeats 0 > /dev/null 2>&1; then fail "bench_train accepted --repeats 0"; fi
else
  echo "note: no Fashion-MNIST under $data: bench_train not checked"
fi
echo "OK: --repeats gives min/median/max in bench_step, bench_gemm, bench_memory and bench_train${lockstep:+ and bench_lockstep}"
