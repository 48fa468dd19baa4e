#!/bin/bash
# SPDX-License-Identifier: MIT
# Quick start, second command: installs what is missing, builds everything
# (library, tests, benchmarks, examples) and runs every ctest entry: the
# gtest suite under the validation layer at lavapipe subgroup size 8
# (LP_NATIVE_VECTOR_WIDTH 256), the tests of kernels with subgroup variants
# also at subgroup sizes 4, 16, 32 and 64 (widths 128, 512, 1024, 2048; 64
# is AMD's wave64), the compile-fail tests, tk-run end to end, and a
# consumer project built against an installed package, as a subproject and
# through FetchContent.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
jobs=$(nproc)
# TK_WERROR=1 (set by CI) turns compiler warnings into errors.
cmake -S . -B build-test -DCMAKE_BUILD_TYPE=Release -DTILEKERNELS_LP_WIDTHS=256 "-DTILEKERNELS_LP_SUBGROUP_WIDTHS=128;512;1024;2048" \
  ${TK_WERROR:+-DCMAKE_COMPILE_WARNING_AS_ERROR=ON} >/dev/null
cmake --build build-test -j"$jobs"
ctest --test-dir build-test --output-on-failure -j"$jobs"
