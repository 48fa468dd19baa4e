// Double-precision CPU reference of aura::FlashPass2 (see its header for the
// math). Inputs are the stored partial values widened to float.
#pragma once

#include <cmath>
#include <cstddef>
#include <limits>
#include <span>
#include <vector>

namespace tilekernels::reference::aura {

struct FlashPass2Result {
  std::vector<double> output;  // [q_heads, dim], before narrowing to the output dtype
  std::vector<double> lse;     // [q_heads], -inf for a head with no non-empty block
};

inline FlashPass2Result flash_pass2(std::span<const float> o_partials, std::span<const float> m_partials,
                                    std::span<const float> l_partials, std::size_t q_heads, std::size_t num_blocks,
                                    std::size_t dim) {
  FlashPass2Result r{std::vector<double>(q_heads * dim, 0.0),
                     std::vector<double>(q_heads, -std::numeric_limits<double>::infinity())};
  for (std::size_t q = 0; q < q_heads; ++q) {
    double m_max = -std::numeric_limits<double>::infinity();
    for (std::size_t b = 0; b < num_blocks; ++b)
      if (l_partials[q * num_blocks + b] != 0.0f) m_max = std::max(m_max, double(m_partials[q * num_blocks + b]));
    if (m_max == -std::numeric_limits<double>::infinity()) continue;
    double l_sum = 0;
    std::vector<double> acc(dim, 0.0);
    for (std::size_t b = 0; b < num_blocks; ++b) {
      const std::size_t i = q * num_blocks + b;
      if (l_partials[i] == 0.0f) continue;
      const double w = std::exp(double(m_partials[i]) - m_max);
      l_sum += w * l_partials[i];
      for (std::size_t d = 0; d < dim; ++d) acc[d] += w * o_partials[i * dim + d];
    }
    for (std::size_t d = 0; d < dim; ++d) r.output[q * dim + d] = acc[d] / l_sum;
    r.lse[q] = m_max + std::log(l_sum);
  }
  return r;
}

}  // namespace tilekernels::reference::aura
