#!/usr/bin/env bash
# A rank SIGKILLed at a random moment of DDP training under plain mpirun (no --enable-recovery): Open MPI sends
# the survivors SIGTERM and kills them about a second later. Every surviving rank must first print the dead
# rank's number, pid and host (trainer/interrupt_guard.h), and the job must end within <max_ms> (default 2000)
# of the kill. Runs <trials> jobs of <np> ranks with a random victim and a random delay; passes when at least
# <need> of them do both.
#   check_sigterm_peer.sh <mpiexec> <rank_kill_driver> <np> <trials> <need> [<max_ms>]
set -uo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/sigterm_job.sh"
mpiexec="$1" driver="$2" np="$3" trials="$4" need="$5" max_ms="${6:-2000}"
work="$(mktemp -d /tmp/volt_sigterm_peer.XXXXXX)"
trap 'rm -rf "$work"' EXIT
good=0
worst_ms=0
for t in $(seq "$trials"); do
  run="$work/run$t"
  start_training_job "$mpiexec" "$driver" "$np" "$run" "$work/log$t"
  pick_rank "$run" "$np" "$t" "$work/log$t" || continue
  victim_rank=$rank victim=$pid
  start_ms=$(($(date +%s%N) / 1000000))
  kill -9 "$victim"
  for _ in $(seq 300); do
    kill -0 "$job" 2>/dev/null || break
    sleep 0.05
  done
  end_ms=$(($(date +%s%N) / 1000000))
  kill -9 "$job" 2>/dev/null
  wait "$job" 2>/dev/null
  ms=$((end_ms - start_ms))
  [ "$ms" -gt "$worst_ms" ] && worst_ms=$ms
  named=0
  for r in $(seq 0 $((np - 1))); do
    [ "$r" -eq "$victim_rank" ] && continue
    # Survivors that exit first (on the same SIGTERM) may be listed beside the victim: they are gone too.
    other='rank [0-9]+ \(pid [0-9]+ on [^)]+\)'
    pattern="^rank $r: SIGTERM received while ($other, )*rank $victim_rank \(pid $victim on [^)]+\)(, $other)* (is|are) missing"
    grep -Eq "$pattern" "$work/log$t" &&
      named=$((named + 1))
  done
  verdict="FAILED"
  if [ "$named" -eq $((np - 1)) ] && [ "$ms" -le "$max_ms" ]; then good=$((good + 1)); verdict="ok"; fi
  echo "trial $t: np=$np killed rank $victim_rank (pid $victim); $named of $((np - 1)) survivors named it;" \
       "job ended $ms ms after the kill: $verdict"
  [ "$verdict" = ok ] || sed 's/^/    | /' "$work/log$t" | tail -20
done
echo "np=$np: $good of $trials trials had every survivor name the dead rank and the job end within $max_ms ms;" \
     "slowest job end $worst_ms ms after the kill"
[ "$good" -ge "$need" ] && echo "sigterm-peer check passed"
