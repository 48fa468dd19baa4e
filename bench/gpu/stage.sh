#!/bin/bash
# SPDX-License-Identifier: MIT
# Stages binaries built here for a remote NVIDIA machine into DIR (default
# .gpu), so that several people can stage side by side (.gpu-gdn, ...).
# Usage: bench/gpu/stage.sh DIR BINARY [BINARY ...]
# Then run there: bash DIR/run.sh BINARY [ARGS...]   (carry DIR)
set -euo pipefail
root=$(git rev-parse --show-toplevel)
cd "$root"
dir=${1:?usage: stage.sh DIR BINARY...}; shift
case "$dir" in .gpu*) ;; *) echo "stage.sh: DIR must start with .gpu (ignored by git)" >&2; exit 2;; esac
mkdir -p "$dir/debs" "$dir/bin" "$dir/lib"
rm -f "$dir"/bin/* "$dir"/lib/*
if ! ls "$dir"/debs/libvulkan1_*.deb >/dev/null 2>&1; then
  o="-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists=/tmp/tk-amd64-lists"
  mkdir -p /tmp/tk-amd64-lists/partial
  apt-get $o update >/dev/null 2>&1 || true
  (cd "$dir/debs" && apt-get $o download libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2 >/dev/null 2>&1) ||
    { echo "stage.sh: could not download the Vulkan loader packages" >&2; exit 1; }
fi
for b in "$@"; do
  [ -x "$b" ] || { echo "stage.sh: $b is not an executable" >&2; exit 2; }
  cp "$b" "$dir/bin/"
  ldd "$b" | awk '/=> \//{print $3}' | { grep -vE '/(libc|libm|libdl|libpthread|librt|ld-linux|libgcc_s|libstdc\+\+|libvulkan)\.so' || true; } |
    while read -r lib; do cp -L "$lib" "$dir/lib/"; done
done
cat > "$dir/run.sh" <<'RUN'
#!/bin/bash
# On the NVIDIA machine: unpack the Vulkan loader, point it at the NVIDIA ICD, run a staged binary.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# Once per machine: unpacking and ldconfig cost about a second per call.
if [ ! -f /tmp/tk-loader-unpacked ]; then
  for f in "$here"/debs/*.deb; do dpkg -x "$f" / ; done; ldconfig && touch /tmp/tk-loader-unpacked
fi
for icd in /usr/share/vulkan/icd.d/nvidia_icd.json /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json; do
  [ -f "$icd" ] && { export VK_DRIVER_FILES=$icd; break; }
done
export LD_LIBRARY_PATH=$here/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
bin=$1; shift
exec "$here/bin/$bin" "$@"
RUN
du -sh "$dir" | awk '{print "staged " $2 ": " $1 " (keep what travels small)"}'
