// SPDX-License-Identifier: MIT
// AURA decode: packed codes + norms back to vectors,
//   output[r, j] = norms[r] * sum_d R[d, j] * codebook[code(r, d)]
// (the transpose of the encode rotation; for a Hadamard encode pass
// hadamard_matrix(signs)). Math in f32, output narrowed once at the end.
//
// Layout (row-major):
//   packed   [rows, Dim*Bits/32]  u32 (code of d at bit offset d*Bits)
//   norms    [rows]               f32 (encode's norm-correction factors)
//   rotation [Dim, Dim]           f32
//   codebook [2^Bits]             f32
//   output   [rows, Dim]          Out (f32, f16 or bf16)
// A zero norm decodes to zeros; NaN/Inf norms propagate to their row.
// Split codes (DecodeConfig's HiDims > 0, the paged cache's split keys):
// the first HiDims coordinates take Bits + 1 bits and the codebook
// hi_codebook [2^(Bits+1)]; their codes fill a row's first
// HiDims * (Bits + 1) / 32 words, the rest's follow.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <optional>

#include "tilekernels/aura/decode_abi.h"
#include "tilekernels/core.hpp"
#include "tilekernels/spirv/aura/decode.hpp"

namespace tilekernels::aura {

template <std::uint32_t Dim, std::uint32_t Bits, DType Out = DType::f32, std::uint32_t HiDims = 0>
struct DecodeConfig {
  static_assert(Dim % 32 == 0, "DecodeConfig: Dim must be a multiple of 32 (whole packed words per row)");
  static_assert(Dim >= 32 && Dim <= 512, "DecodeConfig: Dim must be in [32, 512] (shared memory is sized from Dim)");
  static_assert(Bits == 2 || Bits == 3 || Bits == 4 || Bits == 6 || Bits == 8,
                "DecodeConfig: Bits must be 2, 3, 4, 6 or 8");
  static_assert(Out == DType::f32 || Out == DType::f16 || Out == DType::bf16,
                "DecodeConfig: Out must be DType::f32, DType::f16 or DType::bf16");

  static_assert(HiDims == 0 || ((Bits == 2 || Bits == 3) && HiDims % 32 == 0 && HiDims < Dim),
                "DecodeConfig: split codes (HiDims > 0) need Bits 2 or 3 and HiDims a multiple of 32 below Dim");

  static constexpr std::uint32_t dim = Dim;
  static constexpr std::uint32_t bits = Bits;
  static constexpr DType out_dtype = Out;
  static constexpr std::uint32_t levels = 1u << Bits;
  static constexpr std::uint32_t hi_dims = HiDims;
  static constexpr std::uint32_t hi_levels = HiDims ? 2u << Bits : 0;  // the codebook above the split
  static constexpr std::uint32_t packed_words = (HiDims * (Bits + 1) + (Dim - HiDims) * Bits) / 32;
  // DIM/4 lanes times row_groups invocations, 4 rows per row group.
  static constexpr std::uint32_t lanes = Dim / 4;
  static constexpr std::uint32_t row_groups = std::min<std::uint32_t>(std::max<std::uint32_t>(1, 256 / lanes), 32);
  static constexpr std::uint32_t invocations = lanes * row_groups;
  static constexpr std::uint32_t rows_per_group = 4 * row_groups;
  static constexpr std::uint32_t shared_bytes = 4 * (rows_per_group * Dim + levels + std::max(hi_levels, 1u));
  static_assert(shared_bytes <= 32768, "DecodeConfig: must fit the portable 32 KiB of shared memory");
};

// The one pipeline does not depend on the shape: every call is inside.
struct DecodeEnvelope {};

template <class Config>
class Decode : public KernelBase<Decode<Config>, DecodeEnvelope> {
  using Base = KernelBase<Decode<Config>, DecodeEnvelope>;
  using Base::ctx_;
  using Base::pipelines_;

 public:
  using Base::plan;
  static constexpr const char* name = "aura.decode";
  TK_DECLARE_SPEC(TK_DECODE_SPEC)
  TK_DECLARE_PUSH(TK_DECODE_PUSH)

  struct Args {
    TensorRef packed, norms, rotation, codebook, output;
    std::optional<TensorRef> hi_codebook = {};  // split codes only: [2^(Bits+1)] f32
  };
  struct Problem {
    std::int64_t rows = 0;
  };
  static constexpr std::array<Variant<Problem>, 1> variants{{
      {"portable", Path::portable, spirv::aura_decode, {}, Config::invocations, Config::shared_bytes},
  }};
  struct Plan {
    const Variant<Problem>* variant = nullptr;
  };

  explicit Decode(Context& ctx, DecodeEnvelope envelope = {}) : Base(ctx, envelope) {
    pipelines_.add(ctx, key(select_variant(ctx, name, variants, Problem{1})));
  }

  Problem problem(const Args& a) const { return {a.packed.shape.at(0)}; }

  void check(const Problem& p) const {
    if (p.rows <= 0) throw Error(ErrorCode::invalid_argument, std::string(name) + ": rows must be > 0");
    if (static_cast<std::uint64_t>(p.rows) * Config::dim >= (1ull << 32))
      throw Error(ErrorCode::unsupported, std::string(name) + ": output has too many elements for 32-bit indexing");
    select_variant(*ctx_, name, variants, p);
  }

  void check(const Args& a) const {
    detail::expect_rank(name, "packed", a.packed, 2);
    const auto rows = a.packed.shape[0];
    detail::expect_tensor(*ctx_, name, "packed", a.packed, DType::u32, {rows, Config::packed_words});
    detail::expect_tensor(*ctx_, name, "norms", a.norms, DType::f32, {rows});
    detail::expect_tensor(*ctx_, name, "rotation", a.rotation, DType::f32, {Config::dim, Config::dim});
    detail::expect_tensor(*ctx_, name, "codebook", a.codebook, DType::f32, {Config::levels});
    detail::expect_tensor(*ctx_, name, "output", a.output, Config::out_dtype, {rows, Config::dim});
    detail::expect_optional_table(*ctx_, name, "hi_codebook", a.hi_codebook, Config::hi_levels, "split codes");
    check(problem(a));
  }

  static constexpr std::uint64_t workspace_bytes(const Problem&) { return 0; }

  Plan plan(const Problem& p, std::uint64_t) const {
    check(p);
    return {&select_variant(*ctx_, name, variants, p)};
  }

  void record(vk::CommandBuffer cmd, const Args& a) const { record(cmd, a, plan(problem(a), 0)); }

  void record(vk::CommandBuffer cmd, const Args& a, const Plan& plan) const {
    check(a);
    const auto rows = a.packed.shape[0];
    Push push;
    push.rows = static_cast<std::uint32_t>(rows);
    detail::record_dispatch(*ctx_, cmd, pipelines_.get(name, key(*plan.variant)),
                            {a.packed, a.norms, a.rotation, a.codebook, a.output, a.hi_codebook.value_or(a.codebook)},
                            push,
                            static_cast<std::uint64_t>((rows + Config::rows_per_group - 1) / Config::rows_per_group));
  }

  // Records into a fresh command buffer, submits and waits.
  void run(const Args& a) const {
    check(a);
    ctx_->submit_and_wait([&](vk::CommandBuffer cmd) { record(cmd, a); });
  }

 private:
  PipelineKey key(const Variant<Problem>& v) const {
    Spec spec;
    spec.workgroup = Config::invocations;
    spec.DIM = Config::dim;
    spec.BITS = Config::bits;
    spec.OUT_DTYPE = static_cast<std::uint32_t>(Config::out_dtype);
    spec.ROW_GROUPS = Config::row_groups;
    spec.HI_DIMS = Config::hi_dims;
    return detail::pipeline_key<Push>(*ctx_, v, spec, 6);
  }
};

static_assert(Kernel<Decode<DecodeConfig<128, 4>>>, "aura.decode must have the kernel interface (core/kernel.hpp)");

}  // namespace tilekernels::aura
