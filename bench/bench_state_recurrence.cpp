// SPDX-License-Identifier: MIT
// gdn::StateRecurrence at the forward's shapes (B, T, Hg, H) = (1, 8192, 16,
// 32) and (8, 2048, 16, 32), BT = 64, K = V = 128, initial and final state
// given: the automatic choice, and each variant of the table behind
// --benchmark_filter=^Sweep_. Inputs: unit keys, w and u of the magnitudes
// the forward gives them, a gentle decay. Bytes: every tensor once
// (StateRecurrence::bytes); flops: the two products.
#include <tilekernels/gdn/state_recurrence.hpp>

#include <cmath>
#include <vector>

#include "common.hpp"

namespace {

using namespace tkbench;
namespace gdn = tilekernels::gdn;

void BM_StateRecurrence(benchmark::State& state, const char* variant) {
  using Kernel = gdn::StateRecurrence<gdn::StateRecurrenceConfig<64, 128, 128>>;
  Context& ctx = context();
  const auto shape = gdn_stage_shape(state, ctx);
  if (!shape) return;
  const auto [B, T, Hg, H] = *shape;
  Kernel kernel(ctx);
  const Kernel::Problem problem{B, T, Hg, H, 0, true};
  Kernel::Plan plan = kernel.plan(problem, 0);
  if (!choose_variant<Kernel>(state, ctx, variant, problem, plan.variant)) return;
  plan.bv = kernel.default_bv(*plan.variant);
  kernel.prepare(plan);  // a variant chosen by hand
  const gdn::Chunking ch(B, T, 0, 64);
  const std::int64_t S = ch.slots(), chunks = ch.chunks();
  const double bytes = Kernel::bytes(B * T, S, chunks, B, Hg, H, true, true);
  const double flops = Kernel::flops(S, H);
  const int sets = rotation_sets(bytes);

  const auto n = [](std::int64_t x) { return static_cast<std::size_t>(x); };
  const auto pattern = [](std::size_t i, float scale) {
    return (static_cast<float>((i * 2654435761u) % 2001) * 1e-3f - 1.0f) * scale;
  };
  std::vector<float> k(n(B * T * Hg * 128)), w(n(S * H * 128)), u(n(S * H * 128)), g(n(S * H)),
      h0(n(B * H * 128 * 128));
  for (std::size_t i = 0; i < k.size(); ++i) k[i] = pattern(i, 0.15f);  // rows of norm about 1
  for (std::size_t i = 0; i < w.size(); ++i) w[i] = pattern(i + 7, 0.1f);
  for (std::size_t i = 0; i < u.size(); ++i) u[i] = pattern(i + 13, 1.0f);
  for (std::size_t i = 0; i < g.size(); ++i) g[i] = -0.02f * static_cast<float>(i % 64 + 1);  // cumulative in a chunk
  for (std::size_t i = 0; i < h0.size(); ++i) h0[i] = pattern(i + 29, 0.5f);
  struct Set {
    Tensor k, w, u, g, h0, h, v_new, ht;
  };
  std::vector<Set> inputs;
  for (int s = 0; s < sets; ++s)
    inputs.push_back({Tensor::from_floats(ctx, DType::bf16, {B, T, Hg, 128}, k),
                      Tensor::from_floats(ctx, DType::bf16, {S, H, 128}, w),
                      Tensor::from_floats(ctx, DType::bf16, {S, H, 128}, u), Tensor::from_floats(ctx, DType::f32, {S, H}, g),
                      Tensor::from_floats(ctx, DType::f32, {B, H, 128, 128}, h0), Tensor(ctx, DType::bf16, {chunks, H, 128, 128}),
                      Tensor(ctx, DType::bf16, {S, H, 128}), Tensor(ctx, DType::f32, {B, H, 128, 128})});
  run_timed(
      state, ctx,
      [&](vk::CommandBuffer cmd, int i) {
        const Set& s = inputs[static_cast<std::size_t>(i % sets)];
        Kernel::Args a;
        a.k = s.k, a.w = s.w, a.u = s.u, a.g = s.g, a.initial_state = s.h0.ref(), a.h = s.h, a.v_new = s.v_new;
        a.final_state = s.ht.ref();
        kernel.record(cmd, a, plan);
      },
      bytes, flops, plan.variant->path != Path::portable ? 989e12 : 0.0);
  state.SetLabel(std::string(plan.variant->name) + " bv " + std::to_string(plan.bv));
}

BENCHMARK_CAPTURE(BM_StateRecurrence, auto, "auto")->Apply(gdn_stage_shapes);
BENCHMARK_CAPTURE(BM_StateRecurrence, tensor_core_bf16_rows, "tensor_core_bf16_rows")
    ->Name("Sweep_StateRecurrence/tensor_core_bf16_rows")
    ->Apply(gdn_stage_shapes);
BENCHMARK_CAPTURE(BM_StateRecurrence, tensor_core_bf16, "tensor_core_bf16")
    ->Name("Sweep_StateRecurrence/tensor_core_bf16")
    ->Apply(gdn_stage_shapes);
BENCHMARK_CAPTURE(BM_StateRecurrence, tensor_core_fp16, "tensor_core_fp16")
    ->Name("Sweep_StateRecurrence/tensor_core_fp16")
    ->Apply(gdn_stage_shapes);
BENCHMARK_CAPTURE(BM_StateRecurrence, portable, "portable")->Name("Sweep_StateRecurrence/portable")->Apply(gdn_stage_shapes);

}  // namespace
