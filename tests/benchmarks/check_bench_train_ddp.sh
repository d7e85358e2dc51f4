#!/usr/bin/env bash
# bench_train's gradient-sync split under DDP: with two ranks the JSON carries grad_sync_wait_us,
# grad_sync_collective_us and rank_skew_us, all finite and >= 0 (the wait and the collective > 0), and for two
# ranks the mean wait is exactly the smaller wait plus half the spread (mean of {min, max} = min + (max - min) / 2),
# up to the printed rounding; one process prints none of the fields. Then benchmarks/ddp_scaling.sh runs one pair
# and its lines must agree with themselves: ratio = 2 x one-process µs/step / 2-rank µs/step, and the summary's
# median of one pair is that pair's.
# Usage: check_bench_train_ddp.sh <bench_train> <mpiexec> <ddp_scaling.sh>. Exit 77 (CTest skip) without the
# dataset.
set -euo pipefail
exe="$1"
mpiexec="$2"
scaling="$3"
source "$(dirname "${BASH_SOURCE[0]}")/bench_check_lib.sh"
data="$(mnist_dir_or_skip)"
args=(--data "$data" --batch-size 16 --steps 60)
one="$(run "$exe" "${args[@]}")"
grep -q '"world_size":1' <<<"$one" || fail "one process: no world_size 1 in: $one"
if grep -q 'grad_sync\|rank_skew' <<<"$one"; then fail "one process printed sync fields: $one"; fi
two="$(run "$mpiexec" -np 2 --oversubscribe "$exe" "${args[@]}" --strategy ddp)"
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
out="$(run env MPIRUN="$mpiexec" bash "$scaling" --bench "$exe" --pairs 1 --steps 40 --batch-size 16 -- --data "$data")"
python3 - "$out" <<'PY'
import json, sys
rows = [json.loads(l) for l in sys.argv[1].splitlines() if l.startswith("{")]
if len(rows) != 2 or rows[0]["bench"] != "ddp_scaling_pair" or rows[1]["bench"] != "ddp_scaling":
    sys.exit(f"FAIL: ddp_scaling.sh printed {sys.argv[1]!r}")
pair, summary = rows
want = 2 * pair["one_us_per_step"] / pair["ranks_us_per_step"]
if abs(pair["ratio"] - want) > 0.01 * want + 0.002:
    sys.exit(f"FAIL: pair ratio {pair['ratio']} != 2 x {pair['one_us_per_step']} / {pair['ranks_us_per_step']}")
if summary["pairs"] != 1 or summary["median_ratio"] != pair["ratio"] or summary["np"] != 2:
    sys.exit(f"FAIL: summary {summary} does not match its one pair {pair}")
if summary.get("median_rank_skew_us") != pair.get("rank_skew_us"):
    sys.exit(f"FAIL: summary skew {summary.get('median_rank_skew_us')} != the pair's {pair.get('rank_skew_us')}")
print(f"ok: ddp_scaling.sh pair ratio {pair['ratio']}")
PY
