// SPDX-License-Identifier: MIT
// Gated DeltaNet inter-chunk state recurrence (FLA's
// chunk_gated_delta_rule_fwd_h). Per sequence n and value head h, over its
// chunks in order, with S [K, V] the f32 state (initial_state, or zeros):
//   h_c   = bf16(S)                          the state at the chunk's start
//   v_new = bf16(u - w bf16(S))
//   S     = exp(g_last) S + k^T bf16(v_new' exp(g_last - g_i))
// where v_new' is the unrounded difference, g_last the cumulative log decay
// of the chunk's last row, and rows past the sequence end contribute
// nothing; after the last chunk S is the final state (f32). An empty
// sequence passes its initial state through. These are FLA's rounding
// points.
//
// Layout (row-major, last index innermost; slots and chunks: gdn/chunking.hpp):
//   k             [B, T, Hg, K]        bf16  token rows
//   w, u          [slots, H, K|V]      bf16  (from gdn::RecomputeWU)
//   g             [slots, H]           f32   cumulative log decay (gdn::KKTSolve)
//   initial_state [N, H, K, V] f32 (or [N, H, V, K] with StateLayout::vk), optional
//   cu_seqlens    [N + 1] i32 with its index table (gdn::ChunkIndex), optional
//   h             [NT_total, H, V, K]  bf16 out, the layout gdn::ChunkO reads
//   v_new         [slots, H, V]        bf16 out; may be u's memory (u is read
//                                      before v_new is written over it)
//   final_state   like initial_state, f32 out, optional
//
// Paths: tensor_core_bf16_rows (fragments in the m16n8k16 layout; each
// subgroup holds 16 columns of S in f32 accumulators for the whole sequence
// and feeds them to both products as operands, so only w and k are
// fragment loads; K <= 128); tensor_core_bf16 (any VK_KHR_cooperative_matrix
// bf16 device at subgroups of 32: the state tiles spread over
// (BT / 16)(BV / 16) subgroups, bf16(S) staged through shared memory; the
// next chunk's loads in flight while one computes; K <= 128);
// tensor_core_fp16 (the same on the device's fp16 tile and subgroup size,
// every operand scaled by powers of two into fp16's range) and portable
// (f32 FMAs on register tiles, no subgroup operation). One workgroup per
// (sequence, head, BV columns of V): BV trades parallelism at small
// batches against reloading w and k per column slice
// (bench/notes/2026-11-gdn-forward.md).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "tilekernels/core.hpp"
#include "tilekernels/gdn/chunking.hpp"
#include "tilekernels/gdn/state_recurrence_abi.h"
#include "tilekernels/spirv/gdn/chunk_state.hpp"
#include "tilekernels/spirv/gdn/chunk_state_bf16.hpp"
#include "tilekernels/spirv/gdn/chunk_state_fp16.hpp"
#include "tilekernels/spirv/gdn/chunk_state_rows_bf16.hpp"

namespace tilekernels::gdn {

template <std::uint32_t BT_ = 64, std::uint32_t K_ = 128, std::uint32_t V_ = 128>
struct StateRecurrenceConfig {
  static_assert(BT_ == 16 || BT_ == 32 || BT_ == 64, "StateRecurrenceConfig: BT must be 16, 32 or 64");
  static_assert(K_ == 64 || K_ == 128 || K_ == 256, "StateRecurrenceConfig: K must be 64, 128 or 256");
  static_assert(V_ == 64 || V_ == 128 || V_ == 256, "StateRecurrenceConfig: V must be 64, 128 or 256");
  static constexpr std::uint32_t BT = BT_, K = K_, V = V_;

  // Portable kernel (chunk_state.comp): 8 BV invocations on register
  // tiles; a staged slice of w or k, bf16(S) and the update's operand in
  // f32, g (state_recurrence_abi.h). BV = 32 fits 32 KiB at K = 64 only.
  static constexpr std::uint32_t portable_workgroup(std::uint32_t bv) { return TK_STATE_PORTABLE_WORKGROUP(bv); }
  static constexpr std::uint32_t portable_shared_bytes(std::uint32_t bv) {
    return TK_STATE_PORTABLE_SHARED_BYTES(BT, K, bv);
  }
  static constexpr bool portable_fits(std::uint32_t bv) {
    return (bv == 16 || bv == 32) && portable_shared_bytes(bv) <= 32768;
  }
  static constexpr std::uint32_t portable_bv = 16;
  static_assert(portable_fits(portable_bv), "StateRecurrenceConfig: the portable path must fit 32 KiB of shared memory");

  // Matrix kernels (chunk_state_mma.glsl): (BT / 16)(BV / 16) subgroups;
  // w, k and bf16(S)^T rows of K + 8 16-bit values, the operand, g; the
  // fp16 kernel adds its scaling (the maxima of w, k and bf16(S) for two
  // chunks, a shift per tile of the operand).
  static constexpr std::uint32_t mma_subgroups(std::uint32_t bv) { return BT / 16 * (bv / 16); }
  static constexpr std::uint32_t tc_workgroup(std::uint32_t bv) { return mma_subgroups(bv) * 32; }
  static constexpr std::uint32_t tc_shared_bytes(std::uint32_t bv) {
    return ((2 * BT + bv) * (K / 8 + 1) + BT * (bv / 8 + 1)) * 16 + BT * 4;
  }
  static constexpr std::uint32_t fp16_shared_bytes(std::uint32_t bv) {
    return tc_shared_bytes(bv) + 4 * (6 + mma_subgroups(bv));
  }
  // BV a matrix kernel may take at `subgroup` invocations per subgroup:
  // 16-column tiles dividing V, state tiles a whole number per subgroup, w
  // and k pieces a whole number per invocation and, like h's, at most 16,
  // g rows at most 2, within 48 KiB.
  static constexpr bool mma_fits(std::uint32_t bv, std::uint32_t subgroup, std::uint32_t shared_bytes) {
    const std::uint32_t wg = mma_subgroups(bv) * subgroup, pieces = BT * (K / 8);
    return bv % 16 == 0 && bv > 0 && V % bv == 0 && K >= BT && K / BT <= 8 && subgroup > 0 && pieces % wg == 0 &&
           pieces / wg <= 16 && (bv * (K / 8) + wg - 1) / wg <= 16 && (BT + wg - 1) / wg <= 2 && wg <= 1024 &&
           shared_bytes <= 49152;
  }
  static constexpr bool tc_fits(std::uint32_t bv) { return mma_fits(bv, 32, tc_shared_bytes(bv)); }
  static constexpr bool fp16_fits(std::uint32_t bv, std::uint32_t subgroup) {
    return mma_fits(bv, subgroup, fp16_shared_bytes(bv));
  }
  static constexpr std::uint32_t tc_bv = tc_fits(32) ? 32 : 16;
  static constexpr std::uint32_t fp16_bv(std::uint32_t subgroup) {
    return fp16_fits(32, subgroup) ? 32 : fp16_fits(16, subgroup) ? 16 : 0;
  }

  // Rows kernel (chunk_state_rows.glsl): BV = BT columns of V per
  // workgroup, BT / 16 subgroups of 32, each holding 16 columns of S in
  // registers (K / 16 accumulators, hence K <= 128); w, k (rows of K + 8
  // bf16), u and v_new (rows of BV + 8), g.
  static constexpr std::uint32_t rows_bv = BT;
  static constexpr std::uint32_t rows_workgroup = 2 * BT;
  static constexpr std::uint32_t rows_shared_bytes = (2 * BT * (K / 8 + 1) + BT * (BT / 8 + 1)) * 16 + BT * 4;
  static constexpr bool rows_fit = K <= 128;
  static_assert(!rows_fit || rows_shared_bytes <= 49152, "StateRecurrenceConfig: the rows kernel must fit 48 KiB");
};

// Whether the rows kernel may run: its products take their A operands from
// accumulators element by element, which needs both kinds of 16 x 16
// fragment to put element i at the same position, and it reads an
// accumulator element's column from its lane as the m16n8k16 layout puts
// it. Both hold where the Context read that layout back for bf16 A
// operands and accumulators (DeviceInfo::bf16_layout).
inline bool state_rows_layout(const DeviceInfo& info) {
  return info.cooperative_matrix_bf16 && info.subgroup_size == 32 && info.subgroups_as_reported &&
         info.bf16_layout.a && info.bf16_layout.accumulator;
}

template <class Config>
class StateRecurrence : public KernelBase<StateRecurrence<Config>, GdnEnvelope> {
  using Base = KernelBase<StateRecurrence<Config>, GdnEnvelope>;
  using Base::ctx_;
  using Base::envelope_;
  using Base::pipelines_;

 public:
  using Base::plan;
  static constexpr const char* name = "gdn.state_recurrence";
  TK_DECLARE_SPEC(TK_STATE_RECURRENCE_SPEC)
  TK_DECLARE_PUSH(TK_STATE_RECURRENCE_PUSH)

  struct Args {
    TensorRef k, w, u, g;
    std::optional<TensorRef> initial_state;
    TensorRef h, v_new;
    std::optional<TensorRef> final_state;
    StateLayout state_layout = StateLayout::kv;
    std::optional<TensorRef> cu_seqlens, index;     // variable length: the offsets and their index table
    std::span<const std::int32_t> cu_seqlens_host;  // optional, checked
  };

  using Problem = StageProblem;

  static Status tc_applies(const DeviceInfo&, const Problem&) {
    if (!Config::tc_fits(16)) return Status::failure(ErrorCode::unsupported, "K = 256 or BT > K: no tiling fits");
    return Status::success();
  }
  static Status fp16_applies(const DeviceInfo& info, const Problem&) {
    if (Config::fp16_bv(info.subgroup_size) == 0)
      return Status::failure(ErrorCode::unsupported, "K = 256, BT > K, or too many pieces per invocation at subgroups of " +
                                                         std::to_string(info.subgroup_size) + ": no tiling fits");
    return detail::cpu_chunk_rule(info, Config::BT);
  }

  // The rows kernel runs 4 warps per workgroup against the other's 8:
  // faster once its workgroups fill the multiprocessors (B = 8 at the
  // headline shape), slower below that (B = 1: 64 workgroups on 132
  // multiprocessors; bench/notes/2026-11-gdn-state-recurrence.md). Problems of unknown size
  // (sequences 0) may take it: tests force it so.
  static Status rows_applies(const DeviceInfo& info, const Problem& p) {
    const auto no = [](const std::string& why) { return Status::failure(ErrorCode::unsupported, why); };
    if (!Config::rows_fit) return no("K = 256: 16 state columns of K do not fit registers");
    if (!state_rows_layout(info)) return no("the device's operand and accumulator layouts may differ");
    const std::int64_t sequences = p.N > 0 ? p.N : p.B;
    const std::int64_t workgroups = sequences * p.H * (Config::V / Config::rows_bv);
    if (sequences > 0 && info.multiprocessors > 0 && workgroups < std::int64_t(info.multiprocessors))
      return no("fewer workgroups than multiprocessors: the 8-subgroup kernel is faster there");
    return Status::success();
  }

  static constexpr std::string_view rows_name = "tensor_core_bf16_rows";
  static constexpr std::array<Variant<Problem>, 4> variants{{
      {rows_name, Path::tensor_core_bf16, spirv::gdn_chunk_state_rows_bf16,
       DeviceNeeds{.cooperative_matrix_bf16 = true, .subgroup_size = 32}, Config::rows_workgroup,
       Config::rows_shared_bytes, &rows_applies},
      {"tensor_core_bf16", Path::tensor_core_bf16, spirv::gdn_chunk_state_bf16,
       DeviceNeeds{.cooperative_matrix_bf16 = true, .subgroup_size = 32}, Config::tc_workgroup(Config::tc_bv),
       Config::tc_shared_bytes(Config::tc_bv), &tc_applies},
      {"tensor_core_fp16", Path::tensor_core_fp16, spirv::gdn_chunk_state_fp16,
       DeviceNeeds{.cooperative_matrix_fp16 = true}, Config::tc_workgroup(16), Config::fp16_shared_bytes(16),
       &fp16_applies},
      {"portable", Path::portable, spirv::gdn_chunk_state, {}, Config::portable_workgroup(Config::portable_bv),
       Config::portable_shared_bytes(Config::portable_bv)},
  }};

  struct Plan {
    const Variant<Problem>* variant = nullptr;
    std::uint32_t bv = 0;  // state columns per workgroup
  };

  explicit StateRecurrence(Context& ctx, GdnEnvelope envelope = {}) : Base(ctx, envelope) {
    // The variants plan() takes for few and for many (sequence, head) pairs.
    for (const std::int64_t heads : {1, 4096}) prepare(plan(Problem{1, 1, 1, heads}, 0));
  }

  static Chunking chunking(const Problem& p) { return Chunking(p.B, p.T, p.N, Config::BT); }
  Problem problem(const Args& a) const {
    return {a.k.shape.at(0), a.k.shape.at(1), a.k.shape.at(2), a.g.shape.at(1),
            a.cu_seqlens ? a.cu_seqlens->shape.at(0) - 1 : 0, true};
  }

  void check(const Problem& p) const {
    detail::expect_stage_shape(name, p, true);
    const Chunking ch = chunking(p);
    const std::int64_t K = Config::K, V = Config::V, limit = std::int64_t(1) << 32;
    if (ch.chunks() * p.H * K * V >= limit || p.B * p.T * p.Hg * K >= limit || ch.slots() * p.H * std::max(K, V) >= limit)
      throw Error(ErrorCode::unsupported, std::string(name) + ": too many elements for 32-bit indexing");
    select_variant(*ctx_, name, variants, p);
  }

  void check(const Args& a) const {
    detail::expect_rank(name, "k", a.k, 4);
    detail::expect_rank(name, "g", a.g, 2);
    const auto B = a.k.shape[0], T = a.k.shape[1], Hg = a.k.shape[2], H = a.g.shape[1];
    const Problem p = problem(a);
    const Chunking ch = chunking(p);
    ch.check(*ctx_, name, a.cu_seqlens, a.cu_seqlens_host);
    const std::int64_t S = ch.slots(), N = ch.N(), K = Config::K, V = Config::V;
    detail::expect_tensor(*ctx_, name, "k", a.k, DType::bf16, {B, T, Hg, K});
    if (H % Hg != 0)
      throw Error(ErrorCode::shape_mismatch, detail::where(name, "g") + "H = " + std::to_string(H) +
                                                 " heads is not a multiple of Hg = " + std::to_string(Hg));
    detail::expect_tensor(*ctx_, name, "g", a.g, DType::f32, {S, H});
    detail::expect_tensor(*ctx_, name, "w", a.w, DType::bf16, {S, H, K});
    detail::expect_tensor(*ctx_, name, "u", a.u, DType::bf16, {S, H, V});
    detail::expect_tensor(*ctx_, name, "h", a.h, DType::bf16, {ch.chunks(), H, V, K});
    detail::expect_tensor(*ctx_, name, "v_new", a.v_new, DType::bf16, {S, H, V});
    const Shape state = a.state_layout == StateLayout::kv ? Shape{N, H, K, V} : Shape{N, H, V, K};
    if (a.initial_state) detail::expect_tensor(*ctx_, name, "initial_state", *a.initial_state, DType::f32, state);
    if (a.final_state) detail::expect_tensor(*ctx_, name, "final_state", *a.final_state, DType::f32, state);
    if (envelope_.options && a.state_layout != envelope_.options->state_layout)
      throw Error(ErrorCode::invalid_argument, std::string(name) + ": the state layout differs from the envelope's");
    ch.check_index(*ctx_, name, a.index);
    check(p);
  }

  static constexpr std::uint64_t workspace_bytes(const Problem&) { return 0; }
  Plan plan(const Problem& p, std::uint64_t) const {
    check(p);
    Plan plan{&select_variant(*ctx_, name, variants, p), 0};
    plan.bv = default_bv(*plan.variant);
    return plan;
  }

  // The state columns per workgroup that plan() gives variant `v`.
  std::uint32_t default_bv(const Variant<Problem>& v) const {
    if (v.path == Path::portable) return Config::portable_bv;
    if (v.path == Path::tensor_core_fp16) return Config::fp16_bv(ctx_->info().subgroup_size);
    return is_rows(v) ? Config::rows_bv : Config::tc_bv;
  }

  // What variant `v`'s kernel needs at `bv` state columns per workgroup.
  struct KernelShape {
    bool fits;  // the kernel can take bv
    std::uint32_t workgroup, shared_bytes;
  };
  KernelShape kernel_shape(const Variant<Problem>& v, std::uint32_t bv) const {
    if (v.path == Path::portable)
      return {Config::portable_fits(bv), Config::portable_workgroup(bv), Config::portable_shared_bytes(bv)};
    if (is_rows(v)) return {Config::rows_fit && bv == Config::rows_bv, Config::rows_workgroup, Config::rows_shared_bytes};
    if (v.path == Path::tensor_core_fp16) {
      const std::uint32_t subgroup = ctx_->info().subgroup_size;
      return {Config::fp16_fits(bv, subgroup), Config::mma_subgroups(bv) * subgroup, Config::fp16_shared_bytes(bv)};
    }
    return {Config::tc_fits(bv), Config::tc_workgroup(bv), Config::tc_shared_bytes(bv)};
  }

  void record(vk::CommandBuffer cmd, const Args& a) const { record(cmd, a, plan(problem(a), 0)); }

  // Throws unless `plan` (its bv possibly changed by hand) can run `a`.
  void check(const Args& a, const Plan& plan) const {
    check(a);
    const auto bad = [&](const std::string& why) {
      throw Error(ErrorCode::invalid_argument, std::string(name) + ": plan: " + why);
    };
    if (!plan.variant) bad("no variant");
    const KernelShape shape = kernel_shape(*plan.variant, plan.bv);
    if (!shape.fits) bad("bv = " + std::to_string(plan.bv) + " does not fit this kernel");
    if (shape.shared_bytes > ctx_->info().max_shared_memory)
      bad("bv = " + std::to_string(plan.bv) + " needs too much shared memory");
  }

  void record(vk::CommandBuffer cmd, const Args& a, const Plan& plan) const {
    check(a, plan);
    const Problem p = problem(a);
    const Chunking ch = chunking(p);
    const std::uint32_t bits = (a.state_layout == StateLayout::vk ? TK_GDN_OPT_STATE_VK : 0u) |
                               (a.initial_state ? TK_GDN_OPT_H0 : 0u) | (a.final_state ? TK_GDN_OPT_HT : 0u);
    Push push;
    push.T = static_cast<std::uint32_t>(ch.T());
    push.H = static_cast<std::uint32_t>(p.H);
    push.Hg = static_cast<std::uint32_t>(p.Hg);
    push.ratio = static_cast<std::uint32_t>(p.H / p.Hg);
    push.N = static_cast<std::uint32_t>(ch.N());
    push.row_chunks = static_cast<std::uint32_t>(ch.row_chunks());
    push.varlen = ch.varlen() ? 1u : 0u;
    // Optional tensors left out are bound to one the kernel already reads
    // (inputs) or writes (final_state: v_new), never touched.
    detail::record_dispatch(*ctx_, cmd, pipelines_.get(name, key(*plan.variant, plan.bv, bits)),
                            {a.k, a.w, a.u, a.g, a.initial_state.value_or(a.g), a.index.value_or(a.g), a.h, a.v_new,
                             a.final_state.value_or(a.v_new)},
                            push, static_cast<std::uint64_t>(ch.N() * p.H) * (Config::V / plan.bv));
  }

  // Builds the pipelines of a plan chosen by hand (a variant or bv the
  // automatic choice would not take). Not thread-safe: call it before
  // recording from several threads.
  void prepare(const Plan& plan) {
    for (const std::uint32_t bits : detail::option_bit_sets(envelope_, TK_GDN_OPT_STATE_VK))
      for (const std::uint32_t states : {0u, TK_GDN_OPT_H0, TK_GDN_OPT_HT, TK_GDN_OPT_H0 | TK_GDN_OPT_HT})
        pipelines_.add(*ctx_, key(*plan.variant, plan.bv, bits | states));
  }

  void run(const Args& a) const {
    check(a);
    ctx_->submit_and_wait([&](vk::CommandBuffer cmd) { record(cmd, a); });
  }

  // Bytes moved when every tensor is read or written once.
  static double bytes(std::int64_t tokens, std::int64_t slots, std::int64_t chunks, std::int64_t N, std::int64_t Hg,
                      std::int64_t H, bool h0, bool ht) {
    const double K = Config::K, V = Config::V;
    return double(tokens) * Hg * K * 2 + double(slots) * H * (K * 2 + V * 2 + V * 2 + 4) + double(chunks) * H * K * V * 2 +
           (h0 ? 4.0 : 0.0) * N * H * K * V + (ht ? 4.0 : 0.0) * N * H * K * V;
  }
  static double flops(std::int64_t slots, std::int64_t H) { return 4.0 * double(slots) * H * Config::K * Config::V; }

 private:
  static bool is_rows(const Variant<Problem>& v) { return v.name == rows_name; }

  PipelineKey key(const Variant<Problem>& v, std::uint32_t bv, std::uint32_t option_bits) const {
    Spec spec;
    spec.workgroup = kernel_shape(v, bv).workgroup;
    spec.BT = Config::BT;
    spec.KDIM = Config::K;
    spec.VDIM = Config::V;
    spec.BV = bv;
    spec.OPTIONS = option_bits;
    if (v.path == Path::tensor_core_fp16) detail::set_matrix_spec(spec, ctx_->info(), v);
    return detail::pipeline_key<Push>(*ctx_, v, spec, 9);
  }
};

static_assert(Kernel<StateRecurrence<StateRecurrenceConfig<64, 128, 128>>>,
              "gdn.state_recurrence must have the kernel interface (core/kernel.hpp)");

}  // namespace tilekernels::gdn
