#!/usr/bin/env bash
# Volt's own headers are included as <volt/<layer>/<file>.h> (or an umbrella such as <volt/nn.h>), everywhere:
# library sources, tests, examples, benchmarks and documents. Fails on an include of a layer folder without the
# volt/ prefix ("kernels/tensor.h", <nn/module.h>), which would compile only with the source root on the include
# path, and on a <volt/...> include that names no file of the tree. Usage: check_includes.sh [repository root]
set -euo pipefail
root="${1:-$(cd "$(dirname "$0")/../.." && pwd)}"
cd "$root"
layers='runtime|kernels|distributed|nn|data|trainer'
fail=0
files=()
while IFS= read -r -d '' f; do files+=("$f"); done < <(
  find . \( -path ./.git -o -path './build*' \) -prune -o -type f \
    \( -name '*.h' -o -name '*.cpp' -o -name '*.cu' -o -name '*.cuh' -o -name '*.md' \) -print0 | LC_ALL=C sort -z)
# Quoted includes of a test helper (tests/<folder>/x.h, found through tests/ on the test targets' path) are fine.
bad=""
while IFS= read -r hit; do
  path="$(sed -E 's/.*include[[:space:]]*[<"]([^>"]+)[>"].*/\1/' <<<"$hit")"
  if [[ "$hit" == *'"'* && -f "tests/$path" ]]; then continue; fi
  bad+="$hit"$'\n'
done < <(grep -nE "^[[:space:]]*#[[:space:]]*include[[:space:]]*[<\"]($layers)/" -- "${files[@]}" || true)
if [[ -n "$bad" ]]; then
  echo "check_includes: include Volt headers as <volt/<layer>/...>:" >&2
  echo "$bad" >&2
  fail=1
fi
n=0
while IFS= read -r hit; do
  path="$(sed -E 's/.*<volt\/([^>]+)>.*/\1/' <<<"$hit")"
  n=$((n + 1))
  if [[ "$path" == config.h ]]; then continue; fi
  if [[ ! -f "include/volt/$path" && ! -f "$path" ]]; then
    echo "check_includes: <volt/$path> is included but is not a file of the tree" >&2
    fail=1
  fi
done < <(grep -hoE "^[[:space:]]*#[[:space:]]*include[[:space:]]*<volt/[^>]+>" -- "${files[@]}" | LC_ALL=C sort -u)
if [[ "$fail" -ne 0 ]]; then exit 1; fi
echo "check_includes: ${#files[@]} files, ${n} distinct <volt/...> includes, all resolve"
