// SPDX-License-Identifier: MIT
// Gated DeltaNet chunk_fwd_o: the output of chunked gated linear attention.
//
// For each head i_h (q/k head kh = i_h / (H / Hg)) and chunk of BT
// consecutive tokens of one sequence (its last chunk may be partial: a
// sequence's length need not be a multiple of BT):
//   A = bf16( tril_incl( (q k^T) * exp(g_i - g_j) ) )           [BT, BT]
//   o = scale * ( (q h^T) * exp(g_i) + A v_new )                  [BT, V]
// with f32 accumulation. The causal mask includes the diagonal, and A is
// rounded to bf16 after the mask and before its product with v_new, as FLA's
// Triton kernel does. Rows past a sequence's end are neither read nor
// written.
//
// Layout (row-major, last index innermost):
//   q, k  [B, T, Hg, K]       bf16
//   v     [B, T, H, V]        bf16   (v_new)
//   h     [B, NT, H, V, K]    bf16   (state per chunk and head, V rows of K; NT = ceil(T / BT))
//   g     [B, T, H]           f32    (chunk-local cumulative gate, natural log)
//   o     [B, T, H, V]        bf16   a view: B and T one token axis, its offset (in
//                                    elements) and token and head strides any even
//                                    numbers (pairs are written as 32-bit words); rows
//                                    that do not all start at multiples of 8 elements
//                                    are written by words, in pipelines built where
//                                    GdnEnvelope::unaligned_views says
// or, with v, g and h slot-major as gdn::KKTSolve and gdn::StateRecurrence
// write them (gdn/chunking.hpp; chosen by g's rank): v [slots, H, V], g
// [slots, H], h [chunks, H, V, K]. Sequences: B rows of T tokens, or with
// cu_seqlens (B = 1) any lengths, chunks never straddling them (the device
// reads `index`, built from cu_seqlens by gdn::ChunkIndex); token-major h
// is then [1, chunks, H, V, K].
//
// Variants, fastest first (ChunkO::variants):
// - tensor_core_bf16: bf16 tensor cores (VK_KHR_cooperative_matrix with
//   VK_KHR_shader_bfloat16, where the build's shader compiler knows
//   GL_EXT_bfloat16: TILEKERNELS_GLSLANG in CMake), V <= 128: q, k, h and v enter the
//   products as they are, in persistent workgroups (one per multiprocessor
//   by default) that load each step while the previous one computes. Its
//   roundings to bf16 (A and o) are three float operations
//   (tk_round_bf16_split, shaders/common/convert.glsl): to nearest even, as
//   FLA, for magnitudes up to 5.19e33; +-Inf and larger values there become
//   NaN, where the other variants keep them.
// - tensor_core_fp16: VK_KHR_cooperative_matrix on the device's fp16 tile
//   (shaders/common/mma.glsl), any subgroup size, f32 accumulators.
//   Operands are converted bf16 -> fp16 exactly when 2^-17 <= |x| <= 65504;
//   a workgroup that meets a finite input or bf16(A) element beyond 65504
//   recomputes its tile with the scalar f32 algorithm (the portable
//   variant's rounding points), so nothing overflows silently.
// - portable: any Vulkan 1.2 device, f32 arithmetic.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "tilekernels/core.hpp"
#include "tilekernels/gdn/chunk_o_abi.h"
#include "tilekernels/gdn/chunking.hpp"
#include "tilekernels/spirv/gdn/chunk_o.hpp"
#include "tilekernels/spirv/gdn/chunk_o_bf16.hpp"
#include "tilekernels/spirv/gdn/chunk_o_fp16.hpp"

namespace tilekernels::gdn {

template <std::uint32_t BT_ = 64, std::uint32_t K_ = 128, std::uint32_t V_ = 128>
struct ChunkOConfig {
  static_assert(BT_ == 16 || BT_ == 32 || BT_ == 64,
                "ChunkOConfig: BT must be 16, 32 or 64 (a chunk is 1 to 4 row blocks of 16 on the tensor-core path)");
  static_assert(K_ == 64 || K_ == 128 || K_ == 256,
                "ChunkOConfig: K must be 64, 128 or 256 (the head sizes every variant is built and tested for)");
  static_assert(V_ == 64 || V_ == 128 || V_ == 256,
                "ChunkOConfig: V must be 64, 128 or 256 (the head sizes every variant is built and tested for)");

  static constexpr std::uint32_t BT = BT_;
  static constexpr std::uint32_t K = K_;
  static constexpr std::uint32_t V = V_;

  // portable: one workgroup of 256 invocations per (chunk, head, up to 128
  // columns of V): q k^T is computed once per tile, so the fewer tiles the
  // better, while the stages fit 32 KiB.
  static constexpr std::uint32_t portable_bv = V < 128 ? V : 128;
  static constexpr std::uint32_t portable_workgroup = 256;
  static constexpr std::uint32_t portable_shared_bytes = TK_CHUNK_O_PORTABLE_SHARED_BYTES(BT, portable_bv);
  static_assert(portable_shared_bytes <= 32 * 1024, "ChunkOConfig: the portable path must fit 32 KiB of shared memory");

  // tensor_core_fp16: all of V up to 128 columns per tile, 4 subgroups along
  // V (16 subgroups at BT = 64, of the device's size), K in shared stages of
  // 64 columns.
  static constexpr std::uint32_t fp16_bv = V < 128 ? V : 128;
  static constexpr std::uint32_t fp16_wc = 4;
  static constexpr std::uint32_t fp16_kc = 64;
  static constexpr std::uint32_t fp16_subgroups = BT / 16 * fp16_wc;
  static constexpr std::uint32_t fp16_shared_bytes = TK_CHUNK_O_FP16_SHARED_BYTES(BT, fp16_bv, fp16_wc, fp16_kc);
  static_assert(fp16_shared_bytes <= 48 * 1024, "ChunkOConfig: the fp16 tensor-core tiles must fit 48 KiB of shared memory");

  // tensor_core_bf16: 512 invocations, V <= 128.
  static constexpr std::uint32_t bf16_shared_bytes = TK_CHUNK_O_BF16_SHARED_BYTES(BT, V);
};

template <class Config>
class ChunkO : public KernelBase<ChunkO<Config>, GdnEnvelope> {
  using Base = KernelBase<ChunkO<Config>, GdnEnvelope>;
  using Base::ctx_;
  using Base::envelope_;
  using Base::pipelines_;

 public:
  using Base::plan;
  static constexpr const char* name = "gdn.chunk_o";
  TK_DECLARE_SPEC(TK_CHUNK_O_SPEC)
  TK_DECLARE_PUSH(TK_CHUNK_O_PUSH)

  struct Args {
    TensorRef q, k, v, h, g, o;
    std::optional<float> scale;                     // default 1 / sqrt(K)
    std::optional<TensorRef> cu_seqlens, index;     // variable length: the offsets and their index table
    std::span<const std::int32_t> cu_seqlens_host;  // optional, checked
  };
  using Problem = StageProblem;

  static constexpr std::array<Variant<Problem>, 3> variants{{
      {"tensor_core_bf16", Path::tensor_core_bf16, spirv::gdn_chunk_o_bf16,
       {.cooperative_matrix_bf16 = true, .subgroup_size = 32}, 512, Config::bf16_shared_bytes,
       [](const DeviceInfo&, const Problem&) {
         return Config::V <= 128 ? Status::success()
                                 : Status::failure(ErrorCode::unsupported, "holds all of V in a tile: V <= 128 only");
       }},
      {"tensor_core_fp16", Path::tensor_core_fp16, spirv::gdn_chunk_o_fp16,
       {.cooperative_matrix_fp16 = true}, Config::fp16_subgroups * 32, Config::fp16_shared_bytes,
       [](const DeviceInfo& info, const Problem&) { return detail::cpu_chunk_rule(info, Config::BT); }},
      {"portable", Path::portable, spirv::gdn_chunk_o, {}, Config::portable_workgroup, Config::portable_shared_bytes},
  }};

  // What record() runs. `workgroups`: the persistent grid of
  // tensor_core_bf16 (at most one per tile); 0: one per multiprocessor
  // where the device reports them, else 264.
  struct Plan {
    const Variant<Problem>* variant = nullptr;
    std::uint32_t workgroups = 0;
  };

  explicit ChunkO(Context& ctx, GdnEnvelope envelope = {}) : Base(ctx, envelope) { prepare(plan(Problem{1, 1, 1, 1}, 0)); }

  static Chunking chunking(const Problem& p) { return Chunking(p.B, p.T, p.N, Config::BT); }
  Problem problem(const Args& a) const {
    return {a.q.shape.at(0), a.q.shape.at(1), a.q.shape.at(2), a.o.shape.at(2),
            a.cu_seqlens ? a.cu_seqlens->shape.at(0) - 1 : 0, a.g.shape.size() == 2};
  }

  void check(const Problem& p) const {
    detail::expect_stage_shape(name, p, false);
    if (!p.slot_major && !envelope_.token_major)
      throw Error(ErrorCode::invalid_argument, std::string(name) + ": token-major intermediates are outside the envelope");
    const Chunking ch = chunking(p);
    const std::int64_t limit = std::int64_t(1) << 32;
    if (p.B * p.T * p.Hg * Config::K >= limit || p.B * p.T * p.H * Config::V >= limit ||
        ch.chunks() * p.H * Config::K * Config::V >= limit || ch.slots() * p.H * Config::V >= limit)
      throw Error(ErrorCode::unsupported, std::string(name) + ": too many elements for 32-bit indexing");
    select_variant(*ctx_, name, variants, p);
  }

  // Throws tilekernels::Error naming the first argument that is wrong.
  void check(const Args& a) const {
    detail::expect_rank(name, "q", a.q, 4);
    detail::expect_rank(name, "o", a.o, 4);
    const auto B = a.q.shape[0], T = a.q.shape[1], Hg = a.q.shape[2], H = a.o.shape[2];
    const std::int64_t K = Config::K, V = Config::V;
    const Problem p = problem(a);
    const Chunking ch = chunking(p);
    ch.check(*ctx_, name, a.cu_seqlens, a.cu_seqlens_host);
    detail::expect_tensor(*ctx_, name, "q", a.q, DType::bf16, {B, T, Hg, K});
    detail::expect_tensor(*ctx_, name, "k", a.k, DType::bf16, {B, T, Hg, K});
    if (H % Hg != 0)
      throw Error(ErrorCode::shape_mismatch, detail::where(name, "o") + "H = " + std::to_string(H) +
                                                 " heads is not a multiple of Hg = " + std::to_string(Hg) +
                                                 " (the heads of q and k)");
    if (p.slot_major) {
      detail::expect_tensor(*ctx_, name, "v", a.v, DType::bf16, {ch.slots(), H, V});
      detail::expect_tensor(*ctx_, name, "h", a.h, DType::bf16, {ch.chunks(), H, V, K});
      detail::expect_tensor(*ctx_, name, "g", a.g, DType::f32, {ch.slots(), H});
    } else {
      const std::int64_t NT = ch.varlen() ? ch.chunks() : ch.row_chunks();
      detail::expect_tensor(*ctx_, name, "v", a.v, DType::bf16, {B, T, H, V});
      detail::expect_tensor(*ctx_, name, "h", a.h, DType::bf16, {B, NT, H, V, K});
      detail::expect_tensor(*ctx_, name, "g", a.g, DType::f32, {B, T, H});
    }
    o_view(a);
    ch.check_index(*ctx_, name, a.index);
    if (a.scale && !std::isfinite(*a.scale))
      throw Error(ErrorCode::invalid_argument, std::string(name) + ": scale must be finite");
    check(p);
  }

  static constexpr std::uint64_t workspace_bytes(const Problem&) { return 0; }
  Plan plan(const Problem& p, std::uint64_t) const {
    check(p);
    return {&select_variant(*ctx_, name, variants, p), 0};
  }

  void record(vk::CommandBuffer cmd, const Args& a) const { record(cmd, a, plan(problem(a), 0)); }

  // Records `plan` (from plan(), or a variant of `variants` eligible here,
  // prepared).
  void record(vk::CommandBuffer cmd, const Args& a, const Plan& plan) const {
    check(a);
    const Variant<Problem>& v = *plan.variant;
    const Problem p = problem(a);
    const Chunking ch = chunking(p);
    // The tile walk: B rows of NT chunks each, or one row of every chunk.
    const std::int64_t batch = ch.varlen() ? 1 : p.B, NT = ch.varlen() ? ch.chunks() : ch.row_chunks();
    if (ch.chunks() == 0) return;
    const std::uint32_t bv = v.path == Path::tensor_core_bf16   ? Config::V
                             : v.path == Path::tensor_core_fp16 ? Config::fp16_bv
                                                                : Config::portable_bv;
    const std::uint64_t tiles = static_cast<std::uint64_t>(ch.chunks() * p.H) * (Config::V / bv);
    std::uint64_t groups = tiles;
    if (v.path == Path::tensor_core_bf16)
      groups = std::min<std::uint64_t>(tiles, plan.workgroups ? plan.workgroups : ctx_->info().persistent_grid(264));
    Push push;
    push.T = static_cast<std::uint32_t>(p.T);
    push.H = static_cast<std::uint32_t>(p.H);
    push.Hg = static_cast<std::uint32_t>(p.Hg);
    push.NT = static_cast<std::uint32_t>(NT);
    push.total_groups = static_cast<std::uint32_t>(tiles);
    push.scale = a.scale ? *a.scale : 1.0f / std::sqrt(float(Config::K));
    push.stride = static_cast<std::uint32_t>(groups);
    push.ratio = static_cast<std::uint32_t>(p.H / p.Hg);
    push.batch = static_cast<std::uint32_t>(batch);
    push.N = static_cast<std::uint32_t>(ch.N());
    const detail::ViewLayout view = o_view(a);
    push.o_at = view.at, push.o_token = view.token, push.o_head = view.head;
    // Without cu_seqlens the index binding gets g, never read there.
    detail::record_dispatch(*ctx_, cmd, pipelines_.get(name, key(v, p, !detail::aligned_rows(view))),
                            {a.q, a.k, a.v, a.h, a.g, a.o, a.index.value_or(a.g)}, push, groups);
  }

  // Builds the pipelines of a plan chosen by hand (a variant the automatic
  // choice would not take). Not thread-safe: call it before recording from
  // several threads.
  void prepare(const Plan& plan) {
    for (const bool varlen : {false, true})
      for (const bool slots : {true, false})
        for (const bool unaligned : {false, true})
          if ((slots || envelope_.token_major) && (!unaligned || envelope_.unaligned_views))
            pipelines_.add(*ctx_, key(*plan.variant, Problem{1, 1, 1, 1, varlen ? 1 : 0, slots}, unaligned));
  }

  // Records into a fresh command buffer, submits and waits.
  void run(const Args& a) const {
    check(a);
    ctx_->submit_and_wait([&](vk::CommandBuffer cmd) { record(cmd, a); });
  }

 private:
  // The view o (checked, and inside the envelope) and where it is.
  detail::ViewLayout o_view(const Args& a) const {
    const detail::ViewLayout l = detail::expect_view(
        *ctx_, name, "o", a.o, DType::bf16, {a.q.shape[0], a.q.shape[1], a.o.shape[2], Config::V}, 2);
    detail::expect_word_rows(name, "o", a.o, l);
    detail::expect_view_in(name, "o", envelope_, a.o, l);
    return l;
  }

  // `unaligned`: o's rows may start at any even element (O_UNALIGNED; the
  // portable variant writes words anyway and takes one pipeline for both).
  PipelineKey key(const Variant<Problem>& v, const Problem& p, bool unaligned) const {
    Spec spec;
    spec.VARLEN = p.N > 0 ? 1u : 0u;
    spec.SLOTS = p.slot_major ? 1u : 0u;
    spec.O_UNALIGNED = unaligned && v.path != Path::portable ? 1u : 0u;
    spec.BT = Config::BT;
    spec.KDIM = Config::K;
    spec.VDIM = Config::V;
    std::uint32_t bv = Config::V;
    if (v.path == Path::tensor_core_bf16) {
      spec.workgroup = 512;
    } else if (v.path == Path::tensor_core_fp16) {
      spec.workgroup = detail::matrix_workgroup(ctx_->info(), Config::fp16_subgroups);
      detail::set_matrix_spec(spec, ctx_->info(), v);
      bv = Config::fp16_bv;
      spec.WC = Config::fp16_wc;
      spec.KSTAGE = Config::fp16_kc;
    } else {
      spec.workgroup = Config::portable_workgroup;
      bv = Config::portable_bv;
    }
    spec.BV = bv;
    return detail::pipeline_key<Push>(*ctx_, v, spec, 7);
  }
};

static_assert(Kernel<ChunkO<ChunkOConfig<64, 128, 128>>>, "gdn.chunk_o must have the kernel interface (core/kernel.hpp)");

}  // namespace tilekernels::gdn
