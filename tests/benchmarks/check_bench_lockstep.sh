#!/usr/bin/env bash
# bench_lockstep, the machine's lockstep ceiling: on 1, 2 and 3 ranks its JSON line has the right np, a step that is
# its work plus its wait (us_per_step = busy_us + wait_us, within 5 % + 20 µs: rank 0's steps against all ranks'
# mean), work near the requested length (loosely: calibrated on a loaded 2-core machine), no wait or skew to
# speak of for one process, a wait for several, and the smallest wait never above the mean; --iters fixes the
# work (same "iters" back, step_us null); bad flags are refused by name. Then benchmarks/ddp_scaling.sh --ceiling
# runs one pair: both lockstep halves did the same work, its ceiling_ratio is 2 x one-process / two-rank lockstep
# µs per step, and the summary's median ceiling and ratio_vs_ceiling follow.
# Usage: check_bench_lockstep.sh <bench_lockstep> <mpiexec> <ddp_scaling.sh> <bench_train>. Exit 77 (CTest skip)
# for the ddp_scaling part without the dataset.
set -euo pipefail
lock="$1"
mpiexec="$2"
scaling="$3"
train="$4"
source "$(dirname "${BASH_SOURCE[0]}")/bench_check_lib.sh"
check() {  # check NP MIN_BUSY_FRACTION JSON
  python3 - "$@" <<'PY'
import json, sys
np_, low, out = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
lines = [l for l in out.splitlines() if l.startswith("{")]
if len(lines) != 1:
    sys.exit(f"FAIL: expected one JSON line (rank 0), got {out!r}")
r = json.loads(lines[0])
if r["bench"] != "lockstep" or r["np"] != np_ or r["steps"] != 200 or r["step_us"] != 400.0 or r["iters"] < 1:
    sys.exit(f"FAIL: np {np_}: wrong header fields in {r}")
step, busy, wait = r["us_per_step"], r["busy_us"], r["wait_us"]
if min(step, busy, r["busy_sd_us"], wait, r["collective_us"], r["skew_us"]) < 0:
    sys.exit(f"FAIL: np {np_}: a negative figure in {r}")
if abs(step - (busy + wait)) > 0.05 * step + 20:
    sys.exit(f"FAIL: np {np_}: us_per_step {step} is not busy {busy} + wait {wait}")
if r["collective_us"] > wait + 0.1:
    sys.exit(f"FAIL: np {np_}: the smallest wait {r['collective_us']} exceeds the mean {wait}")
# The work is calibrated on rank 0's core while the other ranks start: it takes about --step-us, less when the
# calibration ran on a busy core (three ranks on two cores), more on a loaded machine.
if not low * 400 <= busy <= 10 * 400:
    sys.exit(f"FAIL: np {np_}: busy {busy} us is far from the requested 400 us")
if np_ == 1 and (r["skew_us"] != 0 or wait > 0.5 * step):
    sys.exit(f"FAIL: one process: skew {r['skew_us']} or wait {wait} where it runs alone")
if np_ > 1 and wait <= 0:
    sys.exit(f"FAIL: np {np_}: ranks in lockstep never waited: {r}")
print(f"ok: np {np_}: {step} us per step = busy {busy} + wait {wait}")
PY
}
args=(--step-us 400 --steps 200)
check 1 0.25 "$(run "$lock" "${args[@]}")"
check 2 0.25 "$(run "$mpiexec" -np 2 --oversubscribe "$lock" "${args[@]}")"
check 3 0.05 "$(run "$mpiexec" -np 3 --oversubscribe "$lock" "${args[@]}")"
fixed="$(run "$mpiexec" -np 2 --oversubscribe "$lock" --iters 1234 --steps 20)"
grep -q '"step_us":null,"iters":1234,' <<<"$fixed" || fail "--iters 1234 did not fix the work: $fixed"
for bad in "--step-us 0" "--steps 5" "--iters 0"; do
  # shellcheck disable=SC2086
  if err="$("$lock" $bad 2>&1)"; then fail "bench_lockstep $bad was accepted"; fi
  grep -q -- "${bad%% *}" <<<"$err" || fail "the refusal of $bad does not name the flag: $err"
done
if err="$(bash "$scaling" --bench "$train" --ceiling --lockstep /nonexistent/bench_lockstep 2>&1)"; then
  fail "ddp_scaling.sh --ceiling ran without bench_lockstep"
fi
grep -q "bench_lockstep" <<<"$err" || fail "ddp_scaling.sh's refusal does not name bench_lockstep: $err"
if err="$(bash "$scaling" --bench "$train" --ceiling --steps 10 2>&1)"; then
  fail "--ceiling --steps 10 was accepted"
fi
grep -q -- "--steps" <<<"$err" || fail "ddp_scaling.sh's refusal of --ceiling --steps 10 does not name --steps: $err"

data="$(mnist_dir_or_skip "the ddp_scaling.sh --ceiling pair")"
out="$(run env MPIRUN="$mpiexec" bash "$scaling" --bench "$train" --lockstep "$lock" --ceiling --pairs 1 --steps 40 \
  --batch-size 16 -- --data "$data")"
python3 - "$out" <<'PY'
import json, sys
rows = [json.loads(l) for l in sys.argv[1].splitlines() if l.startswith("{")]
if len(rows) != 2 or rows[0]["bench"] != "ddp_scaling_pair" or rows[1]["bench"] != "ddp_scaling":
    sys.exit(f"FAIL: ddp_scaling.sh --ceiling printed {sys.argv[1]!r}")
pair, summary = rows
if pair.get("lockstep_iters", 0) < 1:
    sys.exit(f"FAIL: no lockstep_iters in {pair}")
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
