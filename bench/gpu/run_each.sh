#!/bin/bash
# SPDX-License-Identifier: MIT
# Runs every benchmark matching FILTER in a process of its own and prints
# one table. Seen on the H100: entries late in one long process ran up to 3x
# slower than the same entry in a fresh process (cause not found), so
# reported numbers come from fresh processes.
# Usage (on the GPU machine): bash bench/gpu/run_each.sh DIR FILTER [ARGS...]
dir=$1; filter=$2; shift 2
names=$(bash "$dir/run.sh" tilekernels_bench --benchmark_list_tests --benchmark_filter="$filter" 2>/dev/null | grep -E '^(BM_|Sweep_)')
first=1
for n in $names; do
  re=$(printf '%s' "$n" | sed 's/[][().*+?^$|\\]/\\&/g')
  out=$(bash "$dir/run.sh" tilekernels_bench --benchmark_filter="^${re}\$" --benchmark_counters_tabular=true "$@" 2>&1)
  if [ $first = 1 ]; then echo "$out" | grep -E '^\[tilekernels bench\]|^Benchmark'; first=0; fi
  echo "$out" | grep -E '^(BM_|Sweep_)'
done
