// SPDX-License-Identifier: MIT
// What the tk-run ops of Gated DeltaNet share: the host copy of the optional
// cu_seqlens, the K/V and option checks (one wording for every op), and a
// run that records a stage's index table (gdn/chunking.hpp) ahead of the
// kernel in one submission.
#pragma once

#include <tilekernels/gdn/chunk_index.hpp>
#include <tilekernels/gdn/chunking.hpp>

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "op.hpp"

namespace tkrun {

// The offsets of input 'cu_seqlens' [N + 1] (empty when it is not given).
inline std::vector<std::int32_t> cu_seqlens_input(Invocation& inv) {
  if (!inv.has_input("cu_seqlens")) return {};
  const Shape s = inv.input_shape("cu_seqlens");
  if (s.size() != 1 || s[0] < 2)
    throw UsageError("input 'cu_seqlens': expected shape [N + 1] with N >= 1, got " + tilekernels::shape_string(s));
  return inv.ints("cu_seqlens", s);
}

// K or V, the last dimension of `input`, must be one the kernels are built for.
inline void check_head_size(const std::string& input, const char* letter, std::int64_t value) {
  if (value != 64 && value != 128 && value != 256)
    throw UsageError("input '" + input + "': " + letter + " must be 64, 128 or 256 (its last dimension), got " +
                     std::to_string(value));
}

// A 0/1 parameter (false/true accepted too).
inline bool flag_param(const Invocation& inv, const std::string& name) {
  const std::string v = inv.param(name);
  if (v == "0" || v == "false") return false;
  if (v == "1" || v == "true") return true;
  throw UsageError("parameter '" + name + "' must be 0 or 1, got '" + printable(v, 60) + "'");
}

// The options every whole Gated DeltaNet op takes (gdn.chunk_forward,
// gdn.recurrent_step), checked the same way by both, before any allocation:
// the flags, the state layout, and the gate inputs against gate_in_kernel.
inline tilekernels::gdn::GdnOptions gdn_options(const Invocation& inv) {
  namespace gdn = tilekernels::gdn;
  gdn::GdnOptions options;
  options.qk_l2norm = flag_param(inv, "qk_l2norm");
  options.gate_in_kernel = flag_param(inv, "gate_in_kernel");
  options.beta_sigmoid = flag_param(inv, "beta_sigmoid");
  options.allow_neg_eigval = flag_param(inv, "allow_neg_eigval");
  const std::string layout = inv.param("state_layout");
  if (layout != "kv" && layout != "vk")
    throw UsageError("parameter 'state_layout' must be kv or vk, got '" + printable(layout, 60) + "'");
  options.state_layout = layout == "kv" ? gdn::StateLayout::kv : gdn::StateLayout::vk;
  if (options.allow_neg_eigval && !options.beta_sigmoid)
    throw UsageError("parameter 'allow_neg_eigval' = 1 needs beta_sigmoid=1 (as in FLA)");
  if (!options.gate_in_kernel && (inv.has_input("A_log") || inv.has_input("dt_bias")))
    throw UsageError("inputs 'A_log' and 'dt_bias' are used only with gate_in_kernel=1");
  if (options.gate_in_kernel && !inv.has_input("A_log"))
    throw UsageError("parameter 'gate_in_kernel' = 1 needs input 'A_log' (--in A_log=FILE.npy)");
  return options;
}

// Parameter 'scale': auto (1/sqrt(K)) or a positive finite number.
inline double gdn_scale(const Invocation& inv, std::int64_t K) {
  if (inv.param("scale") == "auto") return 1.0 / std::sqrt(static_cast<double>(K));
  const double scale = inv.float_param("scale");
  if (!(scale > 0)) throw UsageError("parameter 'scale' must be a positive number, got " + printable(inv.param("scale"), 60));
  const auto narrowed = static_cast<float>(scale);  // what the kernels take: 0 would mean auto, inf is refused
  if (!(narrowed > 0) || !std::isfinite(narrowed))
    throw UsageError("parameter 'scale' is outside float's range, got " + printable(inv.param("scale"), 60));
  return scale;
}

// Runs `kernel` on `args` (whose cu_seqlens_host is set): with cu_seqlens
// its device copy and the index table gdn::ChunkIndex builds from it are
// recorded first, in the same submission.
template <std::uint32_t BT, class Kernel>
void run_with_index(tilekernels::Context& ctx, Invocation& inv, const Kernel& kernel, typename Kernel::Args args,
                    std::int64_t B, std::int64_t T) {
  const std::span<const std::int32_t> cu = args.cu_seqlens_host;
  const tilekernels::gdn::Chunking ch(B, T, cu, BT);
  std::optional<tilekernels::Tensor> cu_device, index;
  if (ch.varlen()) {
    cu_device.emplace(inv.alloc(ctx, tilekernels::DType::i32, Shape{static_cast<std::int64_t>(cu.size())},
                                "input 'cu_seqlens'"));
    cu_device->upload(cu);
    index.emplace(inv.alloc(ctx, tilekernels::DType::u32, Shape{static_cast<std::int64_t>(ch.index_bytes() / 4)},
                            "the index table of input 'cu_seqlens'"));
    args.cu_seqlens = cu_device->ref();
    args.index = index->ref();
  }
  kernel.check(args);
  const tilekernels::gdn::ChunkIndex<BT> index_kernel(ctx);
  ctx.submit_and_wait([&](vk::CommandBuffer cmd) {
    if (index) {
      index_kernel.record(cmd, {*cu_device, *index, T});
      tilekernels::compute_barrier(ctx, cmd);
    }
    kernel.record(cmd, args);
  });
}

}  // namespace tkrun
