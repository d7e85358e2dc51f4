#!/usr/bin/env bash
# A rank stopped (SIGSTOP: hung, or held by a debugger) at a random moment of DDP training, then SIGTERM to every
# rank of the job, as SLURM's scancel sends it (a SIGTERM to mpirun instead continues the stopped rank first, and
# the job then stops gracefully). The stopped rank cannot reach the step boundary, so every other rank must print
# the stopped rank's number, pid and host and the last collective it entered, and its own, before it exits
# (trainer/interrupt_guard.h), all within <max_ms> (default 2000) of the SIGTERM (the job itself ends when Open
# MPI has torn the stopped rank down, which is reported but not judged). Runs <trials> jobs of <np> ranks with a
# random stopped rank and a random delay; passes when at least <need> of them do both.
#   check_sigterm_stuck.sh <mpiexec> <rank_kill_driver> <np> <trials> <need> [<max_ms>]
set -uo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/sigterm_job.sh"
mpiexec="$1" driver="$2" np="$3" trials="$4" need="$5" max_ms="${6:-2000}"
work="$(mktemp -d /tmp/volt_sigterm_stuck.XXXXXX)"
job=""
cleanup() {
  [ -n "$job" ] && kill -9 "$job" 2>/dev/null
  # A stopped rank outlives a killed mpirun: end every rank this script started.
  for f in "$work"/run*/pid.*; do [ -f "$f" ] && kill -9 "$(cat "$f")" 2>/dev/null; done
  rm -rf "$work"
}
trap cleanup EXIT
# running PID: the process exists and has not exited (a zombie waits for its launcher to reap it).
running() { [ -r "/proc/$1/stat" ] && [ "$(sed -E 's/.*\) (.).*/\1/' "/proc/$1/stat" 2>/dev/null)" != Z ]; }
good=0
worst_ms=0
for t in $(seq "$trials"); do
  run="$work/run$t"
  start_training_job "$mpiexec" "$driver" "$np" "$run" "$work/log$t"
  pick_rank "$run" "$np" "$t" "$work/log$t" || continue
  stuck_rank=$rank stuck=$pid
  kill -STOP "$stuck"
  sleep 0.3  # the others reach a collective the stopped rank never enters
  start_ms=$(($(date +%s%N) / 1000000))
  for r in $(seq 0 $((np - 1))); do kill -TERM "$(cat "$run/pid.$r")"; done
  others_ms=""
  for _ in $(seq 300); do
    if [ -z "$others_ms" ]; then
      left=0
      for r in $(seq 0 $((np - 1))); do
        [ "$r" -ne "$stuck_rank" ] && running "$(cat "$run/pid.$r")" && left=1
      done
      [ "$left" = 0 ] && others_ms=$(($(date +%s%N) / 1000000 - start_ms))
    fi
    kill -0 "$job" 2>/dev/null || break
    sleep 0.02
  done
  end_ms=$(($(date +%s%N) / 1000000))
  : "${others_ms:=$((end_ms - start_ms))}"
  kill -9 "$job" "$stuck" 2>/dev/null
  wait "$job" 2>/dev/null
  job=""
  ms=$others_ms
  [ "$ms" -gt "$worst_ms" ] && worst_ms=$ms
  named=0
  for r in $(seq 0 $((np - 1))); do
    [ "$r" -eq "$stuck_rank" ] && continue
    coll='(#[0-9]+ [a-z_]+|none)'
    pattern="^rank $r: SIGTERM received while rank $stuck_rank \(pid $stuck on [^,]+, process stopped, last"
    pattern+=" collective $coll\) is stuck \(this rank's last collective is $coll\); exiting now \(code 143\)"
    grep -Eq "$pattern" "$work/log$t" && named=$((named + 1))
  done
  verdict="FAILED"
  if [ "$named" -eq $((np - 1)) ] && [ "$ms" -le "$max_ms" ]; then good=$((good + 1)); verdict="ok"; fi
  echo "trial $t: np=$np stopped rank $stuck_rank (pid $stuck); $named of $((np - 1)) others named it and its last" \
       "collective, all of them exited $ms ms after the SIGTERM (the job $((end_ms - start_ms)) ms):" \
       "$verdict"
  [ "$verdict" = ok ] || sed 's/^/    | /' "$work/log$t" | tail -20
  [ "$verdict" = ok ] && grep -m1 "is stuck" "$work/log$t" | sed 's/^/    | /'
done
echo "np=$np: $good of $trials trials had every other rank name the stopped rank and exit within $max_ms ms" \
     "of the SIGTERM; slowest $worst_ms ms"
[ "$good" -ge "$need" ] && echo "sigterm-stuck check passed"
