// SPDX-License-Identifier: MIT
#include <benchmark/benchmark.h>

#include <cstdio>
#include <string>

#include "common.hpp"

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  tkbench::ceilings();  // device line and the two ceilings first
  benchmark::RunSpecifiedBenchmarks();
  // TILEKERNELS_PIPELINE_STATS=1: what the driver says about each pipeline.
  if (const std::string report = tkbench::context().pipeline_report(); !report.empty())
    std::printf("[tilekernels pipelines]\n%s", report.c_str());
  benchmark::Shutdown();
  return 0;
}
