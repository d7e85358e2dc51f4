#!/usr/bin/env bash
# bench_lockstep, the machine's lockstep ceiling: on 1, 2 and 3 ranks its JSON line has the right np, a step that is
# its work plus its wait (us_per_step = busy_us + wait_us, within 5 % + 20 µs: rank 0's steps against all ranks'
# mean), work near the requested length, no wait or skew to speak of for one process and a wait for several; bad
# flags are refused by name. Then benchmarks/ddp_scaling.sh --ceiling runs one pair: its ceiling_ratio is
# 2 x one-process / two-rank lockstep µs per step, and the summary's median ceiling and ratio_vs_ceiling follow.
# Usage: check_bench_lockstep.sh <bench_lockstep> <mpiexec> <ddp_scaling.sh> <bench_train>. Exit 77 (CTest skip)
# for the ddp_scaling part without the dataset.
set -euo pipefail
lock="$1"
mpiexec="$2"
scaling="$3"
train="$4"
fail() { echo "FAIL: $*"; exit 1; }
check() {  # check NP JSON
  python3 - "$1" "$2" <<'PY'
import json, sys
np_, out = int(sys.argv[1]), sys.argv[2]
lines = [l for l in out.splitlines() if l.startswith("{")]
if len(lines) != 1:
    sys.exit(f"FAIL: expected one JSON line (rank 0), got {out!r}")
r = json.loads(lines[0])
if r["bench"] != "lockstep" or r["np"] != np_ or r["steps"] != 200 or r["step_us"] != 400.0:
    sys.exit(f"FAIL: np {np_}: wrong header fields in {r}")
step, busy, wait = r["us_per_step"], r["busy_us"], r["wait_us"]
if min(step, busy, r["busy_sd_us"], wait, r["skew_us"]) < 0:
    sys.exit(f"FAIL: np {np_}: a negative figure in {r}")
if abs(step - (busy + wait)) > 0.05 * step + 20:
    sys.exit(f"FAIL: np {np_}: us_per_step {step} is not busy {busy} + wait {wait}")
# The work is calibrated on this machine's fastest core: it takes about --step-us (a loaded machine: longer).
if not 0.25 * 400 <= busy <= 10 * 400:
    sys.exit(f"FAIL: np {np_}: busy {busy} us is far from the requested 400 us")
if np_ == 1 and (r["skew_us"] != 0 or wait > 0.5 * step):
    sys.exit(f"FAIL: one process: skew {r['skew_us']} or wait {wait} where it runs alone")
if np_ > 1 and wait <= 0:
    sys.exit(f"FAIL: np {np_}: ranks in lockstep never waited: {r}")
print(f"ok: np {np_}: {step} us per step = busy {busy} + wait {wait}")
PY
}
args=(--step-us 400 --steps 200)
check 1 "$("$lock" "${args[@]}")"
for np in 2 3; do check "$np" "$("$mpiexec" -np "$np" --oversubscribe "$lock" "${args[@]}" 2>/dev/null)"; done
for bad in "--step-us 0" "--steps 5"; do
  # shellcheck disable=SC2086
  if err="$("$lock" $bad 2>&1)"; then fail "bench_lockstep $bad was accepted"; fi
  grep -q -- "${bad%% *}" <<<"$err" || fail "the refusal of $bad does not name the flag: $err"
done
if err="$(bash "$scaling" --bench "$train" --ceiling --lockstep /nonexistent/bench_lockstep 2>&1)"; then
  fail "ddp_scaling.sh --ceiling ran without bench_lockstep"
fi
grep -q "bench_lockstep" <<<"$err" || fail "ddp_scaling.sh's refusal does not name bench_lockstep: $err"

data="${VOLT_MNIST_DIR:-/usr/share/datasets/fashion-mnist}"
if [ ! -f "$data/train-images-idx3-ubyte.gz" ] && [ ! -f "$data/train-images-idx3-ubyte" ]; then
  echo "SKIP: no Fashion-MNIST under $data for the ddp_scaling.sh --ceiling pair (Debian package dataset-fashion-mnist)"
  exit 77
fi
out="$(bash "$scaling" --bench "$train" --lockstep "$lock" --ceiling --pairs 1 --steps 40 --batch-size 16 \
  -- --data "$data" 2>/dev/null)"
python3 - "$out" <<'PY'
import json, sys
rows = [json.loads(l) for l in sys.argv[1].splitlines() if l.startswith("{")]
if len(rows) != 2 or rows[0]["bench"] != "ddp_scaling_pair" or rows[1]["bench"] != "ddp_scaling":
    sys.exit(f"FAIL: ddp_scaling.sh --ceiling printed {sys.argv[1]!r}")
pair, summary = rows
want = 2 * pair["lockstep_one_us_per_step"] / pair["lockstep_ranks_us_per_step"]
if abs(pair["ceiling_ratio"] - want) > 0.001 * want + 0.002:
    sys.exit(f"FAIL: ceiling_ratio {pair['ceiling_ratio']} != 2 x lockstep one / ranks = {want}")
if summary["median_ceiling_ratio"] != pair["ceiling_ratio"]:
    sys.exit(f"FAIL: summary ceiling {summary['median_ceiling_ratio']} != the pair's {pair['ceiling_ratio']}")
vs = summary["median_ratio"] / summary["median_ceiling_ratio"]
if abs(summary["ratio_vs_ceiling"] - vs) > 0.002:
    sys.exit(f"FAIL: ratio_vs_ceiling {summary['ratio_vs_ceiling']} != {summary['median_ratio']} / "
             f"{summary['median_ceiling_ratio']}")
print(f"ok: ddp_scaling.sh --ceiling: ratio {pair['ratio']}, ceiling {pair['ceiling_ratio']}")
PY
