#!/bin/bash
# SPDX-License-Identifier: MIT
# On the NVIDIA machine: runs the benchmarks matching FILTER with the
# driver's shader disk cache in a fresh folder and copies every cache entry
# (one per compiled pipeline) to $OUT/glcache, with the machine's nvdisasm,
# for bench/gpu/sass.py to disassemble here. NVIDIA's Vulkan driver returns
# no internal representation through VK_KHR_pipeline_executable_properties;
# its cache entries hold the compiled SASS (bench/notes/2026-11-gdn-chunk-o-recompute-wu.md).
# Usage (on the GPU machine): bash bench/gpu/shader_cache.sh DIR FILTER
# (FILTER is google benchmark's regex; the names end in
# /iterations:N/manual_time, so a FILTER ending in $ at the arguments
# matches nothing.)
dir=$1; filter=$2
cache=/tmp/tk-glcache
rm -rf "$cache" && mkdir -p "$cache" "$OUT/glcache"
__GL_SHADER_DISK_CACHE=1 __GL_SHADER_DISK_CACHE_PATH=$cache __GL_SHADER_DISK_CACHE_SKIP_CLEANUP=1 \
  bash "$dir/run.sh" tilekernels_bench --benchmark_filter="$filter" 2>&1 | grep -E "^BM_"
i=0
for f in $(find "$cache" -name '*.bin'); do cp "$f" "$OUT/glcache/entry$i.bin"; i=$((i + 1)); done
echo "shader_cache.sh: $i cache entries"
nv=$(command -v nvdisasm || echo /usr/local/cuda/bin/nvdisasm)
[ -x "$nv" ] && cp "$nv" "$OUT/glcache/nvdisasm"
