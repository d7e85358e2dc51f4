#!/usr/bin/env bash
# Sharded checkpoints load at any world size and under any strategy: zero_resume_driver trains 4 steps under
# zero2 on 3 ranks; that checkpoint resumes under ddp on 2 ranks (and, separately, under zero1 on 2 ranks) for 4
# more steps; each of those resumes on a single device (no mpirun) for 4 more. Every resume checks that the
# loaded parameters and full-layout optimizer state equal the checkpoint exactly, and the final parameters
# must match an uninterrupted single-device run of 12 steps to 1e-9. Usage: check_zero_resume.sh <mpiexec> <driver>
set -uo pipefail
mpiexec="$1"
driver="$2"
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
[ "$(grep -c 'zero-resume ok' "$work/log")" = 6 ] || fail "expected six legs to report ok"
[ "$(grep -c 'tensors equal to' "$work/log")" = 4 ] || fail "expected four resumes to check the loaded state"
grep 'max |params' "$work/log"
echo "zero-resume check passed"
