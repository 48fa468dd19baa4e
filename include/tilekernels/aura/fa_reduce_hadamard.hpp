// SPDX-License-Identifier: MIT
// AURA fused split-K reduce + randomised-Hadamard undo: the last step of
// decode attention over a Hadamard-rotated KV cache.
//
// When the values were stored rotated, v' = rotate(v) = Hn (signs * v) with
// Hn = H / sqrt(HeadDim) the normalised Sylvester-Hadamard matrix (natural
// order, H[i][j] = (-1)^popcount(i & j); symmetric and, normalised, its own
// inverse) and signs a vector of +-1, the attention output comes out rotated
// too. This kernel merges the split-K partials of each row (one query head of
// one token) and rotates the result back in one dispatch:
//   M = max { m_b : l_b != 0 },  e_b = e^(m_b - M),  L = sum_b e_b l_b,
//   x = sum_b e_b o_b / L,       output = signs * (Hn x)
// i.e. first the normalised fast Walsh-Hadamard transform, then the sign
// flips; undo(rotate(v)) == v because Hn Hn = I and signs * signs = 1.
// The reference header checks that identity (reference::aura::hadamard_rotate).
//
// Layout (row-major, last index innermost), shared with FlashPass2:
//   o_partials [rows, nwg, HeadDim]   Partial dtype, un-normalised o_b
//   m_partials [rows, nwg]            Partial dtype, running max of block b
//   l_partials [rows, nwg]            Partial dtype, running sum of block b
//   signs      [HeadDim]              f32, the rotation's sign vector (+-1)
//   output     [rows, HeadDim]        Out dtype (f32 by default)
// nwg (the number of partials per row) is 1..32. Blocks with l_b == 0 are
// empty and skipped (their o and m are never used); a row whose blocks are
// all empty gets zeros, never NaN. NaN or Inf in o, m or l of a non-empty
// block makes that row's output non-finite (the transform mixes every slot
// of the row). The signs are applied as given: any diagonal works, +-1 makes
// it the exact inverse of the rotation.
//
// Geometry (shaders/aura/fa_reduce_hadamard.comp): per row, `groups` lane
// groups of HeadDim/4 invocations, each invocation owning 4 consecutive
// slots; group g loads blocks g, g + groups, ... (up to 32 per invocation,
// all in flight together); small rows are packed several to a workgroup so
// that a workgroup has at least 64 invocations. The transform runs in
// shared memory with one barrier per pair of index bits (`portable`); the
// `subgroup` variant does the index bits that fit in a subgroup with
// shuffles instead, and the block weights with subgroup reductions where a
// subgroup holds a lane per block slot (any subgroup size, where the
// device's subgroups are as reported and tile the workgroup).
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <string>

#include "tilekernels/aura/fa_reduce_hadamard_abi.h"
#include "tilekernels/core.hpp"
#include "tilekernels/spirv/aura/fa_reduce_hadamard.hpp"
#include "tilekernels/spirv/aura/fa_reduce_hadamard_subgroup.hpp"

namespace tilekernels::aura {

template <std::uint32_t HeadDim, DType Partial = DType::f32, DType Out = DType::f32>
struct FaReduceHadamardConfig {
  static_assert(HeadDim == 64 || HeadDim == 128 || HeadDim == 256 || HeadDim == 512,
                "FaReduceHadamardConfig: HeadDim must be 64, 128, 256 or 512 (a power of two for the "
                "Walsh-Hadamard transform, at least 64 so a row fills 16 lanes)");
  static_assert(Partial == DType::f32 || Partial == DType::f16 || Partial == DType::bf16,
                "FaReduceHadamardConfig: Partial must be DType::f32, DType::f16 or DType::bf16");
  static_assert(Out == DType::f32 || Out == DType::f16 || Out == DType::bf16,
                "FaReduceHadamardConfig: Out must be DType::f32, DType::f16 or DType::bf16");

  static constexpr std::uint32_t head_dim = HeadDim;
  static constexpr std::uint32_t log2_head_dim = static_cast<std::uint32_t>(std::countr_zero(HeadDim));
  static constexpr DType partial_dtype = Partial;
  static constexpr DType out_dtype = Out;
  static constexpr std::uint32_t max_nwg = 32;
  // Invocations per lane group: each owns one vec4 of the row.
  static constexpr std::uint32_t chunks = HeadDim / 4;
  // Largest workgroup the dispatcher builds.
  static constexpr std::uint32_t max_invocations = 512;
  static_assert(chunks <= max_invocations, "FaReduceHadamardConfig: one lane group must fit a workgroup");

  // Shared memory of a workgroup of `rows` rows, `groups` lane groups of
  // `blocks_per_group` blocks: (m, l, e) per block slot, the vec4 sums of
  // groups 1.., the row itself during the transform.
  static constexpr std::uint32_t shared_bytes(std::uint32_t rows, std::uint32_t groups,
                                              std::uint32_t blocks_per_group) {
    return rows * (3 * groups * blocks_per_group * 4 + (groups - 1) * chunks * 16 + HeadDim * 4) + 16;
  }
  // The automatic geometries (at most 4 lane groups, 32 block slots, 64
  // invocations where rows are packed) must fit the portable 32 KiB.
  static_assert(shared_bytes(std::max<std::uint32_t>(1, 64 / chunks), 1, 32) <= 32768 &&
                    shared_bytes(1, 4, 8) <= 32768,
                "FaReduceHadamardConfig: shared memory exceeds the portable 32 KiB");
};

// The pipelines depend on the shape through the partials per row (at most
// Config::max_nwg) and whether rows are few: every call is inside.
struct FaReduceHadamardEnvelope {};

template <class Config>
class FaReduceHadamard : public KernelBase<FaReduceHadamard<Config>, FaReduceHadamardEnvelope> {
  using Base = KernelBase<FaReduceHadamard<Config>, FaReduceHadamardEnvelope>;
  using Base::ctx_;
  using Base::pipelines_;

 public:
  using Base::plan;
  static constexpr const char* name = "aura.fa_reduce_hadamard";
  TK_DECLARE_SPEC(TK_FA_REDUCE_HADAMARD_SPEC)
  TK_DECLARE_PUSH(TK_FA_REDUCE_HADAMARD_PUSH)

  struct Args {
    TensorRef o_partials, m_partials, l_partials, signs, output;
  };
  struct Problem {
    std::int64_t rows = 0, nwg = 0;
  };

  // Workgroup shape for one dispatch.
  struct Geometry {
    std::uint32_t groups = 1;              // lane groups per row
    std::uint32_t blocks_per_group = 1;    // partials each invocation loads (a power of two)
    std::uint32_t rows_per_workgroup = 1;
    std::uint32_t invocations() const { return rows_per_workgroup * groups * Config::chunks; }
  };

  // The automatic geometry of a call with `nwg` partials per row and
  // `rows` rows (0: many): one lane group per row for up to 256 rows (one
  // group of nwg-deep loads is the fastest there), else about nwg / 8,
  // within the workgroup limit; enough rows per workgroup for 64
  // invocations.
  static Geometry geometry(const DeviceInfo& info, std::uint32_t nwg, std::uint64_t rows = 0) {
    const std::uint32_t max_invocations = std::min(Config::max_invocations, info.max_workgroup_invocations);
    Geometry g;
    g.groups = rows != 0 && rows <= 256 ? 1 : std::bit_ceil((nwg + 7) / 8);
    while (g.groups > 1 && g.groups * Config::chunks > max_invocations) g.groups /= 2;
    g.blocks_per_group = std::bit_ceil((nwg + g.groups - 1) / g.groups);
    g.rows_per_workgroup = std::max<std::uint32_t>(1, 64 / (g.groups * Config::chunks));
    return g;
  }

  static constexpr std::array<Variant<Problem>, 2> variants{{
      {"subgroup", Path::subgroup, spirv::aura_fa_reduce_hadamard_subgroup,
       {.subgroup_shuffle = true, .subgroup_arithmetic = true}, Config::chunks, Config::shared_bytes(1, 1, 1),
       [](const DeviceInfo& info, const Problem& p) {
         // The shuffles number invocations by subgroup: a permutation of the
         // workgroup only where it is whole subgroups of the reported size.
         const auto g = geometry(info, static_cast<std::uint32_t>(p.nwg), static_cast<std::uint64_t>(p.rows));
         return info.whole_subgroups(g.invocations())
                    ? Status::success()
                    : Status::failure(ErrorCode::unsupported, "the device's subgroups do not tile the workgroup");
       }},
      {"portable", Path::portable, spirv::aura_fa_reduce_hadamard, {}, Config::chunks, Config::shared_bytes(1, 1, 1)},
  }};

  // What record() runs; benchmarks may change the geometry (and build its
  // pipeline with prepare()).
  struct Plan {
    const Variant<Problem>* variant = nullptr;
    Geometry geometry;
  };

  explicit FaReduceHadamard(Context& ctx, FaReduceHadamardEnvelope envelope = {}) : Base(ctx, envelope) {
    for (std::int64_t nwg = 1; nwg <= static_cast<std::int64_t>(Config::max_nwg); ++nwg)
      for (const std::int64_t rows : {1, 257}) prepare(plan(Problem{rows, nwg}, 0));
  }

  Problem problem(const Args& a) const { return {a.o_partials.shape.at(0), a.o_partials.shape.at(1)}; }

  void check(const Problem& p) const {
    if (p.rows <= 0 || p.nwg <= 0 || p.nwg > static_cast<std::int64_t>(Config::max_nwg))
      throw Error(ErrorCode::invalid_argument, detail::where(name, "o_partials") + "rows must be > 0 and nwg (dimension 1) in [1, " +
                                                   std::to_string(Config::max_nwg) + "], got " + std::to_string(p.rows) +
                                                   " and " + std::to_string(p.nwg));
    if (static_cast<std::uint64_t>(p.rows) * static_cast<std::uint64_t>(p.nwg) * Config::chunks >= (1ull << 32))
      throw Error(ErrorCode::unsupported, std::string(name) + ": o_partials has too many elements for 32-bit indexing");
    select_variant(*ctx_, name, variants, p);
  }

  // Throws tilekernels::Error naming the first argument that is wrong.
  void check(const Args& a) const {
    detail::expect_rank(name, "o_partials", a.o_partials, 3);
    const auto rows = a.o_partials.shape[0], nwg = a.o_partials.shape[1];
    if (nwg > static_cast<std::int64_t>(Config::max_nwg))
      throw Error(ErrorCode::invalid_argument, detail::where(name, "o_partials") + "nwg (dimension 1) must be in [1, " +
                                                   std::to_string(Config::max_nwg) + "], got " + std::to_string(nwg));
    detail::expect_tensor(*ctx_, name, "o_partials", a.o_partials, Config::partial_dtype, {rows, nwg, Config::head_dim});
    detail::expect_tensor(*ctx_, name, "m_partials", a.m_partials, Config::partial_dtype, {rows, nwg});
    detail::expect_tensor(*ctx_, name, "l_partials", a.l_partials, Config::partial_dtype, {rows, nwg});
    detail::expect_tensor(*ctx_, name, "signs", a.signs, DType::f32, {Config::head_dim});
    detail::expect_tensor(*ctx_, name, "output", a.output, Config::out_dtype, {rows, Config::head_dim});
    check(problem(a));
  }

  // Throws unless `plan` can run `a` (a geometry changed by hand included).
  void check(const Args& a, const Plan& plan) const {
    check(a);
    const Geometry& g = plan.geometry;
    const auto& info = ctx_->info();
    const std::uint32_t nwg = static_cast<std::uint32_t>(a.o_partials.shape[1]);
    const std::uint32_t max_invocations = std::min(Config::max_invocations, info.max_workgroup_invocations);
    const std::uint32_t shared_limit = std::min<std::uint32_t>(32768, info.max_shared_memory);
    const std::uint32_t shared = Config::shared_bytes(g.rows_per_workgroup, g.groups, g.blocks_per_group);
    if (!plan.variant || g.groups == 0 || g.rows_per_workgroup == 0 || g.groups * g.blocks_per_group < nwg ||
        !std::has_single_bit(g.blocks_per_group) || g.invocations() > max_invocations || shared > shared_limit)
      throw Error(ErrorCode::invalid_argument,
                  std::string(name) + ": geometry of " + std::to_string(g.rows_per_workgroup) + " rows of " +
                      std::to_string(g.groups) + " lane groups x " + std::to_string(g.blocks_per_group) + " blocks: " +
                      std::to_string(g.invocations()) + " invocations and " + std::to_string(shared) +
                      " bytes of shared memory (limits " + std::to_string(max_invocations) + " and " +
                      std::to_string(shared_limit) + "), for " + std::to_string(nwg) + " partials per row");
    if (plan.variant->path == Path::subgroup && !info.whole_subgroups(g.invocations()))
      throw Error(ErrorCode::invalid_argument, std::string(name) + ": geometry: the subgroup variant needs a workgroup "
                                                                   "of whole subgroups");
  }

  static constexpr std::uint64_t workspace_bytes(const Problem&) { return 0; }

  Plan plan(const Problem& p, std::uint64_t) const {
    check(p);
    return {&select_variant(*ctx_, name, variants, p),
            geometry(ctx_->info(), static_cast<std::uint32_t>(p.nwg), static_cast<std::uint64_t>(p.rows))};
  }

  void record(vk::CommandBuffer cmd, const Args& a) const { record(cmd, a, plan(problem(a), 0)); }

  void record(vk::CommandBuffer cmd, const Args& a, const Plan& plan) const {
    check(a, plan);
    const auto rows = static_cast<std::uint32_t>(a.o_partials.shape[0]);
    const Geometry& g = plan.geometry;
    Push push;
    push.rows = rows;
    push.nwg = static_cast<std::uint32_t>(a.o_partials.shape[1]);
    push.inv_sqrt_dim = inv_sqrt_head_dim();
    detail::record_dispatch(*ctx_, cmd, pipelines_.get(name, key(*plan.variant, g)),
                            {a.o_partials, a.m_partials, a.l_partials, a.signs, a.output}, push,
                            (static_cast<std::uint64_t>(rows) + g.rows_per_workgroup - 1) / g.rows_per_workgroup);
  }

  // Builds the pipeline of a plan whose geometry was changed by hand. Not
  // thread-safe: call it before recording from several threads.
  void prepare(const Plan& plan) { pipelines_.add(*ctx_, key(*plan.variant, plan.geometry)); }

  // Records into a fresh command buffer, submits and waits.
  void run(const Args& a) const {
    check(a);
    ctx_->submit_and_wait([&](vk::CommandBuffer cmd) { record(cmd, a); });
  }

  // 1/sqrt(HeadDim) rounded once to float (exact for 64 and 256).
  static float inv_sqrt_head_dim() { return static_cast<float>(1.0 / std::sqrt(static_cast<double>(Config::head_dim))); }

 private:
  PipelineKey key(const Variant<Problem>& v, const Geometry& g) const {
    Spec spec;
    spec.workgroup = g.invocations();
    spec.DIM = Config::head_dim;
    spec.LOG_DIM = Config::log2_head_dim;
    spec.GROUPS = g.groups;
    spec.BPG = g.blocks_per_group;
    spec.ROWS = g.rows_per_workgroup;
    spec.PARTIAL_DTYPE = static_cast<std::uint32_t>(Config::partial_dtype);
    spec.OUT_DTYPE = static_cast<std::uint32_t>(Config::out_dtype);
    return detail::pipeline_key<Push>(*ctx_, v, spec, 5);
  }
};

static_assert(Kernel<FaReduceHadamard<FaReduceHadamardConfig<128>>>,
              "aura.fa_reduce_hadamard must have the kernel interface (core/kernel.hpp)");

}  // namespace tilekernels::aura
