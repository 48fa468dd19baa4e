// SPDX-License-Identifier: MIT
// Double-precision CPU reference of gdn::RecomputeWU (see its header):
//   u = A bf16(v * beta),   w = A bf16((k * beta) * exp(g))   per chunk,
// rounded to bf16 where the kernels (and FLA) round: the scaled operands.
// The products with A are exact sums in double; outputs are not narrowed.
// Inputs are the stored values widened to float, numpy layouts:
//   k [B, T, Hg, K], v [B, T, H, V], beta, g [B, T, H], A [B, T, H, BT].
// The tail chunk uses only its valid rows and the matching columns of A.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <span>
#include <vector>

#include "tilekernels/core/dtype.hpp"

namespace tilekernels::reference::gdn {

struct RecomputeWUResult {
  std::vector<double> w;  // [B, T, H, K]
  std::vector<double> u;  // [B, T, H, V]
};

inline RecomputeWUResult recompute_wu(std::span<const float> k, std::span<const float> v, std::span<const float> beta,
                                      std::span<const float> g, std::span<const float> A, std::size_t B,
                                      std::size_t T, std::size_t Hg, std::size_t H, std::size_t K, std::size_t V,
                                      std::size_t BT) {
  RecomputeWUResult r{std::vector<double>(B * T * H * K, 0.0), std::vector<double>(B * T * H * V, 0.0)};
  const std::size_t group = H / Hg;
  std::vector<double> vb(BT * V), kb(BT * K);
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t h = 0; h < H; ++h)
      for (std::size_t t0 = 0; t0 < T; t0 += BT) {
        const std::size_t rows = std::min(BT, T - t0), kh = h / group;
        for (std::size_t j = 0; j < rows; ++j) {
          const std::size_t bh = ((b * T + t0 + j) * H + h);
          const double bt = beta[bh], decay = std::exp(double(g[bh]));
          for (std::size_t c = 0; c < V; ++c)
            vb[j * V + c] = round_to_bf16(static_cast<float>(v[bh * V + c] * bt));
          const std::size_t krow = ((b * T + t0 + j) * Hg + kh) * K;
          for (std::size_t c = 0; c < K; ++c)
            kb[j * K + c] = round_to_bf16(static_cast<float>(k[krow + c] * bt * decay));
        }
        for (std::size_t i = 0; i < rows; ++i) {
          const std::size_t bh = ((b * T + t0 + i) * H + h);
          for (std::size_t j = 0; j < rows; ++j) {
            const double a = A[bh * BT + j];
            for (std::size_t c = 0; c < V; ++c) r.u[bh * V + c] += a * vb[j * V + c];
            for (std::size_t c = 0; c < K; ++c) r.w[bh * K + c] += a * kb[j * K + c];
          }
        }
      }
  return r;
}

}  // namespace tilekernels::reference::gdn
