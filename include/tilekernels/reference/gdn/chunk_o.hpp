// SPDX-License-Identifier: MIT
// Double-precision CPU reference of gdn::ChunkO (see its header for the math
// and the layouts). Inputs are the stored values widened to float (bf16 q, k,
// v_new and h are exact in float; g is f32). It rounds where the kernels
// round: the gated, masked q k^T block is narrowed to bf16 before its product
// with v_new. The result is returned before the final narrowing to bf16.
#pragma once

#include <cmath>
#include <cstddef>
#include <span>
#include <vector>

#include "tilekernels/core/dtype.hpp"

namespace tilekernels::reference::gdn {

struct ChunkOShape {
  std::size_t B, T, Hg, H, K, V, BT;
  std::size_t NT() const { return (T + BT - 1) / BT; }
};

// o [B, T, H, V]
inline std::vector<double> chunk_o(std::span<const float> q, std::span<const float> k, std::span<const float> v,
                                   std::span<const float> h, std::span<const float> g, double scale,
                                   const ChunkOShape& s) {
  const std::size_t NT = s.NT(), ratio = s.H / s.Hg;
  std::vector<double> o(s.B * s.T * s.H * s.V, 0.0);
  std::vector<double> a(s.BT);
  for (std::size_t b = 0; b < s.B; ++b)
    for (std::size_t ih = 0; ih < s.H; ++ih) {
      const std::size_t kh = ih / ratio;
      for (std::size_t t = 0; t < s.T; ++t) {
        const std::size_t it = t / s.BT, t0 = it * s.BT;
        const float* qi = &q[((b * s.T + t) * s.Hg + kh) * s.K];
        const double gi = g[(b * s.T + t) * s.H + ih];
        // The gated, masked row of q k^T, rounded to bf16 as the kernel does.
        for (std::size_t tj = t0; tj <= t; ++tj) {
          const float* kj = &k[((b * s.T + tj) * s.Hg + kh) * s.K];
          double dot = 0;
          for (std::size_t x = 0; x < s.K; ++x) dot += double(qi[x]) * kj[x];
          const double gated = dot * std::exp(gi - double(g[(b * s.T + tj) * s.H + ih]));
          a[tj - t0] = round_to(DType::bf16, static_cast<float>(gated));
        }
        const float* hb = &h[((b * NT + it) * s.H + ih) * s.V * s.K];
        double* out = &o[((b * s.T + t) * s.H + ih) * s.V];
        const double eg = std::exp(gi);
        for (std::size_t c = 0; c < s.V; ++c) {
          double inter = 0;
          for (std::size_t x = 0; x < s.K; ++x) inter += double(qi[x]) * hb[c * s.K + x];
          double intra = 0;
          for (std::size_t tj = t0; tj <= t; ++tj) intra += a[tj - t0] * v[((b * s.T + tj) * s.H + ih) * s.V + c];
          out[c] = scale * (inter * eg + intra);
        }
      }
    }
  return o;
}

}  // namespace tilekernels::reference::gdn
