// SPDX-License-Identifier: MIT
// Gated DeltaNet: the index table of a variable-length call
// (gdn/chunking.hpp), built on the device from cu_seqlens
// (shaders/gdn/chunk_index.comp), so that the stages never need the host
// to know the lengths and a recorded command buffer serves any. The
// chunked forward records it itself; a caller running the stages alone
// records it first, then a compute barrier.
//
//   cu_seqlens  [N + 1]                       i32, read clamped into [0, T], non-decreasing
//   index       [(N + chunks) * 4]            u32 (Chunking::index_bytes() / 4)
// with chunks = Chunking(1, T, N, BT).chunks(). One dispatch of one
// workgroup.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "tilekernels/core.hpp"
#include "tilekernels/gdn/chunk_index_abi.h"
#include "tilekernels/gdn/chunking.hpp"
#include "tilekernels/spirv/gdn/chunk_index.hpp"

namespace tilekernels::gdn {

// The one pipeline does not depend on the shape: every call is inside.
struct ChunkIndexEnvelope {};

template <std::uint32_t ChunkTokens>
class ChunkIndex : public KernelBase<ChunkIndex<ChunkTokens>, ChunkIndexEnvelope> {
  static_assert(ChunkTokens == 16 || ChunkTokens == 32 || ChunkTokens == 64,
                "ChunkIndex: BT must be 16, 32 or 64 (FLA's chunk sizes)");
  using Base = KernelBase<ChunkIndex<ChunkTokens>, ChunkIndexEnvelope>;
  using Base::ctx_;
  using Base::pipelines_;

 public:
  using Base::plan;
  static constexpr const char* name = "gdn.chunk_index";
  TK_DECLARE_SPEC(TK_CHUNK_INDEX_SPEC)
  TK_DECLARE_PUSH(TK_CHUNK_INDEX_PUSH)

  struct Args {
    TensorRef cu_seqlens, index;
    std::int64_t T = 0;  // tokens of the call's one row
  };
  struct Problem {
    std::int64_t T = 0, N = 0;
  };
  struct Plan {
    const Variant<Problem>* variant = nullptr;
  };
  static constexpr std::array<Variant<Problem>, 1> variants{{
      {"portable", Path::portable, spirv::gdn_chunk_index, {}, 256, 256 * 4 + 8},
  }};

  explicit ChunkIndex(Context& ctx, ChunkIndexEnvelope envelope = {}) : Base(ctx, envelope) {
    pipelines_.add(ctx, key(select_variant(ctx, name, variants, Problem{1, 1})));
  }

  Problem problem(const Args& a) const { return {a.T, a.cu_seqlens.shape.at(0) - 1}; }
  static Chunking chunking(const Problem& p) { return Chunking(1, p.T, p.N, ChunkTokens); }

  void check(const Problem& p) const {
    if (p.T < 0 || p.N < 1 || p.T >= (std::int64_t(1) << 31) || p.N >= (std::int64_t(1) << 31))
      throw Error(ErrorCode::invalid_argument, std::string(name) + ": T must be in [0, 2^31) and N in [1, 2^31), got " +
                                                   std::to_string(p.T) + " and " + std::to_string(p.N));
    select_variant(*ctx_, name, variants, p);
  }

  void check(const Args& a) const {
    detail::expect_rank(name, "cu_seqlens", a.cu_seqlens, 1);
    if (a.cu_seqlens.shape[0] < 2)
      throw Error(ErrorCode::shape_mismatch, detail::where(name, "cu_seqlens") + "needs at least 2 offsets, got shape " +
                                                 shape_string(a.cu_seqlens.shape));
    detail::expect_tensor(*ctx_, name, "cu_seqlens", a.cu_seqlens, DType::i32, a.cu_seqlens.shape);
    const Problem p = problem(a);
    check(p);
    const Chunking ch = chunking(p);
    detail::expect_tensor(*ctx_, name, "index", a.index, DType::u32, {static_cast<std::int64_t>(ch.index_bytes() / 4)});
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
    Push push;
    push.T = static_cast<std::uint32_t>(p.T);
    push.N = static_cast<std::uint32_t>(p.N);
    push.chunks = static_cast<std::uint32_t>(chunking(p).chunks());
    detail::record_dispatch(*ctx_, cmd, pipelines_.get(name, key(*plan.variant)), {a.cu_seqlens, a.index}, push, 1);
  }

  void run(const Args& a) const {
    check(a);
    ctx_->submit_and_wait([&](vk::CommandBuffer cmd) { record(cmd, a); });
  }

 private:
  PipelineKey key(const Variant<Problem>& v) const {
    Spec spec;
    spec.workgroup = 256;
    spec.BT = ChunkTokens;
    return detail::pipeline_key<Push>(*ctx_, v, spec, 2);
  }
};

static_assert(Kernel<ChunkIndex<64>>, "gdn.chunk_index must have the kernel interface (core/kernel.hpp)");

}  // namespace tilekernels::gdn
