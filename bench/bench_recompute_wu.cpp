// gdn::RecomputeWU at the shapes (B, T, Hg, H) with BT = 64,
// K = V = 128, A in f32 (and in bf16, as FLA passes it). Arg `variant`:
// 0 tensor-core kernel 2 with 128-invocation workgroups, 1 portable, 2
// kernel 2 with A split in hi + lo fp16, 3 kernel 2 with 256 invocations,
// 4 the first tensor-core kernel (256 invocations), 5 kernel 2 with 512
// invocations (the fp16 default), 6 the bf16 path's defaults (the default
// where the device and build have it: the joint kernel, u and w of a tile
// in one workgroup, where it applies -- A in bf16 here -- else the pairs
// kernel; one persistent workgroup or pair per multiprocessor, the next
// tile in flight), 9 the pairs kernel with its defaults, 7 the pairs
// kernel with one tile per workgroup (no prefetch), 8 the pairs kernel at
// 256 invocations and 528 workgroups. Bytes: every
// tensor read or written once (k once, although GQA heads share it); flops:
// the two products over full BT x BT blocks. The tensor-core entries take
// the nominal dense fp16 tensor-core rate of an H100/H200 (989 TFLOP/s) as
// their flop ceiling, the portable ones the measured f32 FMA rate. Use a
// --benchmark_min_time of a few ms: each iteration is already 100 calls.
#include <tilekernels/gdn/recompute_wu.hpp>

#include <initializer_list>

#include <vector>

#include "common.hpp"

namespace {

using namespace tkbench;
namespace gdn = tilekernels::gdn;

template <DType AType>
void BM_RecomputeWU(benchmark::State& state) {
  using Config = gdn::RecomputeWUConfig<64, 128, 128, AType>;
  using Kernel = gdn::RecomputeWU<Config>;
  Context& ctx = context();
  const std::int64_t B = state.range(0), T = state.range(1), Hg = state.range(2), H = state.range(3);
  const int variant = static_cast<int>(state.range(4));
  gdn::RecomputeWUOptions options;
  options.force_portable = variant == 1;
  options.tensor_cores = variant != 1;
  options.split_a = variant == 2;
  options.coop_workgroup = variant == 3 || variant == 4 ? 256 : variant == 5 ? 512 : 128;
  options.tc_kernel = variant == 4 ? 1 : variant >= 6 ? 3 : 2;
  // 6: the bf16 path's defaults (the joint kernel where it applies); the
  // pairs kernel: 9 its defaults, 7 one tile per workgroup, 8 256 invocations
  options.bf16_joint = variant == 6;
  if (variant == 7) options.bf16_workgroups = 16384;
  if (variant == 8) {
    options.bf16_invocations = 256;
    options.bf16_workgroups = 528;
  }
  Kernel kernel(ctx, options);
  const auto want = variant == 1   ? gdn::RecomputeWUPath::portable
                    : variant >= 6 ? gdn::RecomputeWUPath::cooperative_matrix_bf16
                                   : gdn::RecomputeWUPath::cooperative_matrix_nv;
  if (kernel.path() != want) {
    state.SkipWithError("this path is not available on this device or build");
    return;
  }
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
        kernel.record(cmd, {s.k, s.v, s.beta, s.g, s.A, s.w, s.u});
      },
      bytes, flops, kernel.path() != gdn::RecomputeWUPath::portable ? 989e12 : 0.0);
  const bool tc = kernel.path() != gdn::RecomputeWUPath::portable;
  state.SetLabel(std::string(tc ? "tc" + std::to_string(kernel.tc_kernel()) : "portable") +
                 (options.split_a ? "+split" : "") + (AType == DType::bf16 ? "+A_bf16" : "") +
                 (tc ? "+wg" + std::to_string(variant >= 6 ? kernel.bf16_grid() : options.coop_workgroup) : "") +
                 (variant >= 6 ? "x" + std::to_string(kernel.bf16_invocations()) : "") + (kernel.bf16_joint() ? "+uw" : ""));
}

// Both issue shapes for each of `both`, the first shape only for `first`.
void Variants(benchmark::internal::Benchmark* b, std::initializer_list<std::int64_t> both,
              std::initializer_list<std::int64_t> first) {
  b->ArgNames({"B", "T", "Hg", "H", "variant"});
  for (const auto v : both) b->Args({1, 8192, 16, 32, v})->Args({8, 2048, 16, 32, v});
  for (const auto v : first) b->Args({1, 8192, 16, 32, v});
  b->UseManualTime()->Iterations(10)->Unit(benchmark::kMicrosecond);
}

BENCHMARK(BM_RecomputeWU<DType::f32>)->Apply([](benchmark::internal::Benchmark* b) { Variants(b, {6, 7, 5, 3, 0}, {2, 4, 1}); });
// A in bf16, as FLA's chunked pipeline passes it (and as FLA was timed).
BENCHMARK(BM_RecomputeWU<DType::bf16>)->Apply([](benchmark::internal::Benchmark* b) { Variants(b, {6, 9, 7, 8, 5, 3, 0}, {}); });

}  // namespace
