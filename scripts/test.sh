#!/bin/bash
# Quick start, second command: installs what is missing, builds everything
# (library, tests, benchmarks, examples) and runs every ctest entry: the
# gtest suite under the validation layer at lavapipe subgroup sizes 4, 8 and
# 16 (LP_NATIVE_VECTOR_WIDTH 128, 256, 512), the compile-fail tests, tk-run
# end to end, and a consumer project built against an installed package.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
jobs=$(nproc)
# TK_WERROR=1 (set by CI) turns compiler warnings into errors.
cmake -S . -B build-test -DCMAKE_BUILD_TYPE=Release "-DTK_LP_WIDTHS=128;256;512" \
  ${TK_WERROR:+-DCMAKE_COMPILE_WARNING_AS_ERROR=ON} >/dev/null
cmake --build build-test -j"$jobs"
ctest --test-dir build-test --output-on-failure -j"$jobs"
