#!/bin/bash
# SPDX-License-Identifier: MIT
# A Debian unstable root for the matrix-unit variants: its glslang compiles
# GL_KHR_cooperative_matrix and GL_EXT_bfloat16 (Debian 12's glslc does
# neither), its spirv-val checks them, and its lavapipe runs
# VK_KHR_cooperative_matrix (fp16 tiles of 8x8x8). Needs root (debootstrap,
# mount, chroot).
#
#   scripts/unstable-root.sh ROOT
#
# creates ROOT (once), installs the packages, mounts /proc and binds this
# checkout at its own path inside ROOT, and writes ROOT.bin/glslang,
# ROOT.bin/spirv-val, ROOT.bin/spirv-opt (for -DTILEKERNELS_GLSLANG,
# -DTILEKERNELS_SPIRV_VAL and -DTILEKERNELS_SPIRV_OPT)
# and ROOT.bin/run (runs a command inside ROOT, in the current directory).
set -euo pipefail
root=$(realpath -m "$1")
repo=$(realpath "$(dirname "$0")/..")
sudo=""
[ "$(id -u)" = 0 ] || sudo=sudo
if [ ! -x "$root/usr/bin/apt-get" ]; then
  command -v debootstrap >/dev/null || DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends debootstrap
  $sudo debootstrap --variant=minbase unstable "$root" >"$root.debootstrap.log" 2>&1 ||
    { tail -20 "$root.debootstrap.log"; exit 1; }
fi
mountpoint -q "$root/proc" || $sudo mount -t proc proc "$root/proc"
$sudo mkdir -p "$root$repo"
mountpoint -q "$root$repo" || $sudo mount --bind "$repo" "$root$repo"
$sudo cp /etc/resolv.conf "$root/etc/resolv.conf"
$sudo chroot "$root" sh -c 'DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
  glslang-tools spirv-tools mesa-vulkan-drivers libvulkan1 vulkan-validationlayers >/tmp/tk-apt.log 2>&1 || { tail -20 /tmp/tk-apt.log; exit 1; }'
mkdir -p "$root.bin"
for tool in glslang spirv-val spirv-opt; do
  printf '#!/bin/sh\nexec %s chroot %s sh -c '"'"'cd "$0" && exec %s "$@"'"'"' "$PWD" "$@"\n' "$sudo" "$root" "$tool" \
    >"$root.bin/$tool"
done
printf '#!/bin/sh\nexec %s chroot %s sh -c '"'"'cd "$0" && exec "$@"'"'"' "$PWD" "$@"\n' "$sudo" "$root" >"$root.bin/run"
chmod +x "$root.bin"/*
echo "unstable root: $root ($($root.bin/run glslang --version | head -1))"
