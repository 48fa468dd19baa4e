// SPDX-License-Identifier: MIT
// Gated DeltaNet decode step (FLA's fused_recurrent_gated_delta_rule): for
// N sequences of T new tokens each (T = 1 for plain decoding, a few for
// speculative decoding), per value head h and token in order,
//   S  = exp(g) S
//   v' = beta (v - S^T k)
//   S += k v'^T
//   o  = S^T (scale q)
// in f32, the state updated in place. Options (GdnOptions): q, k L2
// normalised in the kernel (f32, not rounded), the gate computed in the
// kernel (-exp(A_log[h]) softplus(g + dt_bias[h])), beta a sigmoid of
// logits (doubled with allow_neg_eigval), the state stored [K, V] or [V, K].
// Optionally the state after every token is written too, so that an engine
// can roll back draft tokens it rejects.
//
// Layout (row-major, last index innermost):
//   q, k          [B, T, Hg, K]  bf16, f16 or f32 (both the same)
//   v, o          [B, T, H, V]   bf16, f16 or f32 (o in v's dtype)
//   g, beta       [B, T, H]      f32 (natural-log decay per token, or the raw
//                                gate with gate_in_kernel; beta, or its logits)
// q, k, v, g, beta and o are views: any token and head strides (B and T one
// token axis), any offset that is a multiple of the element size (16-bit o:
// even offsets and strides in elements).
//   A_log, dt_bias [H]           f32 (gate_in_kernel; dt_bias optional)
//   state         [N, H, K, V]   f32 ([N, H, V, K] with StateLayout::vk), read and written in place
//   token_states  [B, T, H, K, V] f32 (likewise [.., V, K]), optional: the
//                                state after each token, by token row (for
//                                fixed length that is [N, T, H, ...])
//   cu_seqlens    [N + 1]        i32 (optional, B = 1): sequence n is tokens
//                                cu_seqlens[n] .. cu_seqlens[n + 1] - 1 of
//                                the one row, any length including 0 (its
//                                state is left as it is)
// H is a multiple of Hg (value head h reads q/k head h / (H / Hg)).
//
// One dispatch. Each workgroup owns BV columns of one sequence's head
// state, reads them once (16-byte pieces), keeps them in registers over the
// T tokens and writes them once: the step moves the state's bytes twice
// and little else, the memory floor. plan() picks BV so that small batches
// still fill the device (about two workgroups per multiprocessor).
// Variants: subgroup (the sums over K by subgroup shuffles, any subgroup
// size, where the workgroup is whole subgroups) and portable (shared
// memory only).
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "tilekernels/core.hpp"
#include "tilekernels/gdn/chunking.hpp"
#include "tilekernels/gdn/recurrent_step_abi.h"
#include "tilekernels/spirv/gdn/recurrent_step.hpp"
#include "tilekernels/spirv/gdn/recurrent_step_subgroup.hpp"

namespace tilekernels::gdn {

template <std::uint32_t K_ = 128, std::uint32_t V_ = 128>
struct RecurrentStepConfig {
  static_assert(K_ == 64 || K_ == 128 || K_ == 256, "RecurrentStepConfig: K must be 64, 128 or 256");
  static_assert(V_ == 64 || V_ == 128 || V_ == 256, "RecurrentStepConfig: V must be 64, 128 or 256");
  static constexpr std::uint32_t K = K_, V = V_;

  // Geometry (recurrent_step.comp): an invocation holds kpi state rows of
  // four columns; K / kpi invocations share a column quad; a workgroup has
  // bv columns.
  static constexpr std::uint32_t invocations(std::uint32_t bv, std::uint32_t kpi) { return (K / kpi) * (bv / 4); }
  // Two token buffers of two vec4 per invocation and one per row group.
  static constexpr std::uint32_t shared_bytes(std::uint32_t bv, std::uint32_t kpi) {
    return 2 * invocations(bv, kpi) * 32 + 2 * (K / kpi) * 16;
  }
  static constexpr bool fits(std::uint32_t bv, std::uint32_t kpi) {
    return (kpi == 4 || kpi == 8 || kpi == 16) && (bv == 8 || bv == 16 || bv == 32 || bv == 64) && V % bv == 0 &&
           invocations(bv, kpi) <= 256 && shared_bytes(bv, kpi) <= 32768;
  }
  // Eight rows per invocation: eight 16-byte state loads in flight each,
  // and 32 registers of state.
  static constexpr std::uint32_t default_kpi = 8;
  static constexpr std::uint32_t max_bv = 32;
  static_assert(fits(max_bv, default_kpi) && fits(8, default_kpi),
                "RecurrentStepConfig: the default geometry must fit 256 invocations and 32 KiB");
};

// The calls a RecurrentStep object is built for: the dtypes (unset: any of
// bf16, f16 and f32; pipelines per pair), and whether q, k, v and o may be
// views that do not start and stride at multiples of 16 elements (q, k) or
// of 4 (v, o), which take a third, slower set of pipelines (dense tensors
// and fused rows of usual head sizes never do; dense tensors have one set,
// other views another).
struct RecurrentStepEnvelope {
  std::optional<DType> qk_dtype, v_dtype;
  bool unaligned_views = true;
};

template <class Config>
class RecurrentStep : public KernelBase<RecurrentStep<Config>, RecurrentStepEnvelope> {
  using Base = KernelBase<RecurrentStep<Config>, RecurrentStepEnvelope>;
  using Base::ctx_;
  using Base::envelope_;
  using Base::pipelines_;

 public:
  using Base::plan;
  static constexpr const char* name = "gdn.recurrent_step";
  static constexpr std::uint32_t K = Config::K, V = Config::V;
  TK_DECLARE_SPEC(TK_RECURRENT_STEP_SPEC)
  TK_DECLARE_PUSH(TK_RECURRENT_STEP_PUSH)

  struct Args {
    TensorRef q, k, v, g, beta;
    TensorRef state;  // read and updated in place
    TensorRef o;
    std::optional<TensorRef> token_states;
    std::optional<TensorRef> A_log, dt_bias;  // gate_in_kernel
    // The device copy is what the kernel reads; the host copy, when given,
    // is validated too (a device copy alone is only clamped into [0, T]).
    std::optional<TensorRef> cu_seqlens;
    std::span<const std::int32_t> cu_seqlens_host;
    GdnOptions options;
    std::optional<float> scale;  // default 1 / sqrt(K)
  };

  struct Problem {
    std::int64_t N = 0, H = 0, tokens = 0;
    DType qk_dtype = DType::bf16, v_dtype = DType::bf16;
    bool aligned = true;  // the views' offsets and strides (RecurrentStepEnvelope)
    // Every view dense at the start of its binding (q, k [B, T, Hg, K], v, o
    // [B, T, H, V], g, beta [B, T, H]): the pipeline then computes the
    // addresses from its compile-time head sizes.
    bool dense = true;
  };

  static constexpr std::array<Variant<Problem>, 2> variants{{
      {"subgroup", Path::subgroup, spirv::gdn_recurrent_step_subgroup, DeviceNeeds{.subgroup_shuffle = true},
       Config::invocations(8, Config::default_kpi), Config::shared_bytes(8, Config::default_kpi)},
      {"portable", Path::portable, spirv::gdn_recurrent_step, {}, Config::invocations(8, Config::default_kpi),
       Config::shared_bytes(8, Config::default_kpi)},
  }};

  struct Plan {
    const Variant<Problem>* variant = nullptr;
    std::uint32_t bv = 0;   // state columns per workgroup: 8, 16, 32 or 64
    std::uint32_t kpi = 0;  // state rows per invocation: 4, 8 or 16
    // Column quads on adjacent lanes (1, 2, 4 or 8, at most bv / 4): the
    // bytes of one row that a subgroup reads together are 16 ql (times the
    // quads the subgroup holds beyond that); the sums over K then span
    // fewer lanes of a subgroup and more subgroups.
    std::uint32_t ql = 1;
  };

  explicit RecurrentStep(Context& ctx, RecurrentStepEnvelope envelope = {}) : Base(ctx, envelope) {
    const std::array<DType, 3> all{DType::bf16, DType::f16, DType::f32};
    for (const DType qk : all)
      for (const DType v : all) {
        if ((envelope_.qk_dtype && qk != *envelope_.qk_dtype) || (envelope_.v_dtype && v != *envelope_.v_dtype)) continue;
        // Few and many (sequence, head) pairs: every slice width plan() takes.
        // (prepare() builds the dense, the aligned and, where the envelope
        // has them, the unaligned pipelines of a plan.)
        for (const std::int64_t heads : {1, 64, 128, 4096}) {
          const Problem p{1, heads, 1, qk, v};
          if (!this->can_implement(p)) continue;
          prepare(plan(p, 0));
        }
      }
  }

  // Sequences: cu_seqlens' entries less one, else B.
  static std::int64_t sequences(const Args& a) {
    return a.cu_seqlens ? a.cu_seqlens->shape.at(0) - 1 : a.q.shape.at(0);
  }
  Problem problem(const Args& a) const {
    const bool al = aligned(a);
    return {sequences(a), a.v.shape.at(2), a.q.shape.at(0) * a.q.shape.at(1), a.q.dtype, a.v.dtype, al,
            al && dense(a)};
  }

  // Whether q and k start and stride (token and head) at multiples of 16
  // elements within their bindings, v and o at multiples of 4.
  bool aligned(const Args& a) const noexcept {
    const auto align = ctx_->info().min_storage_buffer_offset_alignment;
    const auto ok = [&](const TensorRef& t, std::uint64_t n) {
      const std::uint64_t es = dtype_size(t.dtype);
      if (es == 0 || t.offset % es != 0 || ((align ? t.offset % align : t.offset) / es) % n != 0) return false;
      for (std::size_t d = 0; d + 1 < t.strides.size(); ++d)
        if (t.strides[d] < 0 || static_cast<std::uint64_t>(t.strides[d]) % n != 0) return false;
      return true;
    };
    return ok(a.q, 16) && ok(a.k, 16) && ok(a.v, 4) && ok(a.o, 4);
  }

  // Whether every view is the dense tensor of its shape, at the start of
  // its binding (an offset that is a multiple of the device's storage
  // buffer offset alignment).
  bool dense(const Args& a) const {
    const auto Hg = static_cast<std::uint32_t>(a.q.shape.at(2)), H = static_cast<std::uint32_t>(a.v.shape.at(2));
    const auto v = views(a);
    const auto is = [](const detail::ViewLayout& l, std::uint32_t heads, std::uint32_t row) {
      return l.at == 0 && l.head == row && l.token == heads * row;
    };
    return is(v[0], Hg, K) && is(v[1], Hg, K) && is(v[2], H, V) && is(v[3], H, 1) && is(v[4], H, 1) && is(v[5], H, V);
  }

  void check(const Problem& p) const {
    if (p.N <= 0 || p.H <= 0 || p.tokens <= 0)
      throw Error(ErrorCode::invalid_argument, std::string(name) + ": sequences, heads and tokens must be > 0");
    const auto dtype_ok = [](DType d) { return d == DType::bf16 || d == DType::f16 || d == DType::f32; };
    if (!dtype_ok(p.qk_dtype) || !dtype_ok(p.v_dtype))
      throw Error(ErrorCode::dtype_mismatch, std::string(name) + ": q, k and v must be bf16, f16 or f32");
    if ((envelope_.qk_dtype && p.qk_dtype != *envelope_.qk_dtype) || (envelope_.v_dtype && p.v_dtype != *envelope_.v_dtype))
      throw Error(ErrorCode::invalid_argument, std::string(name) + ": the dtypes of q, k (" +
                                                   std::string(dtype_name(p.qk_dtype)) + ") and v (" +
                                                   std::string(dtype_name(p.v_dtype)) + ") are outside the envelope");
    if (!p.aligned && !envelope_.unaligned_views)
      throw Error(ErrorCode::invalid_argument,
                  std::string(name) + ": q, k, v or o is a view whose offset or strides are not multiples of 16 "
                                      "(q, k) or 4 (v, o) elements: outside the envelope (unaligned_views = false)");
    const std::int64_t limit = std::int64_t(1) << 32;
    if (p.N * p.H * K * V >= limit)
      throw Error(ErrorCode::unsupported, std::string(name) + ": too many elements for 32-bit indexing");
    plan_for(p);
  }

  // Throws tilekernels::Error naming the first argument that is wrong.
  void check(const Args& a) const {
    detail::expect_rank(name, "q", a.q, 4);
    detail::expect_rank(name, "v", a.v, 4);
    const auto B = a.q.shape[0], T = a.q.shape[1], Hg = a.q.shape[2], H = a.v.shape[2];
    if (!is_float(a.q.dtype))
      throw Error(ErrorCode::dtype_mismatch, detail::where(name, "q") + "expected bf16, f16 or f32, got " +
                                                 std::string(dtype_name(a.q.dtype)));
    if (!is_float(a.v.dtype))
      throw Error(ErrorCode::dtype_mismatch, detail::where(name, "v") + "expected bf16, f16 or f32, got " +
                                                 std::string(dtype_name(a.v.dtype)));
    if (Hg > 0 && H % Hg != 0)  // (views() names a dimension that is not positive)
      throw Error(ErrorCode::shape_mismatch, detail::where(name, "v") + "H = " + std::to_string(H) +
                                                 " heads is not a multiple of Hg = " + std::to_string(Hg));
    views(a);
    if (a.cu_seqlens) {
      detail::expect_rank(name, "cu_seqlens", *a.cu_seqlens, 1);
      if (B != 1)
        throw Error(ErrorCode::invalid_argument,
                    detail::where(name, "cu_seqlens") + "needs B = 1 (one row of concatenated sequences), got B = " +
                        std::to_string(B));
      if (a.cu_seqlens->shape[0] < 2)
        throw Error(ErrorCode::shape_mismatch, detail::where(name, "cu_seqlens") +
                                                   "needs at least 2 offsets (one sequence), got shape " +
                                                   shape_string(a.cu_seqlens->shape));
      detail::expect_tensor(*ctx_, name, "cu_seqlens", *a.cu_seqlens, DType::i32, a.cu_seqlens->shape);
    }
    Chunking(B, T, a.cu_seqlens_host, 1).check(*ctx_, name, a.cu_seqlens, a.cu_seqlens_host);
    const std::int64_t N = sequences(a);
    const bool kv = a.options.state_layout == StateLayout::kv;
    detail::expect_tensor(*ctx_, name, "state", a.state, DType::f32, kv ? Shape{N, H, K, V} : Shape{N, H, V, K});
    if (a.token_states)
      detail::expect_tensor(*ctx_, name, "token_states", *a.token_states, DType::f32,
                            kv ? Shape{B, T, H, K, V} : Shape{B, T, H, V, K});
    detail::expect_options(*ctx_, name, a.options, a.A_log, a.dt_bias, H);
    if (a.scale && !std::isfinite(*a.scale))
      throw Error(ErrorCode::invalid_argument, std::string(name) + ": scale must be finite, got " + std::to_string(*a.scale));
    if (a.token_states && a.token_states->elements() >= (std::int64_t(1) << 32))
      throw Error(ErrorCode::unsupported, std::string(name) + ": too many elements for 32-bit indexing");
    check(problem(a));
  }

  static constexpr std::uint64_t workspace_bytes(const Problem&) { return 0; }

  // The first eligible variant, and the widest slice that still gives
  // about two workgroups per multiprocessor (or the narrowest).
  Plan plan(const Problem& p, std::uint64_t) const {
    check(p);
    return plan_for(p);
  }

  // Throws unless `plan` (its geometry possibly changed by hand) can run `a`.
  void check(const Args& a, const Plan& plan) const {
    check(a);
    const auto bad = [&](const std::string& why) {
      throw Error(ErrorCode::invalid_argument, std::string(name) + ": plan: " + why);
    };
    if (!plan.variant) bad("no variant");
    if (!Config::fits(plan.bv, plan.kpi))
      bad("bv = " + std::to_string(plan.bv) + ", kpi = " + std::to_string(plan.kpi) + " does not fit K = " +
          std::to_string(K) + ", V = " + std::to_string(V) + " (bv 8..64 dividing V, kpi 4, 8 or 16, <= 256 invocations)");
    if ((plan.ql != 1 && plan.ql != 2 && plan.ql != 4 && plan.ql != 8) || plan.ql > plan.bv / 4)
      bad("ql = " + std::to_string(plan.ql) + " must be 1, 2, 4 or 8 and at most bv / 4 = " + std::to_string(plan.bv / 4));
    const auto& info = ctx_->info();
    if (Config::invocations(plan.bv, plan.kpi) > info.max_workgroup_invocations ||
        Config::shared_bytes(plan.bv, plan.kpi) > info.max_shared_memory)
      bad("the workgroup exceeds the device's limits");
    if (!can_run(*plan.variant, plan.bv, plan.kpi)) bad("the subgroup variant needs a workgroup of whole subgroups");
  }

  void record(vk::CommandBuffer cmd, const Args& a) const { record(cmd, a, plan(problem(a), 0)); }

  void record(vk::CommandBuffer cmd, const Args& a, const Plan& plan) const {
    check(a, plan);
    const auto T = a.q.shape[1], Hg = a.q.shape[2], H = a.v.shape[2];
    const std::int64_t N = sequences(a);
    const Problem p = problem(a);
    Push push;
    push.T = static_cast<std::uint32_t>(T);  // with cu_seqlens B = 1: every token
    push.H = static_cast<std::uint32_t>(H);
    push.Hg = static_cast<std::uint32_t>(Hg);
    push.ratio = static_cast<std::uint32_t>(H / Hg);
    push.varlen = a.cu_seqlens ? 1u : 0u;
    push.scale = a.scale ? *a.scale : 1.0f / std::sqrt(float(K));
    push.options = (detail::option_bits(a.options, a.dt_bias.has_value()) &
                    (TK_GDN_OPT_GATE_IN_KERNEL | TK_GDN_OPT_DT_BIAS | TK_GDN_OPT_BETA_SIGMOID | TK_GDN_OPT_NEG_EIGVAL |
                     TK_GDN_OPT_STATE_VK | TK_GDN_OPT_L2NORM)) |
                   (a.token_states ? TK_GDN_OPT_TOKEN_STATES : 0u);
    const auto v = views(a);
    push.q_at = v[0].at, push.q_token = v[0].token, push.q_head = v[0].head;
    push.k_at = v[1].at, push.k_token = v[1].token, push.k_head = v[1].head;
    push.v_at = v[2].at, push.v_token = v[2].token, push.v_head = v[2].head;
    push.g_at = v[3].at, push.g_token = v[3].token, push.g_head = v[3].head;
    push.beta_at = v[4].at, push.beta_token = v[4].token, push.beta_head = v[4].head;
    push.o_at = v[5].at, push.o_token = v[5].token, push.o_head = v[5].head;
    // Optional tensors left out are bound to one the kernel already reads
    // (inputs) or writes (token_states: o), never touched.
    detail::record_dispatch(*ctx_, cmd, pipelines_.get(name, key(plan, p)),
                            {a.q, a.k, a.v, a.g, a.beta, a.A_log.value_or(a.g), a.dt_bias.value_or(a.g),
                             a.cu_seqlens.value_or(a.g), a.state, a.o, a.token_states.value_or(a.o)},
                            push, static_cast<std::uint64_t>(N * H) * (V / plan.bv));
  }

  // Builds the pipeline of a plan whose geometry was changed by hand, for
  // every dtype pair of the envelope. Not thread-safe: call it before
  // recording from several threads.
  void prepare(const Plan& plan) {
    const std::array<DType, 3> all{DType::bf16, DType::f16, DType::f32};
    for (const DType qk : all)
      for (const DType v : all)
        if ((!envelope_.qk_dtype || qk == *envelope_.qk_dtype) && (!envelope_.v_dtype || v == *envelope_.v_dtype))
          for (const bool aligned : {true, false})
            for (const bool dense : {true, false})
              if (aligned || (!dense && envelope_.unaligned_views))
                pipelines_.add(*ctx_, key(plan, Problem{1, 1, 1, qk, v, aligned, dense}));
  }

  // Convenience for tests and tools: records into a fresh command buffer,
  // submits and waits.
  void run(const Args& a) const {
    const Plan p = plan(problem(a), 0);
    check(a, p);
    ctx_->submit_and_wait([&](vk::CommandBuffer cmd) { record(cmd, a, p); });
  }

  // Whether variant `v` can run workgroups of geometry (bv, kpi) on this
  // device: the subgroup module numbers invocations by subgroup, which
  // needs the workgroup to be whole subgroups as the builtins report them
  // (DeviceInfo::whole_subgroups; lavapipe above LP_NATIVE_VECTOR_WIDTH=512
  // is not).
  bool can_run(const Variant<Problem>& v, std::uint32_t bv, std::uint32_t kpi) const {
    return v.path != Path::subgroup || ctx_->info().whole_subgroups(Config::invocations(bv, kpi));
  }

  // Bytes moved when every tensor is read or written once (the state twice)
  // and flops of the four K x V passes per token and head.
  static double bytes(std::int64_t tokens, std::int64_t N, std::int64_t Hg, std::int64_t H, DType qk, DType v,
                      bool token_states) {
    const double KV = double(K) * V;
    return double(tokens) * (2.0 * Hg * K * dtype_size(qk) + 2.0 * H * V * dtype_size(v) + 8.0 * H) +
           8.0 * N * H * KV + (token_states ? 4.0 * tokens * H * KV : 0.0);
  }
  static double flops(std::int64_t tokens, std::int64_t H) { return 8.0 * double(tokens) * H * K * V; }

 private:
  // The first variant eligible for `p` whose workgroup the device runs as
  // whole subgroups, and its geometry.
  Plan plan_for(const Problem& p) const {
    Plan plan;
    plan.kpi = Config::default_kpi;
    const std::int64_t target = 2 * std::int64_t(ctx_->info().persistent_grid(132));
    plan.bv = 8;
    for (std::uint32_t bv : {32u, 16u})
      if (Config::fits(bv, plan.kpi) && p.N * p.H * (V / bv) >= target) {
        plan.bv = bv;
        break;
      }
    // Where the state is large enough for 32-column slices, 4 column quads
    // on adjacent lanes: a subgroup then reads 64 contiguous bytes of a row
    // instead of 16, which is what brings the step near the copy rate
    // (bench/notes/2026-11-gdn-recurrent-step.md).
    plan.ql = plan.bv >= 32 ? 4 : 1;
    std::string why;
    for (const auto& v : variants) {
      Status s = eligibility(*ctx_, v, p);
      if (s && !can_run(v, plan.bv, plan.kpi))
        s = Status::failure(ErrorCode::unsupported, "the workgroup is not whole subgroups");
      if (s) {
        plan.variant = &v;
        return plan;
      }
      why += "; " + std::string(v.name) + ": " + s.message;
    }
    throw Error(ErrorCode::unsupported, std::string(name) + ": no variant runs this call on '" + ctx_->info().name + "'" + why);
  }

  // The views q, k, v, g, beta, o (checked) and where they are.
  std::array<detail::ViewLayout, 6> views(const Args& a) const {
    const auto B = a.q.shape[0], T = a.q.shape[1], Hg = a.q.shape[2], H = a.v.shape[2];
    const std::array<detail::ViewLayout, 6> out{
        detail::expect_view(*ctx_, name, "q", a.q, a.q.dtype, {B, T, Hg, K}, 2),
        detail::expect_view(*ctx_, name, "k", a.k, a.q.dtype, {B, T, Hg, K}, 2),
        detail::expect_view(*ctx_, name, "v", a.v, a.v.dtype, {B, T, H, V}, 2),
        detail::expect_view(*ctx_, name, "g", a.g, DType::f32, {B, T, H}, 2),
        detail::expect_view(*ctx_, name, "beta", a.beta, DType::f32, {B, T, H}, 2),
        detail::expect_view(*ctx_, name, "o", a.o, a.v.dtype, {B, T, H, V}, 2)};
    if (dtype_size(a.v.dtype) == 2 && !out[5].aligned(2))
      throw Error(ErrorCode::invalid_argument, detail::where(name, "o") +
                                                   "a 16-bit output view needs an even element offset and even strides "
                                                   "(pairs are written as 32-bit words), got offset " +
                                                   std::to_string(a.o.offset) + " bytes and strides " +
                                                   shape_string(a.o.strides));
    return out;
  }

  PipelineKey key(const Plan& plan, const Problem& p) const {
    Spec spec;
    spec.workgroup = Config::invocations(plan.bv, plan.kpi);
    spec.KDIM = K;
    spec.VDIM = V;
    spec.BV = plan.bv;
    spec.KPI = plan.kpi;
    spec.QL = plan.ql;
    spec.QK_DTYPE = static_cast<std::uint32_t>(p.qk_dtype);
    spec.V_DTYPE = static_cast<std::uint32_t>(p.v_dtype);
    spec.VIEWS = !p.aligned ? TK_STEP_VIEWS_ANY : p.dense ? TK_STEP_VIEWS_DENSE : TK_STEP_VIEWS_ALIGNED;
    return detail::pipeline_key<Push>(*ctx_, *plan.variant, spec, 11);
  }
};

static_assert(Kernel<RecurrentStep<RecurrentStepConfig<128, 128>>>,
              "gdn.recurrent_step must have the kernel interface (core/kernel.hpp)");

}  // namespace tilekernels::gdn
