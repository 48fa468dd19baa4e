// SPDX-License-Identifier: MIT
// The bit packing of AURA codes, shared by the encode and decode
// references: `bits`-bit codes of each row at bit offset d * bits of the
// row's u32 stream (little-endian within words; a code may straddle two
// words).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace tilekernels::reference::aura {

inline std::vector<std::uint32_t> pack(std::span<const std::uint32_t> codes, std::size_t rows, std::size_t dim,
                                       std::uint32_t bits) {
  const std::size_t words = (dim * bits + 31) / 32;
  std::vector<std::uint32_t> out(rows * words, 0u);
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t d = 0; d < dim; ++d) {
      const std::uint64_t code = codes[r * dim + d] & ((1u << bits) - 1u);
      const std::size_t bit = d * bits, w = bit / 32, shift = bit % 32;
      const std::uint64_t placed = code << shift;
      out[r * words + w] |= static_cast<std::uint32_t>(placed);
      if (shift + bits > 32) out[r * words + w + 1] |= static_cast<std::uint32_t>(placed >> 32);
    }
  return out;
}

inline std::vector<std::uint32_t> unpack(std::span<const std::uint32_t> packed, std::size_t rows, std::size_t dim,
                                         std::uint32_t bits) {
  const std::size_t words = (dim * bits + 31) / 32;
  std::vector<std::uint32_t> codes(rows * dim);
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t d = 0; d < dim; ++d) {
      const std::size_t bit = d * bits, w = bit / 32, shift = bit % 32;
      std::uint64_t v = packed[r * words + w];
      if (w + 1 < words) v |= static_cast<std::uint64_t>(packed[r * words + w + 1]) << 32;
      codes[r * dim + d] = static_cast<std::uint32_t>(v >> shift) & ((1u << bits) - 1u);
    }
  return codes;
}

// Split codes (aura/paged_cache.hpp's split keys): per row the codes of
// coordinates below hi_dims at bits + 1, then the rest's at bits, each part
// packed as above from the first bit of its own first word.
inline std::vector<std::uint32_t> pack_split(std::span<const std::uint32_t> codes, std::size_t rows, std::size_t dim,
                                             std::uint32_t bits, std::size_t hi_dims) {
  if (hi_dims == 0) return pack(codes, rows, dim, bits);
  std::vector<std::uint32_t> out;
  for (std::size_t r = 0; r < rows; ++r) {
    const auto row = codes.subspan(r * dim, dim);
    const auto hi = pack(row.first(hi_dims), 1, hi_dims, bits + 1),
               lo = pack(row.subspan(hi_dims), 1, dim - hi_dims, bits);
    out.insert(out.end(), hi.begin(), hi.end());
    out.insert(out.end(), lo.begin(), lo.end());
  }
  return out;
}

inline std::vector<std::uint32_t> unpack_split(std::span<const std::uint32_t> packed, std::size_t rows, std::size_t dim,
                                               std::uint32_t bits, std::size_t hi_dims) {
  if (hi_dims == 0) return unpack(packed, rows, dim, bits);
  const std::size_t hw = hi_dims * (bits + 1) / 32, words = hw + (dim - hi_dims) * bits / 32;
  std::vector<std::uint32_t> codes;
  for (std::size_t r = 0; r < rows; ++r) {
    const auto row = packed.subspan(r * words, words);
    const auto hi = unpack(row.first(hw), 1, hi_dims, bits + 1), lo = unpack(row.subspan(hw), 1, dim - hi_dims, bits);
    codes.insert(codes.end(), hi.begin(), hi.end());
    codes.insert(codes.end(), lo.begin(), lo.end());
  }
  return codes;
}

}  // namespace tilekernels::reference::aura
