#!/usr/bin/env bash
# The main job: set up, then train an MLP on MNIST on the best device here, offline, with a progress bar.
# Data: $VKBLAS_DATA when set, else ../shared/data when present (scripts/data_env.sh), else ~/.cache/vkblas.
# Extra arguments go to `vkblas train` (e.g. --model cnn --epochs 5 --device cpu).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-/tmp}
source scripts/data_env.sh
.venv/bin/vkblas info || true
exec .venv/bin/vkblas train mnist --model mlp --epochs 3 --out runs/mnist-mlp "$@"
