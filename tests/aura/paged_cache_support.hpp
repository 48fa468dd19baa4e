// SPDX-License-Identifier: MIT
// Test helpers for the paged-cache kernels (CacheWrite, DecodeAttention):
// the reference format of a PagedCacheConfig, a cache on the GPU in guarded
// tensors, its contents read back into a reference cache, and sequences laid
// out over shuffled pages.
#pragma once

#include <tilekernels/aura/cache_write.hpp>
#include <tilekernels/aura/decode_attention.hpp>
#include <tilekernels/reference/aura/decode_attention.hpp>
#include <tilekernels/reference/aura/paged_cache.hpp>

#include <cmath>
#include <numeric>
#include <optional>
#include <vector>

#include "../support.hpp"

namespace tktest::aura_cache {

namespace aura = tilekernels::aura;
namespace ref = tilekernels::reference::aura;

template <class Cache>
ref::SideFormat reference_side(std::uint32_t bits, std::uint64_t seed) {
  ref::SideFormat s;
  s.bits = bits;
  s.raw_dtype = Cache::raw_dtype;
  s.norm_dtype = Cache::norm_dtype;
  s.rotation = Cache::rotation == aura::Rotation::hadamard ? ref::RotationKind::hadamard : ref::RotationKind::dense;
  s.seed = seed;
  return s;
}

template <class Cache>
ref::PagedCacheFormat reference_format(std::uint32_t kv_heads, std::uint32_t num_pages, std::uint64_t k_seed,
                                       std::uint64_t v_seed) {
  ref::PagedCacheFormat f;
  f.dim = Cache::dim;
  f.page_tokens = Cache::page_tokens;
  f.kv_heads = kv_heads;
  f.num_pages = num_pages;
  f.k = reference_side<Cache>(Cache::k_bits, k_seed);
  f.k.hi_dims = Cache::k_hi_dims;
  f.v = reference_side<Cache>(Cache::v_bits, v_seed);
  return f;
}

// The cache of one layer on the GPU, every tensor between sentinels and
// filled with all-ones words: the reference's poison (codes ~0, norms and
// raw values NaN), so that slots nobody wrote compare equal to it.
template <class Cache>
struct GpuCache {
  std::int64_t kv_heads, num_pages;
  GuardedTensor k_codes, v_codes;
  std::optional<GuardedTensor> k_norms, v_norms;

  GpuCache(Context& ctx, std::int64_t heads, std::int64_t pages)
      : kv_heads(heads),
        num_pages(pages),
        k_codes(ctx, Cache::store_dtype(Cache::k_bits), Cache::side_store_shape(true, pages, heads)),
        v_codes(ctx, Cache::store_dtype(Cache::v_bits), Cache::store_shape(Cache::v_bits, pages, heads)) {
    if (!Cache::k_raw) k_norms.emplace(ctx, Cache::norm_dtype, Cache::norm_shape(pages, heads));
    if (!Cache::v_raw) v_norms.emplace(ctx, Cache::norm_dtype, Cache::norm_shape(pages, heads));
  }
  std::optional<TensorRef> k_norms_ref() const { return k_norms ? std::optional<TensorRef>(k_norms->ref()) : std::nullopt; }
  std::optional<TensorRef> v_norms_ref() const { return v_norms ? std::optional<TensorRef>(v_norms->ref()) : std::nullopt; }

  // Copies the GPU's contents into `c` (same format), checking the sentinels.
  void read_into(ref::PagedCache& c) const {
    read_side(c.k, k_codes, k_norms, Cache::k_raw);
    read_side(c.v, v_codes, v_norms, Cache::v_raw);
  }

 private:
  static std::vector<std::uint16_t> halves(const GuardedTensor& t, std::size_t n) {
    const auto words = t.read_words();
    std::vector<std::uint16_t> out(n);
    for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<std::uint16_t>(words[i / 2] >> (16 * (i % 2)));
    return out;
  }
  static void read_side(ref::SideStore& st, const GuardedTensor& codes, const std::optional<GuardedTensor>& norms,
                        bool raw) {
    if (raw) {
      st.raw = halves(codes, st.raw.size());
      return;
    }
    st.codes = codes.read_words();
    if (Cache::norm_dtype == DType::f32) {
      st.norms = norms->read_floats();
    } else {
      const auto h = halves(*norms, st.norms.size());
      for (std::size_t i = 0; i < h.size(); ++i) st.norms[i] = widen(DType::f16, h[i]);
    }
  }
};

// Sequences of the given lengths over pages in shuffled order: each
// sequence gets ceil(len / PageTokens) pages (+ `spare` unused ones), the
// block table is padded with -1 past them.
struct Layout {
  std::vector<std::int32_t> seq_lens, block_table;
  std::int64_t max_pages = 1, num_pages = 1;

  // slot of position p of sequence s
  std::int32_t slot(std::size_t s, std::size_t p, std::uint32_t page_tokens) const {
    return block_table[s * static_cast<std::size_t>(max_pages) + p / page_tokens] * static_cast<std::int32_t>(page_tokens) +
           static_cast<std::int32_t>(p % page_tokens);
  }
};

inline Layout make_layout(Rng& rng, const std::vector<std::int32_t>& lens, std::uint32_t page_tokens,
                          std::int64_t spare_pages = 2) {
  Layout l;
  l.seq_lens = lens;
  std::int64_t total = spare_pages;
  for (auto len : lens) {
    const std::int64_t pages = (len + page_tokens - 1) / page_tokens;
    l.max_pages = std::max(l.max_pages, pages + 1);
    total += pages;
  }
  l.num_pages = std::max<std::int64_t>(total, 1);
  std::vector<std::int32_t> perm(static_cast<std::size_t>(l.num_pages));
  std::iota(perm.begin(), perm.end(), 0);
  for (std::size_t i = perm.size(); i > 1; --i) std::swap(perm[i - 1], perm[rng.next() % i]);
  l.block_table.assign(lens.size() * static_cast<std::size_t>(l.max_pages), -1);
  std::size_t next = 0;
  for (std::size_t s = 0; s < lens.size(); ++s)
    for (std::int64_t i = 0; i * page_tokens < lens[s]; ++i)
      l.block_table[s * static_cast<std::size_t>(l.max_pages) + static_cast<std::size_t>(i)] = perm[next++];
  return l;
}

// Cosine similarity of two vectors.
inline double cosine(const std::vector<float>& a, const std::vector<double>& b) {
  double ab = 0, aa = 0, bb = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    ab += a[i] * b[i];
    aa += double(a[i]) * a[i];
    bb += b[i] * b[i];
  }
  return ab / std::sqrt(aa * bb);
}

}  // namespace tktest::aura_cache
