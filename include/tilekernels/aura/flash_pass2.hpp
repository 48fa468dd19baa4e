// SPDX-License-Identifier: MIT
// AURA flash pass 2: the split-K merge of decode attention.
//
// Pass 1 (aura::DecodeAttention, or any split-K attention) leaves, for each
// query head q and key block b, the softmax state of the block
// (shaders/common/softmax_state.glsl): the un-normalised partial output
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
// Workspace (workspace_bytes(problem), 0 for most shapes): when few heads
// have many blocks (512 or more, fewer than 128 head slices), a head is
// spread over several workgroups along its blocks, which combine through
// the workspace; plan(problem, 0) merges each head slice in one workgroup
// instead.
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "tilekernels/aura/flash_pass2_abi.h"
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
  TK_DECLARE_SPEC(TK_FLASH_PASS2_SPEC)
  TK_DECLARE_PUSH(TK_FLASH_PASS2_PUSH)

  struct Args {
    TensorRef o_partials, m_partials, l_partials, output;
    std::optional<TensorRef> lse = std::nullopt;
    std::optional<Workspace> workspace = std::nullopt;
  };

  struct Problem {
    std::int64_t q_heads = 0, num_blocks = 0;
  };
  // The largest calls the object is built for (0: any).
  struct Envelope {
    std::int64_t max_q_heads = 0, max_blocks = 0;
  };

  static constexpr std::array<Variant<Problem>, 1> variants{{
      {"portable", Path::portable, spirv::aura_flash_pass2, {}, Config::chunks, Config::shared_bytes(1)},
  }};

  // The workgroup geometry of one call.
  struct Geometry {
    std::uint32_t slices = 1;       // workgroups per head along the output; divides Dim / 4
    std::uint32_t splits = 1;       // workgroups per head slice along the blocks (> 1 needs the workspace)
    std::uint32_t lane_groups = 1;  // lane groups per workgroup, a power of two
    std::uint32_t unroll = 4;       // 1..16: blocks per group with loads in flight together
    bool prefetch = false;          // the next batch's loads in flight while one is folded
  };

  // What record() runs: the variant and its geometry. Benchmarks may change
  // the geometry of a plan (and build its pipeline with prepare()) before
  // recording it.
  struct Plan {
    const Variant<Problem>* variant = nullptr;
    Geometry geometry;
  };

  explicit FlashPass2(Context& ctx, Envelope envelope = {}) : ctx_(&ctx), envelope_(envelope) { prepare_envelope(); }

  const Envelope& envelope() const noexcept { return envelope_; }
  std::size_t pipelines() const noexcept { return pipelines_.size(); }
  const PipelineSet& pipeline_set() const noexcept { return pipelines_; }

  Problem problem(const Args& a) const { return {a.o_partials.shape.at(0), a.o_partials.shape.at(1)}; }

  // Throws tilekernels::Error unless this object runs `p` on its device.
  void check(const Problem& p) const {
    if (p.q_heads <= 0 || p.num_blocks <= 0)
      throw Error(ErrorCode::invalid_argument, std::string(name) + ": q_heads and num_blocks must be > 0, got " +
                                                   std::to_string(p.q_heads) + " and " + std::to_string(p.num_blocks));
    if (static_cast<std::uint64_t>(p.q_heads) * static_cast<std::uint64_t>(p.num_blocks) * Config::dim >= (1ull << 32) * 4)
      throw Error(ErrorCode::unsupported, std::string(name) + ": o_partials has too many elements for 32-bit indexing");
    const auto over = [&](const char* what, std::int64_t value, std::int64_t max) {
      if (max && value > max)
        throw Error(ErrorCode::invalid_argument, std::string(name) + ": " + what + " " + std::to_string(value) +
                                                     " exceeds the envelope's " + std::to_string(max));
    };
    over("q_heads", p.q_heads, envelope_.max_q_heads);
    over("num_blocks", p.num_blocks, envelope_.max_blocks);
    select_variant(*ctx_, name, variants, p);
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
    check(problem(a));
  }

  Status can_implement(const Problem& p) const noexcept {
    return detail::status_of([&] { check(p); });
  }
  Status can_implement(const Args& a) const noexcept {
    return detail::status_of([&] { check(a); });
  }

  // Workspace bytes the fastest geometry for `p` needs (0: none; they also
  // serve every call with the same q_heads and fewer blocks), and those of a
  // given geometry.
  std::uint64_t workspace_bytes(const Problem& p) const {
    check(p);
    return workspace_bytes(p.q_heads, geometry(p, true));
  }
  static std::uint64_t workspace_bytes(std::int64_t q_heads, const Geometry& g) {
    return split_layout(q_heads, g).regions.bytes();
  }

  // The geometry record() takes for `p`, with or without a workspace to
  // split heads through. Automatic choice (measurements: bench/notes/2026-11-aura-flash-pass2.md,
  // aura.flash_pass2):
  // - slices: double the slices (down to 4 vec4 slots, 64 bytes of each
  //   block row) while that leaves at most 256 workgroups, about two per
  //   multiprocessor of a large GPU; for long rows (768 or more blocks) at
  //   most 128 wider workgroups;
  // - splits along the blocks only where the slices still leave fewer
  //   than 128 workgroups and there are 512 or more blocks: workgroups of
  //   128 or more blocks, about 256 workgroups (more splits lose more to
  //   the merge through the workspace than they gain);
  // - the rest from the blocks per split (blocked_geometry).
  Geometry geometry(const Problem& p, bool workspace) const {
    const bool long_rows = p.num_blocks >= 768;
    Geometry g;
    g.slices = slices_for(p.q_heads, long_rows);
    const std::int64_t units = p.q_heads * g.slices;  // (head, slice) pairs
    if (workspace && p.num_blocks >= 512 && units < 128)
      g.splits = static_cast<std::uint32_t>(std::min<std::int64_t>(p.num_blocks / 128, (256 + units - 1) / units));
    blocked_geometry(g, long_rows, (p.num_blocks + g.splits - 1) / g.splits);
    return g;
  }

  // What record() runs for `p` with a workspace of `workspace` bytes.
  Plan plan(const Problem& p, std::uint64_t workspace) const {
    check(p);
    Plan plan{&select_variant(*ctx_, name, variants, p), {}};
    plan.geometry = geometry(p, workspace >= workspace_bytes(p.q_heads, geometry(p, true)));
    return plan;
  }

  // The plan record(cmd, a) takes.
  Plan plan(const Args& a) const {
    check(a);
    return plan(problem(a), a.workspace ? a.workspace->memory.size : 0);
  }

  // Throws unless `plan` can run `a` (a geometry changed by hand included).
  void check(const Args& a, const Plan& plan) const {
    check(a);
    const Geometry& g = plan.geometry;
    const auto& info = ctx_->info();
    const auto bad = [&](const std::string& why) {
      throw Error(ErrorCode::invalid_argument, std::string(name) + ": geometry: " + why);
    };
    if (!plan.variant) bad("the plan has no variant");
    if (g.slices == 0 || Config::chunks % g.slices) bad("slices must divide Dim / 4 = " + std::to_string(Config::chunks));
    if (g.lane_groups == 0 || !std::has_single_bit(g.lane_groups)) bad("lane_groups must be a power of two");
    if (g.unroll == 0 || g.unroll > 16) bad("unroll must be in [1, 16]");
    if (g.splits == 0 || g.splits > 256) bad("splits must be in [1, 256]");
    if (g.lane_groups * (Config::chunks / g.slices) > info.max_workgroup_invocations ||
        Config::shared_bytes(g.lane_groups, g.slices) > info.max_shared_memory)
      bad(std::to_string(g.lane_groups) + " lane groups exceed the device's workgroup limits");
    if (g.splits > 1) {
      if (!a.workspace) throw Error(ErrorCode::invalid_argument, std::string(name) + ": workspace: splits need one");
      detail::expect_workspace(*ctx_, name, *a.workspace, workspace_bytes(a.o_partials.shape[0], g));
    }
  }

  // Records plan(problem(a), the workspace's size); the workspace must hold
  // workspace_bytes(problem(a)).
  void record(vk::CommandBuffer cmd, const Args& a) const {
    check(a);
    const Problem p = problem(a);
    const std::uint64_t given = a.workspace ? a.workspace->memory.size : 0;
    detail::expect_workspace_bytes(name, given, workspace_bytes(p));
    record(cmd, a, plan(p, given));
  }

  // Records `plan` (from plan(), its geometry possibly changed).
  void record(vk::CommandBuffer cmd, const Args& a, const Plan& plan) const {
    check(a, plan);
    const Problem p = problem(a);
    const Geometry& g = plan.geometry;
    const Pipeline& pipeline = pipelines_.get(name, key(*plan.variant, g));
    // Unused bindings (lse, the workspace without splits) get the output to
    // keep every descriptor valid: the shader never touches them, and a
    // tensor the kernel writes anyway adds no hazard for synchronization
    // validation (which counts every binding the shader declares).
    const TensorRef lse = a.lse ? *a.lse : a.output;
    std::vector<TensorRef> bindings{a.o_partials, a.m_partials, a.l_partials, a.output, lse};
    if (g.splits > 1) {
      const SplitLayout w = split_layout(p.q_heads, g);
      const TensorRef counters = detail::workspace_region(*a.workspace, 0, w.counter_bytes);
      const std::uint64_t o_at = w.regions.scratch_at(a.workspace->memory.size);
      bindings.push_back(detail::workspace_region(*a.workspace, o_at, w.o_bytes));
      bindings.push_back(detail::workspace_region(*a.workspace, o_at + w.ml_offset, w.ml_bytes));
      bindings.push_back(counters);
      if (!a.workspace->zeroed) detail::record_fill(*ctx_, cmd, counters);
    } else {
      bindings.insert(bindings.end(), {a.output, a.output, a.output});
    }
    Push push;
    push.q_heads = static_cast<std::uint32_t>(p.q_heads);
    push.num_blocks = static_cast<std::uint32_t>(p.num_blocks);
    push.splits = g.splits;
    push.flags = a.lse ? 1u : 0u;
    detail::record_dispatch(*ctx_, cmd, pipeline, bindings, push,
                            static_cast<std::uint64_t>(p.q_heads) * g.slices * g.splits);
  }

  // Builds the pipeline of a plan whose geometry was changed by hand (the
  // envelope's are built by the constructor). Not thread-safe: call it
  // before recording from several threads.
  void prepare(const Plan& plan) { pipelines_.add(*ctx_, key(*plan.variant, plan.geometry)); }

  // Convenience for tests and tools: allocates the workspace the call can
  // use, records into a fresh command buffer, submits and waits.
  void run(const Args& a) const {
    check(a);
    Args with = a;
    std::optional<Tensor> scratch;
    if (!a.workspace) {
      const auto bytes = workspace_bytes(problem(a));
      if (bytes) {
        scratch.emplace(*ctx_, DType::u32, Shape{static_cast<std::int64_t>(bytes / 4)});
        with.workspace = Workspace{scratch->ref()};
      }
    }
    ctx_->submit_and_wait([&](vk::CommandBuffer cmd) { record(cmd, with); });
  }

 private:
  // Slices per head (see geometry()).
  std::uint32_t slices_for(std::int64_t q_heads, bool long_rows) const {
    const std::int64_t max_units = long_rows ? 128 : 256;
    std::uint32_t slices = 1;
    while (Config::chunks % (2 * slices) == 0 && Config::chunks / (2 * slices) >= 4 && q_heads * 2 * slices <= max_units)
      slices *= 2;
    return slices;
  }

  // Lane groups, unroll and prefetch for `per_split` blocks per workgroup:
  // - lane groups: up to 256 invocations per workgroup (512 for long
  //   rows), enough groups that each replays one round of 4 blocks (fewer
  //   than 64 blocks) or of 8; split: 8 lane groups of 8 blocks;
  // - unsplit, with 3 or more rounds of 8 blocks per group: rounds of 4
  //   with the next round's loads in flight (prefetch).
  // Constant from kSaturation blocks per split on (prepare relies on it).
  void blocked_geometry(Geometry& g, bool long_rows, std::int64_t per_split) const {
    blocked_geometry(g, max_lane_groups(g.slices, long_rows), per_split);
  }
  static void blocked_geometry(Geometry& g, std::uint32_t max_groups, std::int64_t per_split) {
    // Blocks each lane group should replay: one round of 4 or 8 unsplit, 16
    // (two rounds of 8) when split.
    const std::int64_t per_group = g.splits > 1 ? 16 : per_split >= 64 ? 8 : 4;
    const auto want = std::bit_ceil(static_cast<std::uint64_t>((per_split + per_group - 1) / per_group));
    g.lane_groups = static_cast<std::uint32_t>(std::min<std::uint64_t>(std::bit_floor(max_groups), want));
    const bool streaming = g.splits == 1 && per_split >= 3 * 8 * static_cast<std::int64_t>(g.lane_groups);
    if (g.splits > 1)
      g.unroll = per_split >= 8 * static_cast<std::int64_t>(g.lane_groups) ? 8 : 4;
    else
      g.unroll = streaming ? 4 : static_cast<std::uint32_t>(per_group);
    g.prefetch = streaming;
  }
  // The most lane groups a workgroup of `slices` slices may have.
  std::uint32_t max_lane_groups(std::uint32_t slices, bool long_rows) const {
    const std::uint32_t slice_chunks = Config::chunks / slices;
    const auto& info = ctx_->info();
    const std::uint32_t target = long_rows ? 512 : 256;
    const std::uint32_t max_invocations = std::min(std::max(target, slice_chunks), info.max_workgroup_invocations);
    std::uint32_t max_groups = std::max<std::uint32_t>(1, max_invocations / slice_chunks);
    while (max_groups > 1 &&
           Config::shared_bytes(max_groups, slices) > std::min<std::uint32_t>(32768, info.max_shared_memory))
      --max_groups;
    return max_groups;
  }
  // At most 512 invocations of at least 4 each: 128 lane groups, whose
  // choices settle by 3 x 8 x 128 blocks.
  static constexpr std::int64_t kSaturation = 4096;

  PipelineKey key(const Variant<Problem>& v, const Geometry& g) const {
    Spec spec;
    spec.workgroup = g.lane_groups * (Config::chunks / g.slices);
    spec.DIM = Config::dim;
    spec.GROUPS = g.lane_groups;
    spec.PARTIAL_DTYPE = static_cast<std::uint32_t>(Config::partial_dtype);
    spec.OUT_DTYPE = static_cast<std::uint32_t>(Config::out_dtype);
    spec.UNROLL = g.unroll;
    spec.SPLIT = g.splits > 1 ? 1u : 0u;
    spec.SLICES = g.slices;
    spec.PREFETCH = g.prefetch ? 1u : 0u;
    return detail::pipeline_key<Push>(*ctx_, v, spec, 8);
  }

  // Every pipeline plan() can choose inside the envelope: each head count
  // (from 129 on, none slices or splits: they behave as 129), rows short
  // and long, split or not, every block count per split up to where the
  // choice settles.
  void prepare_envelope() {
    if (envelope_.max_q_heads < 0 || envelope_.max_blocks < 0)
      throw Error(ErrorCode::invalid_argument, std::string(name) + ": envelope: maxima must be >= 0 (0: any)");
    const Variant<Problem>& v = select_variant(*ctx_, name, variants, Problem{1, 1});
    const std::int64_t max_q = envelope_.max_q_heads ? std::min<std::int64_t>(envelope_.max_q_heads, 129) : 129;
    const std::int64_t max_nb = envelope_.max_blocks ? envelope_.max_blocks : kSaturation;
    // (slices, long rows, split) as the head counts give them, then the rest.
    std::set<std::array<std::uint32_t, 3>> classes;
    for (std::int64_t q = 1; q <= max_q; ++q)
      for (const bool long_rows : {false, true}) {
        if (long_rows && max_nb < 768) continue;
        const std::uint32_t slices = slices_for(q, long_rows);
        classes.insert({slices, long_rows ? 1u : 0u, 1u});
        if (max_nb >= 512 && q * slices < 128) classes.insert({slices, long_rows ? 1u : 0u, 2u});
      }
    std::set<std::array<std::uint32_t, 5>> geometries;
    for (const auto& [slices, long_rows, splits] : classes) {
      const std::uint32_t max_groups = max_lane_groups(slices, long_rows != 0);
      for (std::int64_t per = 1; per <= std::min(max_nb, kSaturation); ++per) {
        Geometry g;
        g.slices = slices;
        g.splits = splits;
        blocked_geometry(g, max_groups, per);
        geometries.insert({g.slices, g.splits, g.lane_groups, g.unroll, g.prefetch ? 1u : 0u});
      }
    }
    for (const auto& [slices, splits, groups, unroll, prefetch] : geometries)
      pipelines_.add(*ctx_, key(v, Geometry{slices, splits, groups, unroll, prefetch != 0}));
  }

  // Workspace regions of a split geometry: per head slice an arrival
  // counter at the front (the part that must be zero); per (head slice,
  // split) the merged o slice and (m, l) in the scratch at the back of the
  // range passed (workspace.hpp). Empty without splits.
  struct SplitLayout {
    detail::ZeroScratchLayout regions;
    std::uint64_t counter_bytes = 0, o_bytes = 0, ml_offset = 0, ml_bytes = 0;
  };
  static SplitLayout split_layout(std::int64_t q_heads, const Geometry& g) {
    SplitLayout s;
    if (g.splits <= 1) return s;
    const auto units = static_cast<std::uint64_t>(q_heads) * g.slices;
    s.counter_bytes = units * 4;
    s.regions.add_zero(s.counter_bytes);
    s.o_bytes = units * g.splits * (Config::chunks / g.slices) * 16;
    s.regions.add_scratch(s.o_bytes);
    s.ml_bytes = units * g.splits * 8;
    s.ml_offset = s.regions.add_scratch(s.ml_bytes);
    return s;
  }

  Context* ctx_;
  Envelope envelope_;
  PipelineSet pipelines_;
};

static_assert(Kernel<FlashPass2<FlashPass2Config<128>>>, "aura.flash_pass2 must have the kernel interface (core/kernel.hpp)");

}  // namespace tilekernels::aura
