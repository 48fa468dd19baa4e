// SPDX-License-Identifier: MIT
// Gated DeltaNet q/k L2 normalisation (FLA's l2norm_fwd, used with
// use_qk_l2norm_in_kernel): every row of K values of q and of k becomes
// x / sqrt(sum x^2 + 1e-6), computed in f32 and stored in bf16 (nearest
// even), the dtype the later stages of the chunked forward read. With
// normalise false the rows are copied as they are (the chunked forward's
// dense copy of q and k views that its later stages cannot bind).
//
// Layout: q, k, q_out, k_out [B, T, Hg, K] bf16. q and k are views: any
// token and head strides (B and T one token axis), any offset that is a
// multiple of the element size; q_out and k_out are dense. One dispatch
// for both tensors; portable (no subgroup operation, 1 KiB of shared
// memory).
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "tilekernels/core.hpp"
#include "tilekernels/gdn/l2norm_abi.h"
#include "tilekernels/spirv/gdn/l2norm.hpp"

namespace tilekernels::gdn {

// The one pipeline does not depend on the shape: every call is inside.
struct L2NormEnvelope {};

template <std::uint32_t K>
class L2Norm : public KernelBase<L2Norm<K>, L2NormEnvelope> {
  static_assert(K == 64 || K == 128 || K == 256, "L2Norm: K must be 64, 128 or 256 (whole 16-byte pieces per lane)");
  using Base = KernelBase<L2Norm<K>, L2NormEnvelope>;
  using Base::ctx_;
  using Base::pipelines_;

 public:
  using Base::plan;
  static constexpr const char* name = "gdn.l2norm";
  TK_DECLARE_SPEC(TK_L2NORM_SPEC)
  TK_DECLARE_PUSH(TK_L2NORM_PUSH)

  struct Args {
    TensorRef q, k, q_out, k_out;
    bool normalise = true;  // false: copy the rows
  };
  struct Problem {
    std::int64_t rows = 0;  // B T Hg
  };
  struct Plan {
    const Variant<Problem>* variant = nullptr;
  };
  static constexpr std::array<Variant<Problem>, 1> variants{{
      {"portable", Path::portable, spirv::gdn_l2norm, {}, 256, 1024},
  }};

  explicit L2Norm(Context& ctx, L2NormEnvelope envelope = {}) : Base(ctx, envelope) {
    pipelines_.add(ctx, key(select_variant(ctx, name, variants, Problem{1})));
  }

  Problem problem(const Args& a) const { return {element_count(a.q.shape) / K}; }

  void check(const Problem& p) const {
    if (p.rows <= 0 || p.rows * K >= (std::int64_t(1) << 32))
      throw Error(ErrorCode::invalid_argument, std::string(name) + ": rows must be in [1, 2^32 / K)");
    select_variant(*ctx_, name, variants, p);
  }

  void check(const Args& a) const {
    detail::expect_rank(name, "q", a.q, 4);
    const Shape s = a.q.shape;
    if (s[3] != K)
      throw Error(ErrorCode::shape_mismatch, detail::where(name, "q") + "expected K = " + std::to_string(K) +
                                                 " in shape [B, T, Hg, K], got " + shape_string(s));
    views(a);
    detail::expect_tensor(*ctx_, name, "q_out", a.q_out, DType::bf16, s);
    detail::expect_tensor(*ctx_, name, "k_out", a.k_out, DType::bf16, s);
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
    Push push;
    push.rows = static_cast<std::uint32_t>(problem(a).rows);
    push.Hg = static_cast<std::uint32_t>(a.q.shape[2]);
    push.normalise = a.normalise ? 1u : 0u;
    const auto v = views(a);
    push.q_at = v[0].at, push.q_token = v[0].token, push.q_head = v[0].head;
    push.k_at = v[1].at, push.k_token = v[1].token, push.k_head = v[1].head;
    detail::record_dispatch(*ctx_, cmd, pipelines_.get(name, key(*plan.variant)), {a.q, a.k, a.q_out, a.k_out}, push,
                            (push.rows + 31) / 32, 2);
  }

  void run(const Args& a) const {
    check(a);
    ctx_->submit_and_wait([&](vk::CommandBuffer cmd) { record(cmd, a); });
  }

 private:
  // The views q and k (checked) and where they are.
  std::array<detail::ViewLayout, 2> views(const Args& a) const {
    return {detail::expect_view(*ctx_, name, "q", a.q, DType::bf16, a.q.shape, 2),
            detail::expect_view(*ctx_, name, "k", a.k, DType::bf16, a.q.shape, 2)};
  }

  PipelineKey key(const Variant<Problem>& v) const {
    Spec spec;
    spec.workgroup = 256;
    spec.KDIM = K;
    return detail::pipeline_key<Push>(*ctx_, v, spec, 4);
  }
};

static_assert(Kernel<L2Norm<128>>, "gdn.l2norm must have the kernel interface (core/kernel.hpp)");

}  // namespace tilekernels::gdn
