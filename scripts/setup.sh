#!/usr/bin/env bash
# Prepare a machine for vkblas: a virtual environment in .venv with the package (editable) and its test tools,
# and, when run as root on a machine with no Vulkan driver, Mesa's lavapipe (a CPU Vulkan device) from apt.
# Safe to run again: it only does what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! bash scripts/have_vulkan.sh; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "setup: installing lavapipe (mesa-vulkan-drivers, libvulkan1)"
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mesa-vulkan-drivers libvulkan1 >/dev/null
  else
    bash scripts/have_vulkan.sh -v || true
    echo "setup: no Vulkan driver found; vkblas will use the cpu backend (install your GPU's Vulkan driver," \
         "or as root: apt-get install mesa-vulkan-drivers libvulkan1)" >&2
  fi
fi

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip >/dev/null 2>&1 || true
.venv/bin/python -m pip install -q -e ".[test,server]"
if [ "${VKBLAS_WITH_TORCH:-0}" = 1 ]; then
  # the CPU build, as a reference in tests and benchmarks (a plain "torch" would pull a CUDA build of several GB).
  # VKBLAS_WITH_TORCH=1 promises the comparisons: a failed install fails here, and the tests fail rather than skip
  if ! .venv/bin/python -m pip install -q "torch==2.13.0"; then
    echo "setup: error: VKBLAS_WITH_TORCH=1 but torch 2.13.0 could not be installed" >&2
    exit 1
  fi
fi
