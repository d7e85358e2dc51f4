#!/usr/bin/env bash
# The build scripts cannot pass by accident, checked in a few seconds without building anything:
#  1. .ci/run requires the CUDA backend: it reaches the configure with VOLT_CUDA=ON and CUDA_ARCHS 90, and a
#     configure that fails (here a stand-in cmake on PATH that fails like CMakeLists.txt does without nvcc) fails
#     it, with the configure's output shown (scripts/build.sh discards it only on success);
#  2. scripts/build.sh builds only VOLT_BUILD_TARGETS when given;
#  3. scripts/run_example.sh builds only mnist_mlp, without tests or benchmarks, in its own folder: CPU-only with
#     one line saying so when nvidia-smi finds no GPU, the CUDA backend for the GPU's architecture alone when it
#     finds one (compute capability 9.0 -> sm_90), and passes its flags to the example;
#  4. where this runs as root with unshare(1): the real CMake configure of this tree with VOLT_CUDA=ON in a mount
#     namespace where /usr/local/cuda is empty and no nvcc is on PATH fails, and says why.
# Usage: check_build_scripts.sh PROJECT_ROOT
set -u
root=$(cd "${1:?usage: check_build_scripts.sh PROJECT_ROOT}" && pwd)
fail() { echo "FAIL: $*"; exit 1; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

# A cmake that records its arguments; a configure with -DVOLT_CUDA=ON fails as Volt's CMakeLists.txt does when it
# finds no nvcc, any other configure and every build succeed.
mkdir -p "$tmp/bin"
cat > "$tmp/bin/cmake" <<SH
#!/bin/sh
echo "\$*" >> "$tmp/cmake.calls"
case " \$* " in
  *" --build "*) mkdir -p "\$2/examples"
    printf '#!/bin/sh\necho "example ran: \$*"\n' > "\$2/examples/mnist_mlp"; chmod +x "\$2/examples/mnist_mlp"
    exit 0;;
  *" -DVOLT_CUDA=ON "*) echo "-- Looking for a CUDA compiler - NOTFOUND"
    echo "CMake Error at CMakeLists.txt:98 (message):"; echo "  VOLT_CUDA=ON but no CUDA compiler (nvcc) was found"
    exit 1;;
esac
echo "-- Volt: CUDA backend 0"
SH
chmod +x "$tmp/bin/cmake"

# 1. .ci/run: setup.sh checks the installed packages first (all present where the tests were built).
rc=0
PATH="$tmp/bin:$PATH" bash "$root/.ci/run" > "$tmp/ci.out" 2>&1 || rc=$?
[ $rc -ne 0 ] || { cat "$tmp/ci.out"; fail ".ci/run passed although its configure failed"; }
grep -q -- '-DVOLT_CUDA=ON .*-DCMAKE_CUDA_ARCHITECTURES=90' "$tmp/cmake.calls" ||
  fail ".ci/run did not configure with VOLT_CUDA=ON and sm_90: $(cat "$tmp/cmake.calls")"
grep -q 'VOLT_CUDA=ON but no CUDA compiler (nvcc) was found' "$tmp/ci.out" ||
  { cat "$tmp/ci.out"; fail "no configure output"; }
grep -q 'build: configuring .* failed (output above)' "$tmp/ci.out" || fail "build.sh did not say the configure failed"
if grep -q -- '--build' "$tmp/cmake.calls"; then fail ".ci/run built after a failed configure"; fi

# 2. build.sh with VOLT_BUILD_TARGETS: a quiet configure (one status line) and a build of those targets only.
: > "$tmp/cmake.calls"
out=$(PATH="$tmp/bin:$PATH" VOLT_CUDA=OFF VOLT_BUILD_TARGETS="volt_trainer mnist_mlp" bash "$root/scripts/build.sh" \
  "$tmp/build" 2>&1) || fail "build.sh failed: $out"
[ "$(printf '%s\n' "$out" | tail -1)" = "-- Volt: CUDA backend 0" ] || fail "build.sh printed: $out"
grep -q -- "--build $tmp/build -j[0-9]* --target volt_trainer mnist_mlp\$" "$tmp/cmake.calls" ||
  fail "build.sh's build: $(cat "$tmp/cmake.calls")"
if grep -q 'CMAKE_CUDA_ARCHITECTURES' "$tmp/cmake.calls"; then fail "VOLT_CUDA=OFF still set CUDA architectures"; fi

# 3. run_example.sh without a GPU (nvidia-smi fails as it does without a driver), then with an sm_90 GPU.
printf '#!/bin/sh\necho "NVIDIA-SMI has failed" >&2\nexit 9\n' > "$tmp/bin/nvidia-smi"
printf '#!/bin/sh\necho "Cuda compilation tools, release 13.0"\n' > "$tmp/bin/nvcc"
chmod +x "$tmp/bin/nvidia-smi" "$tmp/bin/nvcc"
: > "$tmp/cmake.calls"
out=$(PATH="$tmp/bin:$PATH" VOLT_EXAMPLE_BUILD="$tmp/ex" bash "$root/scripts/run_example.sh" --accelerator cpu 2>&1) ||
  fail "run_example.sh failed: $out"
[ "$(printf '%s\n' "$out" | grep -c 'CPU-only')" = 1 ] || fail "no single CPU-only line: $out"
printf '%s\n' "$out" | grep -q 'no GPU found: building CPU-only' || fail "run_example.sh printed: $out"
printf '%s\n' "$out" | grep -q '^example ran: --epochs 1 --out .*/runs/mnist_mlp --accelerator cpu$' ||
  fail "the example's command line: $out"
printf '%s\n' "$out" | grep -q 'run_example: \[[0-9]*s\] step 2/3: configure and build' || fail "no progress: $out"
grep -q -- "-B $tmp/ex .*-DVOLT_CUDA=OFF -DVOLT_BUILD_TESTS=OFF -DVOLT_BUILD_BENCHMARKS=OFF" "$tmp/cmake.calls" ||
  fail "run_example.sh's configure without a GPU: $(cat "$tmp/cmake.calls")"
grep -q -- "--build $tmp/ex -j[0-9]* --target mnist_mlp\$" "$tmp/cmake.calls" ||
  fail "run_example.sh's build: $(cat "$tmp/cmake.calls")"
printf '#!/bin/sh\necho "9.0"\n' > "$tmp/bin/nvidia-smi"
rm -f "$tmp/cmake.calls"
# The stand-in cmake fails a VOLT_CUDA=ON configure (as without nvcc), so the GPU run stops after it.
out=$(PATH="$tmp/bin:$PATH" VOLT_EXAMPLE_BUILD="$tmp/ex" bash "$root/scripts/run_example.sh" 2>&1) &&
  fail "run_example.sh went on after a failed configure: $out"
printf '%s\n' "$out" | grep -q 'GPU found (sm_90): building the CUDA backend for sm_90 only' ||
  fail "run_example.sh with a GPU printed: $out"
grep -q -- "-DVOLT_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 " "$tmp/cmake.calls" ||
  fail "run_example.sh's configure with an sm_90 GPU: $(cat "$tmp/cmake.calls")"

# 4. The real configure without nvcc (root and unshare only; a configure-only run of a second or two).
if [ "$(id -u)" = 0 ] && command -v unshare > /dev/null && unshare -m true 2> /dev/null; then
  rc=0
  unshare -m bash -c 'mount -t tmpfs none /usr/local/cuda 2>/dev/null || mkdir -p /usr/local/cuda
    PATH=$(printf %s "$PATH" | tr : "\n" | grep -v cuda | paste -sd:)
    nvcc --version > /dev/null 2>&1 && exit 99
    VOLT_CUDA=ON bash "$1/scripts/build.sh" "$2" -DVOLT_BUILD_TESTS=OFF -DVOLT_BUILD_EXAMPLES=OFF \
      -DVOLT_BUILD_BENCHMARKS=OFF' _ "$root" "$tmp/real" > "$tmp/real.out" 2>&1 || rc=$?
  [ $rc -ne 99 ] || fail "a working nvcc is still on PATH inside the namespace"
  [ $rc -eq 1 ] || { cat "$tmp/real.out"; fail "configure without nvcc under VOLT_CUDA=ON: status $rc, expected 1"; }
  grep -q 'VOLT_CUDA=ON but no CUDA compiler (nvcc) was found' "$tmp/real.out" ||
    { cat "$tmp/real.out"; fail "the real configure did not say why it failed"; }
  echo "real configure without nvcc: failed as it should"
else
  echo "note: not root or no unshare; the real configure without nvcc was not tried"
fi
echo "OK: .ci/run requires CUDA and fails on a failed configure, showing its output;" \
  "run_example.sh builds only mnist_mlp"
