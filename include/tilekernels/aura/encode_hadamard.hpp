// SPDX-License-Identifier: MIT
// aura::HadamardEncode: the fused encode of encode.hpp with a randomised
// Hadamard rotation applied in O(Dim log Dim) (Dim a power of two); the
// rotation is given by its signs (rotation.hpp's hadamard_signs) and the
// codes equal Encode's with hadamard_matrix(signs) up to values within f32
// rounding of a boundary. One kernel (shaders/aura/encode_hadamard.comp):
// the transform in registers, Dim / 32 invocations per row, a cell-table
// quantiser for Bits <= 4; its variants exchange values between the
// invocations of a row through subgroup shuffles (`subgroup`: where the
// device's subgroups are as reported and a workgroup is whole subgroups)
// or shared memory (`portable`).
#pragma once

#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <string>

#include "tilekernels/aura/encode.hpp"
#include "tilekernels/aura/encode_hadamard_abi.h"
#include "tilekernels/spirv/aura/encode_hadamard.hpp"
#include "tilekernels/spirv/aura/encode_hadamard_subgroup.hpp"

namespace tilekernels::aura {

// The pipelines depend on the shape only through the blocks per
// workgroup (1, 2 or 4): every call is inside.
struct HadamardEncodeEnvelope {};

template <class Config>
class HadamardEncode : public KernelBase<HadamardEncode<Config>, HadamardEncodeEnvelope> {
  static_assert(std::has_single_bit(Config::dim), "HadamardEncode: Dim must be a power of two (Sylvester Hadamard matrix)");
  static_assert(Config::hi_dims == 0,
                "HadamardEncode: split codes are encoded by Encode (pass the Hadamard matrix as its rotation)");
  using Base = KernelBase<HadamardEncode<Config>, HadamardEncodeEnvelope>;
  using Base::ctx_;
  using Base::pipelines_;

 public:
  using Base::plan;
  static constexpr const char* name = "aura.encode_hadamard";
  TK_DECLARE_SPEC(TK_ENCODE_HADAMARD_SPEC)
  TK_DECLARE_PUSH(TK_ENCODE_HADAMARD_PUSH)

  struct Args {
    TensorRef input, signs, boundaries, codebook, packed, norms;
  };
  struct Problem {
    std::int64_t rows = 0;
  };

  // The workgroup shape of a call.
  struct Geometry {
    std::uint32_t values = Config::hadamard_values;  // per invocation: 8, 16, 32 or 64, at most Dim
    std::uint32_t invocations = 0;                    // per workgroup, a multiple of Dim / values
    std::uint32_t blocks = 1;                         // blocks of rows per workgroup (next block's loads in flight)
    std::uint32_t rows() const { return invocations / (Config::dim / values); }
  };

  // The automatic geometry: 32 values per invocation, 256 invocations, and
  // 4 (else 2) blocks per workgroup where that still leaves 1024 or more
  // workgroups (more blocks per workgroup starve the device of workgroups).
  static Geometry geometry(std::int64_t rows) {
    Geometry g;
    g.invocations = std::max<std::uint32_t>(256, Config::dim / g.values);
    const std::int64_t row_groups = (rows + g.rows() - 1) / g.rows();
    g.blocks = row_groups >= 4096 ? 4 : row_groups >= 2048 ? 2 : 1;
    return g;
  }

  static constexpr std::uint32_t default_invocations = std::max<std::uint32_t>(256, Config::dim / Config::hadamard_values);
  static constexpr std::uint32_t default_shared_bytes =
      Config::hadamard_sg_shared_bytes(Config::hadamard_values, default_invocations / (Config::dim / Config::hadamard_values));

  static constexpr std::array<Variant<Problem>, 2> variants{{
      {"subgroup", Path::subgroup, spirv::aura_encode_hadamard_subgroup, {.subgroup_shuffle = true},
       default_invocations, default_shared_bytes,
       [](const DeviceInfo& info, const Problem&) {
         // The shuffles number invocations by subgroup: a permutation of the
         // workgroup only where it is whole subgroups of the reported size.
         return info.whole_subgroups(default_invocations)
                    ? Status::success()
                    : Status::failure(ErrorCode::unsupported, "the device's subgroups do not tile the workgroup");
       }},
      {"portable", Path::portable, spirv::aura_encode_hadamard, {}, default_invocations, default_shared_bytes},
  }};

  // What record() runs; benchmarks may change the geometry (and build its
  // pipeline with prepare()).
  struct Plan {
    const Variant<Problem>* variant = nullptr;
    Geometry geometry;
  };

  explicit HadamardEncode(Context& ctx, HadamardEncodeEnvelope envelope = {}) : Base(ctx, envelope) {
    const Variant<Problem>& v = select_variant(ctx, name, variants, Problem{1});
    for (const std::uint32_t blocks : {1u, 2u, 4u}) {
      Geometry g = geometry(1);
      g.blocks = blocks;
      prepare(Plan{&v, g});
    }
  }

  Problem problem(const Args& a) const { return {a.input.shape.at(0)}; }

  void check(const Problem& p) const {
    if (p.rows <= 0) throw Error(ErrorCode::invalid_argument, std::string(name) + ": rows must be > 0");
    if (static_cast<std::uint64_t>(p.rows) * Config::dim >= (1ull << 32))
      throw Error(ErrorCode::unsupported, std::string(name) + ": input has too many elements for 32-bit indexing");
    select_variant(*ctx_, name, variants, p);
  }

  void check(const Args& a) const {
    detail::expect_encode_tensors<Config>(*ctx_, name, a.input, a.boundaries, a.codebook, a.packed, a.norms);
    detail::expect_tensor(*ctx_, name, "signs", a.signs, DType::f32, {Config::dim});
    check(problem(a));
  }

  // Throws unless `plan` can run `a` (a geometry changed by hand included).
  void check(const Args& a, const Plan& plan) const {
    check(a);
    const Geometry& g = plan.geometry;
    const auto bad = [&](const std::string& why) {
      throw Error(ErrorCode::invalid_argument, std::string(name) + ": geometry: " + why);
    };
    if (!plan.variant) bad("the plan has no variant");
    if (g.values < 8 || g.values > 64 || g.values > Config::dim || !std::has_single_bit(g.values))
      bad("values must be 8, 16, 32 or 64 and at most Dim, got " + std::to_string(g.values));
    const std::uint32_t per_row = Config::dim / g.values;
    if (g.invocations == 0 || g.invocations % per_row != 0 || g.invocations > 1024)
      bad("invocations must be a multiple of Dim / values (" + std::to_string(per_row) + ") and at most 1024, got " +
          std::to_string(g.invocations));
    if (g.blocks == 0 || g.blocks > 64) bad("blocks must be in [1, 64], got " + std::to_string(g.blocks));
    const auto& info = ctx_->info();
    if (g.invocations > info.max_workgroup_invocations ||
        Config::hadamard_sg_shared_bytes(g.values, g.rows()) > info.max_shared_memory)
      bad("the workgroup exceeds the device's limits");
    if (plan.variant->path == Path::subgroup && !info.whole_subgroups(g.invocations))
      bad("the subgroup variant needs a workgroup of whole subgroups");
  }

  static constexpr std::uint64_t workspace_bytes(const Problem&) { return 0; }

  Plan plan(const Problem& p, std::uint64_t) const {
    check(p);
    return {&select_variant(*ctx_, name, variants, p), geometry(p.rows)};
  }

  void record(vk::CommandBuffer cmd, const Args& a) const { record(cmd, a, plan(problem(a), 0)); }

  void record(vk::CommandBuffer cmd, const Args& a, const Plan& plan) const {
    check(a, plan);
    const auto rows = a.input.shape[0];
    const Geometry& g = plan.geometry;
    Push push;
    push.rows = static_cast<std::uint32_t>(rows);
    const std::uint64_t per_group = static_cast<std::uint64_t>(g.rows()) * g.blocks;
    detail::record_dispatch(*ctx_, cmd, pipelines_.get(name, key(*plan.variant, g)),
                            {a.input, a.signs, a.boundaries, a.codebook, a.packed, a.norms}, push,
                            (static_cast<std::uint64_t>(rows) + per_group - 1) / per_group);
  }

  // Builds the pipeline of a plan whose geometry was changed by hand. Not
  // thread-safe: call it before recording from several threads.
  void prepare(const Plan& plan) { pipelines_.add(*ctx_, key(*plan.variant, plan.geometry)); }

  // Records into a fresh command buffer, submits and waits.
  void run(const Args& a) const {
    check(a);
    ctx_->submit_and_wait([&](vk::CommandBuffer cmd) { record(cmd, a); });
  }

 private:
  PipelineKey key(const Variant<Problem>& v, const Geometry& g) const {
    Spec spec;
    spec.workgroup = g.invocations;
    spec.DIM = Config::dim;
    spec.BITS = Config::bits;
    spec.IN_DTYPE = static_cast<std::uint32_t>(Config::in_dtype);
    spec.ROWS = g.rows();
    spec.INV_SQRT_DIM_BITS = std::bit_cast<std::uint32_t>(static_cast<float>(1.0 / std::sqrt(double(Config::dim))));
    spec.V = g.values;
    spec.ITER = g.blocks;
    return detail::pipeline_key<Push>(*ctx_, v, spec, 6);
  }
};

static_assert(Kernel<HadamardEncode<EncodeConfig<128, 4>>>,
              "aura.encode_hadamard must have the kernel interface (core/kernel.hpp)");

}  // namespace tilekernels::aura
