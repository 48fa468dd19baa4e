// SPDX-License-Identifier: MIT
// gdn::ChunkForward, the whole chunked forward in one recording, at the
// issue's shapes with K = V = 128, BT = 64, initial and final state given
// (as bench/compare/gdn_forward_fla.py times FLA's chunk_gated_delta_rule):
//   BM_GdnChunkForward/B1_T8192     (B, T, Hg, H) = (1, 8192, 16, 32)
//   BM_GdnChunkForward/B8_T2048     (8, 2048, 16, 32)
//   BM_GdnChunkForward/varlen_N8    B = 1, 8 sequences of mixed lengths,
//                                   16384 tokens (the peer script's lengths)
//   Sweep_GdnChunkForward/qwen_*    the first two with Qwen3-Next's options
//                                   (gdn_forward_fla.py --qwen)
//   Sweep_GdnChunkForward/small     a shape small enough for a CPU device
// Bytes: the forward's own inputs and outputs once (q, k, v, g, beta, o,
// the initial and final state), not its intermediates; flops: the products
// of all stages over full chunks. The floor quoted is the memory floor (the
// stages run on tensor cores where the device has them; their peak is not
// measured here). Counters us_<stage>: the GPU time of each stage of one
// call, from timestamps written after each stage of a separate recording
// (its sum is near, not equal to, us: the barriers fall between stamps).
#include <tilekernels/gdn/chunk_forward.hpp>

#include <array>
#include <cmath>
#include <numeric>
#include <vector>

#include "common.hpp"

namespace {

using namespace tkbench;
namespace gdn = tilekernels::gdn;

struct ForwardShape {
  std::int64_t B, T, Hg, H;
  std::vector<std::int32_t> lengths;  // empty: fixed length
  // Qwen3-Next's options: q and k L2-normalised, the gate from raw g with
  // A_log and dt_bias, beta from logits (gdn_forward_fla.py --qwen).
  bool qwen = false;
};

// Same lengths as bench/compare/gdn_forward_fla.py's VARLEN_LENS.
const std::vector<std::int32_t> kVarlenLengths{4096, 1000, 3000, 517, 2048, 63, 3500, 2160};

// Deterministic values in [-0.5, 0.5).
std::vector<float> noise(std::size_t n, std::uint32_t seed) {
  std::vector<float> out(n);
  std::uint32_t x = seed * 2654435761u + 1;
  for (auto& e : out) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    e = static_cast<float>(static_cast<std::int32_t>(x >> 8) - (1 << 23)) * 0x1p-24f;
  }
  return out;
}

// Timestamps after each stage of one recorded forward.
class StageTimer {
 public:
  static constexpr std::size_t slots = std::size_t(gdn::ChunkForwardStage::count) + 1;
  explicit StageTimer(Context& ctx) : ctx_(&ctx) {
    const auto& d = ctx.dispatcher();
    pool_ = Owned<vk::QueryPool>(
        ctx.device(), ctx.device().createQueryPool(vk::QueryPoolCreateInfo({}, vk::QueryType::eTimestamp, slots), nullptr, d),
        d.vkDestroyQueryPool, nullptr);
  }
  void start(vk::CommandBuffer cmd) {
    cmd.resetQueryPool(*pool_, 0, slots, ctx_->dispatcher());
    cmd.writeTimestamp(vk::PipelineStageFlagBits::eAllCommands, *pool_, 0, ctx_->dispatcher());
    recorded_.fill(false);
  }
  void mark(vk::CommandBuffer cmd, gdn::ChunkForwardStage s) {
    const auto i = std::size_t(s) + 1;
    cmd.writeTimestamp(vk::PipelineStageFlagBits::eAllCommands, *pool_, std::uint32_t(i), ctx_->dispatcher());
    recorded_[i] = true;
  }
  // Seconds per stage (0 for stages the call did not record).
  std::array<double, slots - 1> seconds() const {
    std::array<double, slots - 1> out{};
    std::uint64_t last = 0;
    for (std::size_t i = 0; i < slots; ++i) {
      if (i > 0 && !recorded_[i]) continue;
      std::uint64_t t = 0;
      const auto r = static_cast<vk::Result>(ctx_->dispatcher().vkGetQueryPoolResults(
          static_cast<VkDevice>(ctx_->device()), static_cast<VkQueryPool>(*pool_), std::uint32_t(i), 1, sizeof(t), &t, sizeof(t),
          VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT));
      if (r != vk::Result::eSuccess) throw detail::vulkan_error("reading timestamps", r);
      if (i > 0) out[i - 1] = double(t - last) * ctx_->info().timestamp_period_ns * 1e-9;
      last = t;
    }
    return out;
  }

 private:
  Context* ctx_;
  Owned<vk::QueryPool> pool_;
  std::array<bool, slots> recorded_{};
};

const char* stage_name(gdn::ChunkForwardStage s) {
  switch (s) {
    case gdn::ChunkForwardStage::index: return "us_index";
    case gdn::ChunkForwardStage::l2norm: return "us_l2norm";
    case gdn::ChunkForwardStage::kkt_solve: return "us_kkt_solve";
    case gdn::ChunkForwardStage::recompute_wu: return "us_recompute_wu";
    case gdn::ChunkForwardStage::state_recurrence: return "us_state";
    case gdn::ChunkForwardStage::chunk_o: return "us_chunk_o";
    default: return "us_other";
  }
}

void BM_GdnChunkForward(benchmark::State& state, ForwardShape shape) {
  using Kernel = gdn::ChunkForward<gdn::ChunkForwardConfig<64, 128, 128>>;
  constexpr std::int64_t K = 128, V = 128, BT = 64;
  Context& ctx = context();
  std::vector<std::int32_t> cu;
  if (!shape.lengths.empty()) {
    cu.push_back(0);
    for (auto n : shape.lengths) cu.push_back(cu.back() + n);
    shape.T = cu.back();
  }
  const std::int64_t B = shape.B, T = shape.T, Hg = shape.Hg, H = shape.H;
  const std::int64_t N = cu.empty() ? B : std::int64_t(cu.size()) - 1;
  if (ctx.info().is_cpu() && B * T > 256) {
    state.SkipWithError("shape too large for a CPU device");
    return;
  }
  const auto n = [](std::int64_t x) { return static_cast<std::size_t>(x); };
  std::vector<float> kv = noise(n(B * T * Hg * K), 2);
  for (auto& x : kv) x *= std::sqrt(12.0f / K);  // rows of about unit norm, as FLA's callers pass k
  std::vector<float> gv = noise(n(B * T * H), 4), bv = noise(n(B * T * H), 5);
  if (!shape.qwen) {
    for (auto& x : gv) x = -0.5f + 0.4f * x;  // per-token log decay in (-0.7, -0.3]
    for (auto& x : bv) x = 0.6f + 0.2f * x;
  }
  std::vector<float> h0v = noise(n(N * H * K * V), 6);
  Tensor q = Tensor::from_floats(ctx, DType::bf16, {B, T, Hg, K}, noise(n(B * T * Hg * K), 1));
  Tensor k = Tensor::from_floats(ctx, DType::bf16, {B, T, Hg, K}, kv);
  Tensor v = Tensor::from_floats(ctx, DType::bf16, {B, T, H, V}, noise(n(B * T * H * V), 3));
  Tensor g = Tensor::from_floats(ctx, DType::f32, {B, T, H}, gv);
  Tensor beta = Tensor::from_floats(ctx, DType::f32, {B, T, H}, bv);
  Tensor h0 = Tensor::from_floats(ctx, DType::f32, {N, H, K, V}, h0v);
  Tensor ht(ctx, DType::f32, {N, H, K, V}), o(ctx, DType::bf16, {B, T, H, V});
  std::optional<Tensor> cu_dev;
  if (!cu.empty()) {
    cu_dev.emplace(ctx, DType::i32, Shape{std::int64_t(cu.size())});
    cu_dev->upload(std::span<const std::int32_t>(cu));
  }
  const Kernel fwd(ctx);
  Kernel::Args args;
  args.q = q, args.k = k, args.v = v, args.g = g, args.beta = beta, args.o = o;
  args.initial_state = h0.ref(), args.final_state = ht.ref();
  std::optional<Tensor> a_log_t, dt_bias_t;
  if (shape.qwen) {
    std::vector<float> a_log = noise(n(H), 7), dt_bias = noise(n(H), 8);
    for (auto& x : a_log) x = std::log(0.55f + x);  // A in (0.05, 1.05)
    for (auto& x : dt_bias) x *= 0.2f;
    a_log_t.emplace(Tensor::from_floats(ctx, DType::f32, {H}, a_log));
    dt_bias_t.emplace(Tensor::from_floats(ctx, DType::f32, {H}, dt_bias));
    args.options.qk_l2norm = args.options.gate_in_kernel = args.options.beta_sigmoid = true;
    args.A_log = a_log_t->ref(), args.dt_bias = dt_bias_t->ref();
  }
  if (cu_dev) args.cu_seqlens = cu_dev->ref();
  args.cu_seqlens_host = cu;
  Tensor ws(ctx, DType::u32, {std::int64_t(Kernel::workspace_bytes(fwd.problem(args)) / 4 + 1)});
  args.workspace = Workspace{ws.ref()};
  if (const Status s = fwd.can_implement(args); !s) {
    state.SkipWithError(s.message.c_str());
    return;
  }

  std::int64_t chunks = 0;  // per head
  gdn::Chunking(B, T, cu, BT).for_each_sequence(
      [&](std::int64_t, std::int64_t, std::int64_t len, std::int64_t) { chunks += (len + BT - 1) / BT; });
  const double tokens = double(B * T);
  const double bytes = 2.0 * (2.0 * tokens * Hg * K + 2.0 * tokens * H * V) + 2.0 * 4.0 * tokens * H +
                       2.0 * 4.0 * double(N * H * K * V);
  const double per_chunk = 2.0 * (double(BT) * BT * K               // k k^T
                                  + double(BT) * BT * (K + V)       // w, u
                                  + 2.0 * double(BT) * K * V        // w h, k^T v_new
                                  + double(BT) * K * V              // q h
                                  + double(BT) * BT * (K + V));     // q k^T, A v_new
  const double flops = per_chunk * double(chunks) * double(H);
  run_timed(state, ctx, [&](vk::CommandBuffer cmd, int) { fwd.record(cmd, args); }, bytes, 0.0, 0, 5);
  state.counters["TFLOP/s"] = flops / (state.counters["us"] * 1e-6) * 1e-12;

  // The per-stage split, averaged over a few single-call recordings.
  StageTimer timer(ctx);
  std::array<double, StageTimer::slots - 1> sum{};
  constexpr int kSplitCalls = 5;
  for (int i = 0; i < kSplitCalls; ++i) {
    ctx.submit_and_wait([&](vk::CommandBuffer cmd) {
      fwd.record(cmd, args);  // warm-up
      compute_barrier(ctx, cmd);
      timer.start(cmd);
      fwd.record(cmd, args, [&](vk::CommandBuffer c, gdn::ChunkForwardStage s) { timer.mark(c, s); });
    });
    const auto s = timer.seconds();
    for (std::size_t j = 0; j < s.size(); ++j) sum[j] += s[j];
  }
  for (std::size_t j = 0; j < sum.size(); ++j)
    if (sum[j] > 0) state.counters[stage_name(gdn::ChunkForwardStage(j))] = sum[j] / kSplitCalls * 1e6;
  state.SetLabel(cu.empty() ? "fixed length" : "varlen N=" + std::to_string(N));
}

BENCHMARK_CAPTURE(BM_GdnChunkForward, B1_T8192, ForwardShape{1, 8192, 16, 32, {}})
    ->UseManualTime()->Iterations(5)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_GdnChunkForward, B8_T2048, ForwardShape{8, 2048, 16, 32, {}})
    ->UseManualTime()->Iterations(5)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_GdnChunkForward, varlen_N8, ForwardShape{1, 0, 16, 32, kVarlenLengths})
    ->UseManualTime()->Iterations(5)->Unit(benchmark::kMicrosecond);
// Many short sequences, 16384 tokens: 128 of 128 tokens against 128 of 127
// and 129 (a tail chunk in every sequence: 320 chunks instead of 256).
const std::vector<std::int32_t> kManyAligned(128, 128);
std::vector<std::int32_t> many_unaligned() {
  std::vector<std::int32_t> l;
  for (int i = 0; i < 128; ++i) l.push_back(i % 2 ? 129 : 127);
  return l;
}
BENCHMARK_CAPTURE(BM_GdnChunkForward, varlen_N128_aligned, ForwardShape{1, 0, 16, 32, kManyAligned})
    ->Name("Sweep_GdnChunkForward/varlen_N128_aligned")
    ->UseManualTime()->Iterations(5)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_GdnChunkForward, varlen_N128_unaligned, ForwardShape{1, 0, 16, 32, many_unaligned()})
    ->Name("Sweep_GdnChunkForward/varlen_N128_unaligned")
    ->UseManualTime()->Iterations(5)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_GdnChunkForward, qwen_B1_T8192, ForwardShape{1, 8192, 16, 32, {}, true})
    ->Name("Sweep_GdnChunkForward/qwen_B1_T8192")
    ->UseManualTime()->Iterations(5)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_GdnChunkForward, qwen_B8_T2048, ForwardShape{8, 2048, 16, 32, {}, true})
    ->Name("Sweep_GdnChunkForward/qwen_B8_T2048")
    ->UseManualTime()->Iterations(5)->Unit(benchmark::kMicrosecond);
// A small shape that a CPU device runs in seconds (--benchmark_filter=^Sweep_).
BENCHMARK_CAPTURE(BM_GdnChunkForward, small, ForwardShape{1, 200, 2, 4, {}})
    ->Name("Sweep_GdnChunkForward/small")
    ->UseManualTime()->Iterations(2)->Unit(benchmark::kMicrosecond);

}  // namespace
