// cu_seqlens for the tk-run ops of the Gated DeltaNet stages: the host copy
// from the optional input, and a run that records the stage's index table
// (gdn/chunking.hpp) ahead of the kernel in one submission.
#pragma once

#include <tilekernels/gdn/chunking.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "op.hpp"

namespace tkrun {

// The offsets of input 'cu_seqlens' [N + 1] (empty when it is not given).
inline std::vector<std::int32_t> cu_seqlens_input(Invocation& inv) {
  std::vector<std::int32_t> cu;
  if (!inv.has_input("cu_seqlens")) return cu;
  const Shape s = inv.input_shape("cu_seqlens");
  if (s.size() != 1 || s[0] < 2)
    throw UsageError("input 'cu_seqlens': expected shape [N + 1] with N >= 1, got " + tilekernels::shape_string(s));
  for (std::uint32_t w : inv.words("cu_seqlens", s)) cu.push_back(static_cast<std::int32_t>(w));
  return cu;
}

// Runs `kernel` on `args` (whose cu_seqlens_host is set), with the index
// table its cu_seqlens needs recorded first.
template <class Kernel>
void run_with_index(tilekernels::Context& ctx, const Kernel& kernel, typename Kernel::Args args,
                    std::int64_t B, std::int64_t T, std::uint32_t bt) {
  const tilekernels::gdn::Chunking ch(B, T, args.cu_seqlens_host, bt);
  ch.check(ctx, Kernel::name, std::nullopt);
  std::optional<tilekernels::Tensor> index;
  if (ch.varlen()) {
    index.emplace(ctx, tilekernels::DType::u32, Shape{static_cast<std::int64_t>(ch.index_bytes() / 4)});
    args.index = index->ref();
  }
  kernel.check(args);
  ctx.submit_and_wait([&](vk::CommandBuffer cmd) {
    if (index) ch.record_index(ctx, cmd, index->ref());
    kernel.record(cmd, args);
  });
}

}  // namespace tkrun
