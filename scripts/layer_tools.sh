#!/usr/bin/env bash
# Make sure gcc, the Vulkan headers and zstd are installed (benchmarks/kernel_stats.py builds its Vulkan layer with
# the first two and decompresses NVIDIA's pipeline cache data with zstd; its tests do too). Installs them when
# missing and we are root; exits non-zero, saying why, otherwise.
set -euo pipefail
if ! command -v gcc >/dev/null || [ ! -f /usr/include/vulkan/vk_layer.h ] || ! command -v zstd >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "layer_tools.sh: installing gcc, libvulkan-dev and zstd" >&2
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq gcc libvulkan-dev zstd >/dev/null
  else
    echo "layer_tools.sh: gcc, the Vulkan headers or zstd are missing (as root: apt-get install gcc libvulkan-dev zstd)" >&2
    exit 1
  fi
fi
