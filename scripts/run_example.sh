#!/usr/bin/env bash
# One command from a fresh machine: install dependencies, build, and train the MNIST MLP example for one epoch
# on the installed Fashion-MNIST (CPU, or a GPU when one is usable).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$root/scripts/setup.sh"
bash "$root/scripts/build.sh" "$root/build"
exec "$root/build/examples/mnist_mlp" --epochs 1 --out "$root/runs/mnist_mlp" "$@"
