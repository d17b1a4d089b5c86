#!/usr/bin/env bash
# The checks of issue 9 that depend on the GPU's driver, for a machine with a real GPU (the H200): sin/cos of
# large arguments (drivers without range reduction), NaN/Inf/±0 semantics of every op against PyTorch, the
# survive-every-error sequence, and tensors beyond the binding (2 GiB there) and buffer limits. Runs each twice:
# compiled without and with naga's runtime bounds checks. Then the per-op host cost (benchmarks/ops.py --per-op).
#   VKBLAS_WITH_TORCH=1 bash scripts/gpu_checks.sh
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-/tmp} VKBLAS_BIG_TESTS=1 VKBLAS_WITH_TORCH=${VKBLAS_WITH_TORCH:-1}
.venv/bin/vkblas info
tests=(tests/test_nan_inf.py tests/test_special_values.py tests/test_edges.py tests/test_large_tensors.py
       tests/test_survive_errors.py tests/test_vulkan_backend.py)
.venv/bin/python -m pytest -q -p no:cacheprovider -m vulkan "${tests[@]}" "$@"
echo "--- again with runtime shader checks on"
VKBLAS_SHADER_CHECKS=1 .venv/bin/python -m pytest -q -p no:cacheprovider -m vulkan "${tests[@]}" "$@"
.venv/bin/python benchmarks/ops.py --per-op --devices vulkan
