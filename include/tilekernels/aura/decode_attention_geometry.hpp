// SPDX-License-Identifier: MIT
// The geometry rules of aura::DecodeAttention (decode_attention.hpp): how
// large a workgroup, how many keys per invocation and how many splits a
// call takes, per variant.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>

#include "tilekernels/aura/decode_attention.hpp"

namespace tilekernels::aura {

// Keys each invocation scores per block (1, 2 or 4) for a workgroup size:
// the most whose code words (K rows, value lanes' words) stay within 32
// registers of each kind.
inline std::uint32_t DecodeAttentionKernel::tokens_per_invocation(std::uint32_t workgroup) const {
  const CacheFormat& f = format_;
  const std::uint32_t lanes = f.dim / 8, groups = workgroup / lanes;
  const std::uint32_t lane_words = f.v_raw() ? 4 : (8 * f.v_bits) % 32 == 0 ? 8 * f.v_bits / 32 : 2;
  for (std::uint32_t tpi : {4u, 2u}) {
    const std::uint32_t value_keys = (workgroup * tpi + groups - 1) / groups;
    if (tpi * f.k_words() <= 32 && value_keys * lane_words <= 32) return tpi;
  }
  return 1;
}

// The geometry of a variant. The CUDA-core ones (measurements:
// bench/notes/2026-11-aura-decode-attention.md): about 2 workgroups per multiprocessor in all (8 on a CPU device): the
// largest blocks (128 invocations, as many keys each as registers allow,
// then 1 key, then 64 invocations) that give at least 3/4 of that count
// one block each; then, unless the call has that many (sequence, KV head,
// row chunk) groups already, as many splits as reach the count, rounded
// so the splits get equal numbers of blocks. More workgroups than that
// lose: every split's state is merged, and one large block per workgroup
// amortises its barriers over more keys. Where the splits merge in one
// dispatch (fused_merge()), its last workgroup reads every state: the
// 128-invocation blocks stay, and one batch of states is taken where
// splits stay short (below); where few workgroups split, 256 invocations
// take their keys in fewer blocks (below). The tensor-core ones have fixed
// blocks (16 keys per subgroup; the staged one 4 subgroups and 16 rows) and
// their own split rule at one workgroup per multiprocessor: their merge
// reads 16-row states two at a time, and fewer splits won at every length
// measured (bench/notes/2026-11-aura-decode-attention-tensor-cores.md).
inline DecodeAttentionGeometry DecodeAttentionKernel::geometry(const Problem& p, bool workspace,
                                                              const Variant<Problem>& v) const {
  if (v.path == Path::tensor_core_fp16) return tensor_core_geometry(p, workspace, is_lanes(v));
  Geometry g;
  g.row_vecs = decode_attention_rows(p) <= 4 ? 1 : 2;
  const std::int64_t units = decode_attention_groups(p, g.row_vecs);
  const std::int64_t enough = split_target(false) * 3 / 4;
  const std::int64_t keys = std::max<std::int64_t>(p.keys, 1);
  const std::array<std::array<std::uint32_t, 2>, 3> candidates{
      {{128, tokens_per_invocation(128)}, {128, 1}, {64, 1}}};
  std::int64_t blocks = 1;
  for (const auto& c : candidates) {
    // Where the larger blocks' splits merge in one dispatch (fused_merge()),
    // they stay: smaller blocks mean more states for the last workgroup
    // (bench/notes/2026-12-aura-short-context.md).
    if (workspace && c[0] < g.workgroup) {
      Geometry larger = g;
      larger.splits = even_splits(split_cap(p, g, false), blocks);
      if (fused_merge(p, larger)) break;
    }
    g.workgroup = c[0];
    g.tokens_per_invocation = c[1];
    blocks = (keys + c[0] * c[1] - 1) / (c[0] * c[1]);
    if (!workspace || units * blocks >= enough) break;
  }
  if (workspace) g.splits = even_splits(split_cap(p, g, false), blocks);
  // A fused merge (fused_merge()) loads the states a batch at a time
  // (TK_DECODE_ATTENTION_MERGE_BATCH). Where one batch would do with
  // at most 2 blocks per split, its last workgroup saves more than a
  // block's time (bench/notes/2026-12-aura-short-context.md); longer
  // splits lose.
  const std::int64_t batch = TK_DECODE_ATTENTION_MERGE_BATCH(format_.dim, g.workgroup);
  if (workspace && g.splits > batch) {
    Geometry one = g;
    one.splits = even_splits(batch, blocks);
    if (fused_merge(p, one) && blocks <= 2ll * one.splits) g = one;
  }
  // Where the call has at most one workgroup per multiprocessor and its
  // splits take blocks of 128 keys, 256 invocations take the same keys in
  // half as many blocks: the same bytes per workgroup, with twice the
  // warps to cover each other's latency and half the dependent blocks
  // (bench/notes/2026-12-aura-short-context-wide.md). Not on CPU devices,
  // which run a workgroup's invocations in turn.
  const auto& info = ctx_->info();
  if (workspace && g.workgroup == 128 && g.tokens_per_invocation == 1 && !info.is_cpu() &&
      units * g.splits <= split_target(false) / 2) {
    Geometry wide = g;
    wide.workgroup = 256;
    wide.splits = even_splits(g.splits, (keys + 255) / 256);
    if (wide.splits == g.splits && fits(v, wide)) g = wide;
  }
  return g;
}

// Workgroups the split rules aim at: about 2 per multiprocessor for the
// CUDA-core variants (8 on a CPU device), 1 for the tensor-core ones.
inline std::int64_t DecodeAttentionKernel::split_target(bool tc) const {
  const auto& info = ctx_->info();
  if (tc) return info.multiprocessors ? info.multiprocessors : 128;
  return info.multiprocessors ? 2 * info.multiprocessors : info.is_cpu() ? 8 : 256;
}
// The most splits a rule takes for these batch dimensions at any length
// (1: none, the call has enough groups already); a length's blocks may
// round it down (even_splits), never up. The tensor-core rule rounds down:
// one workgroup more than the multiprocessors doubles the time of those
// that take two.
inline std::int64_t DecodeAttentionKernel::split_cap(const Problem& p, const Geometry& g, bool tc) const {
  const std::int64_t units = std::max<std::int64_t>(decode_attention_groups(p, g.row_vecs), 1);
  const std::int64_t target = split_target(tc);
  if (units >= target * 3 / 4) return 1;
  return std::min<std::int64_t>(tc ? target / units : (target + units - 1) / units, max_splits);
}

// At most `wanted` splits (and no more than blocks or max_splits), rounded
// so that every split takes the same number of blocks but the last.
inline std::uint32_t DecodeAttentionKernel::even_splits(std::int64_t wanted, std::int64_t blocks) {
  const std::int64_t splits = std::min<std::int64_t>({wanted, blocks, max_splits});
  const std::int64_t per_split = (blocks + splits - 1) / splits;
  return static_cast<std::uint32_t>((blocks + per_split - 1) / per_split);
}

// The lanes variant takes chunks of 4, 8 or 16 rows (the matrix tiles
// keep 16, the rest padding; at most 8 in pairs), so that the merges and
// V's rotation handle the rows that exist, and workgroups of 256 (8
// subgroups: twice the loads in flight per multiprocessor; its registers
// allow one workgroup).
inline DecodeAttentionGeometry DecodeAttentionKernel::tensor_core_geometry(const Problem& p, bool workspace,
                                                                          bool lanes) const {
  const std::uint32_t subgroup = lanes ? 32 : ctx_->info().subgroup_size;
  std::uint32_t subgroups = tc_subgroups;
  if (!lanes && decode_attention_tc_shared_bytes(format_, subgroups, subgroups * subgroup) > ctx_->info().max_shared_memory)
    subgroups = 2;
  Geometry g{lanes ? lanes_workgroup : subgroups * subgroup, 1, 4, 1};
  const std::int64_t rows = decode_attention_rows(p);
  if (lanes) g.row_vecs = rows <= 4 ? 1 : rows <= 8 || lanes_pairs() ? 2 : 4;
  // 16 keys per subgroup, per pair of them above Dim 128
  const std::int64_t block_keys = g.workgroup / subgroup * 16 / (lanes && lanes_pairs() ? 2 : 1);
  const std::int64_t blocks = (std::max<std::int64_t>(p.keys, 1) + block_keys - 1) / block_keys;
  if (workspace) g.splits = even_splits(split_cap(p, g, true), blocks);
  return g;
}

}  // namespace tilekernels::aura
