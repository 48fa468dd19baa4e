// SPDX-License-Identifier: MIT
// Rotations for AURA, generated from a seed identically on every machine.
//
// Convention (the kernels', and the seed's): a rotation is a row-major f32
// matrix R [dim, dim] applied as
//   rotated[d] = sum_j R[d, j] * unit[j],
// and decoding applies the transpose, unit[j] = sum_d R[d, j] * rotated[d].
//
// - dense_rotation(dim, seed): a random orthogonal matrix, Haar-distributed
//   up to float rounding: a dim x dim matrix of standard normals whose rows
//   are orthonormalised by modified Gram-Schmidt, run twice, in double (the
//   rows of R are the resulting vectors, in order).
// - hadamard_signs(dim, seed) and hadamard_rotation(dim, seed): a randomised
//   Hadamard rotation for dim a power of two, rotated = H (s * unit) / sqrt(dim)
//   with s in {-1, +1}^dim and H the Sylvester Hadamard matrix,
//   H[d, j] = (-1)^popcount(d & j); so R[d, j] = H[d, j] s[j] / sqrt(dim), each
//   entry rounded once to f32. Undoing it: unit = s * (H rotated) / sqrt(dim).
//
// Randomness: xoshiro256** seeded through splitmix64; normals by Marsaglia's
// polar method with the exact logarithm of codebook.hpp; all arithmetic is
// + - * / sqrt in double under the same no-contraction rules, so every
// platform produces the same bits (pinned by hashes in the tests).
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "tilekernels/aura/codebook.hpp"
#include "tilekernels/core/error.hpp"
#include "tilekernels/core/splitmix.hpp"

namespace tilekernels::aura {

// xoshiro256** (Blackman & Vigna), state filled by splitmix64 from the seed.
class RotationRng {
 public:
  explicit RotationRng(std::uint64_t seed) {
    for (auto& word : s_) word = splitmix64(seed);
  }
  std::uint64_t next() {
    const std::uint64_t result = std::rotl(s_[1] * 5, 7) * 9;
    const std::uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = std::rotl(s_[3], 45);
    return result;
  }
  // Uniform on [0, 1) with 53 random bits.
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  // Standard normal (Marsaglia polar; the second value of a pair is kept).
  TK_EXACT_FP double normal() {
    TK_EXACT_FP_BODY
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    double u, v, s;
    do {
      u = 2.0 * uniform() - 1.0;
      v = 2.0 * uniform() - 1.0;
      s = u * u + v * v;
    } while (!(s > 0.0 && s < 1.0));
    const double scale = std::sqrt(-2.0 * impl::exact_log(s) / s);
    spare_ = v * scale;
    has_spare_ = true;
    return u * scale;
  }

 private:
  std::uint64_t s_[4];
  double spare_ = 0;
  bool has_spare_ = false;
};

namespace impl {
// Dense rotations cost O(dim^3) on one core: they stop at 512, the largest
// dimension a dense-rotation kernel takes; Hadamard signs at 4096.
inline void expect_rotation_dim(std::uint32_t dim, bool power_of_two) {
  const std::uint32_t most = power_of_two ? 4096 : 512;
  if (dim < 1 || dim > most)
    throw Error(ErrorCode::invalid_argument, std::string("aura.rotation: dim must be in [1, ") + std::to_string(most) +
                                                 "] for a " + (power_of_two ? "Hadamard" : "dense") + " rotation, got " +
                                                 std::to_string(dim));
  if (power_of_two && !std::has_single_bit(dim))
    throw Error(ErrorCode::invalid_argument,
                "aura.rotation: a Hadamard rotation needs dim a power of two, got " + std::to_string(dim));
}
}  // namespace impl

// Random orthogonal [dim, dim], row-major f32; dim in [1, 512].
TK_EXACT_FP inline std::vector<float> dense_rotation(std::uint32_t dim, std::uint64_t seed) {
  TK_EXACT_FP_BODY
  impl::expect_rotation_dim(dim, false);
  RotationRng rng(seed);
  const std::size_t n = dim;
  std::vector<double> q(n * n);
  for (auto& x : q) x = rng.normal();
  for (std::size_t i = 0; i < n; ++i) {
    double* row = &q[i * n];
    for (int pass = 0; pass < 2; ++pass) {
      for (std::size_t j = 0; j < i; ++j) {
        const double* other = &q[j * n];
        double dot = 0.0;
        for (std::size_t c = 0; c < n; ++c) dot = dot + row[c] * other[c];
        for (std::size_t c = 0; c < n; ++c) row[c] = row[c] - dot * other[c];
      }
    }
    double norm2 = 0.0;
    for (std::size_t c = 0; c < n; ++c) norm2 = norm2 + row[c] * row[c];
    const double inv = 1.0 / std::sqrt(norm2);
    for (std::size_t c = 0; c < n; ++c) row[c] = row[c] * inv;
  }
  std::vector<float> out(n * n);
  for (std::size_t i = 0; i < n * n; ++i) out[i] = static_cast<float>(q[i]);
  return out;
}

// The random signs s [dim] (+1.0f or -1.0f) of the Hadamard rotation.
inline std::vector<float> hadamard_signs(std::uint32_t dim, std::uint64_t seed) {
  impl::expect_rotation_dim(dim, true);
  RotationRng rng(seed);
  std::vector<float> s(dim);
  for (auto& x : s) x = (rng.next() >> 63) ? -1.0f : 1.0f;
  return s;
}

// The dense matrix of the Hadamard rotation with the given signs.
TK_EXACT_FP inline std::vector<float> hadamard_matrix(const std::vector<float>& signs) {
  TK_EXACT_FP_BODY
  const auto dim = static_cast<std::uint32_t>(signs.size());
  impl::expect_rotation_dim(dim, true);
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(dim)));
  std::vector<float> r(std::size_t{dim} * dim);
  for (std::uint32_t d = 0; d < dim; ++d)
    for (std::uint32_t j = 0; j < dim; ++j)
      r[std::size_t{d} * dim + j] = (std::popcount(d & j) % 2 ? -scale : scale) * signs[j];
  return r;
}

inline std::vector<float> hadamard_rotation(std::uint32_t dim, std::uint64_t seed) {
  return hadamard_matrix(hadamard_signs(dim, seed));
}

}  // namespace tilekernels::aura
