// SPDX-License-Identifier: MIT
// gdn::RecomputeWU at the shapes (B, T, Hg, H) with BT = 64,
// K = V = 128, A in bf16 (as FLA passes it) and in f32: the automatic
// choice and each variant of the table. Bytes: every tensor read or written
// once (k once, although GQA heads share it); flops: the two products over
// full BT x BT blocks. The tensor-core entries take the nominal dense fp16
// tensor-core rate of an H100/H200 (989 TFLOP/s) as their flop ceiling,
// the portable ones the measured f32 FMA rate.
#include <tilekernels/gdn/recompute_wu.hpp>

#include <initializer_list>

#include <vector>

#include "common.hpp"

namespace {

using namespace tkbench;
namespace gdn = tilekernels::gdn;

template <DType AType>
void BM_RecomputeWU(benchmark::State& state, const char* variant, std::uint32_t workgroups) {
  using Config = gdn::RecomputeWUConfig<64, 128, 128, AType>;
  using Kernel = gdn::RecomputeWU<Config>;
  Context& ctx = context();
  const auto shape = gdn_stage_shape(state, ctx);
  if (!shape) return;
  const auto [B, T, Hg, H] = *shape;
  Kernel kernel(ctx);
  typename Kernel::Plan plan{nullptr, workgroups};
  const typename Kernel::Problem problem{B, T, Hg, H};
  plan.variant = &select_variant(ctx, Kernel::name, Kernel::variants, problem);
  if (!choose_variant<Kernel>(state, ctx, variant, problem, plan.variant)) return;
  kernel.prepare(plan);  // a variant chosen by hand
  const double bytes = double(Kernel::bytes(B, T, Hg, H));
  const double flops = double(Kernel::flops(B, T, H));
  const int sets = rotation_sets(bytes);

  const auto n = [](std::int64_t x) { return static_cast<std::size_t>(x); };
  std::vector<float> k(n(B * T * Hg * 128)), v(n(B * T * H * 128)), beta(n(B * T * H)), g(n(B * T * H)),
      A(n(B * T * H * 64), 0.0f);
  for (std::size_t i = 0; i < k.size(); ++i) k[i] = static_cast<float>((i * 2654435761u) % 2001) * 1e-3f - 1.0f;
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>((i * 40503u) % 1999) * 1e-3f - 1.0f;
  for (std::size_t i = 0; i < beta.size(); ++i) {
    beta[i] = 0.1f + static_cast<float>(i % 7) * 0.1f;
    g[i] = -static_cast<float>((i / n(H)) % 64) * 0.3f;
  }
  for (std::size_t r = 0; r < n(B * T * H); ++r) {
    const std::size_t i = (r / n(H)) % 64;
    for (std::size_t j = 0; j < i; ++j) A[r * 64 + j] = static_cast<float>(((r + j) * 97u) % 101) * 0.004f - 0.2f;
    A[r * 64 + i] = 1.0f;
  }
  struct Set {
    Tensor k, v, beta, g, A, w, u;
  };
  std::vector<Set> inputs;
  for (int s = 0; s < sets; ++s)
    inputs.push_back({Tensor::from_floats(ctx, DType::bf16, {B, T, Hg, 128}, k),
                      Tensor::from_floats(ctx, DType::bf16, {B, T, H, 128}, v),
                      Tensor::from_floats(ctx, DType::f32, {B, T, H}, beta),
                      Tensor::from_floats(ctx, DType::f32, {B, T, H}, g),
                      Tensor::from_floats(ctx, AType, {B, T, H, 64}, A), Tensor(ctx, DType::bf16, {B, T, H, 128}),
                      Tensor(ctx, DType::bf16, {B, T, H, 128})});
  run_timed(
      state, ctx,
      [&](vk::CommandBuffer cmd, int i) {
        const Set& s = inputs[static_cast<std::size_t>(i % sets)];
        kernel.record(cmd, {s.k, s.v, s.beta, s.g, s.A, s.w, s.u, {}, {}, {}}, plan);
      },
      bytes, flops, plan.variant->path != Path::portable ? 989e12 : 0.0);
  state.SetLabel(std::string(plan.variant->name) + (AType == DType::bf16 ? "+A_bf16" : ""));
}

void BM_RecomputeWU_bf16(benchmark::State& state, const char* variant, std::uint32_t workgroups) {
  BM_RecomputeWU<DType::bf16>(state, variant, workgroups);
}
void BM_RecomputeWU_f32(benchmark::State& state, const char* variant, std::uint32_t workgroups) {
  BM_RecomputeWU<DType::f32>(state, variant, workgroups);
}

// A in bf16, as FLA's chunked pipeline passes it (and as FLA was timed):
// the automatic choice and each variant; A in f32.
BENCHMARK_CAPTURE(BM_RecomputeWU_bf16, auto, "auto", 0u)->Apply(gdn_stage_shapes);
BENCHMARK_CAPTURE(BM_RecomputeWU_bf16, tensor_core_bf16, "tensor_core_bf16", 0u)->Apply(gdn_stage_shapes);
BENCHMARK_CAPTURE(BM_RecomputeWU_bf16, tensor_core_fp16, "tensor_core_fp16", 0u)->Apply(gdn_stage_shapes);
BENCHMARK_CAPTURE(BM_RecomputeWU_f32, auto, "auto", 0u)->Apply(gdn_stage_shapes);
BENCHMARK_CAPTURE(BM_RecomputeWU_f32, portable, "portable", 0u)->Apply(gdn_stage_shapes);
// The persistent grid of the bf16 kernels (--benchmark_filter=^Sweep_).
BENCHMARK_CAPTURE(BM_RecomputeWU_bf16, joint_wg264, "tensor_core_bf16_joint", 264u)->Name("Sweep_RecomputeWU<bf16>/joint_wg264")->Apply(gdn_stage_shapes);
BENCHMARK_CAPTURE(BM_RecomputeWU_f32, pairs_wg528, "tensor_core_bf16", 528u)->Name("Sweep_RecomputeWU<f32>/pairs_wg528")->Apply(gdn_stage_shapes);

}  // namespace
