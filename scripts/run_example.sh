#!/usr/bin/env bash
# One command from a fresh machine: install what the example needs, build the libraries and the MNIST MLP example
# (nothing else: no tests, benchmarks or fuzzers), and train it for one epoch on the installed Fashion-MNIST.
# Usage: scripts/run_example.sh [example flags...]   e.g. --epochs 2, --accelerator cpu
#   With a GPU and nvcc, the CUDA backend is compiled for that GPU's architecture only (nvidia-smi's compute
#   capability); without a GPU there is nothing to run CUDA code on, so the build is CPU-only (the test command,
#   scripts/run_tests.sh, still builds and tests the CUDA backend).
#   VOLT_EXAMPLE_BUILD: the build folder (default build-example, apart from the test command's build/, so that
#   neither reconfigures the other). Every step prints its elapsed seconds.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${VOLT_EXAMPLE_BUILD:-$root/build-example}"
t0=$SECONDS
say() { echo "run_example: [$((SECONDS - t0))s] $*"; }

say "step 1/3: dependencies (scripts/setup.sh --example)"
bash "$root/scripts/setup.sh" --example

# The GPU's compute capability, e.g. "9.0" -> 90; empty without a GPU or driver.
arch=""
if command -v nvidia-smi > /dev/null; then
  arch="$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d ' .\r' || true)"
  [[ "$arch" =~ ^[0-9]+$ ]] || arch=""
fi
nvcc_found=0
if command -v nvcc > /dev/null || [ -x /usr/local/cuda/bin/nvcc ]; then nvcc_found=1; fi
if [ -n "$arch" ] && [ "$nvcc_found" = 1 ]; then
  export VOLT_CUDA=ON CUDA_ARCHS="$arch"
  say "GPU found (sm_$arch): building the CUDA backend for sm_$arch only"
elif [ -n "$arch" ]; then
  export VOLT_CUDA=OFF
  say "GPU found but no nvcc: building CPU-only (install the CUDA toolkit to train on the GPU)"
else
  export VOLT_CUDA=OFF
  say "no GPU found: building CPU-only (the test command still builds and tests the CUDA backend)"
fi

say "step 2/3: configure and build the libraries and mnist_mlp in $build (progress in [ %])"
VOLT_BUILD_TARGETS=mnist_mlp bash "$root/scripts/build.sh" "$build" -DVOLT_BUILD_TESTS=OFF \
  -DVOLT_BUILD_BENCHMARKS=OFF -DVOLT_DOCS=OFF -DVOLT_FUZZ=OFF

say "step 3/3: train mnist_mlp for one epoch"
"$build/examples/mnist_mlp" --epochs 1 --out "$root/runs/mnist_mlp" "$@"
say "done"
