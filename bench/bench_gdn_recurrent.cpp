// SPDX-License-Identifier: MIT
// gdn::RecurrentStep, the decode step, at Qwen3-Next's shape: H = 32 value
// heads, Hg = 16 key heads, K = V = 128, bf16 q/k/v, f32 state updated in
// place, q/k L2-normalised in the kernel (as engines call FLA's fused
// recurrent kernel). Headline: BM_GdnRecurrentStep/batch:1 and /batch:32
// (T = 1). Bytes: the state read and written once (the floor: 128 MiB at
// batch 32) plus q, k, v, g, beta read and o written once. States and
// inputs rotate among copies so that the state is not served from the
// cache between calls. The other entries vary the geometry (bv state
// columns per workgroup, kpi state rows per invocation, ql column quads on
// adjacent lanes), the variant, T (speculative decoding) and the per-token
// states.
#include <tilekernels/gdn/recurrent_step.hpp>

#include <cmath>
#include <vector>

#include "common.hpp"

namespace {

using namespace tkbench;
namespace gdn = tilekernels::gdn;
using Kernel = gdn::RecurrentStep<gdn::RecurrentStepConfig<128, 128>>;

// One set of a call's tensors.
struct Set {
  Tensor q, k, v, g, beta, state, o;
};

Set make_set(Context& ctx, std::int64_t batch, std::int64_t T, std::int64_t Hg, std::int64_t H, std::uint32_t seed) {
  const std::int64_t K = 128, V = 128;
  std::uint32_t x = seed * 2654435761u + 1;
  const auto noise = [&](std::int64_t n, float lo, float hi) {
    std::vector<float> out(static_cast<std::size_t>(n));
    for (auto& e : out) {
      x ^= x << 13;
      x ^= x >> 17;
      x ^= x << 5;
      e = lo + (hi - lo) * static_cast<float>(x >> 8) * 0x1p-24f;
    }
    return out;
  };
  return Set{Tensor::from_floats(ctx, DType::bf16, {batch, T, Hg, K}, noise(batch * T * Hg * K, -1, 1)),
             Tensor::from_floats(ctx, DType::bf16, {batch, T, Hg, K}, noise(batch * T * Hg * K, -1, 1)),
             Tensor::from_floats(ctx, DType::bf16, {batch, T, H, V}, noise(batch * T * H * V, -1, 1)),
             Tensor::from_floats(ctx, DType::f32, {batch, T, H}, noise(batch * T * H, -0.5f, -0.01f)),
             Tensor::from_floats(ctx, DType::f32, {batch, T, H}, noise(batch * T * H, 0.1f, 0.9f)),
             Tensor::from_floats(ctx, DType::f32, {batch, H, K, V}, noise(batch * H * K * V, -0.1f, 0.1f)),
             Tensor(ctx, DType::bf16, {batch, T, H, V})};
}

// bv, kpi, ql: 0 takes plan()'s; portable: the portable variant.
void run(benchmark::State& state, std::int64_t batch, std::int64_t T, std::uint32_t bv, std::uint32_t kpi,
         std::uint32_t ql, bool portable, bool token_states) {
  Context& ctx = context();
  const std::int64_t Hg = 16, H = 32, K = 128, V = 128;
  if (ctx.info().is_cpu() && batch > 4) {
    state.SkipWithError("shape too large for a CPU device");
    return;
  }
  const double bytes = Kernel::bytes(batch * T, batch, Hg, H, DType::bf16, DType::bf16, token_states);
  const int sets = rotation_sets(bytes);
  std::vector<Set> data;
  for (int i = 0; i < sets; ++i) data.push_back(make_set(ctx, batch, T, Hg, H, std::uint32_t(i + 1)));
  std::optional<Tensor> ts;
  if (token_states) ts.emplace(ctx, DType::f32, Shape{batch, T, H, K, V});
  Kernel step(ctx);
  std::vector<Kernel::Args> args(data.size());
  for (std::size_t i = 0; i < data.size(); ++i) {
    Kernel::Args& a = args[i];
    a.q = data[i].q, a.k = data[i].k, a.v = data[i].v, a.g = data[i].g, a.beta = data[i].beta;
    a.state = data[i].state, a.o = data[i].o;
    if (ts) a.token_states = ts->ref();
    a.options.qk_l2norm = true;
  }
  Kernel::Plan plan = step.plan(args[0]);
  if (portable) plan.variant = &Kernel::variants.back();
  if (bv) plan.bv = bv;
  if (kpi) plan.kpi = kpi;
  if (ql) plan.ql = ql;
  try {
    step.check(args[0], plan);
  } catch (const Error& e) {
    state.SkipWithError(e.what());
    return;
  }
  run_timed(
      state, ctx, [&](vk::CommandBuffer cmd, int i) { step.record(cmd, args[std::size_t(i) % args.size()], plan); },
      bytes, Kernel::flops(batch * T, H));
  state.counters["bv"] = plan.bv;
  state.counters["kpi"] = plan.kpi;
  state.counters["ql"] = plan.ql;
  state.counters["workgroups"] = double(batch * H * (V / plan.bv));
  state.SetLabel(std::string(plan.variant->name));
}

void BM_GdnRecurrentStep(benchmark::State& state) { run(state, state.range(0), 1, 0, 0, 0, false, false); }
BENCHMARK(BM_GdnRecurrentStep)->ArgName("batch")->Arg(1)->Arg(32)->UseManualTime()->Iterations(10)->Unit(benchmark::kMicrosecond);

// ql: column quads on adjacent lanes (8: a subgroup reads whole 128-byte
// rows, the sums over K then cross subgroups through shared memory).
void BM_GdnRecurrentStepGeometry(benchmark::State& state) {
  run(state, state.range(0), 1, std::uint32_t(state.range(1)), std::uint32_t(state.range(2)),
      std::uint32_t(state.range(3)), state.range(4) != 0, false);
}
BENCHMARK(BM_GdnRecurrentStepGeometry)
    ->Name("Sweep_GdnRecurrentStepGeometry")
    ->ArgNames({"batch", "bv", "kpi", "ql", "portable"})
    ->ArgsProduct({{1, 32}, {8, 16, 32, 64}, {4, 8, 16}, {1}, {0}})
    ->ArgsProduct({{32}, {32, 64}, {8, 16}, {2, 4, 8}, {0}})
    ->Args({1, 0, 0, 0, 1})
    ->Args({32, 0, 0, 0, 1})
    ->UseManualTime()
    ->Iterations(10)
    ->Unit(benchmark::kMicrosecond);

// Speculative decoding: T tokens per sequence, with and without the
// per-token states (which add T states of writes).
void BM_GdnRecurrentStepTokens(benchmark::State& state) {
  run(state, state.range(0), state.range(1), 0, 0, 0, false, state.range(2) != 0);
}
BENCHMARK(BM_GdnRecurrentStepTokens)
    ->Name("Sweep_GdnRecurrentStepTokens")
    ->ArgNames({"batch", "T", "token_states"})
    ->ArgsProduct({{1, 32}, {4, 8}, {0, 1}})
    ->UseManualTime()
    ->Iterations(10)
    ->Unit(benchmark::kMicrosecond);

}  // namespace
