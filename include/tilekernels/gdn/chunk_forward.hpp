// SPDX-License-Identifier: MIT
// Gated DeltaNet, the whole chunked forward (FLA's chunk_gated_delta_rule,
// forward only) recorded by one call: with S the per-sequence state,
//   o_t = S_t^T (scale q_t),  S_t = exp(g_t) S_{t-1} + k_t beta_t (v_t - (exp(g_t) S_{t-1})^T k_t)^T,
// computed by chunks of BT tokens with FLA's rounding points
// (bench/notes/2026-11-gdn-forward.md), stage by stage:
//   [cu_seqlens: gdn::ChunkIndex, the index table from the device's offsets]
//   [qk_l2norm: gdn::L2Norm, q and k into the workspace; without it, where
//    q or k is a view the later stages cannot bind, the same stage copies
//    them there]
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
//   cu_seqlens     [N + 1]        i32, B = 1 (optional): read on the device
//                                 (gdn/chunking.hpp), so a recorded forward
//                                 serves any lengths; its host copy
//                                 cu_seqlens_host, where given, is checked
// H is a multiple of Hg (value head h reads q/k head h / (H / Hg)).
//
// Views: q, k, v, g, beta and o may be views, as an engine slices them out of
// fused projections ([tokens, 2 Hg K + H V] for q, k and v): any token and
// head strides (B and T one token axis), the innermost dimension dense, any
// offset that is a multiple of the element size (o: even offsets and
// strides in elements, its pairs are written as 32-bit words). Each is
// touched by one stage: L2Norm reads q and k (and writes the dense copies
// the later stages read, normalised with qk_l2norm, else only where q or
// k cannot be bound as it is: ChunkForwardProblem::qk_views), KKTSolve
// reads g and beta, RecomputeWU v, and ChunkO writes o. Rows of v and o
// that do not all start at multiples of 8 elements take word-wise
// pipelines (GdnEnvelope::unaligned_views).
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
#include "tilekernels/gdn/chunk_index.hpp"
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

// The shape of a forward: B rows of T tokens, or with cu_seqlens N
// sequences over one row of T tokens (their total); whether q and k are
// normalised in the forward, and whether either is a view the later stages
// cannot bind as it is (not dense, or at an offset that is not a multiple
// of minStorageBufferOffsetAlignment): with either, copies of q and k live
// in the workspace.
struct ChunkForwardProblem {
  std::int64_t B = 0, T = 0, Hg = 0, H = 0;
  std::int64_t N = 0;  // sequences with cu_seqlens (B = 1); 0: fixed length
  bool qk_l2norm = false;
  bool qk_views = false;
};

template <class Config>
class ChunkForward : public KernelBase<ChunkForward<Config>, GdnEnvelope> {
  using Base = KernelBase<ChunkForward<Config>, GdnEnvelope>;
  using Base::ctx_;
  using Base::envelope_;
  using Base::pipelines_;

 public:
  using Base::plan;
  static constexpr const char* name = "gdn.chunk_forward";
  static constexpr std::uint32_t BT = Config::BT, K = Config::K, V = Config::V;

  struct Args {
    TensorRef q, k, v, g, beta, o;
    std::optional<TensorRef> initial_state, final_state;
    std::optional<TensorRef> A_log, dt_bias;
    std::optional<TensorRef> cu_seqlens;            // [N + 1] i32 on the device
    std::span<const std::int32_t> cu_seqlens_host;  // optional, checked
    GdnOptions options;
    std::optional<float> scale;  // default 1 / sqrt(K)
    std::optional<Workspace> workspace;
  };
  using Problem = ChunkForwardProblem;
  // The stages' plans (what plan() would give each for the call).
  struct Plan {
    typename KKTSolve<typename Config::KKT>::Plan kkt;
    typename RecomputeWU<typename Config::WU>::Plan wu;
    typename StateRecurrence<typename Config::State>::Plan state;
    typename ChunkO<typename Config::Output>::Plan out;
  };

  // Where each intermediate lives in the workspace (byte offsets).
  struct Layout {
    std::uint64_t index = 0, g = 0, beta = 0, A = 0, w = 0, u = 0, h = 0, q = 0, k = 0, bytes = 0;
  };

  // The stages take the forward's envelope (slot-major intermediates only).
  explicit ChunkForward(Context& ctx, GdnEnvelope envelope = {})
      : Base(ctx, envelope), index_(ctx), l2_(ctx), kkt_(ctx, stage(envelope)), wu_(ctx, stage(envelope)),
        state_(ctx, stage(envelope)), out_(ctx, stage(envelope)) {}

  // Pipelines of the stages together.
  std::size_t pipelines() const noexcept {
    return index_.pipelines() + l2_.pipelines() + kkt_.pipelines() + wu_.pipelines() + state_.pipelines() +
           out_.pipelines();
  }

  static Chunking chunking(const Problem& p) { return Chunking(p.B, p.T, p.N, BT); }
  Problem problem(const Args& a) const {
    return {a.q.shape.at(0), a.q.shape.at(1), a.q.shape.at(2), a.v.shape.at(2),
            a.cu_seqlens ? a.cu_seqlens->shape.at(0) - 1 : 0, a.options.qk_l2norm, !bindable(a.q) || !bindable(a.k)};
  }

  static Layout layout(const Problem& p) {
    const Chunking ch = chunking(p);
    const auto S = static_cast<std::uint64_t>(ch.slots()), h = static_cast<std::uint64_t>(p.H);
    detail::WorkspaceLayout w;
    Layout l;
    l.index = w.add(ch.index_bytes());
    l.g = w.add(S * h * 4);
    l.beta = w.add(S * h * 4);
    l.A = w.add(S * h * BT * 2);
    l.w = w.add(S * h * K * 2);
    l.u = w.add(S * h * V * 2);  // u, then v_new over it
    l.h = w.add(static_cast<std::uint64_t>(ch.chunks()) * h * K * V * 2);
    if (p.qk_l2norm || p.qk_views) {
      const auto qk = static_cast<std::uint64_t>(p.B * p.T * p.Hg) * K * 2;
      l.q = w.add(qk);
      l.k = w.add(qk);
    }
    l.bytes = w.bytes();
    return l;
  }
  // The workspace a forward of `p` needs. With cu_seqlens it depends on the
  // total tokens and the sequence count only: sized once for the largest
  // batch, it serves every call with as many tokens and sequences or fewer.
  static std::uint64_t workspace_bytes(const Problem& p) { return layout(p).bytes; }

  void check(const Problem& p) const {
    detail::expect_stage_shape(name, StageProblem{p.B, p.T, p.Hg, p.H, p.N, true}, false);
    if (p.qk_l2norm && envelope_.options && !envelope_.options->qk_l2norm)
      throw Error(ErrorCode::invalid_argument, std::string(name) + ": qk_l2norm is outside the envelope's options");
    plan(p, workspace_bytes(p));
  }

  // Throws tilekernels::Error naming the first argument that is wrong (the
  // workspace included).
  void check(const Args& a) const {
    check_problem(a);
    if (!a.workspace)
      throw Error(ErrorCode::invalid_argument,
                  std::string(name) + ": workspace: none given (workspace_bytes() says how much)");
    detail::expect_workspace(*ctx_, name, *a.workspace, workspace_bytes(problem(a)));
  }

  // check() less the workspace: every tensor, option and cu_seqlens.
  void check_problem(const Args& a) const {
    detail::expect_rank(name, "q", a.q, 4);
    detail::expect_rank(name, "v", a.v, 4);
    const auto B = a.q.shape[0], T = a.q.shape[1], Hg = a.q.shape[2], H = a.v.shape[2];
    const Problem p = problem(a);
    const Chunking ch = chunking(p);
    ch.check(*ctx_, name, a.cu_seqlens, a.cu_seqlens_host);
    detail::expect_view(*ctx_, name, "q", a.q, DType::bf16, {B, T, Hg, K}, 2);
    detail::expect_view(*ctx_, name, "k", a.k, DType::bf16, {B, T, Hg, K}, 2);
    if (H % Hg != 0)
      throw Error(ErrorCode::shape_mismatch, detail::where(name, "v") + "H = " + std::to_string(H) +
                                                 " heads is not a multiple of Hg = " + std::to_string(Hg));
    const detail::ViewLayout v = detail::expect_view(*ctx_, name, "v", a.v, DType::bf16, {B, T, H, V}, 2);
    detail::expect_view_in(name, "v", envelope_, a.v, v);
    detail::expect_view(*ctx_, name, "g", a.g, DType::f32, {B, T, H}, 2);
    detail::expect_view(*ctx_, name, "beta", a.beta, DType::f32, {B, T, H}, 2);
    const detail::ViewLayout o = detail::expect_view(*ctx_, name, "o", a.o, DType::bf16, {B, T, H, V}, 2);
    detail::expect_word_rows(name, "o", a.o, o);
    detail::expect_view_in(name, "o", envelope_, a.o, o);
    const std::int64_t N = ch.N();
    const Shape state = a.options.state_layout == StateLayout::kv ? Shape{N, H, K, V} : Shape{N, H, V, K};
    if (a.initial_state) detail::expect_tensor(*ctx_, name, "initial_state", *a.initial_state, DType::f32, state);
    if (a.final_state) detail::expect_tensor(*ctx_, name, "final_state", *a.final_state, DType::f32, state);
    detail::expect_options(*ctx_, name, a.options, a.A_log, a.dt_bias, H);
    detail::expect_options_in(name, envelope_, a.options, a.dt_bias.has_value(),
                              KKTSolve<typename Config::KKT>::option_mask | TK_GDN_OPT_STATE_VK);
    if (a.scale && !std::isfinite(*a.scale))
      throw Error(ErrorCode::invalid_argument, std::string(name) + ": scale must be finite, got " + std::to_string(*a.scale));
    check(p);
  }

  Plan plan(const Problem& p, std::uint64_t workspace) const {
    detail::expect_workspace_bytes(name, workspace, workspace_bytes(p));
    const StageProblem sp{p.B, p.T, p.Hg, p.H, p.N, true};
    return {kkt_.plan(sp, 0), wu_.plan(sp, 0), state_.plan(sp, 0), out_.plan(sp, 0)};
  }

  void record(vk::CommandBuffer cmd, const Args& a) const {
    record(cmd, a, [](vk::CommandBuffer, ChunkForwardStage) {});
  }
  void record(vk::CommandBuffer cmd, const Args& a, const Plan& plan) const {
    record(cmd, a, plan, [](vk::CommandBuffer, ChunkForwardStage) {});
  }
  // The same, calling mark(cmd, stage) after each stage's commands and
  // before the barrier that follows them (for timestamps between stages).
  template <class Mark>
  void record(vk::CommandBuffer cmd, const Args& a, Mark&& mark) const {
    check(a);
    record(cmd, a, plan(problem(a), a.workspace->memory.size), std::forward<Mark>(mark));
  }

  template <class Mark>
  void record(vk::CommandBuffer cmd, const Args& a, const Plan& plan, Mark&& mark) const {
    check(a);
    const Problem p = problem(a);
    const Chunking ch = chunking(p);
    const auto B = p.B, T = p.T, H = p.H;
    const std::int64_t S = ch.slots();
    const Layout l = layout(p);
    const Workspace& ws = *a.workspace;
    const auto region = [&](std::uint64_t at, DType dt, Shape shape) {
      TensorRef t{ws.memory.buffer, ws.memory.offset + at, 0, dt, std::move(shape)};
      t.size = t.bytes();
      return t;
    };
    std::optional<TensorRef> index;
    if (ch.varlen()) {
      index = region(l.index, DType::u32, {static_cast<std::int64_t>(ch.index_bytes() / 4)});
      index_.record(cmd, {*a.cu_seqlens, *index, T});
      mark(cmd, ChunkForwardStage::index);
      compute_barrier(*ctx_, cmd);
    }
    TensorRef q = a.q, k = a.k;
    if (p.qk_l2norm || p.qk_views) {  // the dense copies (normalised where asked) the later stages read
      q = region(l.q, DType::bf16, a.q.shape);
      k = region(l.k, DType::bf16, a.k.shape);
      l2_.record(cmd, {a.q, a.k, q, k, p.qk_l2norm});
      mark(cmd, ChunkForwardStage::l2norm);
      compute_barrier(*ctx_, cmd);
    }
    const TensorRef g = region(l.g, DType::f32, {S, H}), beta = region(l.beta, DType::f32, {S, H});
    const TensorRef A = region(l.A, DType::bf16, {S, H, BT}), w = region(l.w, DType::bf16, {S, H, K});
    const TensorRef u = region(l.u, DType::bf16, {S, H, V}), h = region(l.h, DType::bf16, {ch.chunks(), H, V, K});
    (void)B;

    typename KKTSolve<typename Config::KKT>::Args ka;
    ka.k = k, ka.g = a.g, ka.beta = a.beta, ka.A_log = a.A_log, ka.dt_bias = a.dt_bias;
    ka.g_cumsum = g, ka.beta_out = beta, ka.A = A, ka.options = a.options;
    ka.cu_seqlens = a.cu_seqlens, ka.index = index;
    kkt_.record(cmd, ka, plan.kkt);
    mark(cmd, ChunkForwardStage::kkt_solve);
    compute_barrier(*ctx_, cmd);

    typename RecomputeWU<typename Config::WU>::Args wa;
    wa.k = k, wa.v = a.v, wa.beta = beta, wa.g = g, wa.A = A, wa.w = w, wa.u = u;
    wa.cu_seqlens = a.cu_seqlens, wa.index = index;
    wu_.record(cmd, wa, plan.wu);
    mark(cmd, ChunkForwardStage::recompute_wu);
    compute_barrier(*ctx_, cmd);

    typename StateRecurrence<typename Config::State>::Args sa;
    sa.k = k, sa.w = w, sa.u = u, sa.g = g, sa.initial_state = a.initial_state, sa.h = h, sa.v_new = u;
    sa.final_state = a.final_state, sa.state_layout = a.options.state_layout;
    sa.cu_seqlens = a.cu_seqlens, sa.index = index;
    state_.record(cmd, sa, plan.state);
    mark(cmd, ChunkForwardStage::state_recurrence);
    compute_barrier(*ctx_, cmd);

    typename ChunkO<typename Config::Output>::Args oa;
    oa.q = q, oa.k = k, oa.v = u, oa.h = h, oa.g = g, oa.o = a.o;
    oa.scale = a.scale ? *a.scale : 1.0f / std::sqrt(float(K));
    oa.cu_seqlens = a.cu_seqlens, oa.index = index;
    out_.record(cmd, oa, plan.out);
    mark(cmd, ChunkForwardStage::chunk_o);
  }

  // Convenience for tests and tools: allocates the workspace, records into
  // a fresh command buffer, submits and waits.
  void run(const Args& a) const {
    Args with = a;
    std::optional<Tensor> scratch;
    if (!a.workspace) {
      check_problem(a);  // the workspace is sized from the shapes
      scratch.emplace(*ctx_, DType::u32, Shape{static_cast<std::int64_t>(workspace_bytes(problem(a)) / 4 + 1)});
      with.workspace = Workspace{scratch->ref()};
    }
    check(with);
    ctx_->submit_and_wait([&](vk::CommandBuffer cmd) { record(cmd, with); });
  }

 private:
  // Whether the stages after L2Norm can bind `t` as it is: dense, at an
  // offset the device aligns bindings to (strides that do not match the
  // shape count as a view here; check() names them).
  bool bindable(const TensorRef& t) const {
    const auto align = ctx_->info().min_storage_buffer_offset_alignment;
    const bool dense = t.strides.empty() || (t.strides.size() == t.shape.size() && t.dense());
    return dense && (!align || t.offset % align == 0);
  }

  static GdnEnvelope stage(GdnEnvelope e) {
    e.token_major = false;
    return e;
  }

  ChunkIndex<BT> index_;
  L2Norm<K> l2_;
  KKTSolve<typename Config::KKT> kkt_;
  RecomputeWU<typename Config::WU> wu_;
  StateRecurrence<typename Config::State> state_;
  ChunkO<typename Config::Output> out_;
};

static_assert(Kernel<ChunkForward<ChunkForwardConfig<64, 128, 128>>>,
              "gdn.chunk_forward must have the kernel interface (core/kernel.hpp)");

}  // namespace tilekernels::gdn
