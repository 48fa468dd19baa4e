// SPDX-License-Identifier: MIT
// aura::FaReduceHadamard at the issue's shapes: head dims 256 and 512, nwg 8
// and 32, 32 and 1024 rows, f32 partials and f32 output. Bytes: every partial
// read once (o, m, l), the signs once, the output written once; the flops of
// the merge and the transform are negligible. Args: rows, nwg, and optional
// forced lane groups / rows per workgroup (0: automatic) and the portable
// path (1) for tuning.
#include <tilekernels/aura/fa_reduce_hadamard.hpp>

#include <bit>
#include <vector>

#include "common.hpp"

namespace {

using namespace tkbench;
namespace aura = tilekernels::aura;

template <std::uint32_t HeadDim>
void BM_FaReduceHadamard(benchmark::State& state) {
  using Config = aura::FaReduceHadamardConfig<HeadDim>;
  Context& ctx = context();
  const std::int64_t rows = state.range(0), nwg = state.range(1);
  using Kernel = aura::FaReduceHadamard<Config>;
  const Kernel kernel(ctx);
  typename Kernel::Plan plan{&select_variant(ctx, Kernel::name, Kernel::variants, {rows, nwg}),
                             Kernel::geometry(ctx.info(), static_cast<std::uint32_t>(nwg), static_cast<std::uint64_t>(rows))};
  if (state.range(4) && !choose_variant<Kernel>(state, ctx, "portable", {rows, nwg}, plan.variant)) return;
  auto& g = plan.geometry;
  if (state.range(2)) {
    g.groups = static_cast<std::uint32_t>(state.range(2));
    g.blocks_per_group = std::bit_ceil((static_cast<std::uint32_t>(nwg) + g.groups - 1) / g.groups);
    g.rows_per_workgroup = std::max<std::uint32_t>(1, 64 / (g.groups * Config::chunks));
  }
  if (state.range(3)) g.rows_per_workgroup = static_cast<std::uint32_t>(state.range(3));
  const double bytes = double(rows) * nwg * (HeadDim * 4 + 8) + double(rows) * HeadDim * 4 + HeadDim * 4;
  const int sets = rotation_sets(bytes);
  std::vector<float> o(static_cast<std::size_t>(rows * nwg * HeadDim)), m(static_cast<std::size_t>(rows * nwg)),
      l(m.size()), signs(HeadDim);
  for (std::size_t i = 0; i < o.size(); ++i) o[i] = static_cast<float>((i * 2654435761u) % 1000) * 1e-3f - 0.5f;
  for (std::size_t i = 0; i < m.size(); ++i) {
    m[i] = static_cast<float>((i * 40503u) % 64) * 0.25f - 8.0f;
    l[i] = i % 11 == 3 ? 0.0f : 1.0f + static_cast<float>(i % 7);
  }
  for (std::size_t i = 0; i < signs.size(); ++i) signs[i] = (i * 0x9e3779b9u) & 0x10000u ? 1.0f : -1.0f;
  struct Set {
    Tensor o, m, l, out;
  };
  std::vector<Set> inputs;
  for (int s = 0; s < sets; ++s)
    inputs.push_back({Tensor::from_floats(ctx, DType::f32, {rows, nwg, HeadDim}, o),
                      Tensor::from_floats(ctx, DType::f32, {rows, nwg}, m),
                      Tensor::from_floats(ctx, DType::f32, {rows, nwg}, l), Tensor(ctx, DType::f32, {rows, HeadDim})});
  const Tensor sign_tensor = Tensor::from_floats(ctx, DType::f32, {HeadDim}, signs);
  try {
    kernel.check({inputs[0].o, inputs[0].m, inputs[0].l, sign_tensor, inputs[0].out}, plan);
  } catch (const Error& e) {
    state.SkipWithError(e.what());
    return;
  }
  run_timed(state, ctx, [&](vk::CommandBuffer cmd, int i) {
    const Set& s = inputs[static_cast<std::size_t>(i % sets)];
    kernel.record(cmd, {s.o, s.m, s.l, sign_tensor, s.out}, plan);
  }, bytes, 0);
  state.counters["groups"] = g.groups;
  state.counters["rows/wg"] = g.rows_per_workgroup;
  state.SetLabel(std::string(plan.variant->name));
}

void IssueShapes(benchmark::internal::Benchmark* b) {
  for (std::int64_t rows : {32, 1024})
    for (std::int64_t nwg : {8, 32}) b->Args({rows, nwg, 0, 0, 0});
  b->UseManualTime()->Iterations(10)->Unit(benchmark::kMicrosecond);
}

// Forced geometries at 1024 rows (and 32 to 256 rows of 32 blocks), to
// check the automatic choice.
void Tuning(benchmark::internal::Benchmark* b) {
  for (std::int64_t nwg : {8, 32})
    for (std::int64_t groups : {1, 2, 4, 8})
      for (std::int64_t rpw : {1, 2}) b->Args({1024, nwg, groups, rpw, 0});
  for (std::int64_t groups : {1, 2, 4, 8}) b->Args({32, 32, groups, 1, 0});
  for (std::int64_t rows : {64, 128, 256})
    for (std::int64_t groups : {1, 4}) b->Args({rows, 32, groups, 1, 0});
  for (std::int64_t rows : {32, 1024})
    for (std::int64_t nwg : {8, 32}) b->Args({rows, nwg, 0, 0, 1});  // portable path
  b->UseManualTime()->Iterations(10)->Unit(benchmark::kMicrosecond);
}

BENCHMARK(BM_FaReduceHadamard<256>)->Apply(IssueShapes);
BENCHMARK(BM_FaReduceHadamard<512>)->Apply(IssueShapes);
BENCHMARK(BM_FaReduceHadamard<64>)->Args({1024, 8, 0, 0, 0})->UseManualTime()->Iterations(10)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_FaReduceHadamard<128>)->Args({1024, 8, 0, 0, 0})->UseManualTime()->Iterations(10)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_FaReduceHadamard<256>)->Name("Sweep_FaReduceHadamard<256>")->Apply(Tuning);
BENCHMARK(BM_FaReduceHadamard<512>)->Name("Sweep_FaReduceHadamard<512>")->Apply(Tuning);

}  // namespace
