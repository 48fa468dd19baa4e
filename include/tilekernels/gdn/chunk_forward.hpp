// Gated DeltaNet, the whole chunked forward (FLA's chunk_gated_delta_rule,
// forward only) recorded by one call: with S the per-sequence state,
//   o_t = S_t^T (scale q_t),  S_t = exp(g_t) S_{t-1} + k_t beta_t (v_t - (exp(g_t) S_{t-1})^T k_t)^T,
// computed by chunks of BT tokens with FLA's rounding points
// (bench/notes/2026-11-gdn-forward.md), stage by stage:
//   [cu_seqlens: the index table, vkCmdUpdateBuffer]
//   [qk_l2norm: gdn::L2Norm, q and k into the workspace]
//   gdn::KKTSolve        gate, cumsum, beta, A = (I + M)^-1
//   gdn::RecomputeWU     w, u
//   gdn::StateRecurrence h per chunk, v_new (over u), the final state
//   gdn::ChunkO          o
// with a compute barrier between dependent stages. record() never submits,
// waits or allocates: every intermediate lives in the caller's workspace
// (workspace_bytes()).
//
// Layout (row-major, last index innermost):
//   q, k           [B, T, Hg, K]  bf16        v, o  [B, T, H, V]  bf16
//   g, beta        [B, T, H]      f32 (natural-log decay per token, or the raw
//                                 gate with gate_in_kernel; beta, or its logits)
//   A_log, dt_bias [H]            f32 (gate_in_kernel; dt_bias optional)
//   initial_state, final_state    [N, H, K, V] f32 ([N, H, V, K] with
//                                 StateLayout::vk), optional each; they may
//                                 be the same memory (updated in place)
//   cu_seqlens     [N + 1]        i32, B = 1 (optional; its host copy
//                                 cu_seqlens_host is what the kernels use)
// H is a multiple of Hg (value head h reads q/k head h / (H / Hg)).
//
// Variable length and tails: every stage honours sequence boundaries through
// gdn/chunking.hpp (one dispatch per stage for any lengths); the
// intermediates are slot-major, so a chunk's rows start at a multiple of BT
// whatever the lengths.
#pragma once

#include <cmath>
#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "tilekernels/core.hpp"
#include "tilekernels/gdn/chunk_o.hpp"
#include "tilekernels/gdn/chunking.hpp"
#include "tilekernels/gdn/kkt_solve.hpp"
#include "tilekernels/gdn/l2norm.hpp"
#include "tilekernels/gdn/recompute_wu.hpp"
#include "tilekernels/gdn/state_recurrence.hpp"

namespace tilekernels::gdn {

template <std::uint32_t BT_ = 64, std::uint32_t K_ = 128, std::uint32_t V_ = 128>
struct ChunkForwardConfig {
  static_assert(BT_ == 16 || BT_ == 32 || BT_ == 64, "ChunkForwardConfig: BT must be 16, 32 or 64 (FLA's chunk sizes)");
  static_assert(K_ == 64 || K_ == 128 || K_ == 256, "ChunkForwardConfig: K must be 64, 128 or 256");
  static_assert(V_ == 64 || V_ == 128 || V_ == 256, "ChunkForwardConfig: V must be 64, 128 or 256");
  static constexpr std::uint32_t BT = BT_, K = K_, V = V_;
  using KKT = KKTSolveConfig<BT, K>;
  using WU = RecomputeWUConfig<BT, K, V, DType::bf16>;  // A in bf16, as FLA passes it
  using State = StateRecurrenceConfig<BT, K, V>;
  using Output = ChunkOConfig<BT, K, V>;
};

// The stages of one forward, in recording order (record()'s marker sees
// each one after its commands; index and l2norm only where they run).
enum class ChunkForwardStage { index, l2norm, kkt_solve, recompute_wu, state_recurrence, chunk_o, count };

template <class Config>
class ChunkForward {
 public:
  static constexpr const char* name = "gdn.chunk_forward";
  static constexpr std::uint32_t BT = Config::BT, K = Config::K, V = Config::V;

  struct Args {
    TensorRef q, k, v, g, beta, o;
    std::optional<TensorRef> initial_state, final_state;
    std::optional<TensorRef> A_log, dt_bias;
    std::optional<TensorRef> cu_seqlens;
    std::span<const std::int32_t> cu_seqlens_host;
    GdnOptions options;
    float scale = 0;  // 0: 1 / sqrt(K)
    std::optional<Workspace> workspace;
  };

  // Where each intermediate lives in the workspace (byte offsets).
  struct Layout {
    std::uint64_t index = 0, g = 0, beta = 0, A = 0, w = 0, u = 0, h = 0, q = 0, k = 0, bytes = 0;
  };

  explicit ChunkForward(Context& ctx) : ctx_(&ctx), l2_(ctx), kkt_(ctx), wu_(ctx), state_(ctx), out_(ctx) {}

  static Layout layout(std::int64_t B, std::int64_t T, std::int64_t Hg, std::int64_t H,
                       std::span<const std::int32_t> cu_seqlens_host, bool qk_l2norm) {
    const Chunking ch(B, T, cu_seqlens_host, BT);
    const auto S = static_cast<std::uint64_t>(ch.slots()), h = static_cast<std::uint64_t>(H);
    detail::WorkspaceLayout w;
    Layout l;
    l.index = w.add(ch.index_bytes());
    l.g = w.add(S * h * 4);
    l.beta = w.add(S * h * 4);
    l.A = w.add(S * h * BT * 2);
    l.w = w.add(S * h * K * 2);
    l.u = w.add(S * h * V * 2);  // u, then v_new over it
    l.h = w.add(static_cast<std::uint64_t>(ch.chunks()) * h * K * V * 2);
    if (qk_l2norm) {
      const auto qk = static_cast<std::uint64_t>(B * T * Hg) * K * 2;
      l.q = w.add(qk);
      l.k = w.add(qk);
    }
    l.bytes = w.bytes();
    return l;
  }
  static std::uint64_t workspace_bytes(std::int64_t B, std::int64_t T, std::int64_t Hg, std::int64_t H,
                                       std::span<const std::int32_t> cu_seqlens_host, bool qk_l2norm) {
    return layout(B, T, Hg, H, cu_seqlens_host, qk_l2norm).bytes;
  }
  static std::uint64_t workspace_bytes(const Args& a) {
    return workspace_bytes(a.q.shape.at(0), a.q.shape.at(1), a.q.shape.at(2), a.v.shape.at(2), a.cu_seqlens_host,
                           a.options.qk_l2norm);
  }

  static Chunking chunking(const Args& a) { return Chunking(a.q.shape.at(0), a.q.shape.at(1), a.cu_seqlens_host, BT); }

  // Throws tilekernels::Error naming the first argument that is wrong.
  void check(const Args& a) const {
    check_problem(a);
    if (!a.workspace)
      throw Error(ErrorCode::invalid_argument, std::string(name) + ": workspace: none given (workspace_bytes() says how much)");
    detail::expect_workspace(*ctx_, name, *a.workspace, workspace_bytes(a));
  }

  // check() less the workspace: every tensor, option and cu_seqlens.
  void check_problem(const Args& a) const {
    detail::expect_rank(name, "q", a.q, 4);
    detail::expect_rank(name, "v", a.v, 4);
    const auto B = a.q.shape[0], T = a.q.shape[1], Hg = a.q.shape[2], H = a.v.shape[2];
    const Chunking ch = chunking(a);
    ch.check(*ctx_, name, a.cu_seqlens);
    detail::expect_tensor(*ctx_, name, "q", a.q, DType::bf16, {B, T, Hg, K});
    detail::expect_tensor(*ctx_, name, "k", a.k, DType::bf16, {B, T, Hg, K});
    if (H % Hg != 0)
      throw Error(ErrorCode::shape_mismatch, detail::where(name, "v") + "H = " + std::to_string(H) +
                                                 " heads is not a multiple of Hg = " + std::to_string(Hg));
    detail::expect_tensor(*ctx_, name, "v", a.v, DType::bf16, {B, T, H, V});
    detail::expect_tensor(*ctx_, name, "g", a.g, DType::f32, {B, T, H});
    detail::expect_tensor(*ctx_, name, "beta", a.beta, DType::f32, {B, T, H});
    detail::expect_tensor(*ctx_, name, "o", a.o, DType::bf16, {B, T, H, V});
    const std::int64_t N = ch.N();
    const Shape state = a.options.state_layout == StateLayout::kv ? Shape{N, H, K, V} : Shape{N, H, V, K};
    if (a.initial_state) detail::expect_tensor(*ctx_, name, "initial_state", *a.initial_state, DType::f32, state);
    if (a.final_state) detail::expect_tensor(*ctx_, name, "final_state", *a.final_state, DType::f32, state);
    detail::expect_options(*ctx_, name, a.options, a.A_log, a.dt_bias, H);
  }

  Status can_implement(const Args& a) const {
    return detail::status_of([&] { check(a); });
  }

  void record(vk::CommandBuffer cmd, const Args& a) const {
    record(cmd, a, [](vk::CommandBuffer, ChunkForwardStage) {});
  }

  // The same, calling mark(cmd, stage) after each stage's commands and
  // before the barrier that follows them (for timestamps between stages).
  template <class Mark>
  void record(vk::CommandBuffer cmd, const Args& a, Mark&& mark) const {
    check(a);
    const Chunking ch = chunking(a);
    const auto B = a.q.shape[0], T = a.q.shape[1], Hg = a.q.shape[2], H = a.v.shape[2];
    const std::int64_t S = ch.slots();
    const Layout l = layout(B, T, Hg, H, a.cu_seqlens_host, a.options.qk_l2norm);
    const Workspace& ws = *a.workspace;
    const auto region = [&](std::uint64_t at, DType dt, Shape shape) {
      TensorRef t{ws.memory.buffer, ws.memory.offset + at, 0, dt, std::move(shape)};
      t.size = t.bytes();
      return t;
    };
    std::optional<TensorRef> index;
    if (ch.varlen()) {
      index = region(l.index, DType::u32, {static_cast<std::int64_t>(ch.index_bytes() / 4)});
      ch.record_index(*ctx_, cmd, *index);
      mark(cmd, ChunkForwardStage::index);
    }
    TensorRef q = a.q, k = a.k;
    if (a.options.qk_l2norm) {
      q = region(l.q, DType::bf16, a.q.shape);
      k = region(l.k, DType::bf16, a.k.shape);
      l2_.record(cmd, {a.q, a.k, q, k});
      mark(cmd, ChunkForwardStage::l2norm);
      compute_barrier(*ctx_, cmd);
    }
    const TensorRef g = region(l.g, DType::f32, {S, H}), beta = region(l.beta, DType::f32, {S, H});
    const TensorRef A = region(l.A, DType::bf16, {S, H, BT}), w = region(l.w, DType::bf16, {S, H, K});
    const TensorRef u = region(l.u, DType::bf16, {S, H, V}), h = region(l.h, DType::bf16, {ch.chunks(), H, V, K});

    typename KKTSolve<typename Config::KKT>::Args ka;
    ka.k = k, ka.g = a.g, ka.beta = a.beta, ka.A_log = a.A_log, ka.dt_bias = a.dt_bias;
    ka.g_cumsum = g, ka.beta_out = beta, ka.A = A, ka.options = a.options;
    ka.cu_seqlens_host = a.cu_seqlens_host, ka.index = index;
    kkt_.record(cmd, ka);
    mark(cmd, ChunkForwardStage::kkt_solve);
    compute_barrier(*ctx_, cmd);

    typename RecomputeWU<typename Config::WU>::Args wa;
    wa.k = k, wa.v = a.v, wa.beta = beta, wa.g = g, wa.A = A, wa.w = w, wa.u = u;
    wa.cu_seqlens_host = a.cu_seqlens_host, wa.index = index;
    wu_.record(cmd, wa);
    mark(cmd, ChunkForwardStage::recompute_wu);
    compute_barrier(*ctx_, cmd);

    typename StateRecurrence<typename Config::State>::Args sa;
    sa.k = k, sa.w = w, sa.u = u, sa.g = g, sa.initial_state = a.initial_state, sa.h = h, sa.v_new = u;
    sa.final_state = a.final_state, sa.state_layout = a.options.state_layout;
    sa.cu_seqlens_host = a.cu_seqlens_host, sa.index = index;
    state_.record(cmd, sa);
    mark(cmd, ChunkForwardStage::state_recurrence);
    compute_barrier(*ctx_, cmd);

    const float scale = a.scale != 0 ? a.scale : 1.0f / std::sqrt(float(K));
    typename ChunkO<typename Config::Output>::Args oa;
    oa.q = q, oa.k = k, oa.v = u, oa.h = h, oa.g = g, oa.o = a.o, oa.scale = scale;
    oa.cu_seqlens_host = a.cu_seqlens_host, oa.index = index;
    out_.record(cmd, oa);
    mark(cmd, ChunkForwardStage::chunk_o);
  }

  // Convenience for tests and tools: allocates the workspace, records into
  // a fresh command buffer, submits and waits.
  void run(const Args& a) const {
    Args with = a;
    std::optional<Tensor> scratch;
    if (!a.workspace) {
      check_problem(a);  // the workspace is sized from the shapes
      scratch.emplace(*ctx_, DType::u32, Shape{static_cast<std::int64_t>(workspace_bytes(a) / 4 + 1)});
      with.workspace = Workspace{scratch->ref()};
    }
    check(with);
    ctx_->submit_and_wait([&](vk::CommandBuffer cmd) { record(cmd, with); });
  }

 private:
  Context* ctx_;
  L2Norm<K> l2_;
  KKTSolve<typename Config::KKT> kkt_;
  RecomputeWU<typename Config::WU> wu_;
  StateRecurrence<typename Config::State> state_;
  ChunkO<typename Config::Output> out_;
};

}  // namespace tilekernels::gdn
