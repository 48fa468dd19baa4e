// SPDX-License-Identifier: MIT
// Double-precision CPU reference of the AURA paged KV cache: its format, the
// append (cache_write) and the dequantisation of stored tokens.
//
// Per layer the cache holds K and V, each in a format of its own:
// - TurboQuant (bits 2, 3, 4, 6, 8): per token and KV head, the norm-corrected
//   L2 norm and Lloyd-Max codes of the rotated unit vector (the math of
//   aura/encode.hpp; the reference encode of reference/aura/encode.hpp does
//   the quantisation), with the codebook of aura/codebook.hpp and the
//   rotation of aura/rotation.hpp (randomised Hadamard or dense, seeded);
// - raw (bits 16): the values rounded to bf16 or f16, no norms.
//
// Layout (row-major), the GPU's exactly:
//   codes  [num_pages, kv_heads, page_tokens, dim * bits / 32]  u32 (bits at d * bits of a token's stream)
//   norms  [num_pages, kv_heads, page_tokens]                   f32 or f16
//   raw    [num_pages, kv_heads, page_tokens, dim]              bf16 / f16 bits (raw formats only)
// Within a page, one KV head's tokens are contiguous. A sequence's token at
// position p lives in page block_table[s, p / page_tokens], slot
// p % page_tokens; a cache slot is page * page_tokens + slot (slot_mapping).
//
// The rotation is the f32 matrix R [dim, dim] of rotation.hpp
// (rotated[d] = sum_j R[d, j] x[j]), used as it is in double arithmetic, as
// the reference encode and decode do. A kernel applying the randomised
// Hadamard transform by a fast Walsh-Hadamard butterfly with an exact
// 1/sqrt(dim) differs from that matrix by the f32 rounding of 1/sqrt(dim)
// (< 6e-8 relative), far inside the f32 kernels' budget.
//
// A new cache is poisoned: norms NaN, codes all ones, raw values 0xffff (NaN
// in bf16 and f16), so that reading a slot nobody wrote shows in results.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "tilekernels/aura/codebook.hpp"
#include "tilekernels/aura/rotation.hpp"
#include "tilekernels/core/dtype.hpp"
#include "tilekernels/core/error.hpp"
#include "tilekernels/reference/aura/encode.hpp"

namespace tilekernels::reference::aura {

enum class RotationKind : std::uint32_t { hadamard, dense };
enum class Side : std::uint32_t { k, v };

// The storage format of one side (K or V) of the cache.
struct SideFormat {
  std::uint32_t bits = 4;                          // 2, 3, 4, 6, 8: TurboQuant; 16: raw
  DType raw_dtype = DType::bf16;                   // raw only: bf16 or f16
  DType norm_dtype = DType::f32;                   // TurboQuant only: f32 or f16
  RotationKind rotation = RotationKind::hadamard;  // TurboQuant only
  std::uint64_t seed = 0;                          // of the rotation
  // Split keys (K only, bits 2 or 3): the first hi_dims rotated coordinates
  // take bits + 1 bits and the Lloyd-Max codebook of that width; their
  // codes fill a token's first hi_dims * (bits + 1) / 32 words, the rest's
  // follow. 0: none.
  std::uint32_t hi_dims = 0;

  bool raw() const { return bits == 16; }
  // The width of coordinate d's code.
  std::uint32_t bits_at(std::size_t d) const { return d < hi_dims ? bits + 1 : bits; }
};

struct PagedCacheFormat {
  std::uint32_t dim = 128;
  std::uint32_t page_tokens = 16;
  std::uint32_t kv_heads = 1;
  std::uint32_t num_pages = 1;
  SideFormat k{}, v{};

  const SideFormat& side(Side s) const { return s == Side::k ? k : v; }
  std::size_t slots() const { return std::size_t{num_pages} * page_tokens; }
  // u32 words of one token's codes (0 for a raw side).
  std::size_t words_per_token(Side s) const {
    const SideFormat& sf = side(s);
    return sf.raw() ? 0 : (std::size_t{sf.hi_dims} * (sf.bits + 1) + std::size_t{dim - sf.hi_dims} * sf.bits) / 32;
  }
  // Index of (page, head, slot) in norms; times words_per_token (or dim) in codes (or raw).
  std::size_t token_index(std::size_t page, std::size_t head, std::size_t slot) const {
    return (page * kv_heads + head) * page_tokens + slot;
  }
  std::size_t tokens() const { return slots() * kv_heads; }
};

namespace impl {

inline std::string side_name(Side s) { return s == Side::k ? "k" : "v"; }

inline void fail(const std::string& what) { throw Error(ErrorCode::invalid_argument, "aura.paged_cache: " + what); }

// What the format means, not what a kernel supports: whole u32 words per
// token, a power-of-two dim for the Hadamard rotation (checked by
// rotation.hpp), dim >= 3 for the codebook (codebook.hpp).
inline void validate(const PagedCacheFormat& f) {
  if (f.dim == 0 || f.page_tokens == 0 || f.kv_heads == 0 || f.num_pages == 0)
    fail("dim, page_tokens, kv_heads and num_pages must be positive");
  for (Side s : {Side::k, Side::v}) {
    const SideFormat& sf = f.side(s);
    const std::string name = side_name(s);
    if (sf.raw()) {
      if (sf.raw_dtype != DType::bf16 && sf.raw_dtype != DType::f16)
        fail(name + ": a raw side stores bf16 or f16, got " + std::string(dtype_name(sf.raw_dtype)));
      continue;
    }
    if (sf.bits != 2 && sf.bits != 3 && sf.bits != 4 && sf.bits != 6 && sf.bits != 8)
      fail(name + ": bits must be 2, 3, 4, 6, 8 or 16 (raw), got " + std::to_string(sf.bits));
    if (std::size_t{f.dim} * sf.bits % 32 != 0)
      fail(name + ": dim * bits must be a multiple of 32 (whole u32 words per token), got dim " +
           std::to_string(f.dim) + " bits " + std::to_string(sf.bits));
    if (sf.norm_dtype != DType::f32 && sf.norm_dtype != DType::f16)
      fail(name + ": norms are f32 or f16, got " + std::string(dtype_name(sf.norm_dtype)));
    if (sf.hi_dims != 0 &&
        (s != Side::k || (sf.bits != 2 && sf.bits != 3) || sf.hi_dims % 32 != 0 || sf.hi_dims >= f.dim))
      fail(name + ": split keys need the K side at 2 or 3 bits and hi_dims a multiple of 32 below dim, got bits " +
           std::to_string(sf.bits) + " hi_dims " + std::to_string(sf.hi_dims));
  }
}

}  // namespace impl

// What quantising one side takes: the codebook and the rotation matrix
// (empty for a raw side).
struct SideQuantizer {
  std::vector<float> boundaries;  // [2^bits - 1]
  std::vector<float> codebook;    // [2^bits]
  std::vector<float> rotation;    // [dim, dim] row-major, rotated = R x
  std::vector<float> hi_boundaries, hi_codebook;  // split keys: the same at bits + 1
  std::size_t hi_dims = 0;

  // The codebook of coordinate d.
  std::span<const float> codebook_at(std::size_t d) const { return d < hi_dims ? hi_codebook : codebook; }
  std::span<const float> boundaries_at(std::size_t d) const { return d < hi_dims ? hi_boundaries : boundaries; }
};

inline SideQuantizer make_quantizer(const SideFormat& f, std::uint32_t dim) {
  if (f.raw()) return {};
  const auto cb = tilekernels::aura::lloyd_max_codebook(dim, f.bits);
  SideQuantizer q{cb.boundaries,
                  cb.codebook,
                  f.rotation == RotationKind::hadamard ? tilekernels::aura::hadamard_rotation(dim, f.seed)
                                                       : tilekernels::aura::dense_rotation(dim, f.seed),
                  {},
                  {},
                  f.hi_dims};
  if (f.hi_dims != 0) {
    const auto hi = tilekernels::aura::lloyd_max_codebook(dim, f.bits + 1);
    q.hi_boundaries = hi.boundaries;
    q.hi_codebook = hi.codebook;
  }
  return q;
}

// The stored arrays of one side, in the GPU layout above.
struct SideStore {
  std::vector<std::uint32_t> codes;  // TurboQuant: [num_pages, kv_heads, page_tokens, dim * bits / 32]
  std::vector<float> norms;          // TurboQuant: [num_pages, kv_heads, page_tokens], values exact in norm_dtype
  std::vector<std::uint16_t> raw;    // raw: [num_pages, kv_heads, page_tokens, dim] bf16 / f16 bits
};

struct PagedCache {
  PagedCacheFormat format;
  SideQuantizer k_quantizer, v_quantizer;
  SideStore k, v;

  explicit PagedCache(const PagedCacheFormat& f) : format(f) {
    impl::validate(f);
    k_quantizer = make_quantizer(f.k, f.dim);
    v_quantizer = make_quantizer(f.v, f.dim);
    for (Side s : {Side::k, Side::v}) {
      SideStore& st = store(s);
      if (f.side(s).raw()) {
        st.raw.assign(f.tokens() * f.dim, std::uint16_t{0xffff});
      } else {
        st.codes.assign(f.tokens() * f.words_per_token(s), ~std::uint32_t{0});
        st.norms.assign(f.tokens(), std::numeric_limits<float>::quiet_NaN());
      }
    }
  }

  const SideStore& store(Side s) const { return s == Side::k ? k : v; }
  SideStore& store(Side s) { return s == Side::k ? k : v; }
  const SideQuantizer& quantizer(Side s) const { return s == Side::k ? k_quantizer : v_quantizer; }
};

// The cache slot of position `position` of a sequence whose block_table row
// is `pages` (what an engine puts in slot_mapping).
inline std::int32_t slot_of(const PagedCacheFormat& f, std::span<const std::int32_t> pages, std::size_t position) {
  const std::size_t i = position / f.page_tokens;
  if (i >= pages.size()) impl::fail("position " + std::to_string(position) + " is past the block_table row");
  return static_cast<std::int32_t>(std::int64_t{pages[i]} * f.page_tokens +
                                   static_cast<std::int64_t>(position % f.page_tokens));
}

// Appends tokens: k, v [num_tokens, kv_heads, dim] (the values as the kernel
// reads them, already rounded where the input is bf16/f16), slot_mapping
// [num_tokens]. A negative slot skips its token (its rows are not read); the
// other slots must be distinct (the kernel writes them in parallel) and
// below num_pages * page_tokens. Slots not named keep their contents.
inline void cache_write(PagedCache& cache, std::span<const float> k, std::span<const float> v,
                        std::span<const std::int32_t> slot_mapping) {
  const PagedCacheFormat& f = cache.format;
  const std::size_t tokens = slot_mapping.size(), row = std::size_t{f.kv_heads} * f.dim;
  if (k.size() != tokens * row || v.size() != tokens * row)
    impl::fail("cache_write: k and v must hold num_tokens * kv_heads * dim = " + std::to_string(tokens * row) +
               " values, got " + std::to_string(k.size()) + " and " + std::to_string(v.size()));
  std::vector<std::size_t> written;  // token indices with a slot
  std::vector<bool> taken(f.slots(), false);
  for (std::size_t t = 0; t < tokens; ++t) {
    const std::int32_t slot = slot_mapping[t];
    if (slot < 0) continue;
    if (static_cast<std::size_t>(slot) >= f.slots())
      impl::fail("cache_write: slot " + std::to_string(slot) + " of token " + std::to_string(t) +
                 " is past the cache (" + std::to_string(f.slots()) + " slots)");
    if (taken[static_cast<std::size_t>(slot)])
      impl::fail("cache_write: slot " + std::to_string(slot) + " is named twice (token " + std::to_string(t) + ")");
    taken[static_cast<std::size_t>(slot)] = true;
    written.push_back(t);
  }

  for (Side s : {Side::k, Side::v}) {
    const std::span<const float> input = s == Side::k ? k : v;
    const SideFormat& sf = f.side(s);
    SideStore& st = cache.store(s);
    if (sf.raw()) {
      for (std::size_t t : written) {
        const auto slot = static_cast<std::size_t>(slot_mapping[t]);
        for (std::size_t h = 0; h < f.kv_heads; ++h) {
          const std::size_t dst = f.token_index(slot / f.page_tokens, h, slot % f.page_tokens) * f.dim;
          for (std::size_t d = 0; d < f.dim; ++d)
            st.raw[dst + d] = static_cast<std::uint16_t>(narrow(sf.raw_dtype, input[t * row + h * f.dim + d]));
        }
      }
      continue;
    }
    // One encode call over every written (token, head) row, in that order.
    std::vector<float> rows;
    rows.reserve(written.size() * row);
    for (std::size_t t : written) rows.insert(rows.end(), input.begin() + t * row, input.begin() + (t + 1) * row);
    const SideQuantizer& q = cache.quantizer(s);
    auto enc = sf.hi_dims == 0
                   ? encode(rows, written.size() * f.kv_heads, f.dim, sf.bits, q.rotation, q.boundaries, q.codebook)
                   : encode_split(rows, written.size() * f.kv_heads, f.dim, sf.hi_dims, q.rotation, q.boundaries,
                                  q.codebook, q.hi_boundaries, q.hi_codebook);
    if (sf.hi_dims != 0) enc.packed = pack_split(enc.codes, written.size() * f.kv_heads, f.dim, sf.bits, sf.hi_dims);
    const std::size_t words = f.words_per_token(s);
    for (std::size_t i = 0; i < written.size(); ++i) {
      const auto slot = static_cast<std::size_t>(slot_mapping[written[i]]);
      for (std::size_t h = 0; h < f.kv_heads; ++h) {
        const std::size_t r = i * f.kv_heads + h;
        const std::size_t dst = f.token_index(slot / f.page_tokens, h, slot % f.page_tokens);
        std::copy_n(enc.packed.begin() + static_cast<std::ptrdiff_t>(r * words), words,
                    st.codes.begin() + static_cast<std::ptrdiff_t>(dst * words));
        // The norm is rounded once to f32 (as the f32 kernel holds it), then to f16 where stored so.
        st.norms[dst] = round_to(sf.norm_dtype, static_cast<float>(enc.norms[r]));
      }
    }
  }
}

// Centred keys (aura/paged_cache.hpp): the cache stores k - mu, with mu
// the centre of the token's sequence. The rows cache_write takes for such
// a K side: k [num_tokens, kv_heads, dim] minus each token's row of
// k_centre [rows, kv_heads, dim] (token_centres [num_tokens]), the
// difference rounded to f32, as the kernel forms it.
inline std::vector<float> centred_keys(std::span<const float> k, std::span<const std::int32_t> token_centres,
                                       std::span<const float> k_centre, std::size_t kv_heads, std::size_t dim) {
  const std::size_t row = kv_heads * dim, tokens = token_centres.size();
  if (k.size() != tokens * row || row == 0 || k_centre.size() % row != 0)
    impl::fail("centred_keys: k must hold num_tokens * kv_heads * dim values and k_centre whole rows");
  std::vector<float> out(k.size());
  for (std::size_t t = 0; t < tokens; ++t) {
    const std::int32_t c = token_centres[t];
    if (c < 0 || static_cast<std::size_t>(c) >= k_centre.size() / row)
      impl::fail("centred_keys: token " + std::to_string(t) + " names centre row " + std::to_string(c) +
                 ", not a row of k_centre");
    for (std::size_t i = 0; i < row; ++i) out[t * row + i] = k[t * row + i] - k_centre[static_cast<std::size_t>(c) * row + i];
  }
  return out;
}

// The centre a prompt's keys give: the mean over its tokens of k
// [tokens, kv_heads, dim], per head and dim, in double.
inline std::vector<double> key_mean(std::span<const float> k, std::size_t kv_heads, std::size_t dim) {
  const std::size_t row = kv_heads * dim;
  if (row == 0 || k.empty() || k.size() % row != 0) impl::fail("key_mean: k must hold whole rows, at least one");
  std::vector<double> mean(row, 0.0);
  for (std::size_t i = 0; i < k.size(); ++i) mean[i % row] += k[i];
  for (auto& m : mean) m /= static_cast<double>(k.size() / row);
  return mean;
}

// The codebook indices [dim] of one stored token (TurboQuant sides).
inline std::vector<std::uint32_t> token_codes(const PagedCache& cache, Side s, std::size_t page, std::size_t head,
                                              std::size_t slot) {
  const PagedCacheFormat& f = cache.format;
  const SideFormat& sf = f.side(s);
  const std::size_t words = f.words_per_token(s);
  const auto row = std::span(cache.store(s).codes).subspan(f.token_index(page, head, slot) * words, words);
  return unpack_split(row, 1, f.dim, sf.bits, sf.hi_dims);
}

// The stored norm (TurboQuant) of one token.
inline double token_norm(const PagedCache& cache, Side s, std::size_t page, std::size_t head, std::size_t slot) {
  return cache.store(s).norms[cache.format.token_index(page, head, slot)];
}

namespace impl {
inline void check_token(const PagedCacheFormat& f, std::size_t page, std::size_t head, std::size_t slot) {
  if (page >= f.num_pages || head >= f.kv_heads || slot >= f.page_tokens)
    fail("token (page " + std::to_string(page) + ", head " + std::to_string(head) + ", slot " + std::to_string(slot) +
         ") is outside the cache");
}
}  // namespace impl

// One stored token in the original (un-rotated) domain:
//   TurboQuant: x[j] = norm * sum_d R[d, j] codebook_d[code[d]]   (norm * R^T codebook[codes];
//               codebook_d: the high codebook below a split's hi_dims)
//   raw:        x[j] = the stored bf16 / f16 value, widened.
inline std::vector<double> dequantize_token(const PagedCache& cache, Side s, std::size_t page, std::size_t head,
                                            std::size_t slot) {
  const PagedCacheFormat& f = cache.format;
  impl::check_token(f, page, head, slot);
  const std::size_t dim = f.dim;
  std::vector<double> x(dim, 0.0);
  if (f.side(s).raw()) {
    const std::size_t base = f.token_index(page, head, slot) * dim;
    for (std::size_t j = 0; j < dim; ++j) x[j] = widen(f.side(s).raw_dtype, cache.store(s).raw[base + j]);
    return x;
  }
  const SideQuantizer& q = cache.quantizer(s);
  const auto codes = token_codes(cache, s, page, head, slot);
  for (std::size_t d = 0; d < dim; ++d) {
    const double c = q.codebook_at(d)[codes[d]];
    for (std::size_t j = 0; j < dim; ++j) x[j] += double(q.rotation[d * dim + j]) * c;
  }
  const double norm = token_norm(cache, s, page, head, slot);
  for (auto& value : x) value *= norm;
  return x;
}

// The rotation of a side applied to a vector (the identity for raw sides):
// y[d] = sum_j R[d, j] x[j]; and its transpose, x[j] = sum_d R[d, j] y[d].
inline std::vector<double> rotate(const PagedCache& cache, Side s, std::span<const double> x) {
  if (cache.format.side(s).raw()) return {x.begin(), x.end()};
  const std::size_t dim = cache.format.dim;
  const auto& r = cache.quantizer(s).rotation;
  std::vector<double> y(dim, 0.0);
  for (std::size_t d = 0; d < dim; ++d)
    for (std::size_t j = 0; j < dim; ++j) y[d] += double(r[d * dim + j]) * x[j];
  return y;
}

inline std::vector<double> unrotate(const PagedCache& cache, Side s, std::span<const double> y) {
  if (cache.format.side(s).raw()) return {y.begin(), y.end()};
  const std::size_t dim = cache.format.dim;
  const auto& r = cache.quantizer(s).rotation;
  std::vector<double> x(dim, 0.0);
  for (std::size_t d = 0; d < dim; ++d)
    for (std::size_t j = 0; j < dim; ++j) x[j] += double(r[d * dim + j]) * y[d];
  return x;
}

// Positions [first, end) of one sequence, dequantised, as
// [end - first, kv_heads, dim] (the layout of the rows cache_write takes).
// `pages` is the sequence's block_table row; only the entries covering
// [first, end) are read, so pages wholly outside (e.g. before a sliding
// window) may hold anything.
inline std::vector<double> gather(const PagedCache& cache, Side s, std::span<const std::int32_t> pages,
                                  std::size_t first, std::size_t end) {
  const PagedCacheFormat& f = cache.format;
  if (end < first) impl::fail("gather: end before first");
  if (end > 0 && (end - 1) / f.page_tokens >= pages.size())
    impl::fail("gather: position " + std::to_string(end - 1) + " needs block_table entry " +
               std::to_string((end - 1) / f.page_tokens) + ", the row has " + std::to_string(pages.size()));
  const std::size_t row = std::size_t{f.kv_heads} * f.dim;
  std::vector<double> out((end - first) * row);
  for (std::size_t p = first; p < end; ++p) {
    const std::int32_t page = pages[p / f.page_tokens];
    if (page < 0 || static_cast<std::size_t>(page) >= f.num_pages)
      impl::fail("gather: block_table entry " + std::to_string(p / f.page_tokens) + " = " + std::to_string(page) +
                 " is not a page (" + std::to_string(f.num_pages) + " pages)");
    for (std::size_t h = 0; h < f.kv_heads; ++h) {
      const auto x = dequantize_token(cache, s, static_cast<std::size_t>(page), h, p % f.page_tokens);
      std::copy(x.begin(), x.end(), out.begin() + static_cast<std::ptrdiff_t>((p - first) * row + h * f.dim));
    }
  }
  return out;
}

}  // namespace tilekernels::reference::aura
