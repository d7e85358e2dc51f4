#!/usr/bin/env bash
# Checks scripts/kernel_resources.py on synthetic ptxas reports: a clean report passes and lists its kernels
# with their figures, a spill fails naming the kernel, and a __global__ kernel absent from the reports fails.
set -euo pipefail
script="$1"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/build/obj" "$tmp/src"
cat >"$tmp/src/k.cu" <<'SRC'
template <class T> __global__ void scale_kernel(T* p, int n) {}
__global__ void __launch_bounds__(256) fill_kernel(float* p) {}
SRC
report() {  # mangled name, registers, spill stores, spill loads, smem line
  printf "ptxas info    : Compiling entry function '%s' for 'sm_90'\n" "$1"
  printf "ptxas info    : Function properties for %s\n" "$1"
  printf "    0 bytes stack frame, %s bytes spill stores, %s bytes spill loads\n" "$3" "$4"
  printf "ptxas info    : Used %s registers, used 1 barriers, %s400 bytes cmem[0]\n" "$2" "$5"
}
{
  report _Z12scale_kernelIfEvPT_i 40 0 0 ""
  # A non-inlined __device__ function's own figures (a spill) must not be charged to the kernel before it.
  printf "ptxas info    : Function properties for _Z6helperf\n"
  printf "    64 bytes stack frame, 8 bytes spill stores, 8 bytes spill loads\n"
  report _Z11fill_kernelPf 18 0 0 "2048 bytes smem, "
} >"$tmp/build/obj/k.cu.o.ptxas.txt"
out="$(python3 "$script" "$tmp/build" --sources "$tmp/src")"
echo "$out"
grep -qE '^ +40 +0 +0 +0 +0  sm_90 +void scale_kernel<float>\(float\*, int\)$' <<<"$out"
grep -qE '^ +18 +2048 +0 +0 +0  sm_90 +fill_kernel\(float\*\)$' <<<"$out"
grep -q '2 kernel instantiations (2 kernels) in 1 objects; 0 spill' <<<"$out"
python3 "$script" "$tmp/build" --sources "$tmp/src" --summary --csv "$tmp/r.csv" >/dev/null
grep -q '^fill_kernel(float\*),sm_90,18,2048,0,0,0,k.cu.o,_Z11fill_kernelPf$' "$tmp/r.csv"

report _Z12scale_kernelIdEvPT_i 255 24 16 "" >>"$tmp/build/obj/k.cu.o.ptxas.txt"
if err="$(python3 "$script" "$tmp/build" --sources "$tmp/src" 2>&1 >/dev/null)"; then
  echo "FAIL: a spilling kernel passed"; exit 1
fi
grep -q 'SPILL: void scale_kernel<double>(double\*, int) (sm_90): 24 bytes spill stores, 16 bytes spill loads' <<<"$err"

printf '__global__ void never_built_kernel(int* p) {}\n' >"$tmp/src/more.cu"
sed -i '/scale_kernelId/,$d' "$tmp/build/obj/k.cu.o.ptxas.txt"
if err="$(python3 "$script" "$tmp/build" --sources "$tmp/src" 2>&1 >/dev/null)"; then
  echo "FAIL: a kernel missing from the reports passed"; exit 1
fi
grep -q 'MISSING: __global__ never_built_kernel' <<<"$err"

rm -f "$tmp/build/obj/k.cu.o.ptxas.txt"
if python3 "$script" "$tmp/build" --sources "$tmp/src" >/dev/null 2>&1; then
  echo "FAIL: an empty build passed"; exit 1
fi
echo "kernel_resources.py checks passed"
