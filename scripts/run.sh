#!/usr/bin/env bash
# The main job: set up, then train an MLP on MNIST on the best device here, offline, with a progress bar.
# Data: ../shared/data when present (a sibling checkout of the team's shared folder), else $VKBLAS_DATA, else
# ~/.cache/vkblas; extra arguments go to `vkblas train` (e.g. --model cnn --epochs 5 --device cpu).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-/tmp}
if [ -z "${VKBLAS_DATA:-}" ] && [ -d ../shared/data ]; then export VKBLAS_DATA=$PWD/../shared/data; fi
.venv/bin/vkblas info || true
exec .venv/bin/vkblas train mnist --model mlp --epochs 3 --out runs/mnist-mlp "$@"
