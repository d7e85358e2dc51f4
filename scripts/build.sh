#!/usr/bin/env bash
# Configures and builds Volt. Usage: scripts/build.sh [build-dir] [extra cmake args...]
#   VOLT_CUDA=AUTO|ON|OFF (default AUTO: the CUDA backend is built when nvcc is found)
#   CUDA_ARCHS (default "80-real;90": Ampere binaries plus Hopper binaries and PTX)
#   VOLT_BUILD_TARGETS (default all): the targets to build, space-separated (scripts/run_example.sh builds only
#   the example it runs)
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
# Configure quietly, but show everything it said when it fails (a missing nvcc under VOLT_CUDA=ON, a missing
# package), and say which build this is.
echo "build: configuring $build (VOLT_CUDA=${VOLT_CUDA:-AUTO}${cuda_args:+, ${cuda_args[0]#-D}})"
log="$(mktemp)"
if ! cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DVOLT_CUDA="${VOLT_CUDA:-AUTO}" "${cuda_args[@]}" "$@" \
    > "$log" 2>&1; then
  cat "$log" >&2
  rm -f "$log"
  echo "build: configuring $build failed (output above)" >&2
  exit 1
fi
grep -E '^-- Volt: CUDA backend' "$log" || true
rm -f "$log"
cmake --build "$build" -j"$(nproc)" ${VOLT_BUILD_TARGETS:+--target $VOLT_BUILD_TARGETS}
