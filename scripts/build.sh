#!/usr/bin/env bash
# Configures and builds Volt. Usage: scripts/build.sh [build-dir] [extra cmake args...]
#   VOLT_CUDA=AUTO|ON|OFF (default AUTO: the CUDA backend is built when nvcc is found)
#   CUDA_ARCHS (default "80-real;90": Ampere binaries plus Hopper binaries and PTX)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-$root/build}"
shift || true
export CCACHE_BASEDIR="$root"
export CCACHE_NOHASHDIR=1
cuda_args=()
if [ "${VOLT_CUDA:-AUTO}" != OFF ]; then
  cuda_args+=("-DCMAKE_CUDA_ARCHITECTURES=${CUDA_ARCHS:-80-real;90}")
fi
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DVOLT_CUDA="${VOLT_CUDA:-AUTO}" "${cuda_args[@]}" "$@" >/dev/null
cmake --build "$build" -j"$(nproc)"
