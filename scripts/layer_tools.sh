#!/usr/bin/env bash
# Make sure gcc and the Vulkan headers are installed (benchmarks/kernel_stats.py builds its Vulkan layer with
# them; its test does too). Installs them when missing and we are root; exits non-zero, saying why, otherwise.
set -euo pipefail
if ! command -v gcc >/dev/null || [ ! -f /usr/include/vulkan/vk_layer.h ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "layer_tools.sh: installing gcc and libvulkan-dev" >&2
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq gcc libvulkan-dev >/dev/null
  else
    echo "layer_tools.sh: gcc or the Vulkan headers are missing (as root: apt-get install gcc libvulkan-dev)" >&2
    exit 1
  fi
fi
