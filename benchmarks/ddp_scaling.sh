#!/usr/bin/env bash
# DDP scaling on one machine: bench_train with one process and with N ranks (mpirun -np N --bind-to core), run
# as back-to-back pairs so that both halves of a pair see the same machine, and the ratio of the N-rank global
# rate to the one-process rate per pair. Prints one JSON line per pair and a summary line with the median ratio
# and the median gradient-sync split (grad_sync_wait_us, grad_sync_collective_us, rank_skew_us; see
# bench_train). Usage:
#   benchmarks/ddp_scaling.sh [--bench PATH] [--np N] [--pairs K] [--steps S] [--batch-size B] [-- extra flags]
# Defaults: build/benchmarks/bench_train, N = 2, K = 5, S = 1000, B = 256 (the MLP recipe, CPU ranks).
# MPIRUN names the launcher (default mpirun; e.g. MPIRUN=orterun where only that name is installed).
# --ceiling also runs bench_lockstep (beside bench_train, or --lockstep PATH) after each pair: one process and N
# ranks repeating fixed CPU work as long as that pair's one-process step (calibrated once, in the one-process run,
# and the same work given to the N ranks), with a one-integer all-reduce per step.
# Its ratio ("ceiling_ratio") is the best any synchronous N-rank step of that length reaches on this machine; the
# summary adds its median and "ratio_vs_ceiling" (median ratio / median ceiling ratio): the part of the shortfall
# that is the machine's (uneven or varying core speed) is the ceiling's, the rest is the training step's.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bench="$root/build/benchmarks/bench_train" np=2 pairs=5 steps=1000 bs=256 ceiling=0 lockstep=""
extra=()
while (($#)); do
  case "$1" in
    --bench) bench="$2"; shift 2 ;;
    --np) np="$2"; shift 2 ;;
    --pairs) pairs="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    --batch-size) bs="$2"; shift 2 ;;
    --ceiling) ceiling=1; shift ;;
    --lockstep) lockstep="$2"; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    *) echo "ddp_scaling.sh: unknown argument '$1' (see the header for usage)" >&2; exit 2 ;;
  esac
done
for v in np pairs steps bs; do
  [[ "${!v}" =~ ^[1-9][0-9]*$ ]] ||
    { echo "ddp_scaling.sh: --${v/bs/batch-size} must be a positive integer, got '${!v}'" >&2; exit 2; }
done
((np >= 2)) || { echo "ddp_scaling.sh: --np must be at least 2, got $np" >&2; exit 2; }
[ -x "$bench" ] || { echo "ddp_scaling.sh: no bench_train at $bench (build first, or pass --bench)" >&2; exit 2; }
lockstep="${lockstep:-$(dirname "$bench")/bench_lockstep}"
if ((ceiling)); then
  ((steps >= 20)) || { echo "ddp_scaling.sh: --ceiling needs --steps of at least 20, got $steps" >&2; exit 2; }
  [ -x "$lockstep" ] ||
    { echo "ddp_scaling.sh: --ceiling needs bench_lockstep, not found at $lockstep (pass --lockstep)" >&2; exit 2; }
fi
mpirun="${MPIRUN:-mpirun}"
command -v "$mpirun" >/dev/null || { echo "ddp_scaling.sh: $mpirun not found (Debian: openmpi-bin)" >&2; exit 2; }
[ "$(id -u)" = 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# More ranks than cores: Open MPI refuses to bind and to oversubscribe unless told.
bind=(--bind-to core)
if ((np > $(nproc))); then bind=(--bind-to none --oversubscribe); fi
# One bench_train run per half of a pair (--repeats 1): the K pairs are this script's repeats, alternated so that
# a drift of the machine's speed hits both halves alike.
args=(--batch-size "$bs" --steps "$steps" --repeats 1 "${extra[@]}")
lines=()
for ((i = 1; i <= pairs; ++i)); do
  one="$("$bench" "${args[@]}" | grep '^{')" || { echo "ddp_scaling.sh: the one-process run failed" >&2; exit 1; }
  many="$("$mpirun" -np "$np" "${bind[@]}" "$bench" "${args[@]}" --strategy ddp | grep '^{')" ||
    { echo "ddp_scaling.sh: the $np-rank run failed" >&2; exit 1; }
  lines+=("$one" "$many")
  if ((ceiling)); then
    # The same step length as this pair's one-process run.
    us="$(python3 -c 'import json, sys; print(json.loads(sys.argv[1])["us_per_step"])' "$one")"
    lone="$("$lockstep" --step-us "$us" --steps "$steps" --repeats 1 | grep '^{')" ||
      { echo "ddp_scaling.sh: the one-process bench_lockstep run failed" >&2; exit 1; }
    iters="$(python3 -c 'import json, sys; print(json.loads(sys.argv[1])["iters"])' "$lone")"
    lmany="$("$mpirun" -np "$np" "${bind[@]}" "$lockstep" --iters "$iters" --steps "$steps" --repeats 1 | grep '^{')" ||
      { echo "ddp_scaling.sh: the $np-rank bench_lockstep run failed" >&2; exit 1; }
    lines+=("$lone" "$lmany")
  fi
done
python3 - "$np" "$ceiling" "${lines[@]}" <<'PY'
import json, statistics, sys
np_, ceiling = int(sys.argv[1]), sys.argv[2] == "1"
runs = [json.loads(l) for l in sys.argv[3:]]
per_pair = 4 if ceiling else 2
ratios, ceilings, splits = [], [], {k: [] for k in ("grad_sync_wait_us", "grad_sync_collective_us", "rank_skew_us")}
for i in range(0, len(runs), per_pair):
    one, many = runs[i], runs[i + 1]
    ratio = many["train_samples_per_s"] / one["train_samples_per_s"]
    ratios.append(ratio)
    row = {"bench": "ddp_scaling_pair", "pair": i // per_pair + 1, "np": np_, "batch_size": one["batch_size"],
           "one_us_per_step": one["us_per_step"], "ranks_us_per_step": many["us_per_step"], "ratio": round(ratio, 3)}
    for k in splits:
        if k in many:
            splits[k].append(many[k])
            row[k] = many[k]
    if ceiling:
        lone, lmany = runs[i + 2], runs[i + 3]
        if lone["iters"] != lmany["iters"]:
            sys.exit(f"ddp_scaling.sh: the lockstep halves did different work: {lone['iters']} and {lmany['iters']}")
        c = np_ * lone["us_per_step"] / lmany["us_per_step"]
        ceilings.append(c)
        row.update({"lockstep_iters": lone["iters"], "lockstep_one_us_per_step": lone["us_per_step"],
                    "lockstep_ranks_us_per_step": lmany["us_per_step"], "ceiling_ratio": round(c, 3)})
    print(json.dumps(row))
summary = {"bench": "ddp_scaling", "np": np_, "batch_size": runs[0]["batch_size"], "pairs": len(ratios),
           "median_ratio": round(statistics.median(ratios), 3), "min_ratio": round(min(ratios), 3),
           "max_ratio": round(max(ratios), 3), "efficiency": round(statistics.median(ratios) / np_, 3)}
for k, v in splits.items():
    if v:
        summary["median_" + k] = round(statistics.median(v), 1)
if ceilings:
    summary["median_ceiling_ratio"] = round(statistics.median(ceilings), 3)
    summary["ratio_vs_ceiling"] = round(statistics.median(ratios) / statistics.median(ceilings), 3)
print(json.dumps(summary))
PY
