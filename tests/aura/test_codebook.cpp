// SPDX-License-Identifier: MIT
// Codebooks and rotations (host only). The codebooks are checked against
// values computed without the library: the Lloyd-Max conditions by
// numerical integration, a brute-force Lloyd iteration written here, and
// Max's (1960) published table for the Gaussian limit; then symmetry,
// bit-identical results (pinned hashes: a machine that computes other bits
// fails here), orthogonality of the rotations.
#include <tilekernels/aura/codebook.hpp>
#include <tilekernels/aura/rotation.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <utility>

#include "../support.hpp"

namespace {

namespace aura = tilekernels::aura;
using tilekernels::Error;

std::uint64_t fnv1a(const std::vector<float>& v, std::uint64_t h = 0xcbf29ce484222325ull) {
  for (float x : v) {
    const auto bits = std::bit_cast<std::uint32_t>(x);
    for (int i = 0; i < 4; ++i) h = (h ^ ((bits >> (8 * i)) & 0xffu)) * 0x100000001b3ull;
  }
  return h;
}

// Centroid of the exact density on [a, b], composite Simpson with std::pow.
double numeric_centroid(std::uint32_t dim, double a, double b) {
  const double k = (dim - 3.0) / 2.0;
  const int n = 4000;
  const double h = (b - a) / n;
  double m0 = 0, m1 = 0;
  for (int i = 0; i <= n; ++i) {
    const double x = a + i * h;
    const double w = (i == 0 || i == n) ? 1 : (i % 2 ? 4 : 2);
    const double f = std::pow(std::max(0.0, 1 - x * x), k);
    m0 += w * f;
    m1 += w * x * f;
  }
  return m1 / m0;
}

TEST(AuraCodebook, LloydMaxConditionsHold) {
  for (std::uint32_t dim : {32u, 64u, 96u, 128u, 256u, 512u})
    for (std::uint32_t bits : {1u, 2u, 3u, 4u, 6u, 8u}) {
      SCOPED_TRACE("dim=" + std::to_string(dim) + " bits=" + std::to_string(bits));
      const auto cb = aura::lloyd_max_codebook(dim, bits);
      const std::size_t L = std::size_t{1} << bits;
      ASSERT_EQ(cb.codebook.size(), L);
      ASSERT_EQ(cb.boundaries.size(), L - 1);
      EXPECT_EQ(cb.boundaries[L / 2 - 1], 0.0f);
      const double sigma = 1.0 / std::sqrt(double(dim));
      for (std::size_t i = 0; i < L; ++i) {
        EXPECT_EQ(cb.codebook[i], -cb.codebook[L - 1 - i]);
        if (i + 1 < L) {
          EXPECT_LT(cb.codebook[i], cb.boundaries[i]);
          EXPECT_LT(cb.boundaries[i], cb.codebook[i + 1]);
          EXPECT_NEAR(cb.boundaries[i], 0.5 * (double(cb.codebook[i]) + cb.codebook[i + 1]), 1e-7 * sigma * 8);
        }
        const double a = i == 0 ? -1.0 : cb.boundaries[i - 1], b = i + 1 == L ? 1.0 : cb.boundaries[i];
        EXPECT_NEAR(cb.codebook[i], numeric_centroid(dim, a, b), 1e-6 * sigma) << "cell " << i;
      }
    }
}

TEST(AuraCodebook, GaussianLimit) {
  // Lloyd-Max distortion of N(0, 1) (Max 1960): 0.3634, 0.1175, 0.03454, 0.009497.
  const double gauss[] = {0.3634, 0.1175, 0.03454, 0.009497};
  for (std::uint32_t bits = 1; bits <= 4; ++bits) {
    const auto cb = aura::lloyd_max_codebook(512, bits);
    EXPECT_NEAR(cb.distortion / gauss[bits - 1], 1.0, 0.01) << "bits " << bits;
    // The exact density has lighter tails than the Gaussian: less distortion.
    EXPECT_LT(cb.distortion, gauss[bits - 1]);
  }
  std::printf("  Lloyd-Max distortion per unit vector (dim: bits 2 3 4 6 8)\n");
  for (std::uint32_t dim : {64u, 128u, 256u, 512u}) {
    std::printf("    %3u:", dim);
    for (std::uint32_t bits : {2u, 3u, 4u, 6u, 8u}) std::printf(" %.6g", aura::lloyd_max_codebook(dim, bits).distortion);
    std::printf("\n");
  }
}

// The same quantiser found from scratch by the plain Lloyd iteration
// (boundaries at the midpoints, levels at the centroids of their cells,
// from evenly spaced levels until nothing moves), over the whole line, with
// the density integrated by composite Simpson: no closed form, no Newton
// step and no symmetry assumed, unlike the library's solver.
struct BruteForce {
  std::vector<double> levels, boundaries;
};

BruteForce brute_force_lloyd_max(std::uint32_t dim, std::uint32_t bits) {
  const double k = (dim - 3.0) / 2.0, sigma = 1.0 / std::sqrt(double(dim));
  // Beyond 12 sigma (1 - x^2)^k is below e^-70 of its peak: integrate up to there.
  const double edge = std::min(1.0, 12.0 * sigma);
  const auto moments = [&](double a, double b, double& m0, double& m1) {
    const int n = 400;
    const double h = (b - a) / n;
    m0 = m1 = 0;
    for (int i = 0; i <= n; ++i) {
      const double x = a + i * h;
      const double w = (i == 0 || i == n) ? 1 : (i % 2 ? 4 : 2);
      const double f = std::pow(std::max(0.0, 1 - x * x), k);
      m0 += w * f;
      m1 += w * x * f;
    }
  };
  const std::size_t L = std::size_t{1} << bits;
  BruteForce q{std::vector<double>(L), std::vector<double>(L - 1)};
  for (std::size_t i = 0; i < L; ++i) q.levels[i] = sigma * (-3.0 + 6.0 * (i + 0.5) / double(L));
  for (int it = 0; it < 100000; ++it) {
    for (std::size_t i = 0; i + 1 < L; ++i) q.boundaries[i] = 0.5 * (q.levels[i] + q.levels[i + 1]);
    double moved = 0;
    for (std::size_t i = 0; i < L; ++i) {
      const double a = i == 0 ? -edge : q.boundaries[i - 1], b = i + 1 == L ? edge : q.boundaries[i];
      double m0, m1;
      moments(a, b, m0, m1);
      moved = std::max(moved, std::abs(m1 / m0 - q.levels[i]));
      q.levels[i] = m1 / m0;
    }
    if (moved < 1e-14 * sigma) break;
  }
  for (std::size_t i = 0; i + 1 < L; ++i) q.boundaries[i] = 0.5 * (q.levels[i] + q.levels[i + 1]);
  return q;
}

TEST(AuraCodebook, MatchesABruteForceLloydIteration) {
  const std::pair<std::uint32_t, std::uint32_t> cases[] = {{32, 2}, {64, 3}, {128, 4}, {96, 1}};
  for (const auto& [dim, bits] : cases) {
    SCOPED_TRACE("dim=" + std::to_string(dim) + " bits=" + std::to_string(bits));
    const auto cb = aura::lloyd_max_codebook(dim, bits);
    const auto want = brute_force_lloyd_max(dim, bits);
    const double tol = 1e-6 / std::sqrt(double(dim));
    ASSERT_EQ(cb.codebook.size(), want.levels.size());
    for (std::size_t i = 0; i < want.levels.size(); ++i) EXPECT_NEAR(cb.codebook[i], want.levels[i], tol) << "level " << i;
    for (std::size_t i = 0; i < want.boundaries.size(); ++i)
      EXPECT_NEAR(cb.boundaries[i], want.boundaries[i], tol) << "boundary " << i;
  }
}

// For large Dim sqrt(Dim) times a coordinate tends to N(0, 1), so the
// codebook at Dim 65536, scaled by 256, must give the Lloyd-Max quantiser of
// the standard Gaussian: J. Max, "Quantizing for minimum distortion", IRE
// Trans. Inf. Theory IT-6 (1960), table I (4 significant digits; the
// positive half). At this Dim the exact density moves them by < 2e-4.
TEST(AuraCodebook, MatchesMaxGaussianTable) {
  struct Row {
    std::uint32_t bits;
    std::vector<double> levels, boundaries;  // positive half, boundaries without 0
    double distortion;
  };
  const Row table[] = {
      {1, {0.7980}, {}, 0.3634},
      {2, {0.4528, 1.510}, {0.9816}, 0.1175},
      {3, {0.2451, 0.7560, 1.344, 2.152}, {0.5006, 1.050, 1.748}, 0.03454},
      {4,
       {0.1284, 0.3881, 0.6568, 0.9424, 1.256, 1.618, 2.069, 2.733},
       {0.2582, 0.5224, 0.7996, 1.099, 1.437, 1.844, 2.401},
       0.009497},
  };
  for (const auto& row : table) {
    SCOPED_TRACE("bits=" + std::to_string(row.bits));
    const auto cb = aura::lloyd_max_codebook(65536, row.bits);
    const std::size_t n = row.levels.size();  // levels per half
    ASSERT_EQ(cb.codebook.size(), 2 * n);
    for (std::size_t i = 0; i < n; ++i) {
      EXPECT_NEAR(256.0 * cb.codebook[n + i], row.levels[i], 7e-4) << "level " << i;
      if (i + 1 < n) {
        EXPECT_NEAR(256.0 * cb.boundaries[n + i], row.boundaries[i], 7e-4) << "boundary " << i;
      }
    }
    EXPECT_NEAR(cb.distortion / row.distortion, 1.0, 1e-3);
  }
}

// The pins are this library's own earlier results: they guard portability
// (the same bits on every machine and compiler), not correctness, which
// the tests above check against independent values.
TEST(AuraCodebook, BitIdenticalEverywhere) {
  struct Pin {
    std::uint32_t dim, bits;
    std::uint64_t hash;
  };
  // fnv1a of the float bits of codebook then boundaries.
  const Pin pins[] = {{64, 2, 0xb55e26774d68c269ull}, {96, 3, 0xd7ae78cb40de4e8dull}, {128, 4, 0x195e03f6c71f4b29ull},
                      {256, 6, 0xc9e6584dbe5f5419ull}, {512, 8, 0x616be4864d7c3755ull}, {128, 8, 0x82ac0d4b4b0c3751ull}};
  for (const auto& p : pins) {
    const auto cb = aura::lloyd_max_codebook(p.dim, p.bits);
    EXPECT_EQ(fnv1a(cb.boundaries, fnv1a(cb.codebook)), p.hash) << "dim " << p.dim << " bits " << p.bits;
  }
}

TEST(AuraCodebook, RejectsBadParameters) {
  EXPECT_THROW(aura::lloyd_max_codebook(2, 4), Error);
  EXPECT_THROW(aura::lloyd_max_codebook(128, 0), Error);
  EXPECT_THROW(aura::lloyd_max_codebook(128, 9), Error);
  EXPECT_THROW(aura::hadamard_signs(96, 1), Error);
  EXPECT_THROW(aura::dense_rotation(0, 1), Error);
  EXPECT_THROW(aura::dense_rotation(513, 1), Error);  // O(dim^3): the kernels stop at 512
  EXPECT_THROW(aura::hadamard_signs(8192, 1), Error);
}

double orthogonality_error(const std::vector<float>& r, std::size_t n) {
  double worst = 0;
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < n; ++j) {
      double s = 0;
      for (std::size_t c = 0; c < n; ++c) s += double(r[i * n + c]) * r[j * n + c];
      worst = std::max(worst, std::abs(s - (i == j ? 1.0 : 0.0)));
    }
  return worst;
}

TEST(AuraRotation, DenseIsOrthogonalAndPinned) {
  for (std::uint32_t dim : {32u, 64u, 96u, 128u, 256u}) {
    const auto r = aura::dense_rotation(dim, 42);
    EXPECT_LE(orthogonality_error(r, dim), 1e-6) << "dim " << dim;
    EXPECT_EQ(r, aura::dense_rotation(dim, 42));
    EXPECT_NE(r, aura::dense_rotation(dim, 43));
  }
  EXPECT_EQ(fnv1a(aura::dense_rotation(64, 1)), 0x403c286d2a7d940dull);
  EXPECT_EQ(fnv1a(aura::dense_rotation(96, 7)), 0xdbb6f0d2ef3b44e4ull);
}

TEST(AuraRotation, HadamardMatchesItsDefinition) {
  for (std::uint32_t dim : {32u, 64u, 128u, 256u, 512u}) {
    const auto s = aura::hadamard_signs(dim, 5);
    const auto r = aura::hadamard_rotation(dim, 5);
    EXPECT_EQ(r, aura::hadamard_matrix(s));
    const double scale = 1.0 / std::sqrt(double(dim));
    for (std::uint32_t d = 0; d < dim; ++d)
      for (std::uint32_t j = 0; j < dim; ++j) {
        const double h = (std::popcount(d & j) % 2 ? -1.0 : 1.0) * s[j] * scale;
        ASSERT_EQ(r[d * dim + j], static_cast<float>(h));
      }
    EXPECT_LE(orthogonality_error(r, dim), 1e-6);
    std::size_t negative = 0;
    for (float x : s) negative += x < 0;
    EXPECT_GT(negative, dim / 4);
    EXPECT_LT(negative, 3 * dim / 4);
  }
  EXPECT_EQ(fnv1a(aura::hadamard_signs(128, 3)), 0xf37e14cedb123525ull);
}

TEST(AuraRotation, NormalsHaveUnitVariance) {
  aura::RotationRng rng(11);
  double s1 = 0, s2 = 0;
  const int n = 200000;
  for (int i = 0; i < n; ++i) {
    const double z = rng.normal();
    s1 += z;
    s2 += z * z;
  }
  EXPECT_NEAR(s1 / n, 0.0, 0.01);
  EXPECT_NEAR(s2 / n, 1.0, 0.01);
}

}  // namespace
