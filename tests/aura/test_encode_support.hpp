// Helpers shared by the AURA encode/decode tests: cached codebooks and
// rotations (the 512-dim dense rotation takes a fraction of a second), and
// the code comparison that tolerates only values within f32 rounding of a
// boundary.
#pragma once

#include <tilekernels/aura/codebook.hpp>
#include <tilekernels/aura/decode.hpp>
#include <tilekernels/aura/encode.hpp>
#include <tilekernels/aura/rotation.hpp>
#include <tilekernels/reference/aura/encode.hpp>

#include <map>
#include <utility>

#include "../support.hpp"

namespace tktest::aura_support {

namespace aura = tilekernels::aura;

// A rotated value closer than this to a boundary may be quantised to either
// side by f32 arithmetic (dot products of <= 512 terms of unit-scale values
// carry errors of a few 1e-7).
inline constexpr double kBoundaryMargin = 4e-6;

inline const aura::Codebook& codebook(std::uint32_t dim, std::uint32_t bits) {
  static std::map<std::pair<std::uint32_t, std::uint32_t>, aura::Codebook> cache;
  auto it = cache.find({dim, bits});
  if (it == cache.end()) it = cache.emplace(std::pair{dim, bits}, aura::lloyd_max_codebook(dim, bits)).first;
  return it->second;
}

inline const std::vector<float>& dense_rotation(std::uint32_t dim) {
  static std::map<std::uint32_t, std::vector<float>> cache;
  auto it = cache.find(dim);
  if (it == cache.end()) it = cache.emplace(dim, aura::dense_rotation(dim, 1234 + dim)).first;
  return it->second;
}

// Rows of normals with magnitudes spread over 1e-3 .. 1e3.
inline std::vector<float> make_rows(Rng& rng, std::size_t rows, std::size_t dim, DType dtype) {
  std::vector<float> x(rows * dim);
  for (std::size_t r = 0; r < rows; ++r) {
    const float scale = std::pow(10.0f, rng.uniform(-3.0f, 3.0f));
    for (std::size_t d = 0; d < dim; ++d) x[r * dim + d] = rng.normal() * scale;
  }
  return rounded(dtype, x);
}

struct CodeComparison {
  std::size_t mismatches = 0;       // codes that differ from the reference
  std::size_t unexplained = 0;      // ... of which not within kBoundaryMargin of a boundary
  double worst_norm_error = 0;      // relative, against the norm implied by the kernel's codes
};

// Compares packed codes with the reference and the norms with what the
// kernel's own codes imply (so a tolerated code flip does not fail the norm).
inline CodeComparison compare(const std::vector<std::uint32_t>& packed, const std::vector<float>& norms,
                              const reference::aura::EncodeResult& ref, const std::vector<float>& input,
                              std::size_t rows, std::size_t dim, std::uint32_t bits,
                              const std::vector<float>& codebook) {
  CodeComparison c;
  const auto codes = reference::aura::unpack(packed, rows, dim, bits);
  for (std::size_t i = 0; i < rows * dim; ++i)
    if (codes[i] != ref.codes[i]) {
      ++c.mismatches;
      if (!(ref.margin[i] < kBoundaryMargin)) ++c.unexplained;
    }
  for (std::size_t r = 0; r < rows; ++r) {
    const double expected = reference::aura::corrected_norm(
        std::span(input).subspan(r * dim, dim), std::span(codes).subspan(r * dim, dim), codebook);
    const double err = expected == 0 ? std::abs(norms[r]) : std::abs(norms[r] - expected) / expected;
    c.worst_norm_error = std::max(c.worst_norm_error, std::isnan(err) ? 1e30 : err);
  }
  return c;
}

}  // namespace tktest::aura_support
