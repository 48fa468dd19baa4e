// gdn::ChunkO at the shapes (B, T, Hg, H) with K = V = 128, BT = 64,
// on the tensor-core path (kernel versions 1 and 2, with a few tilings: bv =
// V columns per workgroup, wc = subgroups along V, kc = K per stage) and the
// portable path. Bytes: q, k,
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

void BM_ChunkO(benchmark::State& state, bool portable, int version, std::uint32_t bv, std::uint32_t wc,
               std::uint32_t kc, int v_early, std::uint32_t nbuf, std::uint32_t upw) {
  using Config = gdn::ChunkOConfig<64, 128, 128>;
  Context& ctx = context();
  const std::int64_t B = state.range(0), T = state.range(1), Hg = state.range(2), H = state.range(3);
  const std::int64_t K = 128, V = 128, BT = 64, NT = (T + BT - 1) / BT;
  if (ctx.info().is_cpu() && T > 256) {
    state.SkipWithError("shape too large for a CPU device");
    return;
  }
  gdn::ChunkOOptions options;
  options.force_portable = portable;
  options.nv_bv = bv;
  options.nv_wc = wc;
  options.nv_kc = kc;
  options.nv_v_early = v_early;
  options.nv_version = version == 4 ? 0 : version;  // 4: the bf16 kernel, upw = its workgroups
  options.nv_nbuf = nbuf;
  options.nv_upw = version == 4 ? 0 : upw;
  if (version == 4) options.bf16_workgroups = upw;  // 0: the default grid
  gdn::ChunkO<Config> kernel(ctx, options);
  if (!portable && kernel.path() == gdn::ChunkOPath::portable) {
    state.SkipWithError("no tensor-core path on this device");
    return;
  }
  if (version == 4 && kernel.path() != gdn::ChunkOPath::bf16_cooperative_matrix) {
    state.SkipWithError("no bf16 tensor-core path on this device or build");
    return;
  }
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

  const double bytes = 2.0 * (2.0 * B * T * Hg * K + 2.0 * B * T * H * V + double(B) * NT * H * V * K) +
                       4.0 * B * T * H;
  const double flops = 2.0 * B * NT * H * (double(BT) * K * V + double(BT) * BT * K + double(BT) * BT * V);
  const bool nv = kernel.path() != gdn::ChunkOPath::portable;
  run_timed(state, ctx, [&](vk::CommandBuffer cmd, int) { kernel.record(cmd, {q, k, v, h, g, o, 0.08838834764f}); },
            bytes, nv ? 0.0 : flops, 0, 20);
  state.counters["TFLOP/s"] = flops / (state.counters["us"] * 1e-6) * 1e-12;
  state.SetLabel(gdn::to_string(kernel.path()));
}

void shapes(benchmark::internal::Benchmark* b) {
  b->Args({1, 8192, 16, 32})->Args({8, 2048, 16, 32})->UseManualTime()->Iterations(10)->Unit(benchmark::kMicrosecond);
}

// Version 1 (chunk_o_nv.comp) tilings: V columns per workgroup, subgroups
// along V, K per stage, v_new read early (with the first stage) or late.
BENCHMARK_CAPTURE(BM_ChunkO, nv_bv128_wc4_kc64_early, false, 1, 128u, 4u, 64u, 1, 0u, 0u)->Apply(shapes);
BENCHMARK_CAPTURE(BM_ChunkO, nv_bv128_wc4_kc64_late, false, 1, 128u, 4u, 64u, 0, 0u, 0u)->Apply(shapes);
BENCHMARK_CAPTURE(BM_ChunkO, nv_bv128_wc2_kc64_early, false, 1, 128u, 2u, 64u, 1, 0u, 0u)->Apply(shapes);
BENCHMARK_CAPTURE(BM_ChunkO, nv_bv128_wc4_kc32_early, false, 1, 128u, 4u, 32u, 1, 0u, 0u)->Apply(shapes);
BENCHMARK_CAPTURE(BM_ChunkO, nv_bv64_wc2_kc64_early, false, 1, 64u, 2u, 64u, 1, 0u, 0u)->Apply(shapes);
// Version 2 (chunk_o_nv2.comp): subgroups along V (1: 128 invocations), K
// per stage, shared stage buffers.
BENCHMARK_CAPTURE(BM_ChunkO, nv2_wc1_kc32_buf2, false, 2, 128u, 1u, 32u, -1, 2u, 0u)->Apply(shapes);
BENCHMARK_CAPTURE(BM_ChunkO, nv2_wc1_kc16_buf2, false, 2, 128u, 1u, 16u, -1, 2u, 0u)->Apply(shapes);
BENCHMARK_CAPTURE(BM_ChunkO, nv2_wc1_kc64_buf1, false, 2, 128u, 1u, 64u, -1, 1u, 0u)->Apply(shapes);
BENCHMARK_CAPTURE(BM_ChunkO, nv2_wc2_kc32_buf2, false, 2, 128u, 2u, 32u, -1, 2u, 0u)->Apply(shapes);
BENCHMARK_CAPTURE(BM_ChunkO, nv2_wc2_kc64_buf1, false, 2, 128u, 2u, 64u, -1, 1u, 0u)->Apply(shapes);
BENCHMARK_CAPTURE(BM_ChunkO, nv2_bv64_wc2_kc64_buf1, false, 2, 64u, 2u, 64u, -1, 1u, 0u)->Apply(shapes);
BENCHMARK_CAPTURE(BM_ChunkO, nv2_bv64_wc1_kc64_buf1, false, 2, 64u, 1u, 64u, -1, 1u, 0u)->Apply(shapes);
// Version 3 (chunk_o_nv3.comp): every load of a tile issued at once, in
// workgroups of upw tiles that load the next tile while computing this one.
// The default is wc4_kc64_upw1.
BENCHMARK_CAPTURE(BM_ChunkO, nv3_wc4_kc64_upw8, false, 3, 128u, 4u, 64u, -1, 0u, 8u)->Apply(shapes);
BENCHMARK_CAPTURE(BM_ChunkO, nv3_wc4_kc64_upw16, false, 3, 128u, 4u, 64u, -1, 0u, 16u)->Apply(shapes);
BENCHMARK_CAPTURE(BM_ChunkO, nv3_wc4_kc64_upw32, false, 3, 128u, 4u, 64u, -1, 0u, 32u)->Apply(shapes);
BENCHMARK_CAPTURE(BM_ChunkO, nv3_wc2_kc64_upw16, false, 3, 128u, 2u, 64u, -1, 0u, 16u)->Apply(shapes);
BENCHMARK_CAPTURE(BM_ChunkO, nv3_wc4_kc64_upw1, false, 3, 128u, 4u, 64u, -1, 0u, 1u)->Apply(shapes);
BENCHMARK_CAPTURE(BM_ChunkO, nv3_wc4_kc32_upw1, false, 3, 128u, 4u, 32u, -1, 0u, 1u)->Apply(shapes);
BENCHMARK_CAPTURE(BM_ChunkO, nv3_wc4_kc64_upw2, false, 3, 128u, 4u, 64u, -1, 0u, 2u)->Apply(shapes);
// The bf16 kernel (chunk_o_bf16.comp, the default where available) with
// its default grid (one workgroup per multiprocessor where the device
// reports them, else 264) and with 132, 264 and 528 persistent workgroups.
BENCHMARK_CAPTURE(BM_ChunkO, bf16, false, 4, 0u, 0u, 0u, -1, 0u, 0u)->Apply(shapes);
BENCHMARK_CAPTURE(BM_ChunkO, bf16_wg132, false, 4, 0u, 0u, 0u, -1, 0u, 132u)->Apply(shapes);
BENCHMARK_CAPTURE(BM_ChunkO, bf16_wg264, false, 4, 0u, 0u, 0u, -1, 0u, 264u)->Apply(shapes);
BENCHMARK_CAPTURE(BM_ChunkO, bf16_wg528, false, 4, 0u, 0u, 0u, -1, 0u, 528u)->Apply(shapes);
BENCHMARK_CAPTURE(BM_ChunkO, portable, true, 0, 0u, 0u, 0u, -1, 0u, 0u)
    ->Args({1, 8192, 16, 32})
    ->Args({1, 256, 2, 4})  // small enough for a CPU device
    ->UseManualTime()
    ->Iterations(10)
    ->Unit(benchmark::kMicrosecond);

}  // namespace
