#!/usr/bin/env bash
# Bounded libFuzzer run for CTest: run_fuzz.sh <fuzzer> <scratch-corpus-dir> <seed-corpus-dir>
#   VOLT_FUZZ_SECONDS (default 60): total fuzzing time. Extra libFuzzer flags: VOLT_FUZZ_FLAGS.
# Fails on any crash, sanitizer report, leak, per-input timeout (10 s) or RSS above 2 GiB; the offending input
# is written to the working directory (crash-*, leak-*, timeout-*, oom-*).
set -euo pipefail
fuzzer="$1" scratch="$2" seeds="$3"
mkdir -p "$scratch"
# shellcheck disable=SC2086
exec "$fuzzer" -max_total_time="${VOLT_FUZZ_SECONDS:-60}" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
  ${VOLT_FUZZ_FLAGS:-} "$scratch" "$seeds"
