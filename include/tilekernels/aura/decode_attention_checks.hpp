// SPDX-License-Identifier: MIT
// The checks of aura::DecodeAttention's calls (decode_attention.hpp): the
// arguments against the format, the dtypes and each other, and a plan
// (a geometry changed by hand included) against the call, all before
// any GPU work.
#pragma once

#include <cmath>
#include <string>

#include "tilekernels/aura/decode_attention.hpp"

namespace tilekernels::aura {

inline void DecodeAttentionKernel::check(const Args& a) const {
  using tilekernels::detail::expect_rank;
  using tilekernels::detail::expect_tensor;
  using tilekernels::detail::where;
  const auto fail = [](ErrorCode code, const std::string& tensor, const std::string& what) {
    throw Error(code, where(name, tensor) + what);
  };
  expect_rank(name, "q", a.q, 4);
  const auto n = a.q.shape[0], ql = a.q.shape[1], qh = a.q.shape[2];
  const CacheFormat& f = format_;
  if (ql > max_q_len)
    fail(ErrorCode::invalid_argument, "q", "q_len must be at most " + std::to_string(max_q_len) + ", got " +
                                               std::to_string(ql));
  q_view(a);
  tilekernels::detail::expect_cache_side(*ctx_, name, f, true, a.k_codes, a.k_norms);
  tilekernels::detail::expect_cache_side(*ctx_, name, f, false, a.v_codes, a.v_norms);
  const auto pages = a.k_codes.shape[0], kvh = a.k_codes.shape[1];
  if (a.v_codes.shape[0] != pages || a.v_codes.shape[1] != kvh)
    fail(ErrorCode::shape_mismatch, "v_codes", "expected " + std::to_string(pages) + " pages of " +
                                                   std::to_string(kvh) + " heads like k_codes, got shape " +
                                                   shape_string(a.v_codes.shape));
  if (qh % kvh != 0)
    fail(ErrorCode::shape_mismatch, "q", "q_heads (" + std::to_string(qh) + ") must be a multiple of kv_heads (" +
                                             std::to_string(kvh) + ", from k_codes)");
  expect_rank(name, "block_table", a.block_table, 2);
  const auto max_pages = a.block_table.shape[1];
  expect_tensor(*ctx_, name, "block_table", a.block_table, DType::i32, {n, max_pages});
  expect_tensor(*ctx_, name, "seq_lens", a.seq_lens, DType::i32, {n});
  expect_tensor(*ctx_, name, "tables", a.tables, DType::f32, CacheTables::shape(f));
  output_view(a);
  if (a.lse) expect_tensor(*ctx_, name, "lse", *a.lse, DType::f32, {n, ql, qh});
  if (a.sinks) expect_tensor(*ctx_, name, "sinks", *a.sinks, DType::f32, {qh});
  const std::int64_t centres =
      tilekernels::detail::expect_key_centre(*ctx_, name, f, kvh, a.k_centre, a.seq_centres, "seq_centres", n);
  if (!f.k_centred && !a.host_seq_centres.empty())
    fail(ErrorCode::invalid_argument, "seq_centres", "a host copy was given for a format whose keys are not centred");
  tilekernels::detail::expect_centre_rows(name, "seq_centres", a.host_seq_centres, n, centres);
  const std::int64_t capacity = max_pages * f.page_tokens;
  const Options& o = a.options;
  if (o.scale && !std::isfinite(*o.scale))
    throw Error(ErrorCode::invalid_argument, std::string(name) + ": options: scale must be finite");
  if (!(o.softcap >= 0) || !std::isfinite(o.softcap))
    throw Error(ErrorCode::invalid_argument, std::string(name) + ": options: softcap must be finite and >= 0 (0: none)");
  if (a.max_seq_len < 0 || a.max_seq_len > capacity)
    throw Error(ErrorCode::invalid_argument, std::string(name) + ": max_seq_len must be in [0, max_pages * page_tokens = " +
                                                 std::to_string(capacity) + "], got " + std::to_string(a.max_seq_len));
  check_decode_attention_host_copies(format_, a);
  check(problem(a));
  if (a.arrivals) {
    // At least one counter per group of the call (more serve it too); the
    // dtype, density and range as any tensor's.
    const std::int64_t slots = arrival_slots(problem(a));
    const TensorRef& t = *a.arrivals;
    if (t.shape.size() != 1 || t.shape[0] < slots)
      fail(ErrorCode::shape_mismatch, "arrivals",
           "expected at least " + std::to_string(slots) + " counters in one dimension, got shape " +
               shape_string(t.shape));
    expect_tensor(*ctx_, name, "arrivals", t, DType::u32, t.shape);
  }
}

inline void DecodeAttentionKernel::check(const Args& a, const Plan& plan) const {
  check(a);
  const Geometry& g = plan.geometry;
  const auto bad = [&](const std::string& why) {
    throw Error(ErrorCode::invalid_argument, std::string(name) + ": geometry: " + why);
  };
  if (!plan.variant) bad("the plan has no variant");
  const bool tc = plan.variant->path == Path::tensor_core_fp16;
  const bool lanes = is_lanes(*plan.variant);
  if (tc) {
    const std::uint32_t sg = ctx_->info().subgroup_size;
    const bool wg_ok = lanes ? g.workgroup == 128 || g.workgroup == 256 : g.workgroup == 2 * sg || g.workgroup == 4 * sg;
    const bool rows_ok = lanes ? g.row_vecs == 1 || g.row_vecs == 2 || (g.row_vecs == 4 && !lanes_pairs())
                               : g.row_vecs == 4;
    if (!wg_ok || !rows_ok || g.tokens_per_invocation != 1)
      bad(lanes ? "the lanes variant takes workgroup 128 or 256, tokens_per_invocation 1, row_vecs 1, 2 or 4 (1 or 2 "
                  "above Dim 128)"
                : "the tensor-core variant takes workgroups of 2 or 4 subgroups (" + std::to_string(2 * sg) + " or " +
                      std::to_string(4 * sg) + " invocations), tokens_per_invocation 1, row_vecs 4");
  } else {
    if (g.workgroup != 64 && g.workgroup != 128 && g.workgroup != 256) bad("workgroup must be 64, 128 or 256");
    if (g.tokens_per_invocation != 1 && g.tokens_per_invocation != 2 && g.tokens_per_invocation != 4)
      bad("tokens_per_invocation must be 1, 2 or 4");
    if (g.row_vecs != 1 && g.row_vecs != 2) bad("row_vecs must be 1 or 2");
    // The block's weights fill the scratch (TK_DECODE_ATTENTION_SCRATCH).
    const std::uint32_t scratch = TK_DECODE_ATTENTION_SCRATCH(g.workgroup);
    if (g.workgroup * g.tokens_per_invocation * g.row_vecs > scratch)
      bad("workgroup " + std::to_string(g.workgroup) + " takes tokens_per_invocation x row_vecs of at most " +
          std::to_string(scratch / g.workgroup));
  }
  if (g.splits == 0 || g.splits > max_splits) bad("splits must be in [1, " + std::to_string(max_splits) + "]");
  if (!fits(*plan.variant, g)) bad("workgroup of " + std::to_string(g.workgroup) + " invocations exceeds the device's limits");
  if (g.splits > 1) {
    if (!a.workspace) throw Error(ErrorCode::invalid_argument, std::string(name) + ": workspace: splits need one");
    tilekernels::detail::expect_workspace(*ctx_, name, *a.workspace, workspace_bytes(problem(a), g));
  }
  if (g.fused_merge && (g.splits < 2 || !a.arrivals))
    bad("fused_merge needs splits > 1 and the arrival counters (Args::arrivals)");
}

}  // namespace tilekernels::aura
