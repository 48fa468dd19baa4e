// SPDX-License-Identifier: MIT
// Gated DeltaNet: recompute_w_u_fwd, the WY representation of a chunk.
//
// For each value head h and chunk of BT consecutive tokens of one sequence:
//   u = A bf16(v * beta)               [BT, V]
//   w = A bf16((k * beta) * exp(g))    [BT, K]
// with A the chunk's solved (I + A)^-1 block, f32 accumulation, and the
// operand rounding to bf16 where flash-linear-attention rounds it. A is
// lower triangular (zeros above the diagonal, as gdn::KKTSolve writes it):
// tensor_core_bf16_joint skips its 16 x 16 tiles above the diagonal. GQA: the
// key head of value head h is h / (H / Hg).
//
// Layout (numpy shapes, row-major, last index innermost):
//   k    [B, T, Hg, K]  bf16        v    [B, T, H, V]  bf16 (a view, below)
//   beta [B, T, H]      f32         g    [B, T, H]     f32 (chunk-local cumulative gate, natural log)
//   A    [B, T, H, BT]  f32 (or bf16, Config::a_dtype, as FLA's pipeline passes it)
//                                  (row t holds the BT coefficients of its chunk)
//   w    [B, T, H, K]   bf16 out    u    [B, T, H, V]  bf16 out
// or, with beta, g, A, w and u slot-major as gdn::KKTSolve writes them
// (gdn/chunking.hpp; chosen by g's rank): [slots, H], [slots, H, BT],
// [slots, H, K], [slots, H, V]. Sequences: B rows of T tokens, or with
// cu_seqlens (B = 1) any lengths, chunks never straddling them (the device
// reads their index table, gdn::ChunkIndex). A sequence's length need
// not be a multiple of BT: in its last chunk, rows past its end are neither
// read nor written, and the columns of A past the chunk's last row are
// ignored (they may hold anything).
//
// v is a view: any token and head strides (B and T one token axis), any
// offset that is a multiple of the element size. Where its offset in the
// binding and its strides are multiples of 8 elements (dense v, or fused
// rows of such widths) every variant reads it in 16-byte pieces; else by
// 32-bit words, in pipelines built where GdnEnvelope::unaligned_views says.
//
// Variants, fastest first (RecomputeWU::variants):
// - tensor_core_bf16_joint (A in bf16, BT = 64, K and V <= 128): bf16
//   tensor cores (VK_KHR_cooperative_matrix + VK_KHR_shader_bfloat16, where
//   the build's shader compiler knows GL_EXT_bfloat16: TILEKERNELS_GLSLANG in CMake);
//   u and w of a chunk in one 512-invocation persistent workgroup (one per
//   multiprocessor), A read once, the next chunk's loads in flight;
// - tensor_core_bf16: the same products in pairs of persistent workgroups,
//   one for u and one for w (A in f32 enters as bf16 + bf16 residual,
//   about 16 bits);
// - tensor_core_fp16: VK_KHR_cooperative_matrix on the device's fp16 tile
//   (shaders/common/mma.glsl), subgroups of 8 to 64; power-of-two row
//   scalings keep every fp16 value below 2^15, so bf16 inputs beyond the
//   fp16 range (65504) neither overflow nor lose precision; A is rounded to
//   fp16 (11 bits);
// - portable: any Vulkan 1.2 device, A kept in f32.
// The bf16 variants round to bf16 (operands and results) with three float
// operations (tk_round_bf16_split, shaders/common/convert.glsl): to nearest
// even, as FLA, for magnitudes up to 5.19e33; +-Inf and larger values there
// become NaN, where the other variants keep them.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "tilekernels/core.hpp"
#include "tilekernels/gdn/chunking.hpp"
#include "tilekernels/gdn/recompute_wu_abi.h"
#include "tilekernels/spirv/gdn/recompute_wu.hpp"
#include "tilekernels/spirv/gdn/recompute_wu_bf16.hpp"
#include "tilekernels/spirv/gdn/recompute_wu_bf16_joint.hpp"
#include "tilekernels/spirv/gdn/recompute_wu_fp16.hpp"

namespace tilekernels::gdn {

template <std::uint32_t BT = 64, std::uint32_t K = 128, std::uint32_t V = 128, DType AType = DType::f32>
struct RecomputeWUConfig {
  static_assert(AType == DType::f32 || AType == DType::bf16,
                "RecomputeWUConfig: A must be DType::f32 (the solved blocks as computed) or DType::bf16 (as FLA's "
                "chunked pipeline stores them)");
  static_assert(BT == 16 || BT == 32 || BT == 64,
                "RecomputeWUConfig: BT must be 16, 32 or 64 (whole 16-row tensor-core tiles, at most 4 per chunk)");
  static_assert(K % 16 == 0 && V % 16 == 0,
                "RecomputeWUConfig: K and V must be multiples of 16 (whole 16-column tensor-core tiles and "
                "16-byte row loads)");
  static_assert(K >= 16 && K <= 256, "RecomputeWUConfig: K must be in [16, 256] (the passes over columns are unrolled "
                                     "at specialisation; larger heads would need more registers than a pass keeps)");
  static_assert(V >= 16 && V <= 256, "RecomputeWUConfig: V must be in [16, 256] (the passes over columns are unrolled "
                                     "at specialisation; larger heads would need more registers than a pass keeps)");

  static constexpr std::uint32_t bt = BT, k = K, v = V;
  static constexpr DType a_dtype = AType;

  // portable: 256 invocations; the A block in f32 plus a 64-column slab of
  // bf16 operand rows (shaders/gdn/recompute_wu.comp).
  static constexpr std::uint32_t portable_workgroup = 256;
  static constexpr std::uint32_t portable_shared_bytes = BT * BT * 4 + BT * 32 * 4;
  static_assert(portable_shared_bytes <= 32768,
                "RecomputeWUConfig: the portable path must fit the portable 32 KiB of shared memory");

  // tensor_core_fp16: 16 subgroups (8 at BT = 16: at most one operand row
  // per 16 lanes in subgroups of 32), of the device's size.
  static constexpr std::uint32_t fp16_subgroups = std::min<std::uint32_t>(16, BT / 2);
  static constexpr std::uint32_t fp16_shared_bytes = TK_RECOMPUTE_WU_FP16_SHARED_BYTES(BT, K, V, fp16_subgroups);
  static_assert(fp16_shared_bytes <= 49152, "RecomputeWUConfig: the fp16 tensor-core path must fit 48 KiB of shared memory");

  // tensor_core_bf16: 512 invocations where its shared memory fits 48 KiB,
  // else 256 (where even that does not fit: BT = 64, A in f32, K or V >
  // 160, the variant does not apply).
  static constexpr std::uint32_t bf16_bytes(std::uint32_t workgroup) {
    return 16 * TK_RECOMPUTE_WU_BF16_VEC4(BT, K, V, AType == DType::f32, workgroup);
  }
  static constexpr std::uint32_t bf16_workgroup = bf16_bytes(512) <= 49152 ? 512 : 256;
  static constexpr std::uint32_t bf16_shared_bytes = bf16_bytes(bf16_workgroup);

  // tensor_core_bf16_joint: A in bf16, BT = 64, K and V <= 128.
  static constexpr bool joint_shape = AType == DType::bf16 && BT == 64 && K <= 128 && V <= 128;
  static constexpr std::uint32_t joint_shared_bytes = 16 * TK_RECOMPUTE_WU_JOINT_VEC4(K, V);
};

template <class Config>
class RecomputeWU : public KernelBase<RecomputeWU<Config>, GdnEnvelope> {
  using Base = KernelBase<RecomputeWU<Config>, GdnEnvelope>;
  using Base::ctx_;
  using Base::envelope_;
  using Base::pipelines_;

 public:
  using Base::plan;
  static constexpr const char* name = "gdn.recompute_wu";
  TK_DECLARE_SPEC(TK_RECOMPUTE_WU_SPEC)
  TK_DECLARE_PUSH(TK_RECOMPUTE_WU_PUSH)

  struct Args {
    TensorRef k, v, beta, g, A, w, u;
    std::optional<TensorRef> cu_seqlens, index;     // variable length: the offsets and their index table
    std::span<const std::int32_t> cu_seqlens_host;  // optional, checked
  };
  using Problem = StageProblem;

  static constexpr std::array<Variant<Problem>, 4> variants{{
      {"tensor_core_bf16_joint", Path::tensor_core_bf16, spirv::gdn_recompute_wu_bf16_joint,
       {.cooperative_matrix_bf16 = true, .subgroup_size = 32}, 512, Config::joint_shared_bytes,
       [](const DeviceInfo&, const Problem&) {
         return Config::joint_shape ? Status::success()
                                    : Status::failure(ErrorCode::unsupported, "needs A in bf16, BT = 64, K and V <= 128");
       }},
      {"tensor_core_bf16", Path::tensor_core_bf16, spirv::gdn_recompute_wu_bf16,
       {.cooperative_matrix_bf16 = true, .subgroup_size = 32}, Config::bf16_workgroup, Config::bf16_shared_bytes,
       [](const DeviceInfo&, const Problem&) {
         return Config::bf16_shared_bytes <= 49152
                    ? Status::success()
                    : Status::failure(ErrorCode::unsupported, "its tiles for these head sizes exceed 48 KiB of shared memory");
       }},
      {"tensor_core_fp16", Path::tensor_core_fp16, spirv::gdn_recompute_wu_fp16,
       {.cooperative_matrix_fp16 = true}, Config::fp16_subgroups * 32, Config::fp16_shared_bytes,
       [](const DeviceInfo& info, const Problem&) {
         if (info.subgroup_size < 8 || info.subgroup_size > 64)
           return Status::failure(ErrorCode::unsupported, "its operand rows need subgroups of 8 to 64 invocations");
         return detail::cpu_chunk_rule(info, Config::bt);
       }},
      {"portable", Path::portable, spirv::gdn_recompute_wu, {}, Config::portable_workgroup,
       Config::portable_shared_bytes},
  }};

  // What record() runs. `workgroups`: the persistent grid of the bf16
  // variants (even for the pairs of tensor_core_bf16; at most one per
  // tile); 0: one per multiprocessor where the device reports them, else 264.
  struct Plan {
    const Variant<Problem>* variant = nullptr;
    std::uint32_t workgroups = 0;
  };

  explicit RecomputeWU(Context& ctx, GdnEnvelope envelope = {}) : Base(ctx, envelope) {
    prepare(plan(Problem{1, 1, 1, 1}, 0));
  }

  static Chunking chunking(const Problem& p) { return Chunking(p.B, p.T, p.N, Config::bt); }
  Problem problem(const Args& a) const {
    return {a.k.shape.at(0), a.k.shape.at(1), a.k.shape.at(2), a.v.shape.at(2),
            a.cu_seqlens ? a.cu_seqlens->shape.at(0) - 1 : 0, a.g.shape.size() == 2};
  }

  void check(const Problem& p) const {
    detail::expect_stage_shape(name, p, false);
    if (!p.slot_major && !envelope_.token_major)
      throw Error(ErrorCode::invalid_argument, std::string(name) + ": token-major intermediates are outside the envelope");
    const Chunking ch = chunking(p);
    const std::int64_t rows = p.slot_major ? ch.slots() : p.B * p.T, limit = std::int64_t(1) << 32;
    if (p.B * p.T * p.Hg * Config::k >= limit || p.B * p.T * p.H * Config::v >= limit ||
        rows * p.H * std::max({Config::bt, Config::k, Config::v}) >= limit)
      throw Error(ErrorCode::unsupported, std::string(name) + ": more than 2^32 elements: too many for 32-bit indexing");
    select_variant(*ctx_, name, variants, p);
  }

  // Throws tilekernels::Error naming the first argument that is wrong.
  void check(const Args& a) const {
    detail::expect_rank(name, "k", a.k, 4);
    detail::expect_rank(name, "v", a.v, 4);
    const auto B = a.k.shape[0], T = a.k.shape[1], Hg = a.k.shape[2], H = a.v.shape[2];
    const std::int64_t K = Config::k, V = Config::v, BT = Config::bt;
    const Problem p = problem(a);
    const Chunking ch = chunking(p);
    ch.check(*ctx_, name, a.cu_seqlens, a.cu_seqlens_host);
    detail::expect_tensor(*ctx_, name, "k", a.k, DType::bf16, {B, T, Hg, K});
    v_view(a);
    if (H % Hg != 0)
      throw Error(ErrorCode::shape_mismatch, detail::where(name, "v") + "value heads H = " + std::to_string(H) +
                                                 " must be a multiple of the key heads Hg = " + std::to_string(Hg) +
                                                 " of k");
    // Rows of the intermediates: B, T token-major, or slots.
    const Shape rows = p.slot_major ? Shape{ch.slots()} : Shape{B, T};
    const auto with = [&](std::initializer_list<std::int64_t> inner) {
      Shape s = rows;
      s.insert(s.end(), inner);
      return s;
    };
    detail::expect_tensor(*ctx_, name, "beta", a.beta, DType::f32, with({H}));
    detail::expect_tensor(*ctx_, name, "g", a.g, DType::f32, with({H}));
    detail::expect_tensor(*ctx_, name, "A", a.A, Config::a_dtype, with({H, BT}));
    detail::expect_tensor(*ctx_, name, "w", a.w, DType::bf16, with({H, K}));
    detail::expect_tensor(*ctx_, name, "u", a.u, DType::bf16, with({H, V}));
    ch.check_index(*ctx_, name, a.index);
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
    // The tile walk: B rows of `chunks` each, or one row of every chunk.
    const std::int64_t batch = ch.varlen() ? 1 : p.B, chunks = ch.varlen() ? ch.chunks() : ch.row_chunks();
    const auto tiles = static_cast<std::uint64_t>(ch.chunks() * p.H);
    if (tiles == 0) return;
    const std::uint32_t grid = plan.workgroups ? plan.workgroups : ctx_->info().persistent_grid(264);
    Push push;
    push.batch = static_cast<std::uint32_t>(batch);
    push.T = static_cast<std::uint32_t>(p.T);
    push.Hg = static_cast<std::uint32_t>(p.Hg);
    push.H = static_cast<std::uint32_t>(p.H);
    push.chunks = static_cast<std::uint32_t>(chunks);
    push.ratio = static_cast<std::uint32_t>(p.H / p.Hg);
    push.N = static_cast<std::uint32_t>(ch.N());
    const detail::ViewLayout view = v_view(a);
    push.v_at = view.at, push.v_token = view.token, push.v_head = view.head;
    std::uint64_t groups = tiles;
    if (v.name == "tensor_core_bf16_joint") {
      groups = std::min<std::uint64_t>(tiles, grid);
      push.stride = static_cast<std::uint32_t>(groups);
    } else if (v.path == Path::tensor_core_bf16) {
      // Persistent pairs: each walks the tiles with a stride of `pairs`,
      // prefetching the next tile while it multiplies this one.
      const std::uint64_t pairs = std::min<std::uint64_t>(tiles, std::max(1u, (grid + 1) / 2));
      push.stride = static_cast<std::uint32_t>(pairs);
      groups = 2 * pairs;
    } else if (v.path == Path::tensor_core_fp16) {
      groups = 2 * tiles;  // one workgroup for u, one for w
    }
    // Without cu_seqlens the index binding gets g, never read there.
    detail::record_dispatch(*ctx_, cmd, pipelines_.get(name, key(v, p, !detail::aligned_rows(view))),
                            {a.k, a.v, a.beta, a.g, a.A, a.w, a.u, a.index.value_or(a.g)}, push, groups);
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

  // Bytes moved when every tensor is read or written once (the memory floor).
  static std::uint64_t bytes(std::int64_t B, std::int64_t T, std::int64_t Hg, std::int64_t H) {
    const auto bt = static_cast<std::uint64_t>(B * T);
    const std::uint64_t a_bytes = dtype_size(Config::a_dtype);
    return bt * (Hg * Config::k * 2 + H * (Config::v * 2 + 4 + 4 + Config::bt * a_bytes + Config::k * 2 + Config::v * 2));
  }
  // Flops of the two products (full BT x BT blocks, as computed).
  static std::uint64_t flops(std::int64_t B, std::int64_t T, std::int64_t H) {
    return static_cast<std::uint64_t>(B * T * H) * 2ull * Config::bt * (Config::k + Config::v);
  }

 private:
  // The view v (checked, and inside the envelope) and where it is.
  detail::ViewLayout v_view(const Args& a) const {
    const detail::ViewLayout l = detail::expect_view(
        *ctx_, name, "v", a.v, DType::bf16, {a.k.shape[0], a.k.shape[1], a.v.shape[2], Config::v}, 2);
    detail::expect_view_in(name, "v", envelope_, a.v, l);
    return l;
  }

  // `unaligned`: v's rows may start at any element (V_UNALIGNED).
  PipelineKey key(const Variant<Problem>& v, const Problem& p, bool unaligned) const {
    Spec spec;
    spec.VARLEN = p.N > 0 ? 1u : 0u;
    spec.SLOTS = p.slot_major ? 1u : 0u;
    spec.V_UNALIGNED = unaligned ? 1u : 0u;
    spec.BT = Config::bt;
    spec.K = Config::k;
    spec.V = Config::v;
    spec.A_DTYPE = static_cast<std::uint32_t>(Config::a_dtype);
    if (v.name == "tensor_core_bf16_joint")
      spec.workgroup = 512;
    else if (v.path == Path::tensor_core_bf16)
      spec.workgroup = Config::bf16_workgroup;
    else if (v.path == Path::tensor_core_fp16) {
      spec.workgroup = detail::matrix_workgroup(ctx_->info(), Config::fp16_subgroups);
      detail::set_matrix_spec(spec, ctx_->info(), v);
    }
    else
      spec.workgroup = Config::portable_workgroup;
    return detail::pipeline_key<Push>(*ctx_, v, spec, 8);
  }
};

static_assert(Kernel<RecomputeWU<RecomputeWUConfig<64, 128, 128, DType::bf16>>>,
              "gdn.recompute_wu must have the kernel interface (core/kernel.hpp)");

}  // namespace tilekernels::gdn
