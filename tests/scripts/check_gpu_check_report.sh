#!/usr/bin/env bash
# scripts/gpu_check.sh cannot pass by accident, checked without a GPU in a few seconds:
#  1. its step runner and report (scripts/gpu_check_lib.sh, gpu_check_report.py) on fake steps: a failing test,
#     a step past its time cap and a missing program turn into FAIL/TIMEOUT/SKIPPED rows and exit status 1; a
#     GPU-only case that skipped is listed by name; every JSON line a step prints is a figure in results.json;
#     all steps passing gives 0; a broken steps.tsv gives 2, never a pass;
#  2. the whole script (--inner, part 4: the examples) with fake programs on PATH: one example fails, so the
#     script exits 1, prints the table last and still writes the other example's results as figures.
# Usage: check_gpu_check_report.sh PROJECT_ROOT
set -u
root=$(cd "${1:?usage: check_gpu_check_report.sh PROJECT_ROOT}" && pwd)
fail() { echo "FAIL: $*"; exit 1; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
expect_line() { grep -qE "$2" "$1" || { cat "$1"; fail "no line matching '$2' in $1"; }; }

# 1. The runner and the report on fake steps.
out=$tmp/one; budget=60; start=$SECONDS
. "$root/scripts/gpu_check_lib.sh"
gpu_check_init > /dev/null
{
  step gpu_fake 20 printf '%s\n' '[ RUN      ] Fake.CudaRuns' '[       OK ] Fake.CudaRuns (1 ms)' \
    '[ RUN      ] Fake.CudaSkips' '[  SKIPPED ] Fake.CudaSkips (0 ms)' '[  PASSED  ] 1 test.' \
    '[  SKIPPED ] 1 test, listed below:' '[  SKIPPED ] Fake.CudaSkips'
  step bench_fake 20 printf '%s\n' 'warming up' '{"model": "mlp", "us_per_step": 12.5}' '{not json'
  step all_broken 20 sh -c 'echo "[  FAILED  ] Fake.Broken (3 ms)"; echo "[  FAILED  ] 1 test, listed below:"; exit 1'
  step slow 1 sleep 30
  have_not=volt_no_such_program_here
  step missing 20 "$have_not"
  skip_step example_nodata example "no Fashion-MNIST"
} > "$tmp/one.steps" 2>&1
rc=0; gpu_check_finish > "$tmp/one.table" 2>&1 || rc=$?
[ $rc -eq 1 ] || { cat "$tmp/one.table"; fail "a failing step must make the report exit 1, got $rc"; }
t=$tmp/one.table
expect_line "$t" '^gpu_fake +PASS +0 .* 1/0/1 +0'
expect_line "$t" '^bench_fake +PASS +0 .* - +1'
expect_line "$t" '^all_broken +FAIL +1 .* 0/1/0 '
expect_line "$t" '^slow +TIMEOUT +124 '
expect_line "$t" '^missing +FAIL +127 .*command not found'
expect_line "$t" '^example_nodata +SKIPPED +- .*no Fashion-MNIST'
expect_line "$t" '^GPU-only tests: 1 ran, 1 skipped$'
expect_line "$t" '^  skipped  gpu_fake: Fake.CudaSkips$'
expect_line "$t" '^not run: 1 step\(s\): example_nodata$'
# The verdict is the last line, so that a device run's output tail always shows it.
[ "$(tail -1 "$t")" = "gpu_check: FAIL (3 of 6 steps failed: all_broken slow missing)" ] ||
  fail "last line: '$(tail -1 "$t")'"
grep -q 'gpu_check: FAIL' "$out/summary.txt" || fail "the table is not in summary.txt"
python3 - "$out/results.json" <<'PY' || fail "results.json"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["ok"] is False and r["failed"] == ["all_broken", "slow", "missing"], r["failed"]
assert r["not_run"] == ["example_nodata"], r["not_run"]
assert r["figures"] == [{"step": "bench_fake", "model": "mlp", "us_per_step": 12.5}], r["figures"]
assert r["gpu_only_tests"] == {"ran": ["gpu_fake: Fake.CudaRuns"], "skipped": ["gpu_fake: Fake.CudaSkips"]}
steps = {s["name"]: s for s in r["steps"]}
assert steps["all_broken"]["tests"] == {"passed": 0, "failed": 1, "skipped": 0}, steps["all_broken"]
assert steps["slow"]["status"] == "timeout" and steps["slow"]["rc"] == 124, steps["slow"]
PY
grep -qx '{"model": "mlp", "us_per_step": 12.5}' "$out/bench.jsonl" || fail "bench.jsonl lacks bench_fake's line"

# Every step passing: status 0 and a PASS verdict.
out=$tmp/two; start=$SECONDS
gpu_check_init > /dev/null
step bench_ok 20 echo '{"x": 1}' > /dev/null
rc=0; gpu_check_finish > "$tmp/two.table" 2>&1 || rc=$?
[ $rc -eq 0 ] || { cat "$tmp/two.table"; fail "all steps passing must give 0, got $rc"; }
[ "$(tail -1 "$tmp/two.table")" = "gpu_check: PASS (1 steps ran, none failed)" ] || fail "$(tail -1 "$tmp/two.table")"

# A report that cannot be made (a broken steps.tsv) is status 2, never a pass.
printf 'only\ttwo\n' >> "$out/steps.tsv"; rm -f "$out/results.json"
rc=0; gpu_check_finish > "$tmp/three.table" 2>&1 || rc=$?
[ $rc -eq 2 ] || { cat "$tmp/three.table"; fail "a broken steps.tsv must give 2, got $rc"; }
expect_line "$tmp/three.table" 'expected 6 tab-separated columns, got 2'

# 2. The whole script, part 4, with fake programs: nvidia-smi, mnist_mlp passing, mnist_cnn failing.
bin=$tmp/bin; data=$tmp/data; mkdir -p "$bin" "$data"; : > "$data/train-images-idx3-ubyte.gz"
printf '#!/bin/sh\necho "Fake GPU, 1.0, 1 MiB, 9.0"\n' > "$bin/nvidia-smi"
cat > "$bin/mnist_mlp" <<'SH'
#!/bin/sh
while [ $# -gt 0 ]; do [ "$1" = --out ] && out=$2; shift; done
mkdir -p "$out" && echo '{"test_acc": 0.84, "train_samples_per_s": 1000}' > "$out/results.json"
SH
printf '#!/bin/sh\necho "error: CUDA out of memory" >&2\nexit 3\n' > "$bin/mnist_cnn"
chmod +x "$bin"/*
rc=0
PATH="$bin:$PATH" OUT=$tmp/whole GPU_CHECK_PARTS=4 VOLT_MNIST_DIR=$data bash "$root/scripts/gpu_check.sh" --inner \
  > "$tmp/whole.out" 2>&1 || rc=$?
[ $rc -eq 1 ] || { cat "$tmp/whole.out"; fail "gpu_check.sh with a failing example must exit 1, got $rc"; }
expect_line "$tmp/whole.out" '^example_mnist_cnn +FAIL +3 .*error: CUDA out of memory'
expect_line "$tmp/whole.out" '^example_mnist_mlp +PASS +0 .* 1$'
[ "$(tail -1 "$tmp/whole.out")" = "gpu_check: FAIL (1 of 3 steps failed: example_mnist_cnn)" ] ||
  fail "last line: '$(tail -1 "$tmp/whole.out")'"
python3 -c 'import json, sys; r = json.load(open(sys.argv[1])); f = r["figures"]
assert r["gpu"] == "Fake GPU, 1.0, 1 MiB, 9.0", r["gpu"]
assert f == [{"step": "example_mnist_mlp", "example": "mnist_mlp", "test_acc": 0.84, "train_samples_per_s": 1000}], f' \
  "$tmp/whole/results.json" || fail "gpu_check.sh's results.json"
[ -f "$tmp/whole/logs.tgz" ] || fail "no logs.tgz"
echo "OK: gpu_check's report fails on a failing, timed-out or missing step and lists GPU-only skips"
