#include <benchmark/benchmark.h>

#include "common.hpp"

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  tkbench::ceilings();  // device line and the two ceilings first
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
