#!/bin/bash
# SPDX-License-Identifier: MIT
# Everything to run on a GPU machine in one go: the test suite, every
# headline benchmark in a fresh process, and the peer scripts.
# Everything is written under $OUT as it goes, so a timeout loses nothing.
# Usage there: bash bench/gpu/run_all.sh DIR [BENCH_FILTER]   (DIR staged by stage.sh;
# TK_PEERS=0 skips the peers)
# Peers need FLA for the Gated DeltaNet scripts: carry .peers/fla.
set -uo pipefail
dir=${1:?usage: run_all.sh DIR [BENCH_FILTER]}
filter=${2:-^BM_}
out=${OUT:-/tmp/tk-out}
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee "$out/gpu.txt"
bash "$dir/run.sh" tilekernels_tests --gtest_brief=1 > "$out/tests.txt" 2>&1
grep -E "PASSED|FAILED|SKIPPED" "$out/tests.txt"
bash bench/gpu/run_each.sh "$dir" "$filter" > "$out/bench.txt" 2>&1
if [ "${TK_PEERS:-1}" != 0 ]; then  # TK_PEERS=0: skip the peer scripts
  for script in bench/compare/*.py; do
    echo "== $script" >> "$out/peers.txt"
    PYTHONUNBUFFERED=1 timeout 120 python3 "$script" >> "$out/peers.txt" 2>&1
  done
fi
cat "$out/bench.txt"
