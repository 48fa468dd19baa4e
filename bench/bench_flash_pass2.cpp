// SPDX-License-Identifier: MIT
// aura::FlashPass2 at the shapes (q_heads, num_blocks, dim), f32
// partials and bf16 output, with lse. Bytes: every partial read once, the
// output and lse written once; flops are negligible. The automatic plan
// gets a workspace (zeroed once, as an engine keeps it), so it may split
// heads where that pays.
#include <tilekernels/aura/flash_pass2.hpp>

#include <vector>

#include "common.hpp"

namespace {

using namespace tkbench;
namespace aura = tilekernels::aura;

// Args: q_heads, num_blocks, lane_groups, unroll, splits, slices, prefetch
// (1 off, 2 on); 0: the automatic choice.
template <std::uint32_t Dim>
void BM_FlashPass2(benchmark::State& state) {
  using Config = aura::FlashPass2Config<Dim, DType::f32, DType::bf16>;
  using Kernel = aura::FlashPass2<Config>;
  Context& ctx = context();
  const std::int64_t q = state.range(0), nb = state.range(1);
  const double bytes = double(q) * nb * (Dim * 4 + 8) + double(q) * (Dim * 2 + 4);
  const int sets = rotation_sets(bytes);
  std::vector<float> o(static_cast<std::size_t>(q * nb * Dim)), m(static_cast<std::size_t>(q * nb)), l(m.size());
  for (std::size_t i = 0; i < o.size(); ++i) o[i] = static_cast<float>((i * 2654435761u) % 1000) * 1e-3f - 0.5f;
  for (std::size_t i = 0; i < m.size(); ++i) {
    m[i] = static_cast<float>((i * 40503u) % 64) * 0.25f - 8.0f;
    l[i] = 1.0f + static_cast<float>(i % 7);
  }
  struct Set {
    Tensor o, m, l, out, lse;
  };
  std::vector<Set> inputs;
  for (int s = 0; s < sets; ++s)
    inputs.push_back({Tensor::from_floats(ctx, DType::f32, {q, nb, Dim}, o), Tensor::from_floats(ctx, DType::f32, {q, nb}, m),
                      Tensor::from_floats(ctx, DType::f32, {q, nb}, l), Tensor(ctx, DType::bf16, {q, Dim}),
                      Tensor(ctx, DType::f32, {q})});
  Kernel kernel(ctx, {q, nb});
  typename Kernel::Geometry g = kernel.geometry({q, nb}, true);
  if (state.range(2)) g.lane_groups = static_cast<std::uint32_t>(state.range(2));
  if (state.range(3)) g.unroll = static_cast<std::uint32_t>(state.range(3));
  if (state.range(4)) g.splits = static_cast<std::uint32_t>(state.range(4));
  if (state.range(5)) g.slices = static_cast<std::uint32_t>(state.range(5));
  if (state.range(6)) g.prefetch = state.range(6) == 2;
  const auto ws_bytes = std::max<std::uint64_t>(4, Kernel::workspace_bytes(q, g));
  Tensor ws(ctx, DType::u32, {static_cast<std::int64_t>(ws_bytes / 4)});
  ws.buffer().fill(0);
  const Workspace workspace{ws.ref(), true};
  typename Kernel::Plan plan = kernel.plan({q, nb}, ws_bytes);
  plan.geometry = g;
  kernel.prepare(plan);
  run_timed(state, ctx, [&](vk::CommandBuffer cmd, int i) {
    const Set& s = inputs[static_cast<std::size_t>(i % sets)];
    kernel.record(cmd, {s.o, s.m, s.l, s.out, s.lse.ref(), workspace}, plan);
  }, bytes, 0);
  state.counters["slices"] = g.slices;
  state.counters["splits"] = g.splits;
  state.counters["groups"] = g.lane_groups;
  state.counters["unroll"] = g.unroll;
  state.counters["prefetch"] = g.prefetch;
}

// The shapes with the automatic geometry.
BENCHMARK(BM_FlashPass2<128>)->Args({32, 32, 0, 0, 0, 0, 0})->Args({32, 256, 0, 0, 0, 0, 0})->Args({64, 1024, 0, 0, 0, 0, 0})
    ->UseManualTime()->Iterations(10)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_FlashPass2<256>)->Args({32, 128, 0, 0, 0, 0, 0})->UseManualTime()->Iterations(10)->Unit(benchmark::kMicrosecond);

// Geometry sweep behind the automatic choice (--benchmark_filter=^Sweep_).
BENCHMARK(BM_FlashPass2<128>)->Name("Sweep_FlashPass2<128>")
    // Slices at the small shape; one round of loads, lane groups x unroll = blocks.
    ->ArgsProduct({{32}, {32}, {8}, {4}, {1}, {1, 2, 4, 8}, {1}})
    ->Args({32, 32, 4, 8, 1, 8, 1})->Args({32, 32, 16, 2, 1, 8, 1})->Args({32, 256, 64, 4, 1, 8, 1})
    ->ArgsProduct({{32}, {256}, {16, 32}, {8}, {1}, {2, 4, 8}, {1}})
    // Streaming shapes: slices, rounds of 4 or 8, with and without prefetch.
    ->ArgsProduct({{64}, {1024, 2048}, {16, 32}, {4, 8}, {1}, {1, 2, 4}, {1, 2}})
    // The workspace splits against slices; few heads with long rows.
    ->ArgsProduct({{64}, {1024}, {8}, {8}, {2, 4, 8}, {2, 4}, {1}})
    ->Args({8, 4096, 0, 0, 0, 0, 0})->Args({8, 4096, 0, 0, 1, 0, 0})->Args({1, 4096, 0, 0, 0, 0, 0})
    ->Args({1, 4096, 0, 0, 1, 0, 0})->Args({512, 256, 0, 0, 0, 0, 0})->Args({128, 64, 0, 0, 0, 0, 0})
    ->UseManualTime()->Iterations(10)->Unit(benchmark::kMicrosecond);

}  // namespace
