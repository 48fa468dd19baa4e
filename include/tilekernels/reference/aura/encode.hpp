// SPDX-License-Identifier: MIT
// Double-precision CPU reference of aura::Encode / aura::HadamardEncode
// (see include/tilekernels/aura/encode.hpp for the math). Inputs
// are the stored values widened to float (bf16/f16 inputs already rounded).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "tilekernels/reference/aura/packing.hpp"

namespace tilekernels::reference::aura {

struct EncodeResult {
  std::vector<std::uint32_t> codes;   // [rows, dim] codebook index per coordinate
  std::vector<std::uint32_t> packed;  // [rows, dim * bits / 32]
  std::vector<double> norms;          // [rows] norm / ||codebook[codes]|| (norm if that is ~0)
  std::vector<double> rotated;        // [rows, dim] rotated unit vector
  // [rows, dim] distance of the rotated value to the nearest boundary: the
  // kernel's f32 arithmetic may pick the other side where this is tiny.
  std::vector<double> margin;
};

// Index = number of boundaries the value strictly exceeds (a value equal to
// a boundary goes to the lower cell).
inline std::uint32_t quantize(double v, std::span<const float> boundaries) {
  std::uint32_t idx = 0;
  for (float b : boundaries) idx += v > static_cast<double>(b) ? 1u : 0u;
  return idx;
}

// Split keys (reference/aura/paged_cache.hpp): coordinates d < hi_dims
// take hi_boundaries and hi_codebook; `packed` is left empty (the caller
// packs the two parts).
inline EncodeResult encode_split(std::span<const float> input, std::size_t rows, std::size_t dim, std::size_t hi_dims,
                                 std::span<const float> rotation, std::span<const float> boundaries,
                                 std::span<const float> codebook, std::span<const float> hi_boundaries,
                                 std::span<const float> hi_codebook) {
  EncodeResult r{std::vector<std::uint32_t>(rows * dim), {}, std::vector<double>(rows),
                 std::vector<double>(rows * dim), std::vector<double>(rows * dim)};
  std::vector<double> unit(dim);
  for (std::size_t row = 0; row < rows; ++row) {
    double sq = 0;
    for (std::size_t j = 0; j < dim; ++j) sq += double(input[row * dim + j]) * input[row * dim + j];
    const double norm = std::sqrt(sq);
    for (std::size_t j = 0; j < dim; ++j) unit[j] = norm > 0 ? input[row * dim + j] / norm : 0.0;
    double recon = 0;
    for (std::size_t d = 0; d < dim; ++d) {
      double v = 0;
      for (std::size_t j = 0; j < dim; ++j) v += double(rotation[d * dim + j]) * unit[j];
      const bool hi = d < hi_dims;
      const std::span<const float> bounds = hi ? hi_boundaries : boundaries, cb = hi ? hi_codebook : codebook;
      const std::uint32_t idx = quantize(v, bounds);
      double margin = std::numeric_limits<double>::infinity();
      for (float b : bounds) margin = std::min(margin, std::abs(v - b));
      r.rotated[row * dim + d] = v;
      r.margin[row * dim + d] = margin;
      r.codes[row * dim + d] = idx;
      recon += double(cb[idx]) * cb[idx];
    }
    recon = std::sqrt(recon);
    r.norms[row] = recon > 1e-30 ? norm / recon : norm;
  }
  return r;
}

inline EncodeResult encode(std::span<const float> input, std::size_t rows, std::size_t dim, std::uint32_t bits,
                           std::span<const float> rotation, std::span<const float> boundaries,
                           std::span<const float> codebook) {
  EncodeResult r = encode_split(input, rows, dim, 0, rotation, boundaries, codebook, {}, {});
  r.packed = pack(r.codes, rows, dim, bits);
  return r;
}

// The norm-correction factor the kernel would store for given codes (split
// keys: codes below hi_dims index hi_codebook).
inline double corrected_norm(std::span<const float> row, std::span<const std::uint32_t> codes,
                             std::span<const float> codebook, std::size_t hi_dims = 0,
                             std::span<const float> hi_codebook = {}) {
  double sq = 0, recon = 0;
  for (float x : row) sq += double(x) * x;
  for (std::size_t d = 0; d < codes.size(); ++d) {
    const double c = (d < hi_dims ? hi_codebook : codebook)[codes[d]];
    recon += c * c;
  }
  recon = std::sqrt(recon);
  return recon > 1e-30 ? std::sqrt(sq) / recon : std::sqrt(sq);
}

}  // namespace tilekernels::reference::aura
