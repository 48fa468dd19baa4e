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

}  // namespace tilekernels::reference::aura
