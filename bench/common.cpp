// SPDX-License-Identifier: MIT
#include "common.hpp"

#include <tilekernels/spirv/bench/copy.hpp>
#include <tilekernels/spirv/bench/fma.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <vector>

namespace tkbench {

Context& context() {
  static std::unique_ptr<Context> ctx = [] {
    ContextOptions options;
    options.validation = false;
    return std::make_unique<Context>(options);
  }();
  return *ctx;
}

namespace {

struct CopyPush {
  std::uint32_t group_offset, count, stride;
};
struct FmaPush {
  std::uint32_t group_offset, iterations;
};

double measure_copy(Context& ctx) {
  const std::size_t bytes = ctx.info().is_cpu() ? (64u << 20) : (1024u << 20);
  Tensor src(ctx, DType::u32, {static_cast<std::int64_t>(bytes / 4)});
  Tensor dst(ctx, DType::u32, {static_cast<std::int64_t>(bytes / 4)});
  src.buffer().fill(0x3f800000u);
  const Pipeline& p = ctx.pipeline({spirv::bench_copy.data(), spirv::bench_copy.size(), {}, 2, sizeof(CopyPush), 0});
  const std::uint32_t count = static_cast<std::uint32_t>(bytes / 16);
  const std::uint32_t groups = std::min<std::uint32_t>(65535, count / 256);
  const double s = gpu_seconds_per_call(ctx, [&](vk::CommandBuffer cmd, int) {
    detail::record_dispatch(ctx, cmd, p, {src.ref(), dst.ref()}, CopyPush{0, count, groups * 256}, groups);
  }, ctx.info().is_cpu() ? 3 : 20, 2);
  return 2.0 * static_cast<double>(bytes) / s;
}

double measure_fma(Context& ctx) {
  const std::uint32_t groups = ctx.info().is_cpu() ? 64 : 8192;
  const std::uint32_t iterations = ctx.info().is_cpu() ? 256 : 4096;
  Tensor out(ctx, DType::f32, {static_cast<std::int64_t>(groups) * 256});
  const Pipeline& p = ctx.pipeline({spirv::bench_fma.data(), spirv::bench_fma.size(), {}, 1, sizeof(FmaPush), 0});
  const double s = gpu_seconds_per_call(ctx, [&](vk::CommandBuffer cmd, int) {
    detail::record_dispatch(ctx, cmd, p, {out.ref()}, FmaPush{0, iterations}, groups);
  }, 5, 1);
  return 2.0 * 8.0 * iterations * groups * 256.0 / s;
}

// The copy kernel moving `bytes` (read + written) per call, rotated through
// enough buffer pairs to leave the cache, with as many workgroups as the
// size needs (up to 65535): what a kernel of that byte count can hope for,
// dispatch cost and ramp included.
void BM_CopyBytes(benchmark::State& state) {
  Context& ctx = context();
  const std::int64_t words = std::max<std::int64_t>(4, state.range(0) / 32 * 4);  // u32s per buffer: half the bytes
  const double bytes = 2.0 * 4.0 * static_cast<double>(words);
  const int sets = rotation_sets(bytes);
  std::vector<Tensor> src, dst;
  for (int s = 0; s < sets; ++s) {
    src.emplace_back(ctx, DType::u32, Shape{words});
    dst.emplace_back(ctx, DType::u32, Shape{words});
    src.back().buffer().fill(0x3f800000u);
  }
  const Pipeline& p = ctx.pipeline({spirv::bench_copy.data(), spirv::bench_copy.size(), {}, 2, sizeof(CopyPush), 0});
  const auto count = static_cast<std::uint32_t>(words / 4);
  const std::uint32_t groups = std::clamp<std::uint32_t>((count + 255) / 256, 1, 65535);
  run_timed(state, ctx, [&](vk::CommandBuffer cmd, int i) {
    const auto k = static_cast<std::size_t>(i % sets);
    detail::record_dispatch(ctx, cmd, p, {src[k].ref(), dst[k].ref()}, CopyPush{0, count, groups * 256}, groups);
  }, bytes, 0);
}
// Byte counts of headline shapes (flash pass 2: 0.53, 4.26, 34.1 MB; the
// fused reduce at 256/8/1024 rows: 9.5 MB).
BENCHMARK(BM_CopyBytes)->Arg(530000)->Arg(4260000)->Arg(9500000)->Arg(34100000)->Arg(120000000)
    ->UseManualTime()->Iterations(10)->Unit(benchmark::kMicrosecond);

}  // namespace

const Ceilings& ceilings() {
  static const Ceilings c = [] {
    Context& ctx = context();
    Ceilings r{measure_copy(ctx), measure_fma(ctx)};
    const PathPreference p = ctx.path();
    std::printf("[tilekernels bench] device: %s | %u multiprocessors | copy %.0f GB/s (read+write) | f32 FMA %.1f "
                "TFLOP/s | paths: %s\n",
                ctx.info().name.c_str(), ctx.info().multiprocessors, r.copy_bytes_per_s * 1e-9,
                r.fma_flops_per_s * 1e-12,
                p == PathPreference::portable   ? "portable only (TILEKERNELS_PATH)"
                : p == PathPreference::subgroup ? "no matrix units (TILEKERNELS_PATH=subgroup)"
                                                : "all");
    return r;
  }();
  return c;
}

int rotation_sets(double bytes_per_set) {
  const double cache = 64.0 * 1024 * 1024;
  return std::clamp(static_cast<int>(2 * cache / bytes_per_set) + 1, 1, 64);
}

double gpu_seconds_per_call(Context& ctx, const std::function<void(vk::CommandBuffer, int)>& record, int reps,
                            int warmup) {
  GpuTimer timer(ctx);
  ctx.submit_and_wait([&](vk::CommandBuffer cmd) {
    for (int i = 0; i < warmup; ++i) {
      record(cmd, i);
      compute_barrier(ctx, cmd);
    }
    timer.start(cmd);
    for (int i = 0; i < reps; ++i) {
      record(cmd, i);
      compute_barrier(ctx, cmd);
    }
    timer.stop(cmd);
  });
  return timer.seconds() / reps;
}

double gpu_seconds_per_item(Context& ctx, const std::function<void(vk::CommandBuffer)>& record, int items) {
  GpuTimer timer(ctx);
  ctx.submit_and_wait([&](vk::CommandBuffer cmd) {
    record(cmd);  // warm-up
    compute_barrier(ctx, cmd);
    timer.start(cmd);
    record(cmd);
    timer.stop(cmd);
  });
  return timer.seconds() / items;
}

// Clocks rise only after a fraction of a second of sustained load and fall
// while the GPU idles (as it does while a kernel's constructor builds its
// pipelines): the work runs in bursts of about 20 ms for at least half a
// second, then until two bursts agree within 3% (at most about 5 s).
void warm_gpu(Context& ctx, const std::function<void(vk::CommandBuffer, int)>& record) {
  if (ctx.info().is_cpu()) return;
  const int burst = static_cast<int>(std::clamp(0.02 / std::max(gpu_seconds_per_call(ctx, record, 1, 1), 1e-7), 10.0, 2000.0));
  double spent = 0, last = 0;
  for (int i = 0; i < 500 && spent < 5; ++i) {
    const double now = gpu_seconds_per_call(ctx, record, burst, 0);
    spent += now * burst;
    if (spent > 0.5 && std::abs(now - last) < 0.03 * last) return;
    last = now;
  }
}

void run_timed(benchmark::State& state, Context& ctx, const std::function<void(vk::CommandBuffer, int)>& record,
               double bytes, double flops, double flops_per_s, int reps) {
  const Ceilings& c = ceilings();
  warm_gpu(ctx, record);
  // Each timed batch keeps the GPU busy for a few milliseconds after an
  // equally long warm-up in the same command buffer: short bursts with idle
  // gaps let the clocks drop and inflate small kernels several times over.
  const double estimate = gpu_seconds_per_call(ctx, record, 10, 2);
  const double batch = ctx.info().is_cpu() ? 0.02 : 0.003;
  reps = std::clamp(static_cast<int>(batch / std::max(estimate, 1e-7)), ctx.info().is_cpu() ? 2 : reps, 20000);
  double total = 0;
  int n = 0;
  for (auto _ : state) {
    const double s = gpu_seconds_per_call(ctx, record, reps, reps);
    state.SetIterationTime(s);
    total += s;
    ++n;
  }
  const double t = total / std::max(n, 1);
  const double peak = flops_per_s > 0 ? flops_per_s : c.fma_flops_per_s;
  const double floor_s = std::max(bytes / c.copy_bytes_per_s, flops / peak);
  state.counters["us"] = t * 1e6;
  state.counters["GB/s"] = bytes / t * 1e-9;
  state.counters["floor_us"] = floor_s * 1e6;
  state.counters["floor/time"] = floor_s / t;
  state.counters["calls"] = reps;
  if (flops > 0) state.counters["TFLOP/s"] = flops / t * 1e-12;
}

std::optional<GdnStageShape> gdn_stage_shape(benchmark::State& state, const Context& ctx) {
  const GdnStageShape s{state.range(0), state.range(1), state.range(2), state.range(3)};
  if (ctx.info().is_cpu() && s.T > 256) {
    state.SkipWithError("shape too large for a CPU device");
    return std::nullopt;
  }
  return s;
}

void gdn_stage_shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"B", "T", "Hg", "H"});
  b->Args({1, 8192, 16, 32})->Args({8, 2048, 16, 32})->UseManualTime()->Iterations(10)->Unit(benchmark::kMicrosecond);
}

}  // namespace tkbench
