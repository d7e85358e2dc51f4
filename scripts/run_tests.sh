#!/usr/bin/env bash
# One command from a fresh machine: install dependencies, build, and run the whole test suite.
#  1. The main build (gcc) enables CUDA when nvcc is present (tests then run on the CPU fallback when there is
#     no GPU); all of CTest runs on it.
#  2. A sanitized CPU-only build (clang, VOLT_CUDA=OFF, AddressSanitizer + UndefinedBehaviorSanitizer,
#     libFuzzer targets; libraries and tests only) runs CTest again, MPI tests included (all but
#     consumer_add_subdirectory and consumer_shared, which would only build an unsanitized Volt from source
#     again), then a bounded
#     run of every fuzz target (VOLT_FUZZ_SECONDS each, default 60). Any sanitizer report, leak, fuzzer crash
#     or hang fails. VOLT_SKIP_SANITIZED=1 (or the older VOLT_SKIP_CPU_ONLY=1) skips it.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$root/scripts/setup.sh"
# ccache keys on paths relative to the checkout, so a fresh clone in another folder (CI) reuses earlier builds;
# exported here too for the consumer tests, which configure and build Volt again from inside CTest.
export CCACHE_BASEDIR="$root" CCACHE_NOHASHDIR=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
bash "$root/scripts/build.sh" "$root/build"
(cd "$root/build" && ctest --output-on-failure -j2 --timeout 600)
if [ "${VOLT_SKIP_SANITIZED:-${VOLT_SKIP_CPU_ONLY:-0}}" != 1 ]; then
  CC=clang CXX=clang++ VOLT_CUDA=OFF bash "$root/scripts/build.sh" "$root/build-asan" \
    -DVOLT_SANITIZE=ON -DVOLT_FUZZ=ON -DVOLT_BUILD_EXAMPLES=OFF -DVOLT_BUILD_BENCHMARKS=OFF
  # Leaks are errors except those allocated inside Open MPI (tests/sanitizers/lsan.supp); UB is fatal.
  export ASAN_OPTIONS="detect_leaks=1:check_initialization_order=1:strict_init_order=1:detect_odr_violation=2"
  export LSAN_OPTIONS="suppressions=$root/tests/sanitizers/lsan.supp:print_suppressions=0"
  export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
  export VOLT_FUZZ_SECONDS="${VOLT_FUZZ_SECONDS:-60}"
  (cd "$root/build-asan" && ctest --output-on-failure -j2 --timeout 600 -LE fuzz -E '^consumer_(add_subdirectory|shared)$')
  (cd "$root/build-asan" && ctest --output-on-failure -j2 -L fuzz)
fi
