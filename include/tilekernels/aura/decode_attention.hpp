// SPDX-License-Identifier: MIT
// AURA decode attention over the paged, compressed KV cache (paged_cache.hpp):
// one call per decode step: one dispatch, two where it splits the keys.
//
// Shapes (row-major, last index innermost):
//   q            [num_seqs, q_len, q_heads, Dim]   Q (f32, f16, bf16); q_len 1..16
//   k_codes, k_norms, v_codes, v_norms             the cache (norms only for coded sides)
//   block_table  [num_seqs, max_pages]             i32 page ids
//   seq_lens     [num_seqs]                        i32 live lengths
//   tables       [table_floats]                    f32 (CacheTables)
//   sinks        [q_heads]                         f32 logits, optional
//   output       [num_seqs, q_len, q_heads, Dim]   Out (f32, f16, bf16)
//   lse          [num_seqs, q_len, q_heads]        f32, optional (natural log, sinks included)
//   k_centre     [centres, kv_heads, Dim]          f32, centred formats only (paged_cache.hpp)
//   seq_centres  [num_seqs]                        i32, centred formats only: each sequence's row of k_centre
// The q_len new tokens of sequence s are already in the cache: query i sits
// at position pos = seq_lens[s] - q_len + i and sees the keys t <= pos, and
// with Options::window = W > 0 only those with t > pos - W. Query head h
// reads KV head h / (q_heads / kv_heads). Per query row, over its keys:
//   z_t = scale * norm_t * <R_k q, codebook_k[codes_t]>      (raw K: scale * <q, k_t>)
//   z_t += scale * <q, k_centre[seq_centres[s], kv_head]>     (centred keys; the row clamped to k_centre)
//   z_t = softcap * tanh(z_t / softcap)                       (Options::softcap > 0)
//   l = sum_t e^(z_t) + e^(sink_h),  y = sum_t e^(z_t) norm_v,t codebook_v[codes_v,t] / l
//   output = R_v^T y (raw V: y itself),  lse = ln l
// with the maximum subtracted. The sink (a logit as given: not scaled or
// capped) joins the denominator only. Empty attention (seq_len 0, or no
// visible key) gives output 0 and lse -inf, or lse = sink with a sink.
// reference/aura/decode_attention.hpp computes the same in double
// (decode_attention_paged_rotated the way this kernel does).
//
// How (shaders/aura/decode_attention.comp): the query is rotated once per
// workgroup (Hadamard by the fast transform, dense by R q); scores use the
// codes directly (no key is dequantised); values are accumulated in V's
// rotated domain, and V's rotation is undone once per output row. A
// workgroup owns up to 8 query rows (query heads x new tokens) of one KV
// head, so a KV head's codes are read once per step for all of its query
// heads (once per 8 rows for larger groups). The keys are split over
// Geometry::splits workgroups per KV head, each publishing its softmax
// state to the workspace; a second dispatch (decode_attention_merge.comp)
// merges them and writes the output (in the first dispatch's pipelines the
// merge's code slowed the tile loops: bench/notes/2026-11-aura-decode-attention-formats.md).
// With arrival counters (Args::arrivals) short steps take one dispatch
// instead (Geometry::fused_merge, the rule in fused_merge()): each
// workgroup counts its arrival after publishing, and the group's last
// merges the states with the merge kernel's code.
// Where the device has fp16 cooperative matrices (any tile of 8 or 16 a
// side, any subgroup size), the tensor-core variant
// (shaders/aura/decode_attention_tc.glsl) computes the scores and the
// value sums as 16x16x16 matrix products over 16 rows (the codes decoded
// through the codebook into fp16 tiles in shared memory) for bf16 and f16
// outputs of coded caches; the same workspace,
// split rule and merge. Its lanes variant (coded K and V, Dim 64/128/256,
// 16x16x16 tiles in the m16n8k16 fragment layout at subgroups of 32:
// decode_attention_tc_lanes.glsl) builds the
// operands in registers from the codes instead; at Dim 256 its subgroups
// work in pairs, one half of the dims each.
//
// q and output are views: any token and head strides, any offset that is a
// multiple of the element size (16-bit outputs: even offsets and strides in
// elements, the pairs being written as 32-bit words), so q can be a slice
// of a fused QKV projection. tables [CacheTables::floats(format)] f32 holds
// the format's codebooks and rotations (CacheTables), the same tensor the
// CacheWrite that filled the cache read.
//
// Centred keys: each workgroup computes c = scale * <q, centre> per row
// once (one workgroup sum) and adds it to every score before the softcap;
// without a softcap the CUDA-core kernels add it to the row's maximum
// instead, which moves every score by the same c.
//
// What the host cannot see: seq_lens and block_table live on the GPU. The
// kernel clamps every seq_len to [0, max_pages * PageTokens] and every
// block-table entry to [0, num_pages), so it never reads outside the cache
// or the table whatever they hold: a garbage length reads as the nearest of
// 0 or the capacity, a garbage page as the nearest page of the cache, and
// the affected rows get attention over whatever those pages hold (finite
// for a finite cache). For a meaningful result, entries for positions <
// seq_len must be pages of the sequence and seq_len >= q_len (or 0: an
// inactive entry, whose rows get 0 and lse -inf). Where the host has copies
// (Args::host_seq_lens, host_block_table: run() and tk-run pass them), they
// are checked before recording and a bad entry is an Error naming it; they
// (or Args::max_seq_len) also let the plan size the split for the real
// lengths instead of the capacity. A recorded call stays correct for any
// lengths the device holds.
//
// Workspace (workspace_bytes(problem)): splits need one (per split state o
// [Dim] and (m, l) per row, in f32, at the back of the range:
// workspace.hpp; no part needs zeroing: the arrival counters, which keep
// their value between calls, are apart from it); the bytes for a problem
// serve every smaller batch at every length, so a workspace sized once for
// the largest batch serves every step. Calls that share a workspace need a
// barrier between them, as any dispatches writing one buffer.
// plan(problem, 0) runs one workgroup per KV head and row chunk: at long
// contexts many times slower.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "tilekernels/aura/decode_attention_abi.h"
#include "tilekernels/aura/decode_attention_types.hpp"
#include "tilekernels/aura/paged_cache.hpp"
#include "tilekernels/core.hpp"
#include "tilekernels/spirv/aura/decode_attention.hpp"
#include "tilekernels/spirv/aura/decode_attention_compact.hpp"
#include "tilekernels/spirv/aura/decode_attention_merge.hpp"
#include "tilekernels/spirv/aura/decode_attention_subgroup.hpp"
#include "tilekernels/spirv/aura/decode_attention_subgroup_compact.hpp"
#include "tilekernels/spirv/aura/decode_attention_tc.hpp"
#include "tilekernels/spirv/aura/decode_attention_tc_lanes.hpp"

namespace tilekernels::aura {

// The kernel for a cache format and dtypes given at run time
// (DecodeAttention<Config> is the same with them fixed at compile time).
class DecodeAttentionKernel {
 public:
  static constexpr const char* name = "aura.decode_attention";
  TK_DECLARE_SPEC(TK_DECODE_ATTENTION_SPEC)
  TK_DECLARE_PUSH(TK_DECODE_ATTENTION_PUSH)
  using Options = DecodeAttentionOptions;
  using Args = DecodeAttentionArgs;
  using Geometry = DecodeAttentionGeometry;
  using Problem = DecodeAttentionProblem;
  struct Plan {
    const Variant<Problem>* variant = nullptr;
    Geometry geometry;
  };
  static constexpr std::uint32_t max_q_len = 16;
  static constexpr std::uint32_t max_splits = TK_DECODE_ATTENTION_MAX_SPLITS;


  // The least any geometry needs (a Dim 64 raw cache); record() checks the call's own.
  static constexpr std::uint32_t least_shared = decode_attention_shared_bytes(CacheFormat{64, 16, 16, 16}, 64, 1, 1);
  // Workgroups of the tensor-core variants: the staged one's in subgroups
  // of the device's size (4, or 2 where the stages of 4 exceed the device's
  // shared memory: 32 KiB holds 4 at Dim 64, 2 at Dim 128), the lanes one's
  // in invocations (subgroups of 32).
  static constexpr std::uint32_t tc_subgroups = 4, lanes_workgroup = 256;
  static constexpr std::string_view lanes_name = "tensor_core_fp16_lanes";
  static constexpr std::array<Variant<Problem>, 6> variants{{
      {lanes_name, Path::tensor_core_fp16, spirv::aura_decode_attention_tc_lanes,
       DeviceNeeds{.subgroup_shuffle = true, .cooperative_matrix_fp16 = true, .subgroup_size = 32}, lanes_workgroup,
       decode_attention_tc_shared_bytes(CacheFormat{64, 16, 4, 4}, lanes_workgroup / 32, lanes_workgroup, true),
       &DecodeAttentionRules::lanes},
      {"tensor_core_fp16", Path::tensor_core_fp16, spirv::aura_decode_attention_tc,
       // The least: 2 subgroups (counted as 32 invocations each: DeviceNeeds), of 4 at least.
       DeviceNeeds{.subgroup_shuffle = true, .cooperative_matrix_fp16 = true}, 32 * 2,
       decode_attention_tc_shared_bytes(CacheFormat{64, 16, 2, 2}, 2, 4 * 2),
       &DecodeAttentionRules::tensor_core_staged},
      {"subgroup", Path::subgroup, spirv::aura_decode_attention_subgroup, DeviceNeeds{.subgroup_arithmetic = true},
       64, least_shared, &DecodeAttentionRules::subgroup_gpu},
      {"subgroup_compact", Path::subgroup, spirv::aura_decode_attention_subgroup_compact,
       DeviceNeeds{.subgroup_arithmetic = true}, 64, least_shared, &DecodeAttentionRules::subgroup_cpu},
      {"portable", Path::portable, spirv::aura_decode_attention, {}, 64, least_shared, &DecodeAttentionRules::portable_gpu},
      {"portable_compact", Path::portable, spirv::aura_decode_attention_compact, {}, 64, least_shared, &DecodeAttentionRules::portable_cpu},
  }};
  // The second dispatch of a split call: Dim / 2 invocations (at least 32),
  // one output dim pair each (the first dispatch's constants otherwise).
  static constexpr Variant<Problem> merge_variant{"merge", Path::portable, spirv::aura_decode_attention_merge, {}, 32, 0};

  using Envelope = DecodeAttentionEnvelope;

  // Builds every pipeline that a call inside `envelope` may take.
  DecodeAttentionKernel(Context& ctx, const CacheFormat& format, DType q_dtype, DType out_dtype, Envelope envelope = {})
      : ctx_(&ctx), format_(validated(format, q_dtype, out_dtype)), q_dtype_(q_dtype), out_dtype_(out_dtype),
        envelope_(envelope) {
    prepare_envelope();
  }

  const CacheFormat& format() const noexcept { return format_; }
  const Envelope& envelope() const noexcept { return envelope_; }
  std::size_t pipelines() const noexcept { return pipelines_.size(); }
  const PipelineSet& pipeline_set() const noexcept { return pipelines_; }

  Problem problem(const Args& a) const {
    Problem p{a.q.shape.at(0),
              a.q.shape.at(1),
              a.q.shape.at(2),
              a.k_codes.shape.at(1),
              a.block_table.shape.at(1),
              a.k_codes.shape.at(0),
              0,
              format_.dim,
              format_.k_bits,
              format_.v_bits,
              out_dtype_,
              a.lse.has_value(),
              format_.k_hi_dims,
              a.arrivals.has_value()};
    std::int64_t longest = p.max_pages * format_.page_tokens;
    if (!a.host_seq_lens.empty()) {
      longest = 0;
      for (auto len : a.host_seq_lens) longest = std::max<std::int64_t>(longest, len);
    } else if (a.max_seq_len > 0) {
      longest = std::min(longest, a.max_seq_len);
    }
    p.keys = a.options.window ? std::min<std::int64_t>(longest, a.options.window + p.q_len - 1) : longest;
    return p;
  }

  // Throws tilekernels::Error unless this object runs `p` on its device:
  // the shape's own rules, the envelope, and a variant for it.
  void check(const Problem& p) const {
    const auto bad = [](const std::string& why) { throw Error(ErrorCode::invalid_argument, std::string(name) + ": " + why); };
    if (p.num_seqs <= 0 || p.q_len <= 0 || p.q_heads <= 0 || p.kv_heads <= 0 || p.max_pages <= 0 || p.num_pages <= 0)
      bad("num_seqs, q_len, q_heads, kv_heads, max_pages and num_pages must be > 0");
    if (p.q_len > max_q_len) bad("q_len must be at most " + std::to_string(max_q_len) + ", got " + std::to_string(p.q_len));
    if (p.q_heads % p.kv_heads != 0)
      bad("q_heads (" + std::to_string(p.q_heads) + ") must be a multiple of kv_heads (" + std::to_string(p.kv_heads) + ")");
    if (p.max_pages * format_.page_tokens >= (1ll << 24) || p.num_pages * p.kv_heads * format_.page_tokens >= (1ll << 31) ||
        p.num_seqs * p.kv_heads >= (1ll << 24))
      throw Error(ErrorCode::unsupported, std::string(name) + ": more sequences, pages or slots than 32-bit indexing allows");
    if (p.keys < 0 || p.keys > p.max_pages * format_.page_tokens)
      bad("keys must be in [0, max_pages * page_tokens], got " + std::to_string(p.keys));
    const Envelope& e = envelope_;
    const auto over = [&](const char* what, std::int64_t value, std::int64_t max) {
      if (max && value > max)
        bad(std::string(what) + " " + std::to_string(value) + " exceeds the envelope's " + std::to_string(max));
    };
    over("num_seqs", p.num_seqs, e.max_num_seqs);
    over("q_len", p.q_len, e.max_q_len);
    if ((e.q_heads && p.q_heads != e.q_heads) || (e.kv_heads && p.kv_heads != e.kv_heads))
      bad("heads " + std::to_string(p.q_heads) + " / " + std::to_string(p.kv_heads) + " differ from the envelope's " +
          std::to_string(e.q_heads) + " / " + std::to_string(e.kv_heads));
    if (p.lse && !e.lse) bad("lse was asked for, but the envelope has lse = false");
    select_variant(*ctx_, name, variants, p);
  }

  // Throws tilekernels::Error naming the first argument that is wrong.
  void check(const Args& a) const;

  Status can_implement(const Problem& p) const noexcept {
    return tilekernels::detail::status_of([&] { check(p); });
  }
  Status can_implement(const Args& a) const noexcept {
    return tilekernels::detail::status_of([&] { check(a); });
  }

  // The geometry record() takes for `p`, with or without a workspace to
  // split through (the rules: decode_attention_geometry.hpp).
  Geometry geometry(const Problem& p, bool workspace) const {
    return geometry(p, workspace, select_variant(*ctx_, name, variants, p));
  }
  // The same for a given variant.
  Geometry geometry(const Problem& p, bool workspace, const Variant<Problem>& v) const;
  // Keys each invocation scores per block (1, 2 or 4) for a workgroup size.
  std::uint32_t tokens_per_invocation(std::uint32_t workgroup) const;
  // Workgroups the split rules aim at.
  std::int64_t split_target(bool tc) const;
  // The most splits a rule takes for these batch dimensions at any length.
  std::int64_t split_cap(const Problem& p, const Geometry& g, bool tc) const;
  // At most `wanted` splits, rounded so that the splits take equal blocks.
  static std::uint32_t even_splits(std::int64_t wanted, std::int64_t blocks);

  static bool is_lanes(const Variant<Problem>& v) { return v.name == lanes_name; }
  bool lanes_pairs() const { return decode_attention_lanes_pairs(format_.dim); }

  // The tensor-core variants' geometry.
  Geometry tensor_core_geometry(const Problem& p, bool workspace, bool lanes) const;

  // Whether a split plan's last workgroup to arrive merges (one dispatch):
  // where the call passes arrival counters, on GPUs (a CPU device runs
  // workgroups in turn: the second dispatch costs it little), for one row
  // quad per workgroup and up to 2048 keys per split. The merge's registers
  // join the whole kernel's: with more quads, or longer tile loops, the
  // slower loop costs more than the dispatch saved
  // (bench/notes/2026-12-aura-short-context.md).
  bool fused_merge(const Problem& p, const Geometry& g) const {
    return p.arrivals && g.splits > 1 && g.row_vecs == 1 && p.keys <= 2048ll * g.splits && !ctx_->info().is_cpu();
  }

  // Arrival counters (Args::arrivals): how many a call needs (sized for the
  // largest batch, they serve every smaller one), the value each holds
  // between calls, and the fill that sets them to it between barriers that
  // order it after earlier work on them and before later compute work
  // (recorded once, before the first call; never submitted here).
  static std::int64_t arrival_slots(const Problem& p) { return decode_attention_arrival_slots(p); }
  static constexpr std::uint32_t arrival_tag = TK_DECODE_ATTENTION_ARRIVAL_TAG;
  void record_arrivals_init(vk::CommandBuffer cmd, const TensorRef& arrivals) const {
    if (arrivals.dtype != DType::u32 || arrivals.offset % 4 || arrivals.size < arrivals.bytes())
      throw Error(ErrorCode::invalid_argument,
                  tilekernels::detail::where(name, "arrivals") +
                      "expected u32 counters at a 4-byte offset, within their buffer range");
    tilekernels::detail::record_fill(*ctx_, cmd, arrivals, arrival_tag);
  }

  using WorkspaceLayout = DecodeAttentionWorkspace;
  WorkspaceLayout workspace_layout(const Problem& p, const Geometry& g) const {
    return decode_attention_workspace(format_, p, g);
  }
  std::uint64_t workspace_bytes(const Problem& p, const Geometry& g) const { return workspace_layout(p, g).bytes(); }
  // Workspace bytes that let record() take its fastest plan for `p` and for
  // every call with no more sequences and new tokens per sequence (the same
  // heads), at every sequence length (0: none needed): sized once for the
  // largest batch, a workspace serves every step.
  std::uint64_t workspace_bytes(const Problem& p) const {
    check(p);
    std::uint64_t bytes = 0;
    for (std::int64_t ql = 1; ql <= p.q_len; ++ql) {
      Problem smaller = p;
      smaller.q_len = ql;
      const Variant<Problem>& v = select_variant(*ctx_, name, variants, smaller);  // independent of num_seqs
      for (std::int64_t n = 1; n <= p.num_seqs; ++n) {
        smaller.num_seqs = n;
        Geometry g = geometry(smaller, true, v);
        g.splits = static_cast<std::uint32_t>(split_cap(smaller, g, v.path == Path::tensor_core_fp16));
        if (g.splits <= 1) break;  // larger batches have more groups: none splits
        bytes = std::max(bytes, workspace_bytes(smaller, g));
      }
    }
    return bytes;
  }

  // What record() runs for `p` with a workspace of `workspace` bytes: the
  // split plan where they hold it, else one workgroup per KV head and row
  // chunk.
  Plan plan(const Problem& p, std::uint64_t workspace) const {
    check(p);
    Plan plan{&select_variant(*ctx_, name, variants, p), {}};
    const Geometry with = geometry(p, true, *plan.variant);
    plan.geometry = workspace >= workspace_bytes(p, with) ? with : geometry(p, false, *plan.variant);
    plan.geometry.fused_merge = fused_merge(p, plan.geometry);
    return plan;
  }

  // The plan record(cmd, a) takes.
  Plan plan(const Args& a) const {
    check(a);
    return plan(problem(a), a.workspace ? a.workspace->memory.size : 0);
  }

  // Throws unless `plan` can run `a` (a geometry changed by hand included).
  void check(const Args& a, const Plan& plan) const;

  // Records plan(problem(a), the workspace's size); the workspace must hold
  // workspace_bytes(problem(a)).
  void record(vk::CommandBuffer cmd, const Args& a) const {
    check(a);
    const Problem p = problem(a);
    const std::uint64_t given = a.workspace ? a.workspace->memory.size : 0;
    tilekernels::detail::expect_workspace_bytes(name, given, workspace_bytes(p));
    record(cmd, a, plan(p, given));
  }

  // Records `plan` (from plan(), its geometry possibly changed).
  void record(vk::CommandBuffer cmd, const Args& a, const Plan& plan) const {
    check(a, plan);
    const Problem p = problem(a);
    const Geometry& g = plan.geometry;
    const std::int64_t gqa = p.q_heads / p.kv_heads;
    const std::int64_t chunks = (decode_attention_rows(p) + 4 * g.row_vecs - 1) / (4 * g.row_vecs);
    const CacheFormat& f = format_;
    const Pipeline& pipeline = pipelines_.get(name, key(*plan.variant, g));

    // Bindings the shader never touches in this configuration (norms of raw
    // sides, sinks, lse, the workspace without splits, the centres of keys
    // not centred) get a tensor of the same call to stay valid: read-only
    // ones a read-only input, written ones the output, so that
    // synchronization validation sees no new hazard.
    std::vector<TensorRef> bindings{a.q,           a.k_codes,     a.k_norms ? *a.k_norms : a.k_codes,
                                    a.v_codes,     a.v_norms ? *a.v_norms : a.v_codes,
                                    a.block_table, a.seq_lens,    a.tables,
                                    a.sinks ? *a.sinks : a.tables, a.output, a.lse ? *a.lse : a.output};
    const TensorRef centre = f.k_centred ? *a.k_centre : a.tables, centre_rows = f.k_centred ? *a.seq_centres : a.seq_lens;
    Push push;
    if (g.splits > 1) {
      const WorkspaceLayout w = workspace_layout(p, g);
      const std::uint64_t o_at = w.o_at(a.workspace->memory.size);
      bindings.push_back(tilekernels::detail::workspace_region(*a.workspace, o_at, w.bytes()));
      push.ml_at = static_cast<std::uint32_t>(w.ml_offset / 16);
    } else {
      bindings.push_back(a.output);
    }
    bindings.push_back(centre);
    bindings.push_back(centre_rows);
    bindings.push_back(g.fused_merge ? *a.arrivals : a.output);
    push.centres = f.k_centred ? static_cast<std::uint32_t>(a.k_centre->shape[0]) : 0;
    push.num_seqs = static_cast<std::uint32_t>(p.num_seqs);
    push.kv_heads = static_cast<std::uint32_t>(p.kv_heads);
    push.max_pages = static_cast<std::uint32_t>(p.max_pages);
    push.num_pages = static_cast<std::uint32_t>(p.num_pages);
    push.gqa = static_cast<std::uint32_t>(gqa);
    push.q_len = static_cast<std::uint32_t>(p.q_len);
    push.splits = g.splits;
    push.flags = (a.lse ? 1u : 0u) | (a.sinks ? 2u : 0u);
    push.window = a.options.window;
    push.scale = a.options.scale ? *a.options.scale : static_cast<float>(1.0 / std::sqrt(double(f.dim)));
    push.softcap = a.options.softcap;
    push.inv_sqrt_dim = static_cast<float>(1.0 / std::sqrt(static_cast<double>(f.dim)));
    const auto q = q_view(a), out = output_view(a);
    push.q_at = q.at, push.q_token = q.token, push.q_head = q.head;
    push.o_at = out.at, push.o_token = out.token, push.o_head = out.head;
    const auto units = static_cast<std::uint64_t>(p.num_seqs * p.kv_heads);
    tilekernels::detail::record_dispatch(*ctx_, cmd, pipeline, bindings, push, units * g.splits,
                                         static_cast<std::uint32_t>(chunks));
    if (g.splits > 1 && !g.fused_merge) {
      compute_barrier(*ctx_, cmd);
      tilekernels::detail::record_dispatch(*ctx_, cmd, pipelines_.get(name, merge_key(g)), bindings, push,
                                           units * static_cast<std::uint64_t>(chunks), g.row_vecs);
    }
  }

  // Builds the pipelines of a plan whose variant or geometry was chosen by
  // hand (the envelope's are built by the constructor). Not thread-safe:
  // call it before recording from several threads.
  void prepare(const Plan& plan) {
    pipelines_.add(*ctx_, key(*plan.variant, plan.geometry));
    if (plan.geometry.splits > 1 && !plan.geometry.fused_merge) pipelines_.add(*ctx_, merge_key(plan.geometry));
  }

  // For tests and tools: allocates the workspace and the arrival counters
  // the call can use (initialised in the same submission), records into a
  // fresh command buffer, submits and waits.
  void run(const Args& a) const {
    check(a);
    Args with = a;
    std::optional<Tensor> scratch, counters;
    if (!a.workspace) {
      const auto bytes = workspace_bytes(problem(a));
      if (bytes) {
        scratch.emplace(*ctx_, DType::u32, Shape{static_cast<std::int64_t>(bytes / 4)});
        with.workspace = Workspace{scratch->ref()};
      }
    }
    if (!a.arrivals) {
      counters.emplace(*ctx_, DType::u32, Shape{arrival_slots(problem(a))});
      with.arrivals = counters->ref();
    }
    ctx_->submit_and_wait([&](vk::CommandBuffer cmd) {
      if (counters) record_arrivals_init(cmd, *with.arrivals);
      record(cmd, with);
    });
  }

 private:
  static CacheFormat validated(const CacheFormat& f, DType q, DType out) {
    f.validate(name);
    const auto is_float = [](DType t) { return t == DType::f32 || t == DType::f16 || t == DType::bf16; };
    if (!is_float(q) || !is_float(out))
      throw Error(ErrorCode::invalid_argument, std::string(name) + ": q and output dtypes must be f32, f16 or bf16");
    return f;
  }

  tilekernels::detail::ViewLayout q_view(const Args& a) const {
    const auto& s = a.q.shape;
    return tilekernels::detail::expect_view(*ctx_, name, "q", a.q, q_dtype_, {s.at(0), s.at(1), s.at(2), format_.dim}, 2);
  }
  tilekernels::detail::ViewLayout output_view(const Args& a) const {
    const auto& s = a.q.shape;
    const auto v =
        tilekernels::detail::expect_view(*ctx_, name, "output", a.output, out_dtype_, {s.at(0), s.at(1), s.at(2), format_.dim}, 2);
    if (dtype_size(out_dtype_) == 2 && !v.aligned(2))
      throw Error(ErrorCode::invalid_argument, tilekernels::detail::where(name, "output") +
                                                   "a 16-bit output view needs an even element offset and even strides "
                                                   "(dim pairs are written as 32-bit words), got offset " +
                                                   std::to_string(a.output.offset) + " bytes and strides " +
                                                   shape_string(a.output.strides));
    return v;
  }

  // Whether a workgroup of variant `v` with geometry `g` fits the device.
  bool fits(const Variant<Problem>& v, const Geometry& g) const {
    const auto& info = ctx_->info();
    const bool tc = v.path == Path::tensor_core_fp16;
    const std::uint32_t subgroups = tc ? g.workgroup / (is_lanes(v) ? 32 : std::max(info.subgroup_size, 1u)) : 0;
    const std::uint32_t shared = tc ? decode_attention_tc_shared_bytes(format_, subgroups, g.workgroup, is_lanes(v))
                                    : decode_attention_shared_bytes(format_, g.workgroup, g.tokens_per_invocation, g.row_vecs);
    return g.workgroup <= info.max_workgroup_invocations && shared <= info.max_shared_memory;
  }

  // The pipelines (decode_attention_pipelines.hpp).
  Spec spec(const Geometry& g) const;
  PipelineKey key(const Variant<Problem>& v, const Geometry& g) const;
  PipelineKey merge_key(const Geometry& g) const;
  void prepare_envelope();

  Context* ctx_;
  CacheFormat format_;
  DType q_dtype_, out_dtype_;
  Envelope envelope_;
  PipelineSet pipelines_;
};

template <class Cache, DType Q = DType::bf16, DType Out = DType::bf16>
struct DecodeAttentionConfig {
  static_assert(Q == DType::f32 || Q == DType::f16 || Q == DType::bf16,
                "DecodeAttentionConfig: Q must be DType::f32, DType::f16 or DType::bf16");
  static_assert(Out == DType::f32 || Out == DType::f16 || Out == DType::bf16,
                "DecodeAttentionConfig: Out must be DType::f32, DType::f16 or DType::bf16");
  static_assert(decode_attention_shared_bytes(Cache::format, 128, 4, 2) <= 32768,
                "DecodeAttentionConfig: the largest geometry must fit the portable 32 KiB of shared memory");
  using cache = Cache;
  static constexpr DType q_dtype = Q, out_dtype = Out;
};

template <class Config>
class DecodeAttention : public DecodeAttentionKernel {
 public:
  using Cache = typename Config::cache;
  explicit DecodeAttention(Context& ctx, Envelope envelope = {})
      : DecodeAttentionKernel(ctx, Cache::format, Config::q_dtype, Config::out_dtype, envelope) {}
};

static_assert(Kernel<DecodeAttentionKernel>, "aura.decode_attention must have the kernel interface (core/kernel.hpp)");

}  // namespace tilekernels::aura

#include "tilekernels/aura/decode_attention_checks.hpp"
#include "tilekernels/aura/decode_attention_geometry.hpp"
#include "tilekernels/aura/decode_attention_pipelines.hpp"
