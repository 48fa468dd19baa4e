// SPDX-License-Identifier: MIT
// Double-precision CPU reference of aura::FlashPass2 (see its header for the
// math): each head's blocks merged as softmax states. Inputs are the stored
// partial values widened to float.
#pragma once

#include <algorithm>
#include <cstddef>
#include <span>
#include <vector>

#include "tilekernels/reference/softmax_state.hpp"

namespace tilekernels::reference::aura {

struct FlashPass2Result {
  std::vector<double> output;  // [q_heads, dim], before narrowing to the output dtype
  std::vector<double> lse;     // [q_heads], -inf for a head with no non-empty block
};

inline FlashPass2Result flash_pass2(std::span<const float> o_partials, std::span<const float> m_partials,
                                    std::span<const float> l_partials, std::size_t q_heads, std::size_t num_blocks,
                                    std::size_t dim) {
  FlashPass2Result r{std::vector<double>(q_heads * dim), std::vector<double>(q_heads)};
  for (std::size_t q = 0; q < q_heads; ++q) {
    SoftmaxState state(dim);
    for (std::size_t b = 0; b < num_blocks; ++b) {
      const std::size_t i = q * num_blocks + b;
      state.merge(o_partials.subspan(i * dim, dim), m_partials[i], l_partials[i]);
    }
    const auto out = state.output();
    std::copy(out.begin(), out.end(), r.output.begin() + static_cast<std::ptrdiff_t>(q * dim));
    r.lse[q] = state.lse();
  }
  return r;
}

}  // namespace tilekernels::reference::aura
