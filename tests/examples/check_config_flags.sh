#!/usr/bin/env bash
# An example run driven by a YAML config file plus command-line overrides reaches the Trainer: the run stops at
# the overriding --max-steps, logs every log_every_n_steps, tests only limit_test_batches batches, writes no
# checkpoint (enable_checkpointing: false), and --print-config shows the merged values (benchmark and num_nodes
# included; a num_nodes no launcher matches stops the run with an error).
# Usage: check_config_flags.sh <mnist_mlp> [extra example flags...]. Exit 77 (CTest skip) without the dataset.
set -euo pipefail
exe="$1"
shift
data="${VOLT_MNIST_DIR:-/usr/share/datasets/fashion-mnist}"
if [ ! -f "$data/train-images-idx3-ubyte.gz" ] && [ ! -f "$data/train-images-idx3-ubyte" ]; then
  echo "SKIP: no Fashion-MNIST under $data (Debian package dataset-fashion-mnist)"
  exit 77
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cat >"$work/run.yaml" <<YAML
data: $data
batch_size: 32
trainer:
  max_steps: 500
  log_every_n_steps: 10
  limit_val_batches: 2
  limit_test_batches: 3
  num_sanity_val_steps: 0
  enable_checkpointing: false
  benchmark: true
  num_nodes: 1
YAML
fail() { echo "FAIL: $*"; exit 1; }
printed="$("$exe" --config "$work/run.yaml" --max-steps 25 --print-config "$@")"
grep -qx 'max_steps: 25' <<<"$printed" || fail "--print-config lacks max_steps: 25"$'\n'"$printed"
grep -qx 'batch_size: 32' <<<"$printed" || fail "--print-config lacks batch_size: 32"
grep -qx 'enable_checkpointing: false' <<<"$printed" || fail "--print-config lacks enable_checkpointing: false"
grep -qx 'benchmark: true' <<<"$printed" || fail "--print-config lacks benchmark: true"
grep -qx 'num_nodes: 1' <<<"$printed" || fail "--print-config lacks num_nodes: 1"
# Without the key, benchmark stays unset (null), and --no-benchmark wins over the file.
"$exe" --print-config "$@" | grep -qx 'benchmark: ~' || fail "--print-config without benchmark does not print it unset"
"$exe" --config "$work/run.yaml" --no-benchmark --print-config "$@" | grep -qx 'benchmark: false' ||
  fail "--no-benchmark does not override the file's benchmark: true"
# A num_nodes the launcher does not match stops the run before training, naming the numbers.
if "$exe" --config "$work/run.yaml" --num-nodes 2 --strategy ddp --max-steps 1 --out "$work/bad" "$@" >"$work/bad.log" 2>&1; then
  fail "--num-nodes 2 without a launcher trained"
fi
grep -q 'num_nodes=2 needs a launcher' "$work/bad.log" || fail "no num_nodes error: $(cat "$work/bad.log")"
"$exe" --config "$work/run.yaml" --max-steps 25 --no-progress-bar --out "$work/run" "$@" >"$work/log" 2>&1 ||
  { cat "$work/log"; fail "the run failed"; }
csv="$(ls "$work"/run/lightning_logs/version_*/metrics.csv)"
# Step rows at steps 9 and 19 (every 10 steps), and the last optimizer step is 24 (--max-steps 25 wins over 500).
steps="$(python3 - "$csv" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
train = [int(float(r["step"])) for r in rows if r.get("train_loss")]
# limit_test_batches: 3 -> 96 test samples, so the accuracy is a multiple of 1/96.
acc = [float(r["test_acc"]) for r in rows if r.get("test_acc")]
ok = len(acc) == 1 and abs(acc[0] * 96 - round(acc[0] * 96)) < 1e-4
print(" ".join(map(str, train)) + ("" if ok else " bad-test-acc:%s" % acc))
PY
)"
[ "$steps" = "9 19" ] || fail "train_loss rows at steps '$steps', expected '9 19' (and one test_acc over 96 samples)"$'\n'"$(cat "$csv")"
grep -q '"train_samples": 800' "$work/run/results.json" || fail "expected 25 steps x 32 samples in results.json: $(cat "$work/run/results.json")"
[ ! -e "$work/run/lightning_logs/version_0/checkpoints" ] || fail "a checkpoint was written with enable_checkpointing: false"
echo "config flags check passed"
