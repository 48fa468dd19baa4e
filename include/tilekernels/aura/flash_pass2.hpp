// AURA flash pass 2: the split-K merge of decode attention.
//
// Pass 1 (a later kernel, or any split-K attention) leaves, for each query
// head q and key block b, the un-normalised partial output
// o_b = sum_j e^(s_j - m_b) v_j, the block maximum m_b and the block sum
// l_b = sum_j e^(s_j - m_b). Pass 2 merges them:
//   M = max { m_b : l_b != 0 },  L = sum_b e^(m_b - M) l_b,
//   output = sum_b e^(m_b - M) o_b / L,   lse = M + ln L.
// Blocks with l_b == 0 (fully masked) are skipped; a head whose blocks are
// all empty gets output 0 and lse -inf, never NaN. NaN or Inf in o or m of a
// non-empty block propagates to that head's output.
//
// Layout (row-major, last index innermost):
//   o_partials [q_heads, num_blocks, Dim]   Partial dtype
//   m_partials [q_heads, num_blocks]        Partial dtype
//   l_partials [q_heads, num_blocks]        Partial dtype
//   output     [q_heads, Dim]               Out dtype
//   lse        [q_heads]                    f32, optional, for chaining merges
//
// A head's output dimensions may be cut into independent slices, one
// workgroup each, so that few heads still fill the GPU. When few heads have
// many blocks, a head (slice) is also spread over several workgroups
// ("splits") along its blocks that combine through a workspace the FlashPass2
// object owns (allocated on first need, a zero-filled counter per head that
// every dispatch leaves at zero). Consequently two recordings of the same
// FlashPass2 object must not execute concurrently: put a compute barrier
// between them (as between any dependent dispatches), or use one object per
// concurrent stream, or Tuning::splits = 1.
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>

#include "tilekernels/core.hpp"
#include "tilekernels/spirv/aura/flash_pass2.hpp"

namespace tilekernels::aura {

template <std::uint32_t Dim, DType Partial = DType::f32, DType Out = DType::bf16, std::uint32_t DimsPerLane = 0>
struct FlashPass2Config {
  static_assert(Dim % 4 == 0, "FlashPass2Config: Dim must be a multiple of 4 (an invocation owns 4 consecutive slots)");
  static_assert(Dim >= 4 && Dim <= 1024, "FlashPass2Config: Dim must be in [4, 1024]");
  static_assert(Partial == DType::f32 || Partial == DType::f16 || Partial == DType::bf16,
                "FlashPass2Config: Partial must be DType::f32, DType::f16 or DType::bf16");
  static_assert(Out == DType::f32 || Out == DType::f16 || Out == DType::bf16,
                "FlashPass2Config: Out must be DType::f32, DType::f16 or DType::bf16");

  static constexpr std::uint32_t dim = Dim;
  static constexpr DType partial_dtype = Partial;
  static constexpr DType out_dtype = Out;
  // Output slots per lane of a 32-lane group, as in the Metal kernel; the
  // register footprint per lane is bounded by it.
  static constexpr std::uint32_t dims_per_lane = (Dim + 31) / 32;
  static_assert(DimsPerLane == 0 || DimsPerLane == dims_per_lane,
                "FlashPass2Config: DimsPerLane, when given, must equal ceil(Dim / 32)");

  // vec4 slots of a head's output; a lane group has one invocation per slot
  // of its slice (chunks / slices).
  static constexpr std::uint32_t chunks = Dim / 4;
  // Shared memory for `groups` lane groups over a slice of chunks / slices
  // slots: one vec4 state per invocation plus (m, l) per group.
  static constexpr std::uint32_t shared_bytes(std::uint32_t groups, std::uint32_t slices = 1) {
    return groups * (Dim / slices * 4 + 8);
  }
  static_assert(shared_bytes(1, 1) <= 32768, "FlashPass2Config: one lane group must fit the portable 32 KiB of shared memory");
};

template <class Config>
class FlashPass2 {
 public:
  static constexpr const char* name = "aura.flash_pass2";

  struct Args {
    TensorRef o_partials, m_partials, l_partials, output;
    std::optional<TensorRef> lse;
  };

  // Workgroup geometry; zeros pick it from the shape and the device.
  struct Tuning {
    std::uint32_t lane_groups = 0;  // power of two; lane groups per workgroup
    std::uint32_t unroll = 0;       // 1..16; blocks per group with loads in flight together
    std::uint32_t splits = 0;       // workgroups per head slice along the blocks (1: no workspace)
    std::uint32_t slices = 0;       // workgroups per head along the output; must divide Dim / 4
    // Whether a lane group issues its next batch's loads before folding
    // the current one (twice the registers for the batch).
    enum class Prefetch : std::uint8_t { automatic, off, on } prefetch = Prefetch::automatic;
  };

  explicit FlashPass2(Context& ctx, Tuning tuning = {}) : ctx_(&ctx), tuning_(tuning) {
    if (tuning.unroll > 16) throw Error(ErrorCode::invalid_argument, std::string(name) + ": Tuning::unroll must be <= 16");
    if (tuning.splits > 64) throw Error(ErrorCode::invalid_argument, std::string(name) + ": Tuning::splits must be <= 64");
    if (tuning.lane_groups & (tuning.lane_groups - 1))
      throw Error(ErrorCode::invalid_argument, std::string(name) + ": Tuning::lane_groups must be a power of two");
    if (tuning.slices && Config::chunks % tuning.slices)
      throw Error(ErrorCode::invalid_argument,
                  std::string(name) + ": Tuning::slices must divide Dim / 4 = " + std::to_string(Config::chunks));
  }

  // Throws tilekernels::Error naming the first argument that is wrong.
  void check(const Args& a) const {
    detail::expect_rank(name, "o_partials", a.o_partials, 3);
    const auto q = a.o_partials.shape[0], nb = a.o_partials.shape[1];
    detail::expect_tensor(*ctx_, name, "o_partials", a.o_partials, Config::partial_dtype, {q, nb, Config::dim});
    detail::expect_tensor(*ctx_, name, "m_partials", a.m_partials, Config::partial_dtype, {q, nb});
    detail::expect_tensor(*ctx_, name, "l_partials", a.l_partials, Config::partial_dtype, {q, nb});
    detail::expect_tensor(*ctx_, name, "output", a.output, Config::out_dtype, {q, Config::dim});
    if (a.lse) detail::expect_tensor(*ctx_, name, "lse", *a.lse, DType::f32, {q});
    if (static_cast<std::uint64_t>(q) * static_cast<std::uint64_t>(nb) * Config::dim >= (1ull << 32) * 4)
      throw Error(ErrorCode::unsupported, std::string(name) + ": o_partials has too many elements for 32-bit indexing");
  }

  // The workgroup geometry of one call.
  struct Geometry {
    std::uint32_t slices;       // workgroups per head along the output
    std::uint32_t splits;       // workgroups per head slice along the blocks
    std::uint32_t lane_groups;  // lane groups per workgroup
    std::uint32_t unroll;       // blocks per group with loads in flight together
    bool prefetch;              // the next batch's loads in flight while one is folded
  };

  // What a call with `q_heads` heads of `num_blocks` blocks runs with: the
  // Tuning fields that are set, the automatic choice for the others.
  //
  // Automatic choice, from measurements on an H100 (bench/NOTES.md,
  // aura.flash_pass2, sixth session):
  // - slices: double the slices (down to 4 vec4 slots, 64 bytes of each
  //   block row) while that leaves at most 256 workgroups, about two per
  //   SM (32 heads x 32 blocks: 3.4 us in 8 slices, 3.8 us unsliced); for
  //   long rows (768 or more blocks) at most 128 wider workgroups;
  // - lane groups: up to 256 invocations per workgroup (512 for long
  //   rows), enough groups that each replays one round of 4 blocks (fewer
  //   than 64 blocks) or of 8;
  // - unsplit, with 3 or more rounds of 8 blocks per group: rounds of 4
  //   with the next round's loads in flight (prefetch). 64 heads x 1024
  //   blocks: 15.1 us in 2 slices of 32 groups this way, 16.0 us in rounds
  //   of 8 without prefetch, 17.0 us unsliced and split 8 ways;
  // - splits along the blocks only where the slices still leave fewer
  //   than 128 workgroups and there are 512 or more blocks: workgroups of
  //   128 or more blocks, 8 lane groups of 8 blocks, about 256 workgroups.
  //   More splits, or splits of fewer blocks, lost more to the merge
  //   through the workspace than they gained.
  Geometry geometry(std::int64_t q_heads, std::int64_t num_blocks) const {
    const bool long_rows = num_blocks >= 768;
    std::uint32_t slices = tuning_.slices;
    if (!slices) {
      const std::int64_t max_units = long_rows ? 128 : 256;
      slices = 1;
      while (Config::chunks % (2 * slices) == 0 && Config::chunks / (2 * slices) >= 4 && q_heads * 2 * slices <= max_units)
        slices *= 2;
    }
    const std::uint32_t slice_chunks = Config::chunks / slices;
    const std::int64_t units = q_heads * slices;  // (head, slice) pairs
    std::uint32_t split = 1;
    if (tuning_.splits)
      split = static_cast<std::uint32_t>(std::min<std::int64_t>(tuning_.splits, num_blocks));
    else if (num_blocks >= 512 && units < 128)
      split = static_cast<std::uint32_t>(std::min<std::int64_t>(num_blocks / 128, (256 + units - 1) / units));
    const std::int64_t per_split = (num_blocks + split - 1) / split;
    // Blocks each lane group should replay: one round of 4 or 8 unsplit, 16
    // (two rounds of 8) when split.
    const std::int64_t per_group = split > 1 ? 16 : per_split >= 64 ? 8 : 4;
    std::uint32_t groups = 0;
    if (tuning_.lane_groups) {
      groups = clamp_groups(tuning_.lane_groups, slices);
    } else {
      const auto& info = ctx_->info();
      const std::uint32_t target = long_rows ? 512 : 256;
      const std::uint32_t max_invocations = std::min(std::max(target, slice_chunks), info.max_workgroup_invocations);
      std::uint32_t max_groups = std::max<std::uint32_t>(1, max_invocations / slice_chunks);
      while (max_groups > 1 &&
             Config::shared_bytes(max_groups, slices) > std::min<std::uint32_t>(32768, info.max_shared_memory))
        --max_groups;
      const auto want = std::bit_ceil(static_cast<std::uint64_t>((per_split + per_group - 1) / per_group));
      groups = static_cast<std::uint32_t>(std::min<std::uint64_t>(std::bit_floor(max_groups), want));
    }
    const bool streaming = split == 1 && per_split >= 3 * 8 * static_cast<std::int64_t>(groups);
    std::uint32_t unroll = tuning_.unroll;
    if (!unroll) {
      if (split > 1)
        unroll = per_split >= 8 * static_cast<std::int64_t>(groups) ? 8 : 4;
      else
        unroll = streaming ? 4 : static_cast<std::uint32_t>(per_group);
    }
    const bool prefetch = tuning_.prefetch == Tuning::Prefetch::automatic ? streaming
                                                                           : tuning_.prefetch == Tuning::Prefetch::on;
    return {slices, split, groups, unroll, prefetch};
  }

  void record(vk::CommandBuffer cmd, const Args& a) const {
    check(a);
    const auto q = a.o_partials.shape[0], nb = a.o_partials.shape[1];
    const Geometry g = geometry(q, nb);
    const std::uint32_t split = g.splits;
    PipelineKey key{spirv::aura_flash_pass2, std::size(spirv::aura_flash_pass2),
                    {g.lane_groups * (Config::chunks / g.slices), Config::dim, g.lane_groups,
                     static_cast<std::uint32_t>(Config::partial_dtype), static_cast<std::uint32_t>(Config::out_dtype),
                     a.lse ? 1u : 0u, g.unroll, split, g.slices, g.prefetch ? 1u : 0u},
                    8, sizeof(Push), 0};
    const Pipeline& pipeline = ctx_->pipeline(key);
    // Unused bindings (lse, the workspace without splits) get a tensor of
    // the call to keep every descriptor valid; the shader never touches them.
    const TensorRef lse = a.lse ? *a.lse : a.m_partials;
    std::vector<TensorRef> bindings{a.o_partials, a.m_partials, a.l_partials, a.output, lse};
    if (split > 1) {
      const Workspace& w = workspace(q, g);
      bindings.push_back(w.o.ref());
      bindings.push_back(w.ml.ref());
      bindings.push_back(w.counters.ref());
    } else {
      bindings.insert(bindings.end(), {a.output, a.output, a.output});
    }
    const Push push{0, static_cast<std::uint32_t>(q), static_cast<std::uint32_t>(nb), 0};
    detail::record_dispatch(*ctx_, cmd, pipeline, bindings, push, static_cast<std::uint64_t>(q) * g.slices * split);
  }

  // Records into a fresh command buffer, submits and waits.
  void run(const Args& a) const {
    check(a);
    const auto q = a.o_partials.shape[0], nb = a.o_partials.shape[1];
    if (const Geometry g = geometry(q, nb); g.splits > 1) workspace(q, g);  // before recording
    ctx_->submit_and_wait([&](vk::CommandBuffer cmd) { record(cmd, a); });
  }

 private:
  struct Push {
    std::uint32_t group_offset, q_heads, num_blocks, pad;
  };
  // A requested group count, reduced until it fits the device.
  std::uint32_t clamp_groups(std::uint32_t groups, std::uint32_t slices) const {
    const auto& info = ctx_->info();
    while (groups > 1 && (groups * (Config::chunks / slices) > info.max_workgroup_invocations ||
                          Config::shared_bytes(groups, slices) > info.max_shared_memory))
      groups /= 2;
    return groups;
  }

  struct Workspace {
    Tensor o, ml, counters;
  };

  // The workspace for `q_heads` heads split as in `g`: per (head slice,
  // split) a state of Dim / slices floats and (m, l), per head slice a
  // counter. Grown when too small, never shrunk (alternating shapes do not
  // reallocate); its counters start at zero.
  const Workspace& workspace(std::int64_t q_heads, const Geometry& g) const {
    const auto units = q_heads * g.slices;  // (head, slice) pairs
    const auto o = q_heads * g.splits * Config::dim, ml = 2 * units * g.splits;
    std::lock_guard lock(workspace_mutex_);
    if (!workspace_ || workspace_->o.elements() < o || workspace_->ml.elements() < ml ||
        workspace_->counters.elements() < units) {
      const auto keep = [&](std::int64_t need, const Tensor Workspace::*part) {
        return workspace_ ? std::max(need, ((*workspace_).*part).elements()) : need;
      };
      auto grown = std::make_unique<Workspace>(Workspace{Tensor(*ctx_, DType::f32, {keep(o, &Workspace::o)}),
                                                         Tensor(*ctx_, DType::f32, {keep(ml, &Workspace::ml)}),
                                                         Tensor(*ctx_, DType::u32, {keep(units, &Workspace::counters)})});
      // Recorded but unexecuted dispatches may still use the old one.
      if (workspace_) retired_.push_back(std::move(workspace_));
      workspace_ = std::move(grown);
      workspace_->counters.buffer().fill(0);
    }
    return *workspace_;
  }

  Context* ctx_;
  Tuning tuning_;
  mutable std::mutex workspace_mutex_;
  mutable std::unique_ptr<Workspace> workspace_;
  mutable std::vector<std::unique_ptr<Workspace>> retired_;
};

}  // namespace tilekernels::aura
