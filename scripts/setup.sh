#!/usr/bin/env bash
# Installs Volt's build and run dependencies from Debian packages (idempotent: installs only what is missing).
# Usage: scripts/setup.sh [--example]
#   --example: only what scripts/run_example.sh needs (scripts/deps.txt without the lines marked "# tests").
# The CUDA toolkit is optional: when /usr/local/cuda/bin/nvcc exists the build enables the CUDA backend.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
case "${1:-}" in
  "") skip='^$' ;;
  --example) skip='#[[:space:]]*tests[[:space:]]*$' ;;
  *) echo "setup: unknown option '$1' (usage: setup.sh [--example])" >&2; exit 2 ;;
esac
mapfile -t pkgs < <(grep -v -E "$skip" "$here/deps.txt" | sed -e 's/#.*//' -e 's/[[:space:]]//g' -e '/^$/d' | sort -u)
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
