// SPDX-License-Identifier: MIT
// gdn::KKTSolve at the forward's shapes (B, T, Hg, H) = (1, 8192, 16, 32)
// and (8, 2048, 16, 32), BT = 64, K = 128, unit keys (as the forward feeds
// them after its L2 norm): the automatic choice, and each variant of the
// table behind --benchmark_filter=^Sweep_. Bytes: k once per value head, g
// and beta in and out, A out; flops: k k^T over full BT x BT blocks and the
// solve (BT^3 / 3). The matrix entries take the nominal dense fp16 rate of
// an H100/H200 (989 TFLOP/s) as their flop ceiling, the portable one the
// measured f32 FMA rate.
#include <tilekernels/gdn/kkt_solve.hpp>

#include <cmath>
#include <vector>

#include "common.hpp"

namespace {

using namespace tkbench;
namespace gdn = tilekernels::gdn;

void BM_KKTSolve(benchmark::State& state, const char* variant) {
  using Kernel = gdn::KKTSolve<gdn::KKTSolveConfig<64, 128>>;
  Context& ctx = context();
  const auto shape = gdn_stage_shape(state, ctx);
  if (!shape) return;
  const auto [B, T, Hg, H] = *shape;
  Kernel kernel(ctx);
  const Kernel::Problem problem{B, T, Hg, H, 0, true};
  Kernel::Plan plan{&select_variant(ctx, Kernel::name, Kernel::variants, problem)};
  if (!choose_variant<Kernel>(state, ctx, variant, problem, plan.variant)) return;
  kernel.prepare(plan);  // a variant chosen by hand
  const gdn::Chunking ch(B, T, 0, 64);
  const std::int64_t S = ch.slots();
  const double bytes = Kernel::bytes(B * T, H);
  const double flops = Kernel::flops(S, H);
  const int sets = rotation_sets(bytes);

  const auto n = [](std::int64_t x) { return static_cast<std::size_t>(x); };
  std::vector<float> k(n(B * T * Hg * 128)), g(n(B * T * H)), beta(n(B * T * H));
  for (std::size_t r = 0; r < n(B * T * Hg); ++r) {
    double ss = 0;
    for (std::size_t i = 0; i < 128; ++i) {
      const float x = static_cast<float>(((r * 128 + i) * 2654435761u) % 2001) * 1e-3f - 1.0f;
      k[r * 128 + i] = x;
      ss += double(x) * x;
    }
    for (std::size_t i = 0; i < 128; ++i) k[r * 128 + i] = static_cast<float>(k[r * 128 + i] / std::sqrt(ss));
  }
  for (std::size_t i = 0; i < g.size(); ++i) {
    beta[i] = 0.1f + static_cast<float>(i % 7) * 0.1f;
    g[i] = -0.02f - static_cast<float>(i % 5) * 0.01f;
  }
  struct Set {
    Tensor k, g, beta, g_out, beta_out, A;
  };
  std::vector<Set> inputs;
  for (int s = 0; s < sets; ++s)
    inputs.push_back({Tensor::from_floats(ctx, DType::bf16, {B, T, Hg, 128}, k),
                      Tensor::from_floats(ctx, DType::f32, {B, T, H}, g),
                      Tensor::from_floats(ctx, DType::f32, {B, T, H}, beta), Tensor(ctx, DType::f32, {S, H}),
                      Tensor(ctx, DType::f32, {S, H}), Tensor(ctx, DType::bf16, {S, H, 64})});
  run_timed(
      state, ctx,
      [&](vk::CommandBuffer cmd, int i) {
        const Set& s = inputs[static_cast<std::size_t>(i % sets)];
        Kernel::Args a;
        a.k = s.k, a.g = s.g, a.beta = s.beta, a.g_cumsum = s.g_out, a.beta_out = s.beta_out, a.A = s.A;
        kernel.record(cmd, a, plan);
      },
      bytes, flops, plan.variant->path != Path::portable ? 989e12 : 0.0);
  state.SetLabel(std::string(plan.variant->name));
}

BENCHMARK_CAPTURE(BM_KKTSolve, auto, "auto")->Apply(gdn_stage_shapes);
BENCHMARK_CAPTURE(BM_KKTSolve, tensor_core_bf16, "tensor_core_bf16")->Name("Sweep_KKTSolve/tensor_core_bf16")->Apply(gdn_stage_shapes);
BENCHMARK_CAPTURE(BM_KKTSolve, tensor_core_fp16, "tensor_core_fp16")->Name("Sweep_KKTSolve/tensor_core_fp16")->Apply(gdn_stage_shapes);
BENCHMARK_CAPTURE(BM_KKTSolve, portable, "portable")->Name("Sweep_KKTSolve/portable")->Apply(gdn_stage_shapes);

}  // namespace
