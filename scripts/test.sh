#!/usr/bin/env bash
# Run the whole test suite: set-up, lint, every test on cpu and vulkan (lavapipe where no GPU), then the Vulkan
# tests again with naga's runtime shader checks on (VKBLAS_SHADER_CHECKS=1).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-/tmp} LP_NUM_THREADS=${LP_NUM_THREADS:-0}
source scripts/data_env.sh
.venv/bin/python -m ruff check src tests benchmarks examples
.venv/bin/python -m ruff format --check src tests benchmarks examples
.venv/bin/python -m pytest -q -p no:cacheprovider "$@"
echo "--- Vulkan tests again with runtime shader checks on"
VKBLAS_SHADER_CHECKS=1 .venv/bin/python -m pytest -q -p no:cacheprovider -m vulkan "$@"
