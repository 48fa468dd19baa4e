// AURA cache_write: appends new K and V rows to the paged KV cache
// (paged_cache.hpp), encoding each side in place in its own format.
//
//   k, v          [num_tokens, kv_heads, Dim]   In (f32, f16 or bf16)
//   slot_mapping  [num_tokens]                  i32: page * PageTokens + offset; negative = skip (padding)
//   k_codes, k_norms, v_codes, v_norms          the cache, layout of paged_cache.hpp (norms only for coded sides)
//
// A coded side stores the fused encode of encode.hpp in f32 (norm, rotation,
// Lloyd-Max codes, norm correction), with the rotation and codebook of the
// CacheTables built from the seeds given to the constructor; a raw side
// stores the values rounded to the raw dtype. The codes equal the
// double-precision reference (reference/aura/paged_cache.hpp) except where a
// rotated value lies within f32 rounding of a boundary; norms agree to f32
// rounding. Slots not named keep their contents.
//
// slot_mapping lives on the GPU, so record() cannot read it: a slot past
// the cache (>= num_pages * PageTokens) is skipped by the kernel, which
// never writes outside the cache; slots must be distinct (two tokens naming
// one slot leave either's row there). Where the host has its copy
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

template <class Cache, DType In = DType::bf16>
struct CacheWriteConfig {
  static_assert(In == DType::f32 || In == DType::f16 || In == DType::bf16,
                "CacheWriteConfig: In must be DType::f32, DType::f16 or DType::bf16");
  using cache = Cache;
  static constexpr DType in_dtype = In;
  static constexpr std::uint32_t invocations = 128;
  // (token, head) rows per workgroup: every value of them in shared memory.
  static constexpr std::uint32_t rows = 512 / Cache::dim;
  static constexpr std::uint32_t shared_bytes(std::uint32_t bits) {
    const std::uint32_t n = rows * Cache::dim;
    const std::uint32_t levels = Cache::raw(bits) ? 2 : 1u << bits;
    return 4 * (n + (Cache::rotation == Rotation::dense ? n : 1) + (Cache::raw(bits) ? 1 : n) + rows * 16 + 3 * rows +
                2 * levels);
  }
  static_assert(shared_bytes(Cache::k_bits) <= 32768 && shared_bytes(Cache::v_bits) <= 32768,
                "CacheWriteConfig: the kernel must fit the portable 32 KiB of shared memory");
};

template <class Config>
class CacheWrite {
 public:
  using Cache = typename Config::cache;
  using Layout = CacheTableLayout<Cache>;
  static constexpr const char* name = "aura.cache_write";
  TK_DECLARE_SPEC(TK_CACHE_WRITE_SPEC)
  TK_DECLARE_PUSH(TK_CACHE_WRITE_PUSH)

  struct Args {
    TensorRef k, v, slot_mapping;
    TensorRef k_codes;
    std::optional<TensorRef> k_norms;
    TensorRef v_codes;
    std::optional<TensorRef> v_norms;
    // Optional host copy of slot_mapping's contents: checked when given.
    std::span<const std::int32_t> host_slot_mapping = {};
  };

  struct Problem {
    std::int64_t num_tokens = 0, kv_heads = 0, num_pages = 0;
  };

  static constexpr std::uint32_t shared_bytes =
      std::max(Config::shared_bytes(Cache::k_bits), Config::shared_bytes(Cache::v_bits));
  static constexpr std::array<Variant<Problem>, 1> variants{{
      {"portable", Path::portable, spirv::aura_cache_write, {}, Config::invocations, shared_bytes},
  }};

  // The rotations are seeded per side; DecodeAttention over this cache needs the same seeds.
  CacheWrite(Context& ctx, std::uint64_t k_seed, std::uint64_t v_seed) : ctx_(&ctx), tables_(ctx, k_seed, v_seed) {}

  const CacheTables<Cache>& tables() const noexcept { return tables_; }

  static Problem problem(const Args& a) { return {a.k.shape.at(0), a.k.shape.at(1), a.k_codes.shape.at(0)}; }

  // Throws tilekernels::Error naming the first argument that is wrong.
  void check(const Args& a) const {
    using tilekernels::detail::expect_rank;
    using tilekernels::detail::expect_tensor;
    expect_rank(name, "k", a.k, 3);
    const auto t = a.k.shape[0], h = a.k.shape[1];
    expect_tensor(*ctx_, name, "k", a.k, Config::in_dtype, {t, h, Cache::dim});
    expect_tensor(*ctx_, name, "v", a.v, Config::in_dtype, {t, h, Cache::dim});
    expect_tensor(*ctx_, name, "slot_mapping", a.slot_mapping, DType::i32, {t});
    detail::expect_cache_side<Cache>(*ctx_, name, "k", Cache::k_bits, a.k_codes, a.k_norms);
    detail::expect_cache_side<Cache>(*ctx_, name, "v", Cache::v_bits, a.v_codes, a.v_norms);
    const auto pages = a.k_codes.shape[0];
    if (a.k_codes.shape[1] != h)
      throw Error(ErrorCode::shape_mismatch, tilekernels::detail::where(name, "k_codes") + "kv_heads " +
                                                 std::to_string(a.k_codes.shape[1]) + " differs from k's " +
                                                 std::to_string(h));
    if (a.v_codes.shape[0] != pages || a.v_codes.shape[1] != h)
      throw Error(ErrorCode::shape_mismatch, tilekernels::detail::where(name, "v_codes") + "expected " +
                                                 std::to_string(pages) + " pages of " + std::to_string(h) +
                                                 " heads like k_codes, got shape " + shape_string(a.v_codes.shape));
    const std::uint64_t capacity = static_cast<std::uint64_t>(pages) * Cache::page_tokens;
    if (static_cast<std::uint64_t>(t) * static_cast<std::uint64_t>(h) >= (1ull << 31) || capacity >= (1ull << 31))
      throw Error(ErrorCode::unsupported, std::string(name) + ": more rows or slots than 32-bit indexing allows");
    if (!a.host_slot_mapping.empty()) {
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

  Status can_implement(const Args& a) const {
    return tilekernels::detail::status_of([&] {
      check(a);
      select_variant(*ctx_, name, variants, problem(a));
    });
  }

  // Records both sides' dispatches (independent of each other).
  void record(vk::CommandBuffer cmd, const Args& a) const {
    check(a);
    const Problem p = problem(a);
    const Variant<Problem>& v = select_variant(*ctx_, name, variants, p);
    record_side(cmd, v, a, a.k, a.k_codes, a.k_norms, Cache::k_bits, Layout::k_codebook, Layout::k_boundaries,
                Layout::k_rotation);
    record_side(cmd, v, a, a.v, a.v_codes, a.v_norms, Cache::v_bits, Layout::v_codebook, Layout::v_boundaries,
                Layout::v_rotation);
  }

  // Convenience for tests and tools: records, submits and waits.
  void run(const Args& a) const {
    check(a);
    ctx_->submit_and_wait([&](vk::CommandBuffer cmd) { record(cmd, a); });
  }

 private:
  void record_side(vk::CommandBuffer cmd, const Variant<Problem>& v, const Args& a, const TensorRef& input,
                   const TensorRef& store, const std::optional<TensorRef>& norms, std::uint32_t bits,
                   std::uint32_t codebook_at, std::uint32_t boundaries_at, std::uint32_t rotation_at) const {
    const Problem p = problem(a);
    Spec spec;
    spec.workgroup = Config::invocations;
    spec.DIM = Cache::dim;
    spec.PAGE_TOKENS = Cache::page_tokens;
    spec.BITS = bits;
    spec.ROTATION = Cache::rotation_code(bits);
    spec.NORM_DTYPE = static_cast<std::uint32_t>(Cache::norm_dtype);
    spec.RAW_DTYPE = static_cast<std::uint32_t>(Cache::raw_dtype);
    spec.IN_DTYPE = static_cast<std::uint32_t>(Config::in_dtype);
    spec.ROWS = Config::rows;
    spec.TABLE_CODEBOOK = codebook_at;
    spec.TABLE_BOUNDARIES = boundaries_at;
    spec.TABLE_ROTATION = rotation_at;
    const Pipeline& pipeline = tilekernels::detail::pipeline_for<Push>(*ctx_, v, spec, 5);
    Push push;
    const auto rows = static_cast<std::uint64_t>(p.num_tokens * p.kv_heads);
    push.rows = static_cast<std::uint32_t>(rows);
    push.kv_heads = static_cast<std::uint32_t>(p.kv_heads);
    push.capacity = static_cast<std::uint32_t>(p.num_pages * Cache::page_tokens);
    push.inv_sqrt_dim = static_cast<float>(1.0 / std::sqrt(static_cast<double>(Cache::dim)));
    // A raw side's norms binding is never accessed; the store keeps it valid.
    tilekernels::detail::record_dispatch(*ctx_, cmd, pipeline,
                                         {input, a.slot_mapping, tables_.ref(), store, norms ? *norms : store}, push,
                                         (rows + Config::rows - 1) / Config::rows);
  }

  Context* ctx_;
  CacheTables<Cache> tables_;
};

}  // namespace tilekernels::aura
