#!/usr/bin/env bash
# One prepared GPU check, sized for a short device lease: run it on the GPU host from the project root with the
# bundle made here by `bash ../shared/gpu/pack.sh build .gpu` carried along, e.g. (device tool)
#   run  command: bash scripts/gpu_check.sh   carry: [".gpu"]   timeout_s: 540
# It works in order of what matters most and stops starting new work when its time budget
# (GPU_CHECK_SECONDS, default 480) runs out, so that whatever it reached comes back:
#   0. GPT-2 (issue 27): Volt's bf16-mixed step beside PyTorch's (../shared/anchors/gpt2_torch.py, eager and
#      torch.compile) in the same call, the step captured as a CUDA graph, the same step with the newest kernel
#      paths off (VOLT_DISABLE_KERNELS), 32-true, 350M with recomputation, bf16 loss parity from the reference's
#      init (and the captured step's losses against the eager step's), the Trainer at one rank (single device, DDP,
#      ZeRO-1 over NCCL; single device with the step captured), and the ratios (scripts/gpt2_gpu_summary.py). Its
#      core (the 124M step eager, captured and on the fallbacks, PyTorch's, the two loss parities) runs first, then
#      part 1, then the rest of part 0, so that the GPU-only tests run even when the longer runs use up the time;
#   1. the GPU-only tests (CUDA graphs, the captured step, every *Cuda* case, NCCL's watchdog, the tests that once
#      assumed no GPU);
#   2. the speed table: bench_train on the GPU with --cuda-graphs off and on (MLP 16 and 256, CNN 64, DDP at 1 rank),
#      the MLP with small products on cuBLAS (--small-gemm off) and with TF32, and the MLP with two loader threads
#      (--num-workers 2), Volt's small GEMM against cuBLAS; then the PyTorch reference for the same work
#      (../shared/anchors/mnist_torch.py) in the same call, on the same GPU;
#   3. every other test binary in full, test_distributed at 1 rank over NCCL;
#   4. one epoch of each MNIST example on the GPU;
#   5. compute-sanitizer memcheck over the captured training step, memcheck and racecheck over the small GEMM;
#   6. where the step's time goes: the simple profiler around the replayed step, and ncu's kernel times;
#   7. CPU data parallelism on the host's cores (no GPU in sight): benchmarks/ddp_scaling.sh --ceiling, 2 ranks.
# GPU_CHECK_PARTS picks parts by number (default "0 1 2 3 4 5 6 7"), e.g. GPU_CHECK_PARTS="2 6" for the speed only.
# The bundle must stay under the device tool's 64 MiB carry with the tracked files: pack.sh's Fashion-MNIST copy
# (30 MB) does not fit beside a 34 MB volt.txz, so a lease may carry a cut-down training set instead (the speed
# table needs only the files' format; the examples' accuracies then differ from a full run's).
# Results under $OUT (default /tmp/volt-gpu-out): summary.txt (one line per step as it ends, then the table),
# results.json (the host, commit and date; every step's status, exit status, time and gtest totals; every figure
# the steps printed as JSON lines, each with its step's name; the GPU-only cases that ran and those that
# skipped), bench.jsonl (bench_train's JSON lines alone) and logs.tgz (every log, and prof/: the profiler
# reports and ncu CSVs).
# Exit status: 0 when every step that ran passed, 1 when any step failed or timed out (a GPU-only case that
# skipped is listed, not a failure; a step left out for lack of time or of its program is a SKIPPED row),
# 2 when the bundle or the report is missing. The last lines printed are the table (scripts/gpu_check_report.py).
set -u
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bundle=${VOLT_GPU_BUNDLE:-$root/.gpu}
if [ "${1:-}" != --inner ]; then
  if [ ! -f "$bundle/run.sh" ]; then
    echo "gpu_check: no bundle at $bundle (make one with ../shared/gpu/pack.sh)" >&2; exit 2
  fi
  # run.sh unpacks the bundle and sets PATH/LD_LIBRARY_PATH/OPAL_PREFIX, then runs what it is given.
  exec bash "$bundle/run.sh" bash "${BASH_SOURCE[0]}" --inner
fi

out=$(realpath -m "${OUT:-/tmp/volt-gpu-out}")  # absolute: steps run in /tmp
export GTEST_COLOR=no  # plain totals lines, also under orterun
export VOLT_TEST_DATA=${VOLT_TEST_DATA:-$root/tests/data}  # the tests' data and the pinned corpus beside it
budget=${GPU_CHECK_SECONDS:-480}; start=$SECONDS
# step, skip_step, note, left and gpu_check_finish (the table, results.json and the exit status).
. "$root/scripts/gpu_check_lib.sh"
gpu_check_init
# GPU_CHECK_PARTS: which of the numbered parts below to run (default all), e.g. "2 6" for the speed table and
# the profiles only.
parts=" ${GPU_CHECK_PARTS:-0 1 2 3 4 5 6 7} "
want() { [[ $parts == *" $1 "* ]]; }
# At the end, whatever stopped the script: the report, then one archive of the logs and the profiler reports
# (few files come back from a device run); the check's status is the report's.
finish() {
  local rc=0
  gpu_check_finish || rc=$?
  (cd "$out" && tar czf logs.tgz logs prof 2>/dev/null && rm -rf logs prof)
  exit $rc
}
trap finish EXIT
# have PROGRAM: whether the bundle has it; a missing one is a SKIPPED row, never silently left out.
have() { command -v "$1" > /dev/null || { skip_step "${2:-$1}" "${3:-test}" "$1 not in the bundle"; return 1; }; }
mnist=${VOLT_MNIST_DIR:-/usr/share/datasets/fashion-mnist}
commit=$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)
gpu=$(nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader 2>&1 | head -1)
python3 -c 'import json, sys; print(json.dumps(dict(zip(sys.argv[1].split(), sys.argv[2:]))))' \
  "date commit gpu budget_s parts" "$(date -u +%FT%TZ)" "$commit" "$gpu" "$budget" "${parts# }" > "$out/header.json"
note "gpu_check $(date -u +%FT%TZ), budget ${budget}s, parts:${parts% }"
note "commit $commit, GPU: $gpu"
step --kind tool nvidia_smi 30 nvidia-smi  # no GPU (or no driver) fails the check here, whatever skips later

# The anchors (../shared/anchors: the PyTorch references) are looked for in $VOLT_ANCHORS, shared/anchors,
# ../shared/anchors and the bundle's anchors/ (copy them there when the device run carries only the bundle).
anchors=""
for d in ${VOLT_ANCHORS:-} "$root/shared/anchors" "$root/../shared/anchors" "$bundle/anchors"; do
  [ -f "$d/mnist_torch.py" ] && { anchors=$(cd "$d" && pwd); break; }
done
# anchor_step NAME CAP ARGS...: a PyTorch reference as a step, or a failed step when the anchors are missing.
anchor_step() {
  local name=$1 cap=$2 script=$3; shift 3
  if [ -z "$anchors" ]; then
    step --kind anchor "$name" 15 sh -c 'echo "gpu_check: no ../shared/anchors (set VOLT_ANCHORS)" >&2; exit 1'
  else
    step --kind anchor "$name" "$cap" env PYTHONUNBUFFERED=1 python3 "$anchors/$script" "$@"
  fi
}

# 0. GPT-2 (issue 27), first because it matters most: Volt's training step and PyTorch's (eager and torch.compile)
# at the same model, batch (GPU_CHECK_GPT2_BATCH, default 32: the largest of 8/16/32 both fit on an H200), T=1024
# and bf16-mixed, back to back; Volt's 32-true with TF32 off and its bf16 step without cuDNN's attention; 350M with
# and without recomputation; 774M with it (batch 8); loss parity from the reference's initial weights and token stream (bf16-mixed, 50
# steps, within 1%); the Trainer (examples/gpt2) on that stream as a single device and as one-rank DDP and ZeRO-1
# over NCCL, and once under the "ops" profiler. scripts/gpt2_gpu_summary.py prints the ratios and the issue's goals
# as one JSON line.
gb=${GPU_CHECK_GPT2_BATCH:-32}
user_disable=${VOLT_DISABLE_KERNELS-}  # what the caller set, for the parts that do not choose
gpt2_disable=$user_disable  # "all" when the new kernel paths failed the GPT-2 step and its fallbacks did not
par=/tmp/volt-gpu-runs/gpt2_parity
if want 0; then
have bench_gpt2 bench_gpt2_124M_bf16 bench && step bench_gpt2_124M_bf16 120 bench_gpt2 --accelerator gpu --model 124M \
  --batch "$gb" --seq 1024 --precision bf16-mixed --steps 20 --warmup 5 --repeats 3
# The same step captured as a CUDA graph after the warm-up and replayed ("cuda_graphs" says whether the capture
# worked; when it failed the steps ran eagerly and the line says why).
have bench_gpt2 bench_gpt2_124M_bf16_graphs bench && step bench_gpt2_124M_bf16_graphs 120 bench_gpt2 \
  --accelerator gpu --model 124M --batch "$gb" --seq 1024 --precision bf16-mixed --steps 20 --warmup 5 --repeats 3 \
  --cuda-graphs
# The same step with every switchable kernel path on its older fallback (VOLT_DISABLE_KERNELS=all,
# kernels/common/kernel_paths.h): what the new paths gain, measured in this call. Paths never run on a GPU before
# may fail there: when the step above printed no figures, the rest of part 0 keeps the fallbacks (part 1's tests
# then run without them and name the failing path's cases).
if have bench_gpt2 bench_gpt2_124M_bf16_fallbacks bench; then
  step bench_gpt2_124M_bf16_fallbacks 120 env VOLT_DISABLE_KERNELS=all bench_gpt2 --accelerator gpu --model 124M \
    --batch "$gb" --seq 1024 --precision bf16-mixed --steps 20 --warmup 5 --repeats 3
  if ! grep -q '"impl": *"volt"' "$logs/bench_gpt2_124M_bf16.log" &&
     grep -q '"impl": *"volt"' "$logs/bench_gpt2_124M_bf16_fallbacks.log"; then
    gpt2_disable=all
    export VOLT_DISABLE_KERNELS=all
  fi
fi
anchor_step anchor_gpt2_124M 240 gpt2_torch.py --model 124M --batch "$gb" --seq 1024 --steps 20 --warmup 5 \
  --mode "${GPU_CHECK_GPT2_MODE:-both}"
# Loss parity: the reference writes its initial weights and token stream, Volt starts from them.
mkdir -p "$par"
anchor_step anchor_gpt2_parity 120 gpt2_torch.py --model 124M --batch 8 --seq 1024 --steps 50 --warmup 0 \
  --mode eager --precision bf16-mixed --losses --init-out "$par/init.safetensors" --tokens-out "$par/tokens.bin"
if [ -f "$par/tokens.bin" ]; then
  have bench_gpt2 bench_gpt2_parity bench && step bench_gpt2_parity 120 bench_gpt2 --accelerator gpu --model 124M \
    --batch 8 --seq 1024 --precision bf16-mixed --steps 50 --warmup 0 --repeats 1 --init "$par/init.safetensors" \
    --tokens "$par/tokens.bin" --losses
  step --kind test gpt2_loss_parity 30 python3 "$root/scripts/gpt2_loss_parity.py" "$logs/anchor_gpt2_parity.log" \
    "$logs/bench_gpt2_parity.log" --rtol 0.01
  # The same 50 steps with the step captured as a CUDA graph after two eager ones (2 + the capture's replay + 47):
  # its losses must follow Volt's eager ones, or something the graph froze at capture (a step count, a learning
  # rate, a pointer) is wrong. Within 1 %, not bit for bit: the embedding's gradient adds with atomics.
  have bench_gpt2 bench_gpt2_parity_graphs bench && step bench_gpt2_parity_graphs 120 bench_gpt2 --accelerator gpu \
    --model 124M --batch 8 --seq 1024 --precision bf16-mixed --steps 47 --warmup 2 --repeats 1 \
    --init "$par/init.safetensors" --tokens "$par/tokens.bin" --losses --cuda-graphs
  step --kind test gpt2_graphs_loss_parity 30 python3 "$root/scripts/gpt2_loss_parity.py" \
    "$logs/bench_gpt2_parity.log" "$logs/bench_gpt2_parity_graphs.log" --rtol 0.01 --require-graphs
fi
fi
# Part 1 runs now, with the caller's kernel paths (by default all on, so that its cases name a failing path),
# before part 0's longer runs.
export VOLT_DISABLE_KERNELS=$user_disable

# 1. What has never run on a GPU, and the tests that once assumed there was none (between part 0's core and the
# rest of part 0).
if want 1; then
gpu_filter='*Cuda*:*CUDA*:*Gpu*:*GPU*:CudaGraph*:StepGraph*:CpuAllocator*:DeviceParser*'
for t in test_runtime test_kernels test_nn test_trainer test_data test_reliability; do
  have $t "gpu_$t" gpu_test && step "gpu_$t" 120 $t --gtest_filter="$gpu_filter"
done
have test_op_table gpu_test_op_table gpu_test && step gpu_test_op_table 180 test_op_table --gtest_filter='*Cuda*:*cuda*'
# NCCL's non-blocking communicator and its watchdog on the GPU (tests/distributed/test_nccl_cuda.cpp), one rank.
have test_distributed gpu_test_distributed gpu_test && step gpu_test_distributed 90 orterun -np 1 test_distributed \
  --gtest_filter='NcclWatchdog*'
# The model zoo (docs/zoo.md), one training step each on the GPU.
for z in vae vit resnet18 wgan_gp pinn lstm_lm ddpm_unet gnn; do
  zoo_args=(--accelerator gpu --steps 1)
  [ "$z" = lstm_lm ] && zoo_args+=(--data "$root/examples/corpus/licenses.txt")
  have "zoo_$z" "gpu_zoo_$z" gpu_test && step "gpu_zoo_$z" 60 "zoo_$z" "${zoo_args[@]}"
done
fi

# 0, continued: the longer GPT-2 runs (32-true, Volt's own attention, 350M, 774M, the Trainer, the profile) and the
# summary, with the kernel paths the first part settled on.
if want 0; then
[ -n "$gpt2_disable" ] && export VOLT_DISABLE_KERNELS=$gpt2_disable
have bench_gpt2 bench_gpt2_124M_fp32 bench && step bench_gpt2_124M_fp32 120 bench_gpt2 --accelerator gpu \
  --model 124M --batch "$gb" --seq 1024 --precision 32-true --steps 5 --warmup 2 --repeats 3
# Each bench_gpt2 line says which attention ran ("attention": cudnn | fused | mixed); here cuDNN's is switched off.
have bench_gpt2 bench_gpt2_124M_bf16_fused_attn bench && step bench_gpt2_124M_bf16_fused_attn 90 \
  env VOLT_DISABLE_CUDNN_SDPA=1 bench_gpt2 --accelerator gpu --model 124M --batch "$gb" --seq 1024 \
  --precision bf16-mixed --steps 10 --warmup 3 --repeats 3
for rc_flag in "" --recompute; do
  name="bench_gpt2_350M_bf16${rc_flag:+_recompute}"
  have bench_gpt2 "$name" bench && step "$name" 90 bench_gpt2 --accelerator gpu --model 350M --batch "$gb" \
    --seq 1024 --precision bf16-mixed --steps 5 --warmup 2 --repeats 1 $rc_flag
done
# 774M (36 blocks, 1280 wide: rows wider than the warp-per-row LayerNorm's 1024 f32 values) with recomputation.
have bench_gpt2 bench_gpt2_774M_bf16_recompute bench && step bench_gpt2_774M_bf16_recompute 90 bench_gpt2 \
  --accelerator gpu --model 774M --batch 8 --seq 1024 --precision bf16-mixed --steps 3 --warmup 1 --repeats 1 --recompute
if [ -f "$par/tokens.bin" ]; then
  # The Trainer on the same stream (400 windows of 1024): single device, then DDP and ZeRO-1 at one rank over NCCL,
  # 40 steps over several epochs (results.json's tokens/s is the whole run's: at stop 29's 11 steps the first step's
  # set-up made it 24 % lower than the step's own rate), no validation. The three run eagerly (ZeRO-1's step cannot
  # be captured, so graphs would not compare like with like); then the single device with its step captured.
  trainer_args=(--accelerator gpu --model 124M --vocab 50304 --seq-len 1024 --batch-size "$gb" --precision bf16-mixed
                --data "$par/tokens.bin" --no-shuffle --warmup-steps 0 --lr 6e-4 --weight-decay 0.1 --no-progress-bar)
  for s in single_device ddp zero1 single_device_graphs; do
    graphs=off; [ "$s" = single_device_graphs ] && graphs=on
    have gpt2 "trainer_gpt2_$s" bench && step --kind bench "trainer_gpt2_$s" 90 orterun -np 1 gpt2 \
      "${trainer_args[@]}" --strategy "${s%_graphs}" --cuda-graphs $graphs --max-steps 40 --limit-val-batches 0 \
      --out "/tmp/volt-gpu-runs/gpt2_$s"
    python3 -c 'import json, sys; print(json.dumps({"trainer": sys.argv[2], **json.load(open(sys.argv[1]))}))' \
      "/tmp/volt-gpu-runs/gpt2_$s/results.json" "$s" >> "$logs/trainer_gpt2_$s.log" 2>/dev/null
  done
  # Where the step's GPU time goes: the Trainer's step under the "ops" profiler (CUDA events around every launch),
  # then one steady-state step's kernels summed by name (scripts/trace_step_kernels.py).
  mkdir -p "$out/prof"
  have gpt2 prof_gpt2_ops && step --kind tool prof_gpt2_ops 90 gpt2 "${trainer_args[@]}" --max-steps 8 \
    --out /tmp/volt-gpu-runs/gpt2_prof --profiler ops --profiler-dir "$out/prof/gpt2"
  python3 "$root/scripts/trace_step_kernels.py" "$out/prof/gpt2/fit-trace.json" > "$logs/gpt2_step_kernels.log" 2>&1
  head -14 "$logs/gpt2_step_kernels.log" | sed 's/^/    /' | tee -a "$summary"
fi
python3 "$root/scripts/gpt2_gpu_summary.py" "$logs" > "$logs/gpt2_summary.log" 2>&1
sed 's/^/    /' "$logs/gpt2_summary.log" | tee -a "$summary"
export VOLT_DISABLE_KERNELS=$user_disable
fi

# 2. The speed table (us_per_step, samples/s), graphs off then on.
if want 2; then
for g in off on; do
  step bench_mlp_graphs_$g 60 bench_train --accelerator gpu --batch-size 16 --batch-size 256 --steps 2000 \
    --cuda-graphs $g
  step bench_cnn_graphs_$g 60 bench_train --accelerator gpu --model cnn --batch-size 64 --steps 500 --cuda-graphs $g
  step bench_ddp1_graphs_$g 60 orterun -np 1 bench_train --accelerator gpu --strategy ddp --batch-size 16 --steps 2000 \
    --cuda-graphs $g
  # cuDNN's timed algorithm choice (--benchmark on) against its heuristics (the default, above).
  step bench_cnn_benchmark_graphs_$g 60 bench_train --accelerator gpu --model cnn --batch-size 64 --steps 500 \
    --cuda-graphs $g --benchmark on
  # The single-device reference for the DDP row, also under orterun (its core binding moves figures by a few %).
  step bench_single_mpi_graphs_$g 60 orterun -np 1 bench_train --accelerator gpu --strategy single_device \
    --batch-size 16 --steps 2000 --cuda-graphs $g
done

# The MLP with small products on cuBLAS instead of Volt's kernel (--small-gemm off), and with TF32 allowed;
# then with the batches assembled by two loader threads (at batch 256 the gather of 256 scattered 3 KB rows
# costs the loop's thread ~100 us), Volt's kernel and cuBLAS, each twice (back to back, to show the spread).
step bench_mlp_cublas_graphs_on 60 bench_train --accelerator gpu --batch-size 16 --batch-size 256 --steps 2000 \
  --cuda-graphs on --small-gemm off
step bench_mlp_tf32_graphs_on 60 bench_train --accelerator gpu --batch-size 16 --batch-size 256 --steps 2000 \
  --cuda-graphs on --small-gemm off --tf32 on
for r in 1 2; do
  for s in on off; do
    step bench_mlp_workers2_small_gemm_${s}_$r 60 bench_train --accelerator gpu --batch-size 16 --batch-size 256 \
      --steps 3000 --cuda-graphs on --num-workers 2 --small-gemm $s
  done
done
step bench_mlp_workers2_graphs_off 60 bench_train --accelerator gpu --batch-size 16 --batch-size 256 --steps 2000 \
  --cuda-graphs off --num-workers 2
fi

# 2b. The PyTorch reference for the same work (../shared/anchors/mnist_torch.py: the MNIST MLP and CNN, eager, as a
# captured graph and in Lightning), in this call on this GPU, so that every comparison with PyTorch comes from one run
# (GPT-2's references run in part 0). Not finding the anchors fails the check.
if want 2; then
  if [ -f "$mnist/train-images-idx3-ubyte.gz" ]; then
    anchor_step anchor_mnist_torch 120 mnist_torch.py "$mnist" 2000
  else
    skip_step anchor_mnist_torch anchor "no Fashion-MNIST under $mnist"
  fi
fi

# 3. Everything else, in full.
# (test_nvtx is left out: it needs the NVTX injection stub that ctest preloads, which the bundle does not carry.)
if want 3; then
for t in test_runtime test_kernels test_nn test_trainer test_data test_reliability test_op_table; do
  have $t "all_$t" && step "all_$t" 240 $t
done
have test_distributed all_test_distributed_np1 && step all_test_distributed_np1 120 orterun -np 1 test_distributed
fi

# 4. The examples, one epoch each.
want 4 && for e in mnist_mlp mnist_cnn; do
  if [ ! -f "$mnist/train-images-idx3-ubyte.gz" ]; then
    skip_step "example_$e" example "no Fashion-MNIST under $mnist"; continue
  fi
  step "example_$e" 120 $e --accelerator gpu --epochs 1 --seed 1 --no-progress-bar --out /tmp/volt-gpu-runs/$e
  # The run's results.json as one JSON line of its log: a figure of results.json like the benchmarks'.
  python3 -c 'import json, sys; print(json.dumps({"example": sys.argv[2], **json.load(open(sys.argv[1]))}))' \
    /tmp/volt-gpu-runs/$e/results.json $e 2>/dev/null | tee -a "$logs/example_$e.log" | sed 's/^/    results: /' |
    tee -a "$summary"
done

# 5. Memory errors in the captured step, memory errors and shared-memory races in the small GEMM.
if ! want 5; then :
elif command -v compute-sanitizer > /dev/null; then
  step sanitize_step_graph 180 compute-sanitizer --tool memcheck --error-exitcode 9 \
    test_trainer --gtest_filter='StepGraphCuda*'
  step sanitize_small_gemm 120 compute-sanitizer --tool memcheck --error-exitcode 9 \
    test_kernels --gtest_filter='SmallGemmCuda*'
  step racecheck_small_gemm 120 compute-sanitizer --tool racecheck --error-exitcode 9 \
    test_kernels --gtest_filter='SmallGemmCuda*'
else
  note "compute-sanitizer: not on this host"
fi
# 6. Where the step's time goes: the simple profiler's host actions around the replayed step (it keeps the
# graph), and, when the host has ncu, every kernel's GPU time over a few replayed steps (node by node) and the
# whole graph's (one workload per replay). Reports under $OUT/prof.
prof=$out/prof; mkdir -p "$prof"
if want 6; then
step prof_mlp16 60 bench_train --accelerator gpu --batch-size 16 --steps 2000 --cuda-graphs on --profiler simple \
  --profiler-dir "$prof/mlp16"
step prof_mlp256 60 bench_train --accelerator gpu --batch-size 256 --steps 2000 --cuda-graphs on --profiler simple \
  --profiler-dir "$prof/mlp256"
step prof_mlp256_workers2 60 bench_train --accelerator gpu --batch-size 256 --steps 2000 --cuda-graphs on \
  --num-workers 2 --profiler simple --profiler-dir "$prof/mlp256_workers2"
step prof_cnn64 60 bench_train --accelerator gpu --model cnn --batch-size 64 --steps 500 --cuda-graphs on \
  --profiler simple --profiler-dir "$prof/cnn64"
if command -v ncu > /dev/null; then
  # ncu_kernels NAME SKIP COUNT ARGS...: gpu__time_duration of COUNT kernels after the first SKIP, as CSV.
  ncu_kernels() {
    local name=$1 skip=$2 count=$3; shift 3
    step "ncu_$name" 90 ncu --csv --print-units base --metrics gpu__time_duration.sum --launch-skip "$skip" \
      --launch-count "$count" --log-file "$prof/ncu_$name.csv" "$@"
    # Per kernel name: launches, GPU µs (scripts/ncu_summary.py); the heaviest five also go to summary.txt.
    python3 "$root/scripts/ncu_summary.py" "$prof/ncu_$name.csv" > "$prof/ncu_$name.txt" 2>&1
    head -6 "$prof/ncu_$name.txt" | sed 's/^/    /' | tee -a "$summary"
  }
  ncu_kernels mlp16 400 45 bench_train --accelerator gpu --batch-size 16 --steps 100 --cuda-graphs on
  ncu_kernels mlp256 400 45 bench_train --accelerator gpu --batch-size 256 --steps 100 --cuda-graphs on
  ncu_kernels cnn64 1500 120 bench_train --accelerator gpu --model cnn --batch-size 64 --steps 60 --cuda-graphs on
  ncu_kernels mlp16_graph 100 6 --graph-profiling graph bench_train --accelerator gpu --batch-size 16 --steps 100 \
    --cuda-graphs on
  ncu_kernels cnn64_graph 300 6 --graph-profiling graph bench_train --accelerator gpu --model cnn --batch-size 64 \
    --steps 60 --cuda-graphs on
else
  note "ncu: not on this host"
fi

fi

# 7. The CPU DDP ratio (one process against 2 ranks, MLP batch 256) with the machine's lockstep ceiling beside it,
# on a host with cores to spare; CUDA hidden so that the runs are CPU-only.
# All or nothing (ddp_scaling.sh prints at its end): skipped unless ~200 s are left.
if want 7 && [ "$(left)" -lt 200 ]; then
  note "ddp_scaling_cpu_np2 skipped ($(left)s left of the budget, it needs ~200s: run GPU_CHECK_PARTS=7 alone)"
elif want 7; then
  step ddp_scaling_cpu_np2 200 env CUDA_VISIBLE_DEVICES= MPIRUN=orterun bash "$root/benchmarks/ddp_scaling.sh" \
    --bench "$(command -v bench_train)" --ceiling --pairs 6
  grep -h '^{' "$logs/ddp_scaling_cpu_np2.log" | tail -1 | sed 's/^/    /' | tee -a "$summary"
fi

note "gpu_check done in $((SECONDS - start))s"
