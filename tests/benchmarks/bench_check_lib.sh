# Shared by the tests/benchmarks/check_*.sh scripts (sourced): fail, run and the Fashion-MNIST directory.
fail() { echo "FAIL: $*"; exit 1; }
# mnist_dir_or_skip [WHAT]: prints the IDX directory ($VOLT_MNIST_DIR, else Debian's), or, when it has no
# training images, says so (naming WHAT needs them) and exits 77, CTest's skip status.
mnist_dir_or_skip() {
  local data="${VOLT_MNIST_DIR:-/usr/share/datasets/fashion-mnist}"
  if [ ! -f "$data/train-images-idx3-ubyte.gz" ] && [ ! -f "$data/train-images-idx3-ubyte" ]; then
    echo "SKIP: no Fashion-MNIST under $data${1:+ for $1} (Debian package dataset-fashion-mnist)" >&2
    exit 77
  fi
  echo "$data"
}
# run CMD...: CMD's stdout; when CMD fails, FAIL with its exit status and its stderr.
run() {
  local err rc=0 out
  err="$(mktemp)"
  out="$("$@" 2>"$err")" || rc=$?
  if ((rc)); then
    echo "FAIL: '$*' exited with $rc: $(cat "$err")" >&2
    rm -f "$err"
    exit 1
  fi
  rm -f "$err"
  printf '%s\n' "$out"
}
