// SPDX-License-Identifier: MIT
// Double-precision CPU reference of aura::Decode (see
// include/tilekernels/aura/decode.hpp for the math).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "tilekernels/reference/aura/packing.hpp"

namespace tilekernels::reference::aura {

// output[r, j] = norms[r] * sum_d rotation[d, j] * codebook[code(r, d)].
inline std::vector<double> decode(std::span<const std::uint32_t> packed, std::span<const float> norms,
                                  std::size_t rows, std::size_t dim, std::uint32_t bits,
                                  std::span<const float> rotation, std::span<const float> codebook) {
  const auto codes = unpack(packed, rows, dim, bits);
  std::vector<double> out(rows * dim, 0.0);
  for (std::size_t r = 0; r < rows; ++r) {
    for (std::size_t d = 0; d < dim; ++d) {
      const double c = codebook[codes[r * dim + d]];
      for (std::size_t j = 0; j < dim; ++j) out[r * dim + j] += double(rotation[d * dim + j]) * c;
    }
    for (std::size_t j = 0; j < dim; ++j) out[r * dim + j] *= norms[r];
  }
  return out;
}

}  // namespace tilekernels::reference::aura
