#!/usr/bin/env bash
# A rank killed during DDP training: rank_kill_driver runs on 3 ranks; once a checkpoint exists, rank 2 gets
# SIGKILL. The surviving ranks must exit non-zero within the collective timeout (VOLT_COLLECTIVE_TIMEOUT=4)
# with a message naming rank 2, and the job must resume from its last checkpoint at the same world size (3) and
# at different ones (2, and 1 without mpirun). Usage: check_rank_kill.sh <mpiexec> <driver>
set -uo pipefail
mpiexec="$1"
driver="$2"
timeout_s=4
work="$(mktemp -d /tmp/volt_rank_kill.XXXXXX)"
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; echo "---- log"; cat "$work/log" 2>/dev/null; exit 1; }

VOLT_COLLECTIVE_TIMEOUT=$timeout_s "$mpiexec" -np 3 --oversubscribe --enable-recovery \
  "$driver" "$work/run" 1000 >"$work/log" 2>&1 &
job=$!
# Wait (at most 60 s) for the second epoch's checkpoint and for every rank's pid file.
for _ in $(seq 600); do
  [ -f "$work/run/ckpt/last.json" ] && [ -f "$work/run/pid.2" ] && grep -q '"epoch": [1-9]' "$work/run/ckpt/last.json" && break
  kill -0 $job 2>/dev/null || fail "the job ended before any checkpoint"
  sleep 0.1
done
[ -f "$work/run/ckpt/last.json" ] || fail "no checkpoint after 60 s"
victim=$(cat "$work/run/pid.2")
start_ms=$(($(date +%s%N) / 1000000))
kill -9 "$victim"
# The survivors must give up within the timeout (plus start-up slack); 60 s means they hung.
for _ in $(seq 600); do
  kill -0 $job 2>/dev/null || break
  sleep 0.1
done
if kill -0 $job 2>/dev/null; then
  kill -9 $job
  fail "the surviving ranks were still running 60 s after rank 2 was killed"
fi
wait $job
rc=$?
elapsed_ms=$(($(date +%s%N) / 1000000 - start_ms))
elapsed=$(awk -v ms=$elapsed_ms 'BEGIN { printf "%.1f", ms / 1000 }')
echo "job exit code $rc, $elapsed s after SIGKILL of rank 2 (collective timeout $timeout_s s)"
# (Under --enable-recovery mpirun's own exit code is 0 even after MPI_Abort, so the ranks' reports are checked.)
for r in 0 1; do
  grep -Eq "rank $r: error: .*Missing: .*rank 2 \(pid $victim on [^)]+\)" "$work/log" ||
    fail "rank $r did not name the killed rank 2 (pid $victim)"
  grep -q "rank $r: process group broken by a collective timeout; calling MPI_Abort" "$work/log" ||
    fail "rank $r did not abort the job"
done
awk -v e="$elapsed" -v t="$timeout_s" 'BEGIN { exit !(e < t + 15) }' || fail "exit took $elapsed s (timeout $timeout_s s)"

# Resume from the last complete checkpoint at world sizes 3, 2 and 1; each finishes two more epochs.
epoch=$(grep -o '"epoch": [0-9]*' "$work/run/ckpt/last.json" | head -1 | grep -o '[0-9]*$')
target=$((epoch + 3))
for np in 3 2 1; do
  if [ "$np" = 1 ]; then
    "$driver" "$work/resume$np" $target "$work/run/ckpt/last" >"$work/log" 2>&1
  else
    "$mpiexec" -np $np --oversubscribe "$driver" "$work/resume$np" $target "$work/run/ckpt/last" >"$work/log" 2>&1
  fi
  rc=$?
  [ "$rc" -eq 0 ] || fail "resume at world size $np exited $rc"
  n=$(grep -c "done world=$np epoch=$target " "$work/log")
  [ "$n" -eq "$np" ] || fail "resume at world size $np: $n of $np ranks reached epoch $target"
  echo "resumed at world size $np from epoch $epoch to $target"
done
echo "rank-kill check passed"
