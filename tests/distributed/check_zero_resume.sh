#!/usr/bin/env bash
# Sharded checkpoints load at any world size and under any strategy: zero_resume_driver trains 4 steps under
# zero2 on 3 ranks; that checkpoint resumes under ddp on 2 ranks (and, separately, under zero1 on 2 ranks) for 4
# more steps; each of those resumes on a single device (no mpirun) for 4 more. Every resume checks that the
# loaded parameters and full-layout optimizer state equal the checkpoint exactly, and the final parameters
# must match an uninterrupted single-device run of 12 steps to 1e-9.
# Sharded layout: zero2 on 3 ranks writes one shard file per rank; that checkpoint resumes under zero2 on 3 ranks
# (each rank reading its own shards), under ddp on 2 ranks and on a single device (consolidated in memory), all
# continuing to the same reference; `volt_checkpoint consolidate` turns it into the full checkpoint, byte for
# byte the one the full-layout zero2 leg wrote.
# Usage: check_zero_resume.sh <mpiexec> <driver> [<volt_checkpoint>]
set -uo pipefail
mpiexec="$1"
driver="$2"
tool="${3:-}"
work="$(mktemp -d /tmp/volt_zero_resume.XXXXXX)"
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; echo "---- log"; cat "$work/log" 2>/dev/null; exit 1; }
run() { echo "+ $*" >>"$work/log"; "$@" >>"$work/log" 2>&1 || fail "$* exited with $?"; }

run "$driver" single_device 12 "$work/reference"
run "$mpiexec" -np 3 --oversubscribe "$driver" zero2 4 "$work/zero2_np3"
run "$mpiexec" -np 2 --oversubscribe "$driver" ddp 8 "$work/ddp_np2" "$work/zero2_np3"
run "$driver" single_device 12 "$work/single_from_ddp" "$work/ddp_np2" "$work/reference"
run "$mpiexec" -np 2 --oversubscribe "$driver" zero1 8 "$work/zero1_np2" "$work/zero2_np3"
run "$driver" single_device 12 "$work/single_from_zero1" "$work/zero1_np2" "$work/reference"
run "$mpiexec" -np 3 --oversubscribe "$driver" zero2+sharded 4 "$work/zero2_sharded_np3"
for r in 0 1 2; do
  [ -f "$work/zero2_sharded_np3.shards/rank-$r-of-3.safetensors" ] || fail "rank $r wrote no shard file"
done
run "$mpiexec" -np 3 --oversubscribe "$driver" zero2+sharded 8 "$work/zero2_sharded_again" "$work/zero2_sharded_np3"
run "$driver" single_device 12 "$work/single_from_zero2_sharded" "$work/zero2_sharded_again" "$work/reference"
run "$mpiexec" -np 2 --oversubscribe "$driver" ddp 8 "$work/ddp_from_sharded" "$work/zero2_sharded_np3"
run "$driver" single_device 12 "$work/single_from_ddp_sharded" "$work/ddp_from_sharded" "$work/reference"
run "$driver" single_device 12 "$work/single_from_sharded" "$work/zero2_sharded_np3" "$work/reference"
[ "$(grep -c 'zero-resume ok' "$work/log")" = 12 ] || fail "expected twelve legs to report ok"
[ "$(grep -c 'tensors equal to' "$work/log")" = 9 ] || fail "expected nine resumes to check the loaded state"
if [ -n "$tool" ]; then
  run "$tool" consolidate "$work/zero2_sharded_np3" "$work/zero2_consolidated"
  for ext in safetensors json; do
    cmp "$work/zero2_consolidated.$ext" "$work/zero2_np3.$ext" >>"$work/log" 2>&1 ||
      fail "the consolidated .$ext differs from the full-layout checkpoint's"
  done
  rm "$work/zero2_sharded_np3.shards/rank-1-of-3.safetensors"
  if "$tool" consolidate "$work/zero2_sharded_np3" "$work/never" >"$work/missing.txt" 2>&1; then
    fail "consolidating without rank 1's shards succeeded"
  fi
  grep -q 'zero2_sharded_np3.shards/rank-1-of-3.safetensors of rank 1 is missing' "$work/missing.txt" ||
    fail "the error does not name the missing shard file: $(cat "$work/missing.txt")"
else
  echo "volt_checkpoint was not built (VOLT_BUILD_EXAMPLES=OFF): its legs are skipped"
fi
grep 'max |params' "$work/log"
echo "zero-resume check passed"
