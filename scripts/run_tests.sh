#!/usr/bin/env bash
# One command from a fresh machine: install dependencies, build, and run the whole test suite.
# The main build enables CUDA when nvcc is present (tests then run on the CPU fallback when there is no GPU);
# a second, CPU-only build (VOLT_CUDA=OFF) is built and tested too unless VOLT_SKIP_CPU_ONLY=1.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$root/scripts/setup.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
bash "$root/scripts/build.sh" "$root/build"
(cd "$root/build" && ctest --output-on-failure -j2 --timeout 600)
if [ "${VOLT_SKIP_CPU_ONLY:-0}" != 1 ]; then
  VOLT_CUDA=OFF bash "$root/scripts/build.sh" "$root/build-cpu-only" -DVOLT_BUILD_EXAMPLES=OFF -DVOLT_BUILD_BENCHMARKS=OFF
  (cd "$root/build-cpu-only" && ctest --output-on-failure -j2 --timeout 600)
fi
