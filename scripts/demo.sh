#!/bin/bash
# SPDX-License-Identifier: MIT
# Quick start, first command: installs what is missing, builds the demos and
# runs them on the default Vulkan device (lavapipe where there is no GPU):
# the compressed KV cache, then a Gated DeltaNet layer.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
cmake -S . -B build-demo -DCMAKE_BUILD_TYPE=Release -DTILEKERNELS_BUILD_TESTS=OFF -DTILEKERNELS_BUILD_BENCH=OFF >/dev/null
cmake --build build-demo -j"$(nproc)" --target kv_attention_demo gdn_layer_demo
./build-demo/examples/kv_attention_demo
./build-demo/examples/gdn_layer_demo
