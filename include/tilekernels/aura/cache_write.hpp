// SPDX-License-Identifier: MIT
// AURA cache_write: appends new K and V rows to the paged KV cache
// (paged_cache.hpp), encoding each side in place in its own format.
//
//   k, v          [num_tokens, kv_heads, Dim]   In (f32, f16 or bf16); views: any token and
//                                               head strides, any offset that is a multiple of
//                                               the element size (slices of a fused QKV buffer)
//   slot_mapping  [num_tokens]                  i32: page * PageTokens + offset; negative = skip (padding)
//   tables        [table_floats]                f32, the format's CacheTables
//   k_codes, k_norms, v_codes, v_norms          the cache, layout of paged_cache.hpp (norms only for coded sides)
//   k_centre      [centres, kv_heads, Dim]      f32, centred formats only (paged_cache.hpp)
//   token_centres [num_tokens]                  i32, centred formats only: each token's row of k_centre
//
// A coded side stores the fused encode of encode.hpp in f32 (norm, rotation,
// Lloyd-Max codes, norm correction), with the rotation and codebook of the
// tables (split keys: the coordinates above the split with their own
// codebook, paged_cache.hpp); a raw side stores the values rounded to the raw dtype. The codes equal the
// double-precision reference (reference/aura/paged_cache.hpp) except where a
// rotated value lies within f32 rounding of a boundary; norms agree to f32
// rounding. Slots not named keep their contents. A centred format encodes
// k - k_centre[token_centres[t], head], the difference taken in f32; a
// centre row past k_centre reads as the nearest row (the host copy,
// Args::host_token_centres, is checked where given).
//
// slot_mapping lives on the GPU, so record() cannot read it: a slot past
// the cache (>= num_pages * PageTokens, or any value read as unsigned that
// large) is skipped by the kernel, which never writes outside the cache;
// slots must be distinct (two tokens naming one slot leave either's row
// there). Where the host has its copy
// (Args::host_slot_mapping, which run() and tk-run pass), it is checked
// first and a bad slot is an Error naming the token.
//
// One dispatch per side, independent of each other (no barrier between).
// A decode step records cache_write, then a compute barrier, then
// DecodeAttention over the same cache.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "tilekernels/aura/cache_write_abi.h"
#include "tilekernels/aura/paged_cache.hpp"
#include "tilekernels/core.hpp"
#include "tilekernels/spirv/aura/cache_write.hpp"

namespace tilekernels::aura {

struct CacheWriteArgs {
  TensorRef k, v, slot_mapping;
  TensorRef tables;  // the format's CacheTables
  TensorRef k_codes;
  std::optional<TensorRef> k_norms;
  TensorRef v_codes;
  std::optional<TensorRef> v_norms;
  // Optional host copy of slot_mapping's contents: checked when given.
  std::span<const std::int32_t> host_slot_mapping = {};
  // Centred formats only: the centres and each token's row of them, and
  // optionally the host copy of token_centres (checked when given).
  std::optional<TensorRef> k_centre = {}, token_centres = {};
  std::span<const std::int32_t> host_token_centres = {};
};

// The kernel for a cache format given at run time (CacheWrite<Config> is
// the same with the format and input dtype fixed at compile time).
class CacheWriteKernel {
 public:
  static constexpr const char* name = "aura.cache_write";
  TK_DECLARE_SPEC(TK_CACHE_WRITE_SPEC)
  TK_DECLARE_PUSH(TK_CACHE_WRITE_PUSH)
  using Args = CacheWriteArgs;

  struct Problem {
    std::int64_t num_tokens = 0, kv_heads = 0, num_pages = 0;
  };
  // The pipelines (one per side) do not depend on the shape: every call
  // of the object's format and input dtype is inside.
  struct Envelope {};
  struct Plan {
    const Variant<Problem>* variant = nullptr;
  };

  static constexpr std::uint32_t invocations = 128;
  // (token, head) rows per workgroup: every value of them in shared memory.
  static constexpr std::uint32_t rows(const CacheFormat& f) { return 512 / f.dim; }
  // Shared memory of one side's dispatch (the K side with split keys holds
  // both codebooks).
  static constexpr std::uint32_t shared_bytes(const CacheFormat& f, bool k_side) {
    const std::uint32_t bits = k_side ? f.k_bits : f.v_bits;
    const std::uint32_t n = rows(f) * f.dim;
    const std::uint32_t levels = CacheFormat::raw(bits) ? 2 : 1u << bits;
    const std::uint32_t hi_levels = k_side && f.k_split() ? 1u << f.k_hi_bits() : 1;
    return 4 * (n + (f.rotation == Rotation::dense ? n : 1) + (CacheFormat::raw(bits) ? 1 : n) + rows(f) * 16 +
                5 * rows(f) + 2 * levels + 2 * hi_levels);
  }

  static constexpr std::array<Variant<Problem>, 1> variants{{
      {"portable", Path::portable, spirv::aura_cache_write, {}, invocations, 0},
  }};

  CacheWriteKernel(Context& ctx, const CacheFormat& format, DType in_dtype, Envelope envelope = {})
      : ctx_(&ctx), format_(validated(format, in_dtype)), in_dtype_(in_dtype), envelope_(envelope) {
    const auto& info = ctx.info();
    for (const bool k_side : {true, false})
      if (shared_bytes(format_, k_side) > info.max_shared_memory)
        throw Error(ErrorCode::unsupported,
                    std::string(name) + ": needs " + std::to_string(shared_bytes(format_, k_side)) +
                        " bytes of shared memory, the device has " + std::to_string(info.max_shared_memory));
    const Variant<Problem>& v = select_variant(*ctx_, name, variants, Problem{1, 1, 1});
    pipelines_.add(ctx, key(v, true));
    pipelines_.add(ctx, key(v, false));
  }

  const CacheFormat& format() const noexcept { return format_; }
  const Envelope& envelope() const noexcept { return envelope_; }
  std::size_t pipelines() const noexcept { return pipelines_.size(); }

  Problem problem(const Args& a) const { return {a.k.shape.at(0), a.k.shape.at(1), a.k_codes.shape.at(0)}; }

  // Throws tilekernels::Error unless this object runs `p` on its device.
  void check(const Problem& p) const {
    if (p.num_tokens <= 0 || p.kv_heads <= 0 || p.num_pages <= 0)
      throw Error(ErrorCode::invalid_argument, std::string(name) + ": num_tokens, kv_heads and num_pages must be > 0");
    const std::uint64_t capacity = static_cast<std::uint64_t>(p.num_pages) * format_.page_tokens;
    if (static_cast<std::uint64_t>(p.num_tokens) * static_cast<std::uint64_t>(p.kv_heads) >= (1ull << 31) ||
        capacity >= (1ull << 31) || capacity * static_cast<std::uint64_t>(p.kv_heads) >= (1ull << 31))
      throw Error(ErrorCode::unsupported, std::string(name) + ": more rows or slots than 32-bit indexing allows");
    select_variant(*ctx_, name, variants, p);
  }

  // Throws tilekernels::Error naming the first argument that is wrong.
  void check(const Args& a) const {
    using tilekernels::detail::expect_rank;
    using tilekernels::detail::expect_tensor;
    const CacheFormat& f = format_;
    expect_rank(name, "k", a.k, 3);
    const auto t = a.k.shape[0], h = a.k.shape[1];
    input_view(a.k, "k", t, h);
    input_view(a.v, "v", t, h);
    expect_tensor(*ctx_, name, "slot_mapping", a.slot_mapping, DType::i32, {t});
    expect_tensor(*ctx_, name, "tables", a.tables, DType::f32, CacheTables::shape(f));
    tilekernels::detail::expect_cache_side(*ctx_, name, f, true, a.k_codes, a.k_norms);
    tilekernels::detail::expect_cache_side(*ctx_, name, f, false, a.v_codes, a.v_norms);
    const std::int64_t centres =
        tilekernels::detail::expect_key_centre(*ctx_, name, f, h, a.k_centre, a.token_centres, "token_centres", t);
    if (!f.k_centred && !a.host_token_centres.empty())
      throw Error(ErrorCode::invalid_argument, tilekernels::detail::where(name, "token_centres") +
                                                   "a host copy was given for a format whose keys are not centred");
    tilekernels::detail::expect_centre_rows(name, "token_centres", a.host_token_centres, t, centres);
    const auto pages = a.k_codes.shape[0];
    if (a.k_codes.shape[1] != h)
      throw Error(ErrorCode::shape_mismatch, tilekernels::detail::where(name, "k_codes") + "kv_heads " +
                                                 std::to_string(a.k_codes.shape[1]) + " differs from k's " +
                                                 std::to_string(h));
    if (a.v_codes.shape[0] != pages || a.v_codes.shape[1] != h)
      throw Error(ErrorCode::shape_mismatch, tilekernels::detail::where(name, "v_codes") + "expected " +
                                                 std::to_string(pages) + " pages of " + std::to_string(h) +
                                                 " heads like k_codes, got shape " + shape_string(a.v_codes.shape));
    check(problem(a));
    if (!a.host_slot_mapping.empty()) {
      const std::uint64_t capacity = static_cast<std::uint64_t>(pages) * f.page_tokens;
      const std::string where = tilekernels::detail::where(name, "slot_mapping");
      if (a.host_slot_mapping.size() != static_cast<std::size_t>(t))
        throw Error(ErrorCode::shape_mismatch, where + "the host copy holds " +
                                                   std::to_string(a.host_slot_mapping.size()) + " slots, expected " +
                                                   std::to_string(t));
      std::vector<bool> taken(capacity, false);
      for (std::size_t i = 0; i < a.host_slot_mapping.size(); ++i) {
        const std::int32_t s = a.host_slot_mapping[i];
        if (s < 0) continue;
        if (static_cast<std::uint64_t>(s) >= capacity)
          throw Error(ErrorCode::invalid_argument, where + "slot " + std::to_string(s) + " of token " +
                                                       std::to_string(i) + " is past the cache (" +
                                                       std::to_string(capacity) + " slots)");
        if (taken[static_cast<std::size_t>(s)])
          throw Error(ErrorCode::invalid_argument, where + "slot " + std::to_string(s) + " is named twice (token " +
                                                       std::to_string(i) + ")");
        taken[static_cast<std::size_t>(s)] = true;
      }
    }
  }

  Status can_implement(const Problem& p) const noexcept {
    return tilekernels::detail::status_of([&] { check(p); });
  }
  Status can_implement(const Args& a) const noexcept {
    return tilekernels::detail::status_of([&] { check(a); });
  }

  static constexpr std::uint64_t workspace_bytes(const Problem&) { return 0; }
  Plan plan(const Problem& p, std::uint64_t) const {
    check(p);
    return {&select_variant(*ctx_, name, variants, p)};
  }

  Plan plan(const Args& a) const {
    check(a);
    return plan(problem(a), 0);
  }

  // Records both sides' dispatches (independent of each other).
  void record(vk::CommandBuffer cmd, const Args& a) const { record(cmd, a, plan(problem(a), 0)); }
  void record(vk::CommandBuffer cmd, const Args& a, const Plan& plan) const {
    check(a);
    record_side(cmd, *plan.variant, a, true);
    record_side(cmd, *plan.variant, a, false);
  }

  // Convenience for tests and tools: records, submits and waits.
  void run(const Args& a) const {
    check(a);
    ctx_->submit_and_wait([&](vk::CommandBuffer cmd) { record(cmd, a); });
  }

 private:
  static CacheFormat validated(const CacheFormat& f, DType in) {
    f.validate(name);
    if (in != DType::f32 && in != DType::f16 && in != DType::bf16)
      throw Error(ErrorCode::invalid_argument, std::string(name) + ": the input dtype must be f32, f16 or bf16");
    return f;
  }

  tilekernels::detail::ViewLayout input_view(const TensorRef& t, const char* tensor, std::int64_t tokens,
                                             std::int64_t heads) const {
    return tilekernels::detail::expect_view(*ctx_, name, tensor, t, in_dtype_, {tokens, heads, format_.dim}, 1);
  }

  // The pipeline of one side (K or V: their formats may be equal, their
  // tables are not).
  PipelineKey key(const Variant<Problem>& v, bool k_side) const {
    const CacheFormat& f = format_;
    const std::uint32_t bits = k_side ? f.k_bits : f.v_bits;
    Spec spec;
    spec.workgroup = invocations;
    spec.DIM = f.dim;
    spec.PAGE_TOKENS = f.page_tokens;
    spec.BITS = bits;
    spec.ROTATION = f.rotation_code(bits);
    spec.NORM_DTYPE = static_cast<std::uint32_t>(f.norm_dtype);
    spec.RAW_DTYPE = static_cast<std::uint32_t>(f.raw_dtype);
    spec.IN_DTYPE = static_cast<std::uint32_t>(in_dtype_);
    spec.ROWS = rows(f);
    spec.TABLE_CODEBOOK = k_side ? f.k_codebook_at() : f.v_codebook_at();
    spec.TABLE_BOUNDARIES = k_side ? f.k_boundaries_at() : f.v_boundaries_at();
    spec.TABLE_ROTATION = k_side ? f.k_rotation_at() : f.v_rotation_at();
    spec.CENTRED = k_side && f.k_centred ? 1 : 0;
    spec.HI_DIMS = k_side ? f.k_hi_dims : 0;
    spec.TABLE_HI_CODEBOOK = k_side ? f.k_hi_codebook_at() : 0;
    spec.TABLE_HI_BOUNDARIES = k_side ? f.k_hi_boundaries_at() : 0;
    return tilekernels::detail::pipeline_key<Push>(*ctx_, v, spec, 7);
  }

  void record_side(vk::CommandBuffer cmd, const Variant<Problem>& v, const Args& a, bool k_side) const {
    const CacheFormat& f = format_;
    const Problem p = problem(a);
    const TensorRef& input = k_side ? a.k : a.v;
    const TensorRef& store = k_side ? a.k_codes : a.v_codes;
    const std::optional<TensorRef>& norms = k_side ? a.k_norms : a.v_norms;
    const Pipeline& pipeline = pipelines_.get(name, key(v, k_side));
    const auto view = input_view(input, k_side ? "k" : "v", p.num_tokens, p.kv_heads);
    Push push;
    const auto row_count = static_cast<std::uint64_t>(p.num_tokens * p.kv_heads);
    push.rows = static_cast<std::uint32_t>(row_count);
    push.kv_heads = static_cast<std::uint32_t>(p.kv_heads);
    push.capacity = static_cast<std::uint32_t>(p.num_pages * f.page_tokens);
    push.inv_sqrt_dim = static_cast<float>(1.0 / std::sqrt(static_cast<double>(f.dim)));
    push.in_at = view.at, push.in_token = view.token, push.in_head = view.head;
    const bool centred = k_side && f.k_centred;
    push.centres = centred ? static_cast<std::uint32_t>(a.k_centre->shape[0]) : 0;
    // Bindings the side never accesses (a raw side's norms, the centres of
    // a side not centred) get a tensor of the call to stay valid.
    tilekernels::detail::record_dispatch(
        *ctx_, cmd, pipeline,
        {input, a.slot_mapping, a.tables, store, norms ? *norms : store, centred ? *a.k_centre : a.tables,
         centred ? *a.token_centres : a.slot_mapping},
        push, (row_count + rows(f) - 1) / rows(f));
  }

  Context* ctx_;
  CacheFormat format_;
  DType in_dtype_;
  Envelope envelope_;
  PipelineSet pipelines_;
};

template <class Cache, DType In = DType::bf16>
struct CacheWriteConfig {
  static_assert(In == DType::f32 || In == DType::f16 || In == DType::bf16,
                "CacheWriteConfig: In must be DType::f32, DType::f16 or DType::bf16");
  static_assert(CacheWriteKernel::shared_bytes(Cache::format, true) <= 32768 &&
                    CacheWriteKernel::shared_bytes(Cache::format, false) <= 32768,
                "CacheWriteConfig: the kernel must fit the portable 32 KiB of shared memory");
  using cache = Cache;
  static constexpr DType in_dtype = In;
};

template <class Config>
class CacheWrite : public CacheWriteKernel {
 public:
  using Cache = typename Config::cache;
  explicit CacheWrite(Context& ctx, Envelope envelope = {})
      : CacheWriteKernel(ctx, Cache::format, Config::in_dtype, envelope) {}
};

static_assert(Kernel<CacheWriteKernel>, "aura.cache_write must have the kernel interface (core/kernel.hpp)");

}  // namespace tilekernels::aura
