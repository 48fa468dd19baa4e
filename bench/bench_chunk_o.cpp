// SPDX-License-Identifier: MIT
// gdn::ChunkO at the shapes (B, T, Hg, H) with K = V = 128, BT = 64,
// for the automatic choice and each variant. Bytes: q, k,
// v_new, h, g read once and o written once. Flops: the three products over
// full 64x64 blocks (q h^T, q k^T, A v_new), reported as TFLOP/s; the floor
// quoted for the tensor-core path is the memory floor (its MMA peak is not
// measured here), for the portable path max(memory, f32 FMA) as usual.
#include <tilekernels/gdn/chunk_o.hpp>

#include <vector>

#include "common.hpp"

namespace {

using namespace tkbench;
namespace gdn = tilekernels::gdn;

// bf16 bits of a small value in [-0.5, 0.5), from an integer hash.
std::vector<std::uint16_t> bf16_noise(std::size_t n, std::uint32_t seed) {
  std::vector<std::uint16_t> out(n);
  std::uint32_t x = seed * 2654435761u + 1;
  for (auto& b : out) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    b = f32_to_bf16(static_cast<float>(static_cast<std::int32_t>(x >> 8) - (1 << 23)) * 0x1p-24f);
  }
  return out;
}

// `variant`: a name of ChunkO's table or "auto"; `workgroups`: the bf16
// persistent grid (0: automatic).
void BM_ChunkO(benchmark::State& state, const char* variant, std::uint32_t workgroups) {
  using Config = gdn::ChunkOConfig<64, 128, 128>;
  using Kernel = gdn::ChunkO<Config>;
  Context& ctx = context();
  const auto shape = gdn_stage_shape(state, ctx);
  if (!shape) return;
  const auto [B, T, Hg, H] = *shape;
  const std::int64_t K = 128, V = 128, BT = 64, NT = (T + BT - 1) / BT;
  Tensor q(ctx, DType::bf16, {B, T, Hg, K}), k(ctx, DType::bf16, {B, T, Hg, K});
  Tensor v(ctx, DType::bf16, {B, T, H, V}), h(ctx, DType::bf16, {B, NT, H, V, K});
  Tensor g(ctx, DType::f32, {B, T, H}), o(ctx, DType::bf16, {B, T, H, V});
  q.upload<std::uint16_t>(bf16_noise(static_cast<std::size_t>(q.elements()), 1));
  k.upload<std::uint16_t>(bf16_noise(static_cast<std::size_t>(k.elements()), 2));
  v.upload<std::uint16_t>(bf16_noise(static_cast<std::size_t>(v.elements()), 3));
  h.upload<std::uint16_t>(bf16_noise(static_cast<std::size_t>(h.elements()), 4));
  std::vector<float> gv(static_cast<std::size_t>(g.elements()));
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t t = 0; t < T; ++t)
      for (std::int64_t i = 0; i < H; ++i) gv[static_cast<std::size_t>((b * T + t) * H + i)] = -0.05f * float(t % BT + i % 3);
  g.upload_floats(gv);
  Kernel kernel(ctx);
  const Kernel::Args args{q, k, v, h, g, o, 0.08838834764f, {}, {}, {}};
  auto plan = kernel.plan(args);
  if (!choose_variant<Kernel>(state, ctx, variant, kernel.problem(args), plan.variant)) return;
  plan.workgroups = workgroups;
  kernel.prepare(plan);  // a variant chosen by hand

  const double bytes = 2.0 * (2.0 * B * T * Hg * K + 2.0 * B * T * H * V + double(B) * NT * H * V * K) +
                       4.0 * B * T * H;
  const double flops = 2.0 * B * NT * H * (double(BT) * K * V + double(BT) * BT * K + double(BT) * BT * V);
  const bool tc = plan.variant->path != Path::portable;
  run_timed(state, ctx, [&](vk::CommandBuffer cmd, int) { kernel.record(cmd, args, plan); }, bytes, tc ? 0.0 : flops, 0,
            20);
  state.counters["TFLOP/s"] = flops / (state.counters["us"] * 1e-6) * 1e-12;
  state.SetLabel(std::string(plan.variant->name));
}

// The automatic choice (tensor_core_bf16 where the device and build have
// it), then each tensor-core variant.
BENCHMARK_CAPTURE(BM_ChunkO, auto, "auto", 0u)->Apply(gdn_stage_shapes);
BENCHMARK_CAPTURE(BM_ChunkO, tensor_core_fp16, "tensor_core_fp16", 0u)->Apply(gdn_stage_shapes);
BENCHMARK_CAPTURE(BM_ChunkO, portable, "portable", 0u)
    ->Args({1, 8192, 16, 32})
    ->Args({1, 256, 2, 4})  // small enough for a CPU device
    ->UseManualTime()
    ->Iterations(10)
    ->Unit(benchmark::kMicrosecond);
// The bf16 persistent grid: 132, 264 and 528 workgroups (--benchmark_filter=^Sweep_).
BENCHMARK_CAPTURE(BM_ChunkO, bf16_wg132, "tensor_core_bf16", 132u)->Name("Sweep_ChunkO/bf16_wg132")->Apply(gdn_stage_shapes);
BENCHMARK_CAPTURE(BM_ChunkO, bf16_wg264, "tensor_core_bf16", 264u)->Name("Sweep_ChunkO/bf16_wg264")->Apply(gdn_stage_shapes);
BENCHMARK_CAPTURE(BM_ChunkO, bf16_wg528, "tensor_core_bf16", 528u)->Name("Sweep_ChunkO/bf16_wg528")->Apply(gdn_stage_shapes);

}  // namespace
