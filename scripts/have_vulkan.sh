#!/usr/bin/env bash
# Exit 0 when a Vulkan driver is installed (a loader, libvulkan.so.1, and at least one ICD manifest), else 1;
# with -v, say what was found or what is missing. Looks where the Vulkan loader looks:
#   VK_DRIVER_FILES / VK_ICD_FILENAMES (colon-separated manifest files or folders) when set, else the icd.d
#   folders under $XDG_CONFIG_DIRS, /etc, $XDG_DATA_HOME, $XDG_DATA_DIRS, /usr/local/share and /usr/share.
# VKBLAS_FS_ROOT (tests only) prefixes every system path, so a fake file system can be checked.
set -uo pipefail
root=${VKBLAS_FS_ROOT:-}
verbose=0
[ "${1:-}" = -v ] && verbose=1
say() { [ "$verbose" = 1 ] && echo "have_vulkan: $*" >&2; return 0; }

manifests_in() {  # every *.json under the given files/folders (colon-separated), one per line
  local IFS=: entry
  for entry in $1; do
    [ -n "$entry" ] || continue
    if [ -d "$root$entry" ]; then
      ls "$root$entry"/*.json 2>/dev/null
    elif [ -f "$root$entry" ]; then
      echo "$root$entry"
    fi
  done
}

explicit=${VK_DRIVER_FILES:-${VK_ICD_FILENAMES:-}}
if [ -n "$explicit" ]; then
  icds=$(manifests_in "$explicit")
else
  bases="${XDG_CONFIG_DIRS:-/etc/xdg}:/etc:${XDG_DATA_HOME:-${HOME:-/root}/.local/share}"
  bases="$bases:${XDG_DATA_DIRS:-/usr/local/share:/usr/share}:/usr/local/share:/usr/share"
  dirs=""
  IFS=: read -ra parts <<<"$bases"
  for base in "${parts[@]}"; do
    dirs="$dirs:$base/vulkan/icd.d"
  done
  icds=$(manifests_in "$dirs" | sort -u)
fi

loader=""
if [ -z "$root" ] && ldconfig -p 2>/dev/null | grep -q 'libvulkan\.so\.1 '; then
  loader=ldconfig
else
  for lib in /usr/lib/*/libvulkan.so.1 /usr/lib64/libvulkan.so.1 /usr/lib/libvulkan.so.1 \
             /lib/*/libvulkan.so.1 /usr/local/lib/libvulkan.so.1; do
    for found in $root$lib; do
      [ -e "$found" ] && loader=$found && break 2
    done
  done
fi

if [ -z "$icds" ]; then
  say "no Vulkan ICD manifest found (${explicit:+VK_DRIVER_FILES/VK_ICD_FILENAMES=$explicit, }icd.d folders)"
  exit 1
fi
if [ -z "$loader" ]; then
  say "ICD manifests found ($(echo "$icds" | tr '\n' ' ')) but no Vulkan loader (libvulkan.so.1)"
  exit 1
fi
say "loader: $loader; drivers: $(echo "$icds" | tr '\n' ' ')"
exit 0
