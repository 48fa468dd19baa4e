// Gated DeltaNet q/k L2 normalisation (FLA's l2norm_fwd, used with
// use_qk_l2norm_in_kernel): every row of K values of q and of k becomes
// x / sqrt(sum x^2 + 1e-6), computed in f32 and stored in bf16 (nearest
// even), the dtype the later stages of the chunked forward read.
//
// Layout: q, k, q_out, k_out [B, T, Hg, K] bf16. One dispatch for both
// tensors; portable (no subgroup operation, 1 KiB of shared memory).
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "tilekernels/core.hpp"
#include "tilekernels/gdn/l2norm_abi.h"
#include "tilekernels/spirv/gdn/l2norm.hpp"

namespace tilekernels::gdn {

template <std::uint32_t K>
class L2Norm {
  static_assert(K == 64 || K == 128 || K == 256, "L2Norm: K must be 64, 128 or 256 (whole 16-byte pieces per lane)");

 public:
  static constexpr const char* name = "gdn.l2norm";
  TK_DECLARE_SPEC(TK_L2NORM_SPEC)
  TK_DECLARE_PUSH(TK_L2NORM_PUSH)

  struct Args {
    TensorRef q, k, q_out, k_out;
  };
  struct Problem {
    std::int64_t rows = 0;
  };
  static constexpr std::array<Variant<Problem>, 1> variants{{
      {"portable", Path::portable, spirv::gdn_l2norm, {}, 256, 1024},
  }};

  explicit L2Norm(Context& ctx) : ctx_(&ctx) {}

  void check(const Args& a) const {
    detail::expect_rank(name, "q", a.q, 4);
    const Shape s = a.q.shape;
    if (s[3] != K)
      throw Error(ErrorCode::shape_mismatch, detail::where(name, "q") + "expected K = " + std::to_string(K) +
                                                 " in shape [B, T, Hg, K], got " + shape_string(s));
    detail::expect_tensor(*ctx_, name, "q", a.q, DType::bf16, s);
    detail::expect_tensor(*ctx_, name, "k", a.k, DType::bf16, s);
    detail::expect_tensor(*ctx_, name, "q_out", a.q_out, DType::bf16, s);
    detail::expect_tensor(*ctx_, name, "k_out", a.k_out, DType::bf16, s);
    if (a.q.elements() >= (std::int64_t(1) << 32))
      throw Error(ErrorCode::unsupported, std::string(name) + ": too many elements for 32-bit indexing");
  }

  Status can_implement(const Args& a) const {
    return detail::status_of([&] { check(a); });
  }

  void record(vk::CommandBuffer cmd, const Args& a) const {
    check(a);
    const auto& v = select_variant(*ctx_, name, variants, Problem{a.q.elements() / K});
    Spec spec;
    spec.workgroup = 256;
    spec.KDIM = K;
    Push push;
    push.rows = static_cast<std::uint32_t>(a.q.elements() / K);
    detail::record_dispatch(*ctx_, cmd, detail::pipeline_for<Push>(*ctx_, v, spec, 4), {a.q, a.k, a.q_out, a.k_out},
                            push, (push.rows + 31) / 32, 2);
  }

 private:
  Context* ctx_;
};

}  // namespace tilekernels::gdn
