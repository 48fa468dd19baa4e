// SPDX-License-Identifier: MIT
// Tensor parallelism as engines split attention: the heads of one layer
// spread over every Vulkan device present, one Context and one thread per
// device, all recording and running at once. Per device: GPU time of
// gdn::ChunkO at (B, T) = (1, 8192), K = V = 128, with H / n value heads
// and Hg / n key heads of H = 32, Hg = 16 (n devices). The manual time is
// the slowest device's; counters give each one's.
#include <tilekernels/gdn/chunk_o.hpp>

#include <algorithm>
#include <thread>
#include <vector>

#include "common.hpp"

namespace {

using namespace tkbench;
namespace gdn = tilekernels::gdn;

void BM_TensorParallelChunkO(benchmark::State& state) {
  const auto names = tilekernels::device_names();
  const std::int64_t n = static_cast<std::int64_t>(names.size());
  const std::int64_t B = 1, T = state.range(0), K = 128, V = 128, H = 32 / n, Hg = std::max<std::int64_t>(1, 16 / n);
  const std::int64_t NT = (T + 63) / 64;
  std::vector<double> seconds(static_cast<std::size_t>(n), 0.0);
  std::vector<std::string> errors(static_cast<std::size_t>(n));
  for (auto _ : state) {
    std::vector<std::thread> threads;
    for (std::int64_t d = 0; d < n; ++d)
      threads.emplace_back([&, d] {
        try {
          ContextOptions options;
          options.device = std::to_string(d);
          options.validation = false;
          Context ctx(options);
          if (ctx.info().is_cpu() && T > 256) throw Error(ErrorCode::unsupported, "shape too large for a CPU device");
          Tensor q(ctx, DType::bf16, {B, T, Hg, K}), k(ctx, DType::bf16, {B, T, Hg, K});
          Tensor v(ctx, DType::bf16, {B, T, H, V}), h(ctx, DType::bf16, {B, NT, H, V, K});
          Tensor g(ctx, DType::f32, {B, T, H}), o(ctx, DType::bf16, {B, T, H, V});
          for (Tensor* t : {&q, &k, &v, &h, &g}) t->buffer().fill(0x3c003c00u);  // small finite values
          const gdn::ChunkO<gdn::ChunkOConfig<64, 128, 128>> kernel(ctx);
          seconds[static_cast<std::size_t>(d)] = gpu_seconds_per_call(
              ctx, [&](vk::CommandBuffer cmd, int) { kernel.record(cmd, {q, k, v, h, g, o, 0.088f, {}, {}, {}}); }, 20, 5);
        } catch (const std::exception& e) {
          errors[static_cast<std::size_t>(d)] = e.what();
        }
      });
    for (auto& t : threads) t.join();
    for (const auto& e : errors)
      if (!e.empty()) {
        state.SkipWithError(e.c_str());
        return;
      }
    state.SetIterationTime(*std::max_element(seconds.begin(), seconds.end()));
  }
  for (std::int64_t d = 0; d < n; ++d) state.counters["gpu" + std::to_string(d) + "_us"] = seconds[d] * 1e6;
  state.counters["devices"] = static_cast<double>(n);
  state.counters["heads_per_device"] = static_cast<double>(H);
}

BENCHMARK(BM_TensorParallelChunkO)->Arg(8192)->Arg(256)->UseManualTime()->Iterations(3)->Unit(benchmark::kMicrosecond);

}  // namespace
