# The step runner and the final report of scripts/gpu_check.sh, sourced by it and by its test
# (tests/scripts/check_gpu_check_report.sh). The caller sets:
#   out       the results folder (absolute), budget (seconds), start (=$SECONDS at the start)
#   root      the project root (for scripts/gpu_check_report.py)
# and calls gpu_check_init once, step/skip_step per step and gpu_check_finish last (its status is the check's).
gpu_check_init() {
  logs=$out/logs; summary=$out/summary.txt; bench=$out/bench.jsonl
  mkdir -p "$logs"; : > "$out/steps.tsv"; : > "$summary"; : > "$bench"
}
left() { echo $((budget - (SECONDS - start))); }
note() { echo "$*" | tee -a "$summary"; }
# record NAME STATUS RC SECONDS KIND NOTE: one line of steps.tsv (tabs and newlines in NOTE become spaces).
record() {
  local text; text=$(printf '%s' "$6" | tr '\t\n' '  ')
  printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" "$5" "$text" >> "$out/steps.tsv"
}
# skip_step NAME KIND WHY: a step that did not run, in the table as SKIPPED with its reason.
skip_step() { note "$1 skipped ($3)"; record "$1" skipped - 0 "$2" "$3"; }

# step [--kind KIND] NAME CAP CMD...: runs CMD under min(CAP, time left) seconds from /tmp, logs to
# logs/NAME.log, notes its status. KIND (default from the name: gpu_* gpu_test, bench_* bench, example_* example,
# anchor_* anchor, else test) sorts the table; a gpu_test's ran and skipped cases are listed at the end.
step() {
  local kind=""
  if [ "$1" = --kind ]; then kind=$2; shift 2; fi
  local name=$1 cap=$2; shift 2
  if [ -z "$kind" ]; then
    case $name in gpu_*) kind=gpu_test;; bench_*) kind=bench;; example_*) kind=example;; anchor_*) kind=anchor;;
      *) kind=test;; esac
  fi
  local t; t=$(left)
  if [ "$t" -lt 15 ]; then skip_step "$name" "$kind" "time budget spent"; return 0; fi
  [ "$t" -lt "$cap" ] && cap=$t
  # By absolute path: gtest's death tests re-run argv[0] from the working directory.
  local exe; exe=$(command -v "$1") && { shift; set -- "$exe" "$@"; }
  local t0=$SECONDS
  (cd /tmp && timeout -k 5 "$cap" "$@") > "$logs/$name.log" 2>&1
  local rc=$? status=pass why=""
  if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then status=timeout; why="stopped at its ${cap}s limit"
  elif [ $rc -eq 127 ]; then status=fail; why="command not found: $1"
  elif [ $rc -ne 0 ]; then
    # The first line naming a failure or an error, else the log's last line.
    status=fail; why=$(grep -m1 -E 'FAIL|[Ee]rror' "$logs/$name.log" || tail -n1 "$logs/$name.log")
    why=$(printf '%s' "$why" | cut -c1-80)
  fi
  local totals
  totals=$(grep -E '^\[  (PASSED|FAILED|SKIPPED) +\] [0-9]+ tests?' "$logs/$name.log" | tr -s ' ' | tr '\n' ' ')
  note "$name rc=$rc $((SECONDS - t0))s $totals"
  grep -E '^\[  FAILED  \].*\(' "$logs/$name.log" | sed 's/^/    /' | tee -a "$summary"
  [ -n "$why" ] && note "    ($why)"
  record "$name" "$status" "$rc" $((SECONDS - t0)) "$kind" "$why"
  # The speed table only (the profiled and ncu runs' figures are distorted by their instruments).
  case $name in bench_*) grep -h '^{' "$logs/$name.log" >> "$bench" 2>/dev/null;; esac
  return 0
}

# gpu_check_finish: the table (also appended to summary.txt), results.json; returns 1 when a step failed,
# 2 when the report itself could not be made.
gpu_check_finish() {
  local rc=0
  python3 "$root/scripts/gpu_check_report.py" "$out" > "$out/table.txt" 2> "$out/report_errors.txt" || rc=$?
  cat "$out/table.txt" "$out/report_errors.txt" | tee -a "$summary"
  if [ $rc -gt 1 ] || [ ! -s "$out/results.json" ]; then
    echo "gpu_check: FAIL (the report could not be made)" | tee -a "$summary"; return 2
  fi
  return $rc
}
