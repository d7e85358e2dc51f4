#!/usr/bin/env bash
# A speed-regression check without a timed unit test: bench_step measures, in one process, the MNIST MLP training
# step (batch 16 and 256, one thread) and a fixed amount of reference work that no change to Volt can speed up or
# slow down (a plain C++ f32 GEMM written in bench_step.cpp); the ratio step / reference (fastest run of each,
# "step_over_reference") must stay within a margin of the baseline below. A busy or slower machine slows both
# halves, so the ratio moves far less than either time; a regression of the step shows as a larger ratio.
# Baselines and margins (docs/first_run.md, "Benchmark ratio check", and the log beside it): measured on the
# shared 2-core development VM under a load average of ~7, where runs spread over 0.48-0.65 at batch 256 and
# 0.08-0.21 at batch 16 (its step is mostly per-op overhead, far more sensitive to a busy machine than a GEMM):
#   batch 256: baseline 0.55, fails above 1.5 x (0.83);  batch 16: baseline 0.16, fails above 2.5 x (0.40).
# BENCH_STEP_RATIO_MARGIN overrides both margins (e.g. 0.5 to see the check fail). A ratio below baseline /
# margin is reported (the step got faster: lower the baseline) but does not fail.
# Usage: check_bench_step_ratio.sh <bench_step>
set -euo pipefail
exe="$1"
source "$(dirname "${BASH_SOURCE[0]}")/bench_check_lib.sh"
declare -A baseline=([16]=0.16 [256]=0.55) margins=([16]=2.5 [256]=1.5)
out="$(run "$exe" --repeats 5 --scale 0.2)"
for bs in 16 256; do
  margin="${BENCH_STEP_RATIO_MARGIN:-${margins[$bs]}}"
  line="$(grep "\"batch_size\":$bs," <<<"$out")" || fail "no batch $bs line in: $out"
  ratio="$(sed -n 's/.*"step_over_reference":\([0-9.eE+-]*\).*/\1/p' <<<"$line")"
  [ -n "$ratio" ] || fail "no step_over_reference in: $line"
  limit="$(awk -v b="${baseline[$bs]}" -v m="$margin" 'BEGIN { printf "%.4f", b * m }')"
  echo "batch $bs: step/reference $ratio (baseline ${baseline[$bs]}, fails above $limit)"
  awk -v r="$ratio" -v l="$limit" 'BEGIN { exit !(r <= l) }' ||
    fail "batch $bs: the MLP step is $ratio x the reference GEMM, above $limit" \
      "(${margin} x baseline ${baseline[$bs]}): $line"
  awk -v r="$ratio" -v b="${baseline[$bs]}" -v m="$margin" 'BEGIN { exit !(r < b / m) }' &&
    echo "note: batch $bs ran well under its baseline; lower the baseline so the check stays sharp"
done
echo "OK: the MLP step within its margin of the baseline ratio to the reference GEMM at batch 16 and 256"
