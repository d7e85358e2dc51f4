#!/usr/bin/env bash
# bench_train --num-workers: the JSON line reports the number of threads the training loader was given (read back
# from the loader, so a flag that never reached the data module shows 0), and the threads change nothing but
# where the batches are assembled: 60 steps with 0 and with 2 workers give the same validation accuracy (the
# loader hands out the same batches in the same order). Bad values are refused. Usage:
# check_bench_train_workers.sh <bench_train>. Exit 77 (CTest skip) without the dataset.
set -euo pipefail
exe="$1"
source "$(dirname "${BASH_SOURCE[0]}")/bench_check_lib.sh"
data="$(mnist_dir_or_skip)"
args=(--data "$data" --batch-size 16 --steps 60)
zero="$(run "$exe" "${args[@]}")"
two="$(run "$exe" "${args[@]}" --num-workers 2)"
grep -q '"num_workers":0' <<<"$zero" || fail "no \"num_workers\":0 in: $zero"
grep -q '"num_workers":2' <<<"$two" || fail "no \"num_workers\":2 in: $two"
acc0="$(grep -E '^val_acc' <<<"$zero")" || fail "no val_acc line in: $zero"
acc2="$(grep -E '^val_acc' <<<"$two")" || fail "no val_acc line in: $two"
[ "$acc0" = "$acc2" ] || fail "validation accuracy differs with loader threads: '$acc0' vs '$acc2'"
if err="$("$exe" "${args[@]}" --num-workers -1 2>&1)"; then fail "--num-workers -1 was accepted"; fi
grep -q -- '--num-workers' <<<"$err" || fail "the refusal of --num-workers -1 does not name the flag: $err"
echo "OK: $acc0 with 0 and 2 loader threads"
