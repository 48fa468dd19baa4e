// AURA decode attention over the paged, compressed KV cache (paged_cache.hpp):
// one call per decode step: one dispatch, two where it splits the keys.
//
// Shapes (row-major, last index innermost):
//   q            [num_seqs, q_len, q_heads, Dim]   Q (f32, f16, bf16); q_len 1..16
//   k_codes, k_norms, v_codes, v_norms             the cache (norms only for coded sides)
//   block_table  [num_seqs, max_pages]             i32 page ids
//   seq_lens     [num_seqs]                        i32 live lengths
//   sinks        [q_heads]                         f32 logits, optional
//   output       [num_seqs, q_len, q_heads, Dim]   Out (f32, f16, bf16)
//   lse          [num_seqs, q_len, q_heads]        f32, optional (natural log, sinks included)
// The q_len new tokens of sequence s are already in the cache: query i sits
// at position pos = seq_lens[s] - q_len + i and sees the keys t <= pos, and
// with Options::window = W > 0 only those with t > pos - W. Query head h
// reads KV head h / (q_heads / kv_heads). Per query row, over its keys:
//   z_t = scale * norm_t * <R_k q, codebook_k[codes_t]>      (raw K: scale * <q, k_t>)
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
// Where the device has fp16 cooperative matrices (NVIDIA), the
// tensor-core variant (shaders/aura/decode_attention_tc.glsl) computes
// the scores and the value sums as 16x16x16 matrix products over 16 rows
// (the codes decoded through the codebook into fp16 tiles in shared
// memory) for bf16 and f16 outputs of coded caches; the same workspace,
// split rule and merge. Its lanes variant (coded K and V, Dim 64/128/256,
// NVIDIA's fragment layout: decode_attention_tc_lanes.glsl) builds the
// operands in registers from the codes instead; at Dim 256 its subgroups
// work in pairs, one half of the dims each.
//
// What the host cannot see: seq_lens and block_table live on the GPU. The
// kernel clamps every seq_len to [0, max_pages * PageTokens] and every
// block-table entry to [0, num_pages), so it never reads outside the cache
// or the table whatever they hold; but entries for positions < seq_len
// must be pages of the sequence (< num_pages) and seq_len >= q_len (or 0:
// an inactive entry) for the result to mean anything. Where the host has
// copies (Args::host_seq_lens, host_block_table: run() and tk-run pass
// them), they are checked before recording and a bad entry is an Error
// naming it; they (or Args::max_seq_len) also let record() size the split
// for the real lengths instead of the capacity.
//
// Workspace (workspace_bytes()): splits need one (per split state o [Dim]
// and (m, l) per row, in f32, at the back of the range: workspace.hpp; no
// part needs zeroing), and workspace_bytes(args) serves every smaller batch
// at every length. Calls that share a workspace need a barrier between
// them, as any dispatches writing one buffer. Without a workspace, or with
// one smaller than the plan needs, record() runs one workgroup per KV head
// and row chunk: at long contexts many times slower.
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
    return Status::success();
  }
  // The tensor-core variant: fp16_operands_rule, Dim 64, 128 or 256, and a
  // lane's code words of a tile of both sides within 32 registers. Taken
  // only with at least 16 query rows per KV head (GQA x new tokens, one
  // full tile): with 4 the CUDA-core variants are faster on the H100, with
  // 16 it is (bench/notes/2026-11-aura-decode-attention-tensor-cores.md). Tests force it with fewer.
  static Status tensor_core_rule(const DeviceInfo&, const Problem& p) {
    const auto no = [](const std::string& why) { return Status::failure(ErrorCode::unsupported, why); };
    if (Status s = fp16_operands_rule(p); !s) return s;
    if (p.kv_heads > 0 && p.q_heads / p.kv_heads * p.q_len < 16)
      return no("fewer than 16 query rows per KV head: the CUDA-core variants are faster there");
    if (p.dim != 64 && p.dim != 128 && p.dim != 256) return no("Dim must be 64, 128 or 256");
    if ((p.k_bits + p.v_bits) * p.dim / 64 > 32) return no("the code words of a tile exceed 32 registers per lane");
    return Status::success();
  }
  // The lanes variant: the tensor-core variant with both products' operands
  // built in registers from the codes (no shared-memory stage), for coded K
  // and V (2 to 8 bits) at Dim 64, 128 or 256 (in pairs of subgroups, one
  // half of the dims each) where the fragment layout is known
  // (decode_attention_lanes_layout). Faster than the staged variant at 16
  // rows per KV head, and than the CUDA-core variants at 4 and 8 rows from
  // 1K keys on (bench/notes/2026-11-aura-decode-attention-tensor-cores.md, Sweep_DecodeAttentionCrossover).
  static Status lanes_rule(const DeviceInfo& info, const Problem& p) {
    const auto no = [](const std::string& why) { return Status::failure(ErrorCode::unsupported, why); };
    if (!decode_attention_lanes_layout(info)) return no("the device's fragment layout is not the one the lanes variant builds");
    if (Status s = fp16_operands_rule(p); !s) return s;
    if (p.dim != 64 && p.dim != 128 && p.dim != 256) return no("Dim must be 64, 128 or 256");
    return Status::success();
  }
  // The least any geometry needs (a Dim 64 raw cache); record() checks the call's own.
  static constexpr std::uint32_t least_shared = decode_attention_shared_bytes(CacheFormat{64, 16, 16, 16}, 64, 1, 1);
  static constexpr std::uint32_t tc_workgroup = 128, lanes_workgroup = 256;
  static constexpr std::string_view lanes_name = "tensor_core_fp16_lanes";
  static constexpr std::array<Variant<Problem>, 6> variants{{
      {lanes_name, Path::tensor_core_fp16, spirv::aura_decode_attention_tc_lanes,
       DeviceNeeds{.subgroup_shuffle = true, .cooperative_matrix_bf16 = true, .subgroup_size = 32}, lanes_workgroup,
       decode_attention_tc_shared_bytes(CacheFormat{64, 16, 4, 4}, lanes_workgroup, true), &lanes_rule},
      {"tensor_core_fp16", Path::tensor_core_fp16, spirv::aura_decode_attention_tc,
       DeviceNeeds{.cooperative_matrix_fp16 = true, .subgroup_size = 32}, tc_workgroup,
       decode_attention_tc_shared_bytes(CacheFormat{64, 16, 2, 2}, tc_workgroup), &tensor_core_rule},
      {"subgroup", Path::subgroup, spirv::aura_decode_attention_subgroup, DeviceNeeds{.subgroup_arithmetic = true},
       64, least_shared, &subgroup_gpu},
      {"subgroup_compact", Path::subgroup, spirv::aura_decode_attention_subgroup_compact,
       DeviceNeeds{.subgroup_arithmetic = true}, 64, least_shared, &subgroup_cpu},
      {"portable", Path::portable, spirv::aura_decode_attention, {}, 64, least_shared, &portable_gpu},
      {"portable_compact", Path::portable, spirv::aura_decode_attention_compact, {}, 64, least_shared, &portable_cpu},
  }};
  // The second dispatch of a split call: Dim / 2 invocations (at least 32),
  // one output dim pair each (the first dispatch's constants otherwise).
  static constexpr Variant<Problem> merge_variant{"merge", Path::portable, spirv::aura_decode_attention_merge, {}, 32, 0};

  // The rotations are seeded per side and must be those of the CacheWrite
  // that filled the cache.
  DecodeAttentionKernel(Context& ctx, const CacheFormat& format, DType q_dtype, DType out_dtype, std::uint64_t k_seed,
                        std::uint64_t v_seed)
      : ctx_(&ctx), format_(validated(format, q_dtype, out_dtype)), q_dtype_(q_dtype), out_dtype_(out_dtype),
        tables_(ctx, format, k_seed, v_seed) {}

  const CacheFormat& format() const noexcept { return format_; }
  const CacheTables& tables() const noexcept { return tables_; }

  Problem problem(const Args& a) const {
    Problem p{a.q.shape.at(0), a.q.shape.at(1), a.q.shape.at(2), a.k_codes.shape.at(1), a.block_table.shape.at(1),
              a.k_codes.shape.at(0), 0, format_.dim, format_.k_bits, format_.v_bits, out_dtype_, a.lse.has_value()};
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

  // Throws tilekernels::Error naming the first argument that is wrong.
  void check(const Args& a) const {
    using tilekernels::detail::expect_rank;
    using tilekernels::detail::expect_tensor;
    using tilekernels::detail::where;
    const auto fail = [](ErrorCode code, const std::string& tensor, const std::string& what) {
      throw Error(code, where(name, tensor) + what);
    };
    expect_rank(name, "q", a.q, 4);
    const auto n = a.q.shape[0], ql = a.q.shape[1], qh = a.q.shape[2];
    const CacheFormat& f = format_;
    expect_tensor(*ctx_, name, "q", a.q, q_dtype_, {n, ql, qh, f.dim});
    if (ql > max_q_len)
      fail(ErrorCode::invalid_argument, "q", "q_len must be at most " + std::to_string(max_q_len) + ", got " +
                                                 std::to_string(ql));
    tilekernels::detail::expect_cache_side(*ctx_, name, f, "k", f.k_bits, a.k_codes, a.k_norms);
    tilekernels::detail::expect_cache_side(*ctx_, name, f, "v", f.v_bits, a.v_codes, a.v_norms);
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
    expect_tensor(*ctx_, name, "output", a.output, out_dtype_, {n, ql, qh, f.dim});
    if (a.lse) expect_tensor(*ctx_, name, "lse", *a.lse, DType::f32, {n, ql, qh});
    if (a.sinks) expect_tensor(*ctx_, name, "sinks", *a.sinks, DType::f32, {qh});
    const std::int64_t capacity = max_pages * f.page_tokens;
    if (capacity >= (1ll << 24) || pages * kvh * f.page_tokens >= (1ll << 31) || n * kvh >= (1ll << 24))
      throw Error(ErrorCode::unsupported, std::string(name) + ": more sequences, pages or slots than 32-bit indexing allows");
    const Options& o = a.options;
    if (o.scale && !std::isfinite(*o.scale))
      throw Error(ErrorCode::invalid_argument, std::string(name) + ": options: scale must be finite");
    if (!(o.softcap >= 0) || !std::isfinite(o.softcap))
      throw Error(ErrorCode::invalid_argument, std::string(name) + ": options: softcap must be finite and >= 0 (0: none)");
    if (a.max_seq_len < 0 || a.max_seq_len > capacity)
      throw Error(ErrorCode::invalid_argument, std::string(name) + ": max_seq_len must be in [0, max_pages * page_tokens = " +
                                                   std::to_string(capacity) + "], got " + std::to_string(a.max_seq_len));
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
        for (std::int64_t i = 0; i * f.page_tokens < len; ++i) {
          const std::int32_t page = a.host_block_table[static_cast<std::size_t>(s * max_pages + i)];
          if (page < 0 || page >= pages)
            fail(ErrorCode::invalid_argument, "block_table",
                 "entry [" + std::to_string(s) + ", " + std::to_string(i) + "] = " + std::to_string(page) +
                     " is not a page of the cache (" + std::to_string(pages) + " pages)");
        }
      }
    }
  }

  Status can_implement(const Args& a) const {
    return tilekernels::detail::status_of([&] { plan(a); });
  }

  // Keys each invocation scores per block (1, 2 or 4) for a workgroup size:
  // the most whose code words (K rows, value lanes' words) stay within 32
  // registers of each kind.
  std::uint32_t tokens_per_invocation(std::uint32_t workgroup) const {
    const CacheFormat& f = format_;
    const std::uint32_t lanes = f.dim / 8, groups = workgroup / lanes;
    const std::uint32_t lane_words = f.v_raw() ? 4 : (8 * f.v_bits) % 32 == 0 ? 8 * f.v_bits / 32 : 2;
    for (std::uint32_t tpi : {4u, 2u}) {
      const std::uint32_t value_keys = (workgroup * tpi + groups - 1) / groups;
      if (tpi * f.words(f.k_bits) <= 32 && value_keys * lane_words <= 32) return tpi;
    }
    return 1;
  }

  // The geometry record() takes for `p`, with or without a workspace to
  // split through. Automatic choice (measurements: bench/notes/2026-11-aura-decode-attention.md):
  // about 2 workgroups per multiprocessor in all (8 on a CPU device): the
  // largest blocks (128 invocations, as many keys each as registers allow,
  // then 1 key, then 64 invocations) that give at least 3/4 of that count
  // one block each; then, unless the call has that many (sequence, KV head,
  // row chunk) groups already, as many splits as reach the count, rounded
  // so the splits get equal numbers of blocks. More workgroups than that
  // lose: every split's state is merged, and one large block per workgroup
  // amortises its barriers over more keys.
  Geometry geometry(const Problem& p, bool workspace) const {
    return geometry(p, workspace, select_variant(*ctx_, name, variants, p));
  }
  // The same for a given variant. The tensor-core ones have fixed blocks
  // (16 keys per subgroup; the staged one 128 invocations and 16 rows) and
  // their own split rule at one workgroup per multiprocessor: their merge
  // reads 16-row states two at a time, and fewer splits won at every length
  // measured (bench/notes/2026-11-aura-decode-attention-tensor-cores.md).
  Geometry geometry(const Problem& p, bool workspace, const Variant<Problem>& v) const {
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
      g.workgroup = c[0];
      g.tokens_per_invocation = c[1];
      blocks = (keys + c[0] * c[1] - 1) / (c[0] * c[1]);
      if (!workspace || units * blocks >= enough) break;
    }
    if (workspace) g.splits = even_splits(split_cap(p, g, false), blocks);
    return g;
  }

  // Workgroups the split rules aim at: about 2 per multiprocessor for the
  // CUDA-core variants (8 on a CPU device), 1 for the tensor-core ones.
  std::int64_t split_target(bool tc) const {
    const auto& info = ctx_->info();
    if (tc) return info.multiprocessors ? info.multiprocessors : 128;
    return info.multiprocessors ? 2 * info.multiprocessors : info.is_cpu() ? 8 : 256;
  }
  // The most splits a rule takes for these batch dimensions at any length
  // (1: none, the call has enough groups already); a length's blocks may
  // round it down (even_splits), never up. The tensor-core rule rounds down:
  // one workgroup more than the multiprocessors doubles the time of those
  // that take two.
  std::int64_t split_cap(const Problem& p, const Geometry& g, bool tc) const {
    const std::int64_t units = std::max<std::int64_t>(decode_attention_groups(p, g.row_vecs), 1);
    const std::int64_t target = split_target(tc);
    if (units >= target * 3 / 4) return 1;
    return std::min<std::int64_t>(tc ? target / units : (target + units - 1) / units, max_splits);
  }

  // At most `wanted` splits (and no more than blocks or max_splits), rounded
  // so that every split takes the same number of blocks but the last.
  static std::uint32_t even_splits(std::int64_t wanted, std::int64_t blocks) {
    const std::int64_t splits = std::min<std::int64_t>({wanted, blocks, max_splits});
    const std::int64_t per_split = (blocks + splits - 1) / splits;
    return static_cast<std::uint32_t>((blocks + per_split - 1) / per_split);
  }

  static bool is_lanes(const Variant<Problem>& v) { return v.name == lanes_name; }
  bool lanes_pairs() const { return decode_attention_lanes_pairs(format_.dim); }

  // The lanes variant takes chunks of 4, 8 or 16 rows (the matrix tiles
  // keep 16, the rest padding; at most 8 in pairs), so that the merges and
  // V's rotation handle the rows that exist, and workgroups of 256 (8
  // subgroups: twice the loads in flight per multiprocessor; its registers
  // allow one workgroup).
  Geometry tensor_core_geometry(const Problem& p, bool workspace, bool lanes) const {
    Geometry g{lanes ? lanes_workgroup : tc_workgroup, 1, 4, 1};
    const std::int64_t rows = decode_attention_rows(p);
    if (lanes) g.row_vecs = rows <= 4 ? 1 : rows <= 8 || lanes_pairs() ? 2 : 4;
    // 16 keys per subgroup of 32, per pair of them above Dim 128
    const std::int64_t block_keys = g.workgroup / 2 / (lanes && lanes_pairs() ? 2 : 1);
    const std::int64_t blocks = (std::max<std::int64_t>(p.keys, 1) + block_keys - 1) / block_keys;
    if (workspace) g.splits = even_splits(split_cap(p, g, true), blocks);
    return g;
  }

  using WorkspaceLayout = DecodeAttentionWorkspace;
  WorkspaceLayout workspace_layout(const Problem& p, const Geometry& g) const {
    return decode_attention_workspace(format_, p, g);
  }
  std::uint64_t workspace_bytes(const Problem& p, const Geometry& g) const { return workspace_layout(p, g).bytes(); }
  // Workspace bytes that let record() take its fastest plan for these
  // arguments and for every call with no more sequences and new tokens per
  // sequence (the same heads), at every sequence length (0: none needed):
  // sized once for the largest batch, a workspace serves every step.
  std::uint64_t workspace_bytes(const Args& a) const {
    check(a);
    const Problem p = problem(a);
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

  Plan plan(const Args& a) const {
    check(a);
    const Problem p = problem(a);
    Plan plan{&select_variant(*ctx_, name, variants, p), {}};
    const Geometry with = geometry(p, true, *plan.variant);
    const bool have = a.workspace && a.workspace->memory.size >= workspace_bytes(p, with);
    plan.geometry = have ? with : geometry(p, false, *plan.variant);
    return plan;
  }

  // Throws unless `plan` can run `a` (a geometry changed by hand included).
  void check(const Args& a, const Plan& plan) const {
    check(a);
    const Geometry& g = plan.geometry;
    const auto bad = [&](const std::string& why) {
      throw Error(ErrorCode::invalid_argument, std::string(name) + ": geometry: " + why);
    };
    if (!plan.variant) bad("the plan has no variant");
    const bool tc = plan.variant->path == Path::tensor_core_fp16;
    const bool lanes = is_lanes(*plan.variant);
    if (tc) {
      const bool wg_ok = lanes ? g.workgroup == 128 || g.workgroup == 256 : g.workgroup == 64 || g.workgroup == 128;
      const bool rows_ok = lanes ? g.row_vecs == 1 || g.row_vecs == 2 || (g.row_vecs == 4 && !lanes_pairs())
                                 : g.row_vecs == 4;
      if (!wg_ok || !rows_ok || g.tokens_per_invocation != 1)
        bad(lanes ? "the lanes variant takes workgroup 128 or 256, tokens_per_invocation 1, row_vecs 1, 2 or 4 (1 or 2 "
                    "above Dim 128)"
                  : "the tensor-core variant takes workgroup 64 or 128, tokens_per_invocation 1, row_vecs 4");
    } else {
      if (g.workgroup != 64 && g.workgroup != 128) bad("workgroup must be 64 or 128");
      if (g.tokens_per_invocation != 1 && g.tokens_per_invocation != 2 && g.tokens_per_invocation != 4)
        bad("tokens_per_invocation must be 1, 2 or 4");
      if (g.row_vecs != 1 && g.row_vecs != 2) bad("row_vecs must be 1 or 2");
    }
    if (g.splits == 0 || g.splits > max_splits) bad("splits must be in [1, " + std::to_string(max_splits) + "]");
    const auto& info = ctx_->info();
    const std::uint32_t shared = tc ? decode_attention_tc_shared_bytes(format_, g.workgroup, lanes)
                                    : decode_attention_shared_bytes(format_, g.workgroup, g.tokens_per_invocation, g.row_vecs);
    if (g.workgroup > info.max_workgroup_invocations || shared > info.max_shared_memory)
      bad("workgroup of " + std::to_string(g.workgroup) + " invocations exceeds the device's limits");
    if (g.splits > 1) {
      if (!a.workspace) throw Error(ErrorCode::invalid_argument, std::string(name) + ": workspace: splits need one");
      tilekernels::detail::expect_workspace(*ctx_, name, *a.workspace, workspace_bytes(problem(a), g));
    }
  }

  void record(vk::CommandBuffer cmd, const Args& a) const { record(cmd, a, plan(a)); }

  // Records `plan` (from plan(a), its geometry possibly changed).
  void record(vk::CommandBuffer cmd, const Args& a, const Plan& plan) const {
    check(a, plan);
    const Problem p = problem(a);
    const Geometry& g = plan.geometry;
    const std::int64_t gqa = p.q_heads / p.kv_heads;
    const std::int64_t chunks = (decode_attention_rows(p) + 4 * g.row_vecs - 1) / (4 * g.row_vecs);
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
    spec.PUBLISH = g.splits > 1 ? 1 : 0;
    const Pipeline& pipeline = tilekernels::detail::pipeline_for<Push>(*ctx_, *plan.variant, spec, 12);

    // Bindings the shader never touches in this configuration (norms of raw
    // sides, sinks, lse, the workspace without splits) get a tensor of the
    // same call to stay valid: read-only ones a read-only input, written ones
    // the output, so that synchronization validation sees no new hazard.
    std::vector<TensorRef> bindings{a.q,           a.k_codes,     a.k_norms ? *a.k_norms : a.k_codes,
                                    a.v_codes,     a.v_norms ? *a.v_norms : a.v_codes,
                                    a.block_table, a.seq_lens,    tables_.ref(),
                                    a.sinks ? *a.sinks : tables_.ref(), a.output, a.lse ? *a.lse : a.output};
    Push push;
    if (g.splits > 1) {
      const WorkspaceLayout w = workspace_layout(p, g);
      const std::uint64_t o_at = w.o_at(a.workspace->memory.size);
      bindings.push_back(tilekernels::detail::workspace_region(*a.workspace, o_at, w.bytes()));
      push.ml_at = static_cast<std::uint32_t>(w.ml_offset / 16);
    } else {
      bindings.push_back(a.output);
    }
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
    const auto units = static_cast<std::uint64_t>(p.num_seqs * p.kv_heads);
    tilekernels::detail::record_dispatch(*ctx_, cmd, pipeline, bindings, push, units * g.splits,
                                         static_cast<std::uint32_t>(chunks));
    if (g.splits > 1) {
      compute_barrier(*ctx_, cmd);
      spec.workgroup = std::max(f.dim / 2, merge_variant.invocations);
      const Pipeline& merge = tilekernels::detail::pipeline_for<Push>(*ctx_, merge_variant, spec, 12);
      tilekernels::detail::record_dispatch(*ctx_, cmd, merge, bindings, push, units * static_cast<std::uint64_t>(chunks),
                                           g.row_vecs);
    }
  }

  // For tests and tools: allocates the workspace the call can use, records
  // into a fresh command buffer, submits and waits.
  void run(const Args& a) const {
    check(a);
    Args with = a;
    std::optional<Tensor> scratch;
    if (!a.workspace) {
      const auto bytes = workspace_bytes(a);
      if (bytes) {
        scratch.emplace(*ctx_, DType::u32, Shape{static_cast<std::int64_t>(bytes / 4)});
        with.workspace = Workspace{scratch->ref()};
      }
    }
    ctx_->submit_and_wait([&](vk::CommandBuffer cmd) { record(cmd, with); });
  }

 private:
  static CacheFormat validated(const CacheFormat& f, DType q, DType out) {
    f.validate(name);
    const auto is_float = [](DType t) { return t == DType::f32 || t == DType::f16 || t == DType::bf16; };
    if (!is_float(q) || !is_float(out))
      throw Error(ErrorCode::invalid_argument, std::string(name) + ": q and output dtypes must be f32, f16 or bf16");
    return f;
  }

  Context* ctx_;
  CacheFormat format_;
  DType q_dtype_, out_dtype_;
  CacheTables tables_;
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
  // The rotations are seeded per side and must be those of the CacheWrite
  // that filled the cache.
  DecodeAttention(Context& ctx, std::uint64_t k_seed, std::uint64_t v_seed)
      : DecodeAttentionKernel(ctx, Cache::format, Config::q_dtype, Config::out_dtype, k_seed, v_seed) {}
};

}  // namespace tilekernels::aura
