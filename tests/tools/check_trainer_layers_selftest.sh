#!/usr/bin/env bash
# check_trainer_layers.py must fail when trainer/ has an include loop: copy trainer/ to a scratch folder, add one
# upward include (the base strategy including the DDP strategy, which includes it back), and expect a failure
# that names both files; the unchanged copy must pass. Usage: check_trainer_layers_selftest.sh [repository root]
set -euo pipefail
root="${1:-$(cd "$(dirname "$0")/../.." && pwd)}"
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
cp -r "$root/trainer" "$scratch/trainer"
checker="$root/tests/tools/check_trainer_layers.py"
python3 "$checker" "$scratch" >/dev/null || { echo "selftest: the unchanged copy fails" >&2; exit 1; }
sed -i '0,/^#include <volt/s//#include <volt\/trainer\/strategies\/ddp.h>\n#include <volt/' "$scratch/trainer/strategies/strategy.h"
if python3 "$checker" "$scratch" 2>"$scratch/err.txt"; then
  echo "selftest: a loop strategies/strategy <-> strategies/ddp was not detected" >&2
  exit 1
fi
grep -q "include loop between.*strategies/ddp.*strategies/strategy" "$scratch/err.txt" || {
  echo "selftest: the failure does not name the loop:" >&2
  cat "$scratch/err.txt" >&2
  exit 1
}
echo "check_trainer_layers selftest: an added loop strategies/strategy <-> strategies/ddp is detected and named"
