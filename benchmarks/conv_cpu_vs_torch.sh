#!/usr/bin/env bash
# Volt's CPU training step of a small ResNet (build/benchmarks/bench_conv_cpu) beside the same model in PyTorch
# (benchmarks/anchors/resnet_cpu_torch.py), with the same shapes, optimizer and thread count, alternating
# between the two ROUNDS times in one go so that both see the same machine load; prints every JSON line, the
# load (uptime) before and after, and per model the ratio volt / torch of the median step times of each round
# and the median of those ratios.
#   benchmarks/conv_cpu_vs_torch.sh [build-dir]
# Environment:
#   TORCH_PYTHON  the python with torch (default /work/.venv-torch/bin/python when present, else python3).
#                 PyTorch is not a Volt dependency; install it in a venv just for this, e.g.
#                 python3 -m venv /work/.venv-torch && /work/.venv-torch/bin/pip install torch numpy
#   THREADS       intra-op threads for both (default 1)
#   MODELS        space-separated "model:width" list (default "resnet8:16 resnet18:16")
#   BATCH (32), OPTIMIZER (sgd), STEPS (10), REPEATS (5), ROUNDS (3)
#   BASELINE_BENCH  optional: a bench_conv_cpu built from another commit (e.g. before a kernel change), run in
#                   each round too ("impl":"volt-baseline") and reported as a ratio to torch beside Volt's
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-$root/build}"
bench="$build/benchmarks/bench_conv_cpu"
anchor="$root/benchmarks/anchors/resnet_cpu_torch.py"
py="${TORCH_PYTHON:-}"
if [ -z "$py" ]; then
  if [ -x /work/.venv-torch/bin/python ]; then py=/work/.venv-torch/bin/python; else py=python3; fi
fi
threads="${THREADS:-1}" batch="${BATCH:-32}" optimizer="${OPTIMIZER:-sgd}"
steps="${STEPS:-10}" repeats="${REPEATS:-5}" rounds="${ROUNDS:-3}"
models="${MODELS:-resnet8:16 resnet18:16}"

if [ ! -x "$bench" ]; then
  echo "conv_cpu_vs_torch: $bench is missing; build it first: make -C $build bench_conv_cpu" >&2
  exit 1
fi
if ! torch_version=$("$py" -c 'import torch; print(torch.__version__)' 2>/dev/null); then
  echo "conv_cpu_vs_torch: PyTorch is not importable from TORCH_PYTHON=$py; install it into a venv" \
       "(python3 -m venv /work/.venv-torch && /work/.venv-torch/bin/pip install torch numpy) or point" \
       "TORCH_PYTHON at a python that has it" >&2
  exit 1
fi

echo "# conv_cpu_vs_torch: $(date -u +%Y-%m-%dT%H:%M:%SZ) $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?')" \
     "threads=$threads batch=$batch optimizer=$optimizer steps=$steps repeats=$repeats rounds=$rounds torch=$torch_version"
echo "# cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(nproc) cores"
echo "# load before: $(uptime)"
results="$(mktemp)"
trap 'rm -f "$results"' EXIT
common=(--batch-size "$batch" --steps "$steps" --warmup 3 --repeats "$repeats" --threads "$threads"
        --optimizer "$optimizer")
for r in $(seq 1 "$rounds"); do
  for mw in $models; do
    m="${mw%%:*}" w="${mw##*:}"
    line=$(OPENBLAS_NUM_THREADS="$threads" "$bench" --model "$m" --width "$w" "${common[@]}" 2>/dev/null)
    echo "$line"; echo "$r $line" >> "$results"
    if [ -n "${BASELINE_BENCH:-}" ]; then
      line=$(OPENBLAS_NUM_THREADS="$threads" "$BASELINE_BENCH" --model "$m" --width "$w" "${common[@]}" 2>/dev/null |
             sed 's/"impl":"volt"/"impl":"volt-baseline"/')
      echo "$line"; echo "$r $line" >> "$results"
    fi
    line=$(OMP_NUM_THREADS="$threads" "$py" "$anchor" --model "$m" --width "$w" "${common[@]}")
    echo "$line"; echo "$r $line" >> "$results"
  done
done
echo "# load after: $(uptime)"
python3 - "$results" <<'EOF'
import json, statistics, sys
rows = {}
for raw in open(sys.argv[1]):
    rnd, line = raw.split(" ", 1)
    j = json.loads(line)
    key = (j["model"], j["width"])
    impl = j["impl"] if j["impl"].startswith("volt") else "torch"
    rows.setdefault(key, {}).setdefault(int(rnd), {})[impl] = j
for (model, width), by_round in rows.items():
    ratios, base_ratios = [], []
    for rnd in sorted(by_round):
        v, t = by_round[rnd]["volt"], by_round[rnd]["torch"]
        ratio = v["ms_per_step_median"] / t["ms_per_step_median"]
        ratios.append(ratio)
        print(f"# {model} w{width} round {rnd}: volt {v['ms_per_step_median']:.2f} ms "
              f"(fwd {v['fwd_ms']:.2f} bwd {v['bwd_ms']:.2f} opt {v['opt_ms']:.2f}), torch "
              f"{t['ms_per_step_median']:.2f} ms (fwd {t['fwd_ms']:.2f} bwd {t['bwd_ms']:.2f} opt {t['opt_ms']:.2f}),"
              f" volt/torch {ratio:.2f}")
        if "volt-baseline" in by_round[rnd]:
            b = by_round[rnd]["volt-baseline"]
            base_ratios.append(b["ms_per_step_median"] / t["ms_per_step_median"])
            print(f"# {model} w{width} round {rnd}: baseline volt {b['ms_per_step_median']:.2f} ms "
                  f"(fwd {b['fwd_ms']:.2f} bwd {b['bwd_ms']:.2f}), baseline/torch {base_ratios[-1]:.2f}")
    print(f"RESULT {model} width {width}: volt/torch step time ratio, median of {len(ratios)} rounds: "
          f"{statistics.median(ratios):.2f} (rounds: {', '.join(f'{x:.2f}' for x in ratios)})")
    if base_ratios:
        print(f"RESULT {model} width {width}: baseline/torch step time ratio, median of {len(base_ratios)} rounds: "
              f"{statistics.median(base_ratios):.2f} (rounds: {', '.join(f'{x:.2f}' for x in base_ratios)})")
EOF
