#!/usr/bin/env bash
# FSDP checkpoints load at any world size and under any strategy, and back: zero_resume_driver --fsdp-net trains
# 4 steps under fsdp on 3 ranks; that checkpoint resumes under ddp on 2 ranks for 4 more, which resumes on a
# single device (no mpirun) for 4 more; the ddp checkpoint also resumes under fsdp on 3 ranks. Every resume
# checks that the loaded parameters and full-layout optimizer state equal the checkpoint exactly, and the final
# parameters of the 12-step legs must match an uninterrupted single-device run of 12 steps to 1e-9. A run saved
# with per-rank shard files resumes under fsdp (reading its own shards), under ddp, and under fsdp on 2 ranks.
# Usage: check_fsdp_resume.sh <mpiexec> <driver>
set -uo pipefail
mpiexec="$1"
driver="$2"
work="$(mktemp -d /tmp/volt_fsdp_resume.XXXXXX)"
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; echo "---- log"; cat "$work/log" 2>/dev/null; exit 1; }
run() { echo "+ $*" >>"$work/log"; "$@" >>"$work/log" 2>&1 || fail "$* exited with $?"; }

run "$driver" --fsdp-net single_device 12 "$work/reference"
run "$mpiexec" -np 3 --oversubscribe "$driver" --fsdp-net fsdp 4 "$work/fsdp_np3"
run "$mpiexec" -np 2 --oversubscribe "$driver" --fsdp-net ddp 8 "$work/ddp_np2" "$work/fsdp_np3"
run "$driver" --fsdp-net single_device 12 "$work/single_from_ddp" "$work/ddp_np2" "$work/reference"
run "$mpiexec" -np 3 --oversubscribe "$driver" --fsdp-net fsdp 12 "$work/fsdp_from_ddp" "$work/ddp_np2" "$work/reference"
# Sharded checkpoint files (checkpoint_layout = sharded) under fsdp: each rank writes its optimizer shards; the
# same layout resumes from them directly, ddp on 2 ranks from their consolidation.
run "$mpiexec" -np 3 --oversubscribe "$driver" --fsdp-net fsdp+sharded 4 "$work/fsdp_sharded_np3"
[ -f "$work/fsdp_sharded_np3.shards/rank-2-of-3.safetensors" ] || fail "no per-rank shard file under fsdp"
run "$mpiexec" -np 3 --oversubscribe "$driver" --fsdp-net fsdp 8 "$work/fsdp_from_sharded" "$work/fsdp_sharded_np3"
run "$mpiexec" -np 2 --oversubscribe "$driver" --fsdp-net ddp 8 "$work/ddp_from_sharded" "$work/fsdp_sharded_np3"
# fsdp at another world size: the sharded checkpoint is consolidated in memory and each rank copies its slices of
# the parameters into its shards (no gather); the run goes on to the reference's 12 steps.
run "$mpiexec" -np 2 --oversubscribe "$driver" --fsdp-net fsdp 12 "$work/fsdp_np2_from_sharded" "$work/fsdp_sharded_np3" "$work/reference"
[ "$(grep -c 'zero-resume ok' "$work/log")" = 9 ] || fail "expected nine legs to report ok"
[ "$(grep -c 'tensors equal to' "$work/log")" = 6 ] || fail "expected six resumes to check the loaded state"
grep 'max |params' "$work/log"
echo "fsdp-resume check passed"
