// SPDX-License-Identifier: MIT
// Gated DeltaNet, first stage of the chunked forward: per chunk and value
// head, the gate (optionally computed in the kernel), its chunk-local
// cumulative sum, beta (optionally a sigmoid of logits) and the solved
// intra-chunk block
//   A = (I + M)^-1,  M[i][j] = beta_i (k_i . k_j) exp(g_i - g_j) for j < i, else 0,
// FLA's chunk_local_cumsum and chunk_gated_delta_rule_fwd_intra in one
// kernel. g stays in natural log (FLA stores g / ln 2).
//
// Layout (row-major, last index innermost; slots: gdn/chunking.hpp):
//   k        [B, T, Hg, K] bf16  (the L2-normalised copy where the forward normalises)
//   g, beta  [B, T, H]     f32   raw per-token log decay (or gate input) and beta (or logits);
//                               views: any token and head strides (B and T one token axis), any
//                               offset that is a multiple of 4 bytes
//   A_log, dt_bias [H]     f32   with GdnOptions::gate_in_kernel (dt_bias optional)
//   g_cumsum [slots, H]    f32   out: cumulative log decay within each chunk
//   beta_out [slots, H]    f32   out: beta as the later stages read it
//   A        [slots, H, BT] bf16 out: unit lower triangular, zero above the
//                               diagonal and in padding rows
// Variable length: cu_seqlens [N + 1] (B = 1) and its index table (built by
// gdn::ChunkIndex); the host copy cu_seqlens_host is only checked.
// Rounding (FLA's points): g and beta in f32, M and the solve in f32, A
// rounded to bf16 (nearest even).
//
// Variants, fastest first (KKTSolve::variants):
// - tensor_core_bf16: k k^T and the solve's block products on
//   VK_KHR_cooperative_matrix bf16 16x16x16 tiles, the solve's operands
//   split into bf16 hi + lo pairs for f32 accuracy; one subgroup of 32 per
//   16-row block.
// - tensor_core_fp16: the same on the device's fp16 tile (any listed M, N, K
//   of 8 or 16) at its subgroup size, the operands split into fp16 pairs. A
//   chunk with a k element, or an M or X value, beyond 65504 is solved again
//   by the portable variant's scalar code in the same workgroup, so nothing
//   overflows silently; it takes the portable variant's shared memory.
// - portable: scalar f32, no subgroup operation, 28.3 KiB of shared memory
//   at BT = 64.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "tilekernels/core.hpp"
#include "tilekernels/gdn/chunking.hpp"
#include "tilekernels/gdn/kkt_solve_abi.h"
#include "tilekernels/spirv/gdn/chunk_kkt_solve.hpp"
#include "tilekernels/spirv/gdn/chunk_kkt_solve_bf16.hpp"
#include "tilekernels/spirv/gdn/chunk_kkt_solve_fp16.hpp"

namespace tilekernels::gdn {

template <std::uint32_t BT_ = 64, std::uint32_t K_ = 128>
struct KKTSolveConfig {
  static_assert(BT_ == 16 || BT_ == 32 || BT_ == 64,
                "KKTSolveConfig: BT must be 16, 32 or 64 (whole 16-row blocks, at most 4 per chunk)");
  static_assert(K_ == 64 || K_ == 128 || K_ == 256, "KKTSolveConfig: K must be 64, 128 or 256");
  static constexpr std::uint32_t BT = BT_, K = K_;
  // Portable kernel (chunk_kkt_solve.comp): 256 invocations; the scalar
  // solve's shared memory (kkt_solve_abi.h), g and beta.
  static constexpr std::uint32_t portable_workgroup = 256;
  static constexpr std::uint32_t rt = BT / 16;
  static constexpr std::uint32_t portable_shared_bytes = 16 * TK_KKT_PS_SMEM_VEC4(BT, K) + 8 * BT;
  // Matrix kernels (chunk_kkt_solve_mma.glsl, bf16 and fp16): one subgroup
  // per 16-row block; their shared memory is laid out in kkt_solve_abi.h, the
  // fp16 kernel's over the scalar solve's (its fallback) with a flag.
  static constexpr std::uint32_t tc_workgroup = 2 * BT;
  static constexpr std::uint32_t tc_shared_bytes = 16 * TK_KKT_TC_SMEM_VEC4(BT, K) + 8 * BT;
  static constexpr std::uint32_t fp16_shared_bytes =
      16 * TK_ABI_MAX(TK_KKT_PS_SMEM_VEC4(BT, K), TK_KKT_TC_SMEM_VEC4(BT, K)) + 8 * BT + 4;
  static_assert(portable_shared_bytes <= 32768, "KKTSolveConfig: the portable path must fit 32 KiB of shared memory");
  static_assert(tc_shared_bytes <= 49152, "KKTSolveConfig: the tensor-core path must fit 48 KiB of shared memory");
  static_assert(fp16_shared_bytes <= 32768, "KKTSolveConfig: the fp16 path must fit 32 KiB of shared memory");
};

template <class Config>
class KKTSolve : public KernelBase<KKTSolve<Config>, GdnEnvelope> {
  using Base = KernelBase<KKTSolve<Config>, GdnEnvelope>;
  using Base::ctx_;
  using Base::envelope_;
  using Base::pipelines_;

 public:
  using Base::plan;
  static constexpr const char* name = "gdn.kkt_solve";
  TK_DECLARE_SPEC(TK_KKT_SOLVE_SPEC)
  TK_DECLARE_PUSH(TK_KKT_SOLVE_PUSH)
  static constexpr std::uint32_t option_mask =
      TK_GDN_OPT_GATE_IN_KERNEL | TK_GDN_OPT_DT_BIAS | TK_GDN_OPT_BETA_SIGMOID | TK_GDN_OPT_NEG_EIGVAL;

  struct Args {
    TensorRef k, g, beta;
    std::optional<TensorRef> A_log, dt_bias;
    TensorRef g_cumsum, beta_out, A;
    GdnOptions options;  // gate_in_kernel, beta_sigmoid, allow_neg_eigval
    std::optional<TensorRef> cu_seqlens, index;     // variable length: the offsets and their index table
    std::span<const std::int32_t> cu_seqlens_host;  // optional, checked
  };

  using Problem = StageProblem;

  static constexpr std::array<Variant<Problem>, 3> variants{{
      {"tensor_core_bf16", Path::tensor_core_bf16, spirv::gdn_chunk_kkt_solve_bf16,
       DeviceNeeds{.cooperative_matrix_bf16 = true, .subgroup_size = 32}, Config::tc_workgroup, Config::tc_shared_bytes},
      {"tensor_core_fp16", Path::tensor_core_fp16, spirv::gdn_chunk_kkt_solve_fp16,
       DeviceNeeds{.cooperative_matrix_fp16 = true}, Config::rt * 32, Config::fp16_shared_bytes,
       [](const DeviceInfo& info, const Problem&) { return detail::cpu_chunk_rule(info, Config::BT); }},
      {"portable", Path::portable, spirv::gdn_chunk_kkt_solve, {}, Config::portable_workgroup,
       Config::portable_shared_bytes},
  }};

  struct Plan {
    const Variant<Problem>* variant = nullptr;
  };

  explicit KKTSolve(Context& ctx, GdnEnvelope envelope = {}) : Base(ctx, envelope) {
    prepare(plan(Problem{1, 1, 1, 1}, 0));
  }

  static Chunking chunking(const Problem& p) { return Chunking(p.B, p.T, p.N, Config::BT); }
  Problem problem(const Args& a) const {
    return {a.k.shape.at(0), a.k.shape.at(1), a.k.shape.at(2), a.g.shape.at(2),
            a.cu_seqlens ? a.cu_seqlens->shape.at(0) - 1 : 0, true};
  }

  void check(const Problem& p) const {
    detail::expect_stage_shape(name, p, true);
    const Chunking ch = chunking(p);
    if (p.B * p.T * p.Hg * Config::K >= (std::int64_t(1) << 32) || ch.slots() * p.H * Config::BT >= (std::int64_t(1) << 32))
      throw Error(ErrorCode::unsupported, std::string(name) + ": too many elements for 32-bit indexing");
    select_variant(*ctx_, name, variants, p);
  }

  void check(const Args& a) const {
    detail::expect_rank(name, "k", a.k, 4);
    detail::expect_rank(name, "g", a.g, 3);
    const auto B = a.k.shape[0], T = a.k.shape[1], Hg = a.k.shape[2], H = a.g.shape[2];
    const Problem p = problem(a);
    const Chunking ch = chunking(p);
    ch.check(*ctx_, name, a.cu_seqlens, a.cu_seqlens_host);
    detail::expect_tensor(*ctx_, name, "k", a.k, DType::bf16, {B, T, Hg, Config::K});
    if (H % Hg != 0)
      throw Error(ErrorCode::shape_mismatch, detail::where(name, "g") + "H = " + std::to_string(H) +
                                                 " heads is not a multiple of Hg = " + std::to_string(Hg));
    views(a);
    detail::expect_options(*ctx_, name, a.options, a.A_log, a.dt_bias, H);
    detail::expect_options_in(name, envelope_, a.options, a.dt_bias.has_value(), option_mask);
    const std::int64_t S = ch.slots();
    detail::expect_tensor(*ctx_, name, "g_cumsum", a.g_cumsum, DType::f32, {S, H});
    detail::expect_tensor(*ctx_, name, "beta_out", a.beta_out, DType::f32, {S, H});
    detail::expect_tensor(*ctx_, name, "A", a.A, DType::bf16, {S, H, Config::BT});
    ch.check_index(*ctx_, name, a.index);
    check(p);
  }

  static constexpr std::uint64_t workspace_bytes(const Problem&) { return 0; }
  Plan plan(const Problem& p, std::uint64_t) const {
    check(p);
    return {&select_variant(*ctx_, name, variants, p)};
  }

  void record(vk::CommandBuffer cmd, const Args& a) const { record(cmd, a, plan(problem(a), 0)); }

  void record(vk::CommandBuffer cmd, const Args& a, const Plan& plan) const {
    check(a);
    const Problem p = problem(a);
    const Chunking ch = chunking(p);
    if (ch.chunks() == 0) return;
    const std::uint32_t bits = detail::option_bits(a.options, a.dt_bias.has_value()) & option_mask;
    const Pipeline& pipeline = pipelines_.get(name, key(*plan.variant, bits));
    Push push;
    push.T = static_cast<std::uint32_t>(p.T);
    push.H = static_cast<std::uint32_t>(p.H);
    push.Hg = static_cast<std::uint32_t>(p.Hg);
    push.ratio = static_cast<std::uint32_t>(p.H / p.Hg);
    push.N = static_cast<std::uint32_t>(ch.N());
    push.row_chunks = static_cast<std::uint32_t>(ch.row_chunks());
    push.varlen = ch.varlen() ? 1u : 0u;
    const auto v = views(a);
    push.g_at = v[0].at, push.g_token = v[0].token, push.g_head = v[0].head;
    push.beta_at = v[1].at, push.beta_token = v[1].token, push.beta_head = v[1].head;
    // Optional inputs left out are bound to an input the kernel reads
    // anyway (never touched): every descriptor stays valid and adds no hazard.
    const TensorRef& spare = a.g;
    detail::record_dispatch(*ctx_, cmd, pipeline,
                            {a.k, a.g, a.beta, a.A_log.value_or(spare), a.dt_bias.value_or(spare),
                             a.index.value_or(spare), a.g_cumsum, a.beta_out, a.A},
                            push, static_cast<std::uint64_t>(ch.chunks() * p.H));
  }

  // Builds the pipelines of a plan chosen by hand (a variant the automatic
  // choice would not take). Not thread-safe: call it before recording from
  // several threads.
  void prepare(const Plan& plan) {
    for (const std::uint32_t bits : detail::option_bit_sets(envelope_, option_mask))
      pipelines_.add(*ctx_, key(*plan.variant, bits));
  }

  void run(const Args& a) const {
    check(a);
    ctx_->submit_and_wait([&](vk::CommandBuffer cmd) { record(cmd, a); });
  }

  // Bytes every tensor moves once (k read once per value head) and the
  // flops of k k^T (full BT x BT blocks) and of the solve (BT^3 / 3).
  static double bytes(std::int64_t tokens, std::int64_t H) {
    return double(tokens) * double(H) * (Config::K * 2 + 4 * 4 + Config::BT * 2);
  }
  static double flops(std::int64_t slots, std::int64_t H) {
    return double(slots) * double(H) * (2.0 * Config::BT * Config::K + 2.0 * Config::BT * Config::BT / 3);
  }

 private:
  // The views g and beta (checked) and where they are.
  std::array<detail::ViewLayout, 2> views(const Args& a) const {
    const Shape s{a.k.shape[0], a.k.shape[1], a.g.shape[2]};
    return {detail::expect_view(*ctx_, name, "g", a.g, DType::f32, s, 2),
            detail::expect_view(*ctx_, name, "beta", a.beta, DType::f32, s, 2)};
  }

  PipelineKey key(const Variant<Problem>& v, std::uint32_t option_bits) const {
    Spec spec;
    spec.workgroup = v.invocations;
    if (v.path == Path::tensor_core_fp16) {
      spec.workgroup = detail::matrix_workgroup(ctx_->info(), Config::rt);
      detail::set_matrix_spec(spec, ctx_->info(), v);
    }
    spec.BT = Config::BT;
    spec.KDIM = Config::K;
    spec.OPTIONS = option_bits;
    return detail::pipeline_key<Push>(*ctx_, v, spec, 9);
  }
};

static_assert(Kernel<KKTSolve<KKTSolveConfig<64, 128>>>, "gdn.kkt_solve must have the kernel interface (core/kernel.hpp)");

}  // namespace tilekernels::gdn
