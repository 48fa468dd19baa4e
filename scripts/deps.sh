#!/bin/bash
# SPDX-License-Identifier: MIT
# Installs the Debian/Ubuntu packages tilekernels needs, if any is missing.
# Sourced by demo.sh and test.sh; uses sudo when not root.
set -euo pipefail
tk_packages=(cmake make g++ pkg-config libvulkan-dev glslc spirv-tools mesa-vulkan-drivers vulkan-validationlayers
             libgtest-dev libbenchmark-dev)
missing=()
for p in "${tk_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "tilekernels: installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" = 0 ] || sudo=sudo
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
