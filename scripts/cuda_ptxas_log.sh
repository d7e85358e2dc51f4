#!/usr/bin/env bash
# CUDA compiler launcher (CMAKE_CUDA_COMPILER_LAUNCHER): runs the compile command it is given (through ccache
# when that is the first word) and keeps ptxas's resource report (-Xptxas=-v: registers, shared memory, stack
# and spills per kernel and architecture) in <object>.ptxas.txt beside the object instead of the build log.
# scripts/kernel_resources.py reads those files. Other compiler messages reach stderr unchanged.
set -u
out=""
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
  if [ "${args[i]}" = "-o" ] && [ $((i + 1)) -lt ${#args[@]} ]; then out="${args[i + 1]}"; fi
done
err="$(mktemp)"
"$@" 2>"$err"
rc=$?
report='^ptxas info|bytes stack frame'
if [ -n "$out" ] && [ "$rc" -eq 0 ]; then
  grep -E "$report" "$err" >"$out.ptxas.txt.tmp" || true
  mv -f "$out.ptxas.txt.tmp" "$out.ptxas.txt"
fi
grep -vE "$report" "$err" >&2 || true
rm -f "$err"
exit "$rc"
