// SPDX-License-Identifier: MIT
// Benchmark machinery (docs/DESIGN.md "Benchmarks"): GPU time from timestamps
// around N back-to-back dispatches in one command buffer after a warm-up,
// inputs rotated among copies when one set would sit in the cache, and the
// floor measured in the same run: max(bytes / copy bandwidth, flops / peak).
#pragma once

#include <benchmark/benchmark.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "tilekernels/core.hpp"

namespace tkbench {

using namespace tilekernels;

Context& context();

struct Ceilings {
  double copy_bytes_per_s = 0;  // bytes read + written per second by a uvec4 copy kernel
  double fma_flops_per_s = 0;   // f32 FMA rate (2 flops each)
};
// Measured once per process, on first use.
const Ceilings& ceilings();

// Copies of an input set needed so that rotating among them leaves the
// last-level cache (assumed <= 64 MiB): at least 1, at most 64.
int rotation_sets(double bytes_per_set);

// GPU seconds per call of `record(cmd, i)` (i = 0..reps-1, so callers can
// rotate inputs), with a compute barrier between calls, timed over `reps`
// calls after `warmup` untimed ones.
double gpu_seconds_per_call(Context& ctx, const std::function<void(vk::CommandBuffer, int)>& record, int reps = 100,
                            int warmup = 10);

// GPU seconds per item of a batch that `record` writes whole (`items` of
// them, with whatever dependencies it records itself): recorded twice in one
// command buffer, the second time between timestamps.
double gpu_seconds_per_item(Context& ctx, const std::function<void(vk::CommandBuffer)>& record, int items);

// Times `record` once per benchmark iteration (manual time: the per-call GPU
// time, so register entries with ->UseManualTime()->Iterations(n), since
// google benchmark would otherwise repeat until the per-call times sum to
// its min_time, each repetition costing a full submit) and sets the
// counters every entry reports: GB/s, the floor in us, and floor/time
// (1.0 is the physical limit). `flops_per_s` overrides the measured f32 peak
// for kernels on other units (tensor cores). `reps` is the least number of
// calls per timed batch; batches are lengthened to a few ms of GPU work.
void run_timed(benchmark::State& state, Context& ctx, const std::function<void(vk::CommandBuffer, int)>& record,
               double bytes, double flops, double flops_per_s = 0, int reps = 100);

// A GDN stage benchmark's arguments (B, T, Hg, H), or nothing (the entry
// skipped) on a CPU device past T = 256, where it would take minutes.
struct GdnStageShape {
  std::int64_t B, T, Hg, H;
};
std::optional<GdnStageShape> gdn_stage_shape(benchmark::State& state, const Context& ctx);
// Registers the GDN forward's headline shapes (B, T, Hg, H) = (1, 8192, 16,
// 32) and (8, 2048, 16, 32), manual time, 10 iterations, in us.
void gdn_stage_shapes(benchmark::internal::Benchmark* b);

// Sets `variant` to Kernel's variant named `name` ("auto": leaves the
// automatic choice) and returns true, or skips the entry (returning false)
// where this device or build cannot run that variant for `problem`.
template <class Kernel, class Variant>
bool choose_variant(benchmark::State& state, const Context& ctx, std::string_view name,
                    const typename Kernel::Problem& problem, const Variant*& variant) {
  if (name == "auto") return true;
  for (const auto& v : Kernel::variants)
    if (v.name == name) {
      const Status s = eligibility(ctx, v, problem);
      if (!s) {
        state.SkipWithError((std::string(name) + ": " + s.message).c_str());
        return false;
      }
      variant = &v;
      return true;
    }
  state.SkipWithError((std::string(name) + ": no such variant").c_str());
  return false;
}

}  // namespace tkbench
