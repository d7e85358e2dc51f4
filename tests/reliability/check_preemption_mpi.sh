#!/usr/bin/env bash
# Preemption under mpirun: preempt_driver trains under DDP on <np> ranks with auto_requeue and a fake scontrol
# first on PATH; once every rank has taken 3 optimizer steps, SIGUSR1 goes to every rank (mode "all", as SLURM
# signals every task), to the last rank only (mode "one") or to mpirun, which forwards it (mode "launcher"). Every rank must stop with the preempted exit code,
# rank 0 must have written the checkpoint and called `scontrol requeue 4242` exactly once, and the requeued job
# (the same command line) must end with final weights byte-identical to an uninterrupted <np>-rank run.
# With a fifth argument "async", every run also checkpoints after each optimizer step through AsyncCheckpointing
# (background writes under DDP; the preemption checkpoint itself is synchronous).
# Usage: check_preemption_mpi.sh <mpiexec> <preempt_driver> <np> all|one|launcher [async]
set -uo pipefail
mpiexec="$1"
driver="$2"
np="$3"
mode="$4"
extra=()
[ "${5:-}" = async ] && extra=(--async)
work="$(mktemp -d /tmp/volt_preempt_mpi.XXXXXX)"
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; echo "---- log"; cat "$work/log" 2>/dev/null; exit 1; }
unset SLURM_JOB_ID SLURM_ARRAY_JOB_ID SLURM_ARRAY_TASK_ID
export CUDA_VISIBLE_DEVICES=

mkdir -p "$work/bin"
printf '#!/bin/sh\necho "$@" >> "%s/scontrol.log"\n' "$work" > "$work/bin/scontrol"
chmod +x "$work/bin/scontrol"

echo "+ reference" >>"$work/log"
"$mpiexec" -np "$np" --oversubscribe "$driver" "$work/ref" 3 --ddp --resume auto "${extra[@]}" >>"$work/log" 2>&1 ||
  fail "the uninterrupted run exited with $?"
[ -f "$work/ref/final.safetensors" ] || fail "the uninterrupted run wrote no final weights"

echo "+ preempted run" >>"$work/log"
PATH="$work/bin:$PATH" SLURM_JOB_ID=4242 "$mpiexec" -np "$np" --oversubscribe "$driver" "$work/run" 3 --ddp \
  --resume auto --requeue --step-ms 10 "${extra[@]}" >>"$work/log" 2>&1 &
job=$!
for _ in $(seq 1 3000); do
  ready=1
  for ((r = 0; r < np; r++)); do [ -f "$work/run/progress.$r" ] || ready=0; done
  [ "$ready" = 1 ] && break
  sleep 0.01
done
[ "$ready" = 1 ] || { kill "$job" 2>/dev/null; fail "the ranks never got under way"; }
case "$mode" in
  all) for ((r = 0; r < np; r++)); do kill -USR1 "$(cat "$work/run/pid.$r")"; done ;;
  one) kill -USR1 "$(cat "$work/run/pid.$((np - 1))")" ;;
  launcher) kill -USR1 "$job" ;;  # mpirun forwards SIGUSR1 to every rank
  *) kill "$job"; fail "unknown mode $mode" ;;
esac
wait "$job"
rc=$?
[ "$rc" = 42 ] || fail "the preempted job exited with $rc, expected 42 (preempted)"
ck="$work/run/lightning_logs/version_0/checkpoints"
[ -f "$ck/preempted.json" ] && [ -f "$ck/preempted.safetensors" ] || fail "no preempted checkpoint in $ck"
[ -f "$ck/interrupted.json" ] && fail "an 'interrupted' checkpoint was written as well"
[ "$(cat "$work/scontrol.log" 2>/dev/null)" = "requeue 4242" ] ||
  fail "scontrol was called as '$(cat "$work/scontrol.log" 2>/dev/null)', expected one 'requeue 4242'"
step="$(grep -o 'step=[0-9]*' "$work/log" | tail -1)"
grep -q "requeued=1" "$work/log" || fail "rank 0 did not report the requeue"
[ -f "$work/run/final.safetensors" ] && fail "the preempted run finished training (the signal came too late)"

echo "+ requeued run" >>"$work/log"
PATH="$work/bin:$PATH" SLURM_JOB_ID=4242 "$mpiexec" -np "$np" --oversubscribe "$driver" "$work/run" 3 --ddp \
  --resume auto --requeue "${extra[@]}" >>"$work/log" 2>&1 || fail "the requeued run exited with $?"
cmp "$work/ref/final.safetensors" "$work/run/final.safetensors" >>"$work/log" 2>&1 ||
  fail "the requeued run's final weights differ from the uninterrupted run's"
[ "$(wc -l < "$work/scontrol.log")" = 1 ] || fail "the finished run called scontrol again"
if [ "${5:-}" = async ]; then
  ls "$ck" | grep -q '^epoch=.*-step=.*\.json$' || fail "no per-step checkpoint was written in the background"
fi
echo "preempted at $step on $np ranks (signal to $mode${5:+, $5 checkpoints}), resumed bit-identically"
echo "preemption check passed"
