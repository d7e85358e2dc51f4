#!/usr/bin/env bash
# Installs Volt's build and run dependencies from Debian packages (idempotent: installs only what is missing).
# Usage: scripts/setup.sh [--example]
#   --example: only what scripts/run_example.sh needs (scripts/deps.txt without the lines marked "# tests").
# The CUDA toolkit is optional: when /usr/local/cuda/bin/nvcc exists the build enables the CUDA backend, and (without
# --example) this also unpacks the headers of the "pip:" lines of deps.txt (the cuDNN frontend, for cuDNN's fused
# attention) into .deps/ in the checkout, where CMake finds them; nothing is downloaded at build time.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
case "${1:-}" in
  "") skip='^$' ;;
  --example) skip='#[[:space:]]*tests[[:space:]]*$' ;;
  *) echo "setup: unknown option '$1' (usage: setup.sh [--example])" >&2; exit 2 ;;
esac
mapfile -t pkgs < <(grep -v -E "$skip" "$here/deps.txt" | grep -v '^pip:' |
  sed -e 's/#.*//' -e 's/[[:space:]]//g' -e '/^$/d' | sort -u)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${#missing[@]} Debian package(s): ${missing[*]}"
  case " ${missing[*]} " in
    *" dataset-fashion-mnist "*) echo "setup: (dataset-fashion-mnist is the Fashion-MNIST training set, ~30 MB)" ;;
  esac
  SUDO=""
  if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
  echo "setup: apt-get update"
  $SUDO apt-get update -qq
  echo "setup: apt-get install (this can take a few minutes on a fresh machine)"
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
  echo "setup: done"
else
  echo "setup: all ${#pkgs[@]} dependencies present"
fi

# Header-only wheels (deps.txt "pip:<requirement> <folder>"): include/ of the wheel goes to .deps/<folder>/include,
# with the requirement in .deps/<folder>/REQUIREMENT, so a changed pin fetches again and an unchanged one does not.
# The wheel for one fixed platform and Python is fetched whatever this machine runs, since only its headers are used.
if [ -z "${1:-}" ] && { [ -x /usr/local/cuda/bin/nvcc ] || command -v nvcc > /dev/null; }; then
  deps_dir="$(cd "$here/.." && pwd)/.deps"
  while read -r req folder; do
    dest="$deps_dir/$folder"
    if [ -d "$dest/include" ] && [ "$(cat "$dest/REQUIREMENT" 2>/dev/null)" = "$req" ]; then
      echo "setup: $req headers present ($dest/include)"
      continue
    fi
    echo "setup: fetching the headers of $req (pip download) into $dest"
    tmp="$(mktemp -d)"
    if python3 -m pip download -q --timeout 20 --retries 1 --no-deps --only-binary=:all: \
         --platform manylinux_2_28_x86_64 --python-version 3.11 -d "$tmp" "$req" &&
       python3 - "$tmp" "$dest.new" <<'PY'
import pathlib, sys, zipfile
wheel = next(pathlib.Path(sys.argv[1]).glob("*.whl"))
with zipfile.ZipFile(wheel) as z:
    names = [n for n in z.namelist() if n.startswith("include/")]
    if not names:
        sys.exit(f"setup: {wheel.name} has no include/ folder")
    z.extractall(sys.argv[2], names)
PY
    then
      echo "$req" > "$dest.new/REQUIREMENT"
      rm -rf "$dest" && mv "$dest.new" "$dest"
      echo "setup: $req headers in $dest/include"
    else
      rm -rf "$dest.new"
      echo "setup: warning: could not fetch $req; the CUDA build runs without it (see scripts/deps.txt)" >&2
    fi
    rm -rf "$tmp"
  done < <(sed -n -e 's/#.*//' -e 's/^pip://p' "$here/deps.txt")
fi
