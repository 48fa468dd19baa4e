// SPDX-License-Identifier: MIT
// The types of aura::DecodeAttention's calls (decode_attention.hpp):
// options, arguments, the workgroup geometry and the problem a variant is
// chosen for; and what each kernel's workgroup needs of the device (shared
// memory, the fragment layout of the lanes variant).
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "tilekernels/aura/decode_attention_abi.h"
#include "tilekernels/aura/paged_cache.hpp"
#include "tilekernels/core.hpp"

namespace tilekernels::aura {

struct DecodeAttentionOptions {
  std::optional<float> scale;  // default 1 / sqrt(dim); must be finite
  std::uint32_t window = 0;    // sliding window W (keys at positions > pos - W); 0: none
  float softcap = 0;           // cap * tanh(z / cap); 0: none
};

struct DecodeAttentionArgs {
  TensorRef q;  // a view (decode_attention.hpp)
  TensorRef k_codes;
  std::optional<TensorRef> k_norms;
  TensorRef v_codes;
  std::optional<TensorRef> v_norms;
  TensorRef block_table, seq_lens;
  TensorRef tables;  // the format's codebooks and rotations (CacheTables)
  TensorRef output;  // a view like q
  std::optional<TensorRef> lse = {}, sinks = {};
  DecodeAttentionOptions options = {};
  std::optional<Workspace> workspace = {};
  // Optional host copies of seq_lens [num_seqs] and block_table
  // [num_seqs, max_pages] (either may be given alone): checked, and used
  // to size the split.
  std::span<const std::int32_t> host_seq_lens = {}, host_block_table = {};
  // The longest seq_len of the call where the host knows it without a copy
  // (0: unknown; the capacity max_pages * page_tokens is assumed).
  std::int64_t max_seq_len = 0;
  // Centred formats only (paged_cache.hpp): the centres [centres, kv_heads,
  // Dim] f32 and each sequence's row of them [num_seqs] i32, and optionally
  // the host copy of seq_centres (checked when given).
  std::optional<TensorRef> k_centre = {}, seq_centres = {};
  std::span<const std::int32_t> host_seq_centres = {};
  // Optional arrival counters [>= arrival_slots(problem)] u32, each holding
  // DecodeAttentionKernel::arrival_tag before the first call
  // (record_arrivals_init) and left so by every call. With them a split
  // call may take one dispatch: each group's last workgroup to arrive
  // merges the split states (Geometry::fused_merge). Kept apart from the
  // workspace: memory that other work overwrites would make the affected
  // rows NaN until it is initialised again.
  std::optional<TensorRef> arrivals = {};
};

// The largest calls a DecodeAttention object is built for: its
// constructor builds every pipeline they may take (0: any).
struct DecodeAttentionEnvelope {
  std::int64_t max_num_seqs = 0;
  std::int64_t max_q_len = 16;
  std::int64_t q_heads = 0, kv_heads = 0;  // the model's heads, where fixed
  bool lse = true;                         // calls may ask for lse
};

// The workgroup geometry of one call.
struct DecodeAttentionGeometry {
  std::uint32_t workgroup = 128;            // invocations: 64, 128 or 256 (the lanes variant: 128 or 256)
  std::uint32_t tokens_per_invocation = 1;  // keys each invocation scores per block: 1, 2 or 4
  std::uint32_t row_vecs = 1;               // query rows per workgroup / 4: 1 or 2 (tensor cores: 4; lanes: 1, 2 or 4)
  std::uint32_t splits = 1;                 // workgroups per KV head and row chunk along the keys (> 1 needs the workspace)
  bool fused_merge = false;  // splits > 1: the last workgroup to arrive merges (Args::arrivals), one dispatch
};

struct DecodeAttentionProblem {
  std::int64_t num_seqs = 0, q_len = 0, q_heads = 0, kv_heads = 0, max_pages = 0, num_pages = 0;
  std::int64_t keys = 0;  // the most keys one query row may see (an upper bound)
  // The kernel's format and output dtype (what the tensor-core variant's rule reads).
  std::uint32_t dim = 0, k_bits = 0, v_bits = 0;
  DType out_dtype = DType::f32;
  bool lse = false;  // the call asks for lse
  std::uint32_t k_hi_dims = 0;  // split keys (CacheFormat::k_hi_dims)
  bool arrivals = false;        // the call passes arrival counters (Args::arrivals)
};

// Shared memory of a decode-attention workgroup
// (shaders/aura/decode_attention.comp): the queries, the scratch (weights,
// value sums), the reductions, codebooks, page ids, the arrival's word.
constexpr std::uint32_t decode_attention_shared_bytes(const CacheFormat& f, std::uint32_t workgroup,
                                                      std::uint32_t tokens_per_invocation, std::uint32_t row_vecs) {
  const auto levels = [](std::uint32_t bits) { return CacheFormat::raw(bits) ? 1u : 1u << bits; };
  const std::uint32_t pages = workgroup * tokens_per_invocation / f.page_tokens + 2;
  return 16 * (f.dim * row_vecs + TK_DECODE_ATTENTION_SCRATCH(workgroup) + (workgroup + workgroup / 8) * row_vecs) +
         4 * (levels(f.k_bits) + (f.k_split() ? levels(f.k_hi_bits()) : 0) + levels(f.v_bits)) + 8 * pages + 8;
}

// Shared memory of a tensor-core workgroup (shaders/aura/decode_attention_tc.glsl):
// the subgroups' stages and the row-index tile, the scratch, codebooks, the
// per-subgroup norms, factors and states, the row scales and centre terms,
// and two reductions (the second for centred keys only, counted always),
// the arrival's word.
// The lanes variant (decode_attention_tc_lanes.glsl) has no per-subgroup
// stages (its smem holds the queries, then the merged O) and adds its byte
// table in 16 copies.
// Whether the lanes variant's subgroups work in pairs, one half of the dims
// each (decode_attention_tc.glsl derives its HALVES from Dim the same way).
// In pairs it exchanges partial scores through its query area: 8 subgroups
// x 2 buffers x 32 lanes of uvec4 within 16 rows of Dim / 8 + 1 uvec4
// (decode_attention_tc_lanes.glsl).
constexpr bool decode_attention_lanes_pairs(std::uint32_t dim) { return dim > 128; }
static_assert(16 * (256 / 8 + 1) >= 8 * 2 * 32, "the lanes variant's score exchange must fit its query area");
constexpr std::uint32_t decode_attention_tc_shared_bytes(const CacheFormat& f, std::uint32_t subgroups,
                                                         std::uint32_t workgroup, bool lanes = false) {
  // The lanes variant: the queries, then (16 rows, Dim <= 128) the merged O.
  const std::uint32_t main = lanes ? 16 * (decode_attention_lanes_pairs(f.dim) ? f.dim / 8 + 1 : f.dim / 4 + 1)
                                   : subgroups * TK_DECODE_ATTENTION_TC_STAGE(f.dim);
  return 16 * (main + 64 + TK_DECODE_ATTENTION_TC_SCRATCH(f.dim, lanes ? 1 : 0)) +
         4 * ((1u << f.k_bits) + (1u << f.v_bits)) + 4 * (subgroups * 16 * 5 + 32 + 2 * workgroup) + 8 +
         (lanes ? 256 * 16 * 4 : 0);
}

// Whether the device's fp16 cooperative matrices are whole 16 x 16 x 16
// tiles with the fragment layout that the lanes variant
// (shaders/aura/decode_attention_tc_lanes.glsl) builds its operands in and
// reads its results from: mma.sync's m16n8k16 for A, B and the accumulator
// at subgroups of 32, as the Context read it back from the device
// (DeviceInfo::fp16_layout).
inline bool decode_attention_lanes_layout(const DeviceInfo& info) {
  const MmaLayout& l = info.fp16_layout;
  return info.cooperative_matrix_fp16 && info.fp16_tile == MatrixTile{16, 16, 16} && info.subgroup_size == 32 &&
         l.a && l.b && l.accumulator;
}

// Query rows per KV head of a call (GQA x new tokens).
inline std::int64_t decode_attention_rows(const DecodeAttentionProblem& p) {
  return p.q_heads / std::max<std::int64_t>(p.kv_heads, 1) * p.q_len;
}
// The (sequence, KV head, row chunk) groups of a call with chunks of
// 4 * row_vecs rows: what the split rules count.
inline std::int64_t decode_attention_groups(const DecodeAttentionProblem& p, std::uint32_t row_vecs) {
  return p.num_seqs * p.kv_heads * ((decode_attention_rows(p) + 4 * row_vecs - 1) / (4 * row_vecs));
}
// The merge of a group's states (shaders/common/decode_attention_merge_states.glsl)
// stages two vec4 per split in the kernel's scratch: the tensor-core
// variants' at Dim 64 is the smallest (the CUDA-core kernel's holds 8 vec4
// per invocation, 512 at least).
static_assert(2 * TK_DECODE_ATTENTION_MAX_SPLITS <= TK_DECODE_ATTENTION_TC_SCRATCH(64u, 0),
              "the merge's scratch must hold two vec4 per split");
// Arrival counters a call needs: one per group of any geometry (chunks of
// at least 4 rows), so that they serve every smaller batch.
inline std::int64_t decode_attention_arrival_slots(const DecodeAttentionProblem& p) {
  return decode_attention_groups(p, 1);
}

// Regions of the workspace for a geometry: the split states' o and their
// (m, l), group-major (decode_attention_finish.glsl), in the scratch at the
// back of the range passed (o_at(), ml_at(); workspace.hpp); nothing needs
// zeroing. All zero bytes without splits.
struct DecodeAttentionWorkspace {
  detail::ZeroScratchLayout regions;
  std::uint64_t ml_offset = 0;  // from o_at()
  std::uint64_t bytes() const { return regions.bytes(); }
  std::uint64_t o_at(std::uint64_t size) const { return regions.scratch_at(size); }
  std::uint64_t ml_at(std::uint64_t size) const { return o_at(size) + ml_offset; }
};
inline DecodeAttentionWorkspace decode_attention_workspace(const CacheFormat& f, const DecodeAttentionProblem& p,
                                                           const DecodeAttentionGeometry& g) {
  DecodeAttentionWorkspace w;
  if (g.splits <= 1) return w;
  const std::uint64_t states = static_cast<std::uint64_t>(decode_attention_groups(p, g.row_vecs)) * g.splits;
  w.regions.add_scratch(states * f.dim * g.row_vecs * 16);
  w.ml_offset = w.regions.add_scratch(states * g.row_vecs * 32);
  return w;
}

// The eligibility rules of DecodeAttention's variants (decode_attention.hpp).
struct DecodeAttentionRules {
  using Problem = DecodeAttentionProblem;
  // Each path comes as two modules of one shader: the long loops unrolled
  // (GPUs), or left to the driver ("compact": CPU devices, whose compilers
  // take tens of seconds over the unrolled module).
  // The subgroup variants reduce with subgroup arithmetic and combine one
  // value per subgroup (gl_SubgroupID, gl_NumSubgroups): they need the
  // subgroups to be what the builtins say.
  static Status module_for(const DeviceInfo& info, bool compact, bool subgroups) {
    if (subgroups && !info.subgroups_as_reported)
      return Status::failure(ErrorCode::unsupported, "the device's subgroups are not what its builtins report");
    if (compact != info.is_cpu())
      return Status::failure(ErrorCode::unsupported, compact ? "a GPU takes the unrolled module"
                                                             : "a CPU device takes the compact module");
    return Status::success();
  }
  static Status subgroup_gpu(const DeviceInfo& i, const Problem&) { return module_for(i, false, true); }
  static Status subgroup_cpu(const DeviceInfo& i, const Problem&) { return module_for(i, true, true); }
  static Status portable_gpu(const DeviceInfo& i, const Problem&) { return module_for(i, false, false); }
  static Status portable_cpu(const DeviceInfo& i, const Problem&) { return module_for(i, true, false); }
  // What both tensor-core variants need: their fp16 operands (Q scaled per
  // row by a power of two, the codebooks rounded to fp16) are accurate to
  // ~1e-4 relative, so they serve bf16 and f16 outputs without lse only
  // (f32 outputs and lse, budget 1e-5, would need hi + lo splits of both
  // operands: three products where they take one); and both sides coded
  // (raw bf16 values do not fit fp16's range).
  static Status fp16_operands_rule(const Problem& p) {
    const auto no = [](const std::string& why) { return Status::failure(ErrorCode::unsupported, why); };
    if (p.out_dtype == DType::f32) return no("f32 output needs more than fp16 operands give");
    if (p.lse) return no("lse (f32) needs more than fp16 operands give");
    if (CacheFormat::raw(p.k_bits) || CacheFormat::raw(p.v_bits)) return no("raw cache sides exceed fp16's range");
    if (p.k_hi_dims != 0) return no("split keys are read by the CUDA-core variants only");
    return Status::success();
  }
  // What the staged tensor-core variant can run (on the device's tile, at
  // any subgroup size: decode_attention_tc.glsl): fp16_operands_rule, Dim
  // 64, 128 or 256, and a lane's code words of a tile of both sides within
  // 32 registers.
  static Status tensor_core_capable(const DeviceInfo&, const Problem& p) {
    const auto no = [](const std::string& why) { return Status::failure(ErrorCode::unsupported, why); };
    if (Status s = fp16_operands_rule(p); !s) return s;
    if (p.dim != 64 && p.dim != 128 && p.dim != 256) return no("Dim must be 64, 128 or 256");
    if ((p.k_bits + p.v_bits) * p.dim / 64 > 32) return no("the code words of a tile exceed 32 registers per lane");
    return Status::success();
  }
  // Where it is taken: with at least 16 query rows per KV head (GQA x new
  // tokens, one full tile; with 4 the CUDA-core variants are faster on the
  // H100, with 16 it is: bench/notes/2026-11-aura-decode-attention-tensor-cores.md),
  // on a GPU (a CPU device's compiler takes minutes over its products, and
  // its CUDA-core variants serve it). Tests force it elsewhere.
  static Status tensor_core_staged(const DeviceInfo& info, const Problem& p) {
    const auto no = [](const std::string& why) { return Status::failure(ErrorCode::unsupported, why); };
    if (Status s = tensor_core_capable(info, p); !s) return s;
    if (p.kv_heads > 0 && p.q_heads / p.kv_heads * p.q_len < 16)
      return no("fewer than 16 query rows per KV head: the CUDA-core variants are faster there");
    if (info.is_cpu()) return no("a CPU device compiles its products for minutes: the CUDA-core variants serve it");
    return Status::success();
  }
  // The lanes variant: the tensor-core variant with both products' operands
  // built in registers from the codes (no shared-memory stage), for coded K
  // and V (2 to 8 bits) at Dim 64, 128 or 256 (in pairs of subgroups, one
  // half of the dims each) where the fragment layout is known
  // (decode_attention_lanes_layout). Faster than the staged variant at 16
  // rows per KV head, and than the CUDA-core variants at 4 and 8 rows from
  // 1K keys on (bench/notes/2026-11-aura-decode-attention-step-cost.md, Sweep_DecodeAttentionCrossover).
  static Status lanes(const DeviceInfo& info, const Problem& p) {
    const auto no = [](const std::string& why) { return Status::failure(ErrorCode::unsupported, why); };
    if (!decode_attention_lanes_layout(info)) return no("the device's fragment layout is not the one the lanes variant builds");
    if (Status s = fp16_operands_rule(p); !s) return s;
    if (p.dim != 64 && p.dim != 128 && p.dim != 256) return no("Dim must be 64, 128 or 256");
    return Status::success();
  }
};

// Throws unless the host copies of seq_lens and block_table (where given)
// agree with the call's shapes and the cache.
inline void check_decode_attention_host_copies(const CacheFormat& format, const DecodeAttentionArgs& a) {
  const std::string name = "aura.decode_attention";
  const auto fail = [&](ErrorCode code, const std::string& tensor, const std::string& what) {
    throw Error(code, tilekernels::detail::where(name, tensor) + what);
  };
  const auto n = a.q.shape[0], ql = a.q.shape[1], max_pages = a.block_table.shape[1], pages = a.k_codes.shape[0];
  const std::int64_t capacity = max_pages * format.page_tokens;
  if (!a.host_seq_lens.empty()) {
    if (a.host_seq_lens.size() != static_cast<std::size_t>(n))
      fail(ErrorCode::shape_mismatch, "seq_lens", "the host copy holds " + std::to_string(a.host_seq_lens.size()) +
                                                      " values, expected " + std::to_string(n));
    for (std::size_t s = 0; s < a.host_seq_lens.size(); ++s) {
      const std::int64_t len = a.host_seq_lens[s];
      if (len < 0 || len > capacity)
        fail(ErrorCode::invalid_argument, "seq_lens", "seq_len " + std::to_string(len) + " of sequence " +
                                                          std::to_string(s) + " is outside [0, max_pages * page_tokens = " +
                                                          std::to_string(capacity) + "]");
      if (len > 0 && len < ql)
        fail(ErrorCode::invalid_argument, "seq_lens", "seq_len " + std::to_string(len) + " of sequence " +
                                                          std::to_string(s) + " is below q_len " + std::to_string(ql) +
                                                          " (the new tokens must be in the cache; 0 marks an inactive entry)");
    }
  }
  if (!a.host_block_table.empty()) {
    if (a.host_block_table.size() != static_cast<std::size_t>(n * max_pages))
      fail(ErrorCode::shape_mismatch, "block_table", "the host copy holds " + std::to_string(a.host_block_table.size()) +
                                                         " entries, expected " + std::to_string(n * max_pages));
    for (std::int64_t s = 0; s < n; ++s) {
      // Without lengths every entry must be a page; with them, those holding live positions.
      const std::int64_t len = a.host_seq_lens.empty() ? capacity : a.host_seq_lens[static_cast<std::size_t>(s)];
      for (std::int64_t i = 0; i * format.page_tokens < len; ++i) {
        const std::int32_t page = a.host_block_table[static_cast<std::size_t>(s * max_pages + i)];
        if (page < 0 || page >= pages)
          fail(ErrorCode::invalid_argument, "block_table",
               "entry [" + std::to_string(s) + ", " + std::to_string(i) + "] = " + std::to_string(page) +
                   " is not a page of the cache (" + std::to_string(pages) + " pages)");
      }
    }
  }
}

}  // namespace tilekernels::aura
