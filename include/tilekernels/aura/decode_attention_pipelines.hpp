// SPDX-License-Identifier: MIT
// The pipelines of aura::DecodeAttention (decode_attention.hpp): the keys
// of a geometry and every pipeline a call inside an envelope may take,
// built by the constructor.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "tilekernels/aura/decode_attention.hpp"

namespace tilekernels::aura {

// The pipeline keys of a geometry: the first dispatch, and the merge of a
// split call (the first dispatch's constants but its workgroup and TPI,
// which the merge does not read).
inline DecodeAttentionKernel::Spec DecodeAttentionKernel::spec(const Geometry& g) const {
  const CacheFormat& f = format_;
  Spec spec;
  spec.workgroup = g.workgroup;
  spec.DIM = f.dim;
  spec.PAGE_TOKENS = f.page_tokens;
  spec.K_BITS = f.k_bits;
  spec.V_BITS = f.v_bits;
  spec.K_ROT = f.rotation_code(f.k_bits);
  spec.V_ROT = f.rotation_code(f.v_bits);
  spec.NORM_DTYPE = static_cast<std::uint32_t>(f.norm_dtype);
  spec.RAW_DTYPE = static_cast<std::uint32_t>(f.raw_dtype);
  spec.Q_DTYPE = static_cast<std::uint32_t>(q_dtype_);
  spec.OUT_DTYPE = static_cast<std::uint32_t>(out_dtype_);
  spec.ROW_VECS = g.row_vecs;
  spec.TPI = g.tokens_per_invocation;
  spec.K_CODEBOOK_AT = f.k_codebook_at();
  spec.V_CODEBOOK_AT = f.v_codebook_at();
  spec.K_ROTATION_AT = f.k_rotation_at();
  spec.V_ROTATION_AT = f.v_rotation_at();
  spec.PUBLISH = g.splits > 1 ? (g.fused_merge ? 2 : 1) : 0;
  spec.K_CENTRED = f.k_centred ? 1 : 0;
  spec.K_HI_DIMS = f.k_hi_dims;
  spec.K_HI_CODEBOOK_AT = f.k_hi_codebook_at();
  return spec;
}
inline PipelineKey DecodeAttentionKernel::key(const Variant<Problem>& v, const Geometry& g) const {
  Spec s = spec(g);
  if (v.path == Path::tensor_core_fp16) tilekernels::detail::set_matrix_spec(s, ctx_->info(), v);
  return tilekernels::detail::pipeline_key<Push>(*ctx_, v, s, 15);
}
inline PipelineKey DecodeAttentionKernel::merge_key(const Geometry& g) const {
  Spec s = spec(g);
  s.workgroup = std::max(format_.dim / 2, merge_variant.invocations);
  s.TPI = 1;
  return tilekernels::detail::pipeline_key<Push>(*ctx_, merge_variant, s, 15);
}

// Every pipeline a call inside the envelope may take: per row count (each
// new-token count times the envelope's GQA group, or every count up to 17
// where the heads are open: no rule tells more rows apart) and lse or
// not, the variant plan() takes, each geometry its rule can give (any
// key count and batch), unsplit and split, and the merge of the split ones
// (a second dispatch, or in the last workgroup where fused_merge() says).
inline void DecodeAttentionKernel::prepare_envelope() {
  const Envelope& e = envelope_;
  if (e.max_num_seqs < 0 || e.max_q_len < 1 || e.max_q_len > max_q_len || e.q_heads < 0 || e.kv_heads < 0 ||
      (e.kv_heads && e.q_heads % e.kv_heads))
    throw Error(ErrorCode::invalid_argument, std::string(name) + ": envelope: max_q_len must be in [1, " +
                                                 std::to_string(max_q_len) +
                                                 "], maxima >= 0 (0: any), q_heads a multiple of kv_heads");
  std::vector<std::int64_t> rows;
  if (e.q_heads && e.kv_heads)
    for (std::int64_t ql = 1; ql <= e.max_q_len; ++ql) rows.push_back(e.q_heads / e.kv_heads * ql);
  else
    for (std::int64_t r = 1; r <= 17; ++r) rows.push_back(r);
  for (const std::int64_t r : rows)
    for (const bool lse : {false, true}) {
      if (lse && !e.lse) continue;
      // r rows as one new token of r query heads (the rules read rows only).
      const Problem p{
          1, 1, r, 1, 1, 1, 1, format_.dim, format_.k_bits, format_.v_bits, out_dtype_, lse, format_.k_hi_dims};
      const Variant<Problem>& v = select_variant(*ctx_, name, variants, p);
      std::vector<Geometry> geometries;
      if (v.path == Path::tensor_core_fp16) {
        geometries.push_back(tensor_core_geometry(p, false, is_lanes(v)));
      } else {
        Geometry g;
        g.row_vecs = r <= 4 ? 1 : 2;
        // 256 x 1: the rule's wider workgroup where few split (split calls
        // only, not on CPU devices).
        for (const auto& [wg, tpi] : std::array<std::array<std::uint32_t, 2>, 4>{
                 {{128, tokens_per_invocation(128)}, {128, 1}, {64, 1}, {256, 1}}}) {
          if (wg == 256 && ctx_->info().is_cpu()) continue;
          g.workgroup = wg;
          g.tokens_per_invocation = tpi;
          geometries.push_back(g);
        }
      }
      for (Geometry g : geometries)
        for (const std::uint32_t splits : {1u, 2u}) {
          g.splits = splits;
          if (!fits(v, g) || (g.workgroup == 256 && splits == 1)) continue;
          prepare(Plan{&v, g});
          Problem counted = p;  // a call with arrival counters
          counted.arrivals = true;
          if (!fused_merge(counted, g)) continue;
          Geometry fused = g;
          fused.fused_merge = true;
          prepare(Plan{&v, fused});
        }
    }
}

}  // namespace tilekernels::aura
