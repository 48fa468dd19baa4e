// SPDX-License-Identifier: MIT
// Double-precision CPU reference of aura::FaReduceHadamard (see its header
// for the math and the layout), and the randomised Hadamard rotation it
// undoes. Inputs are the stored values widened to float.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <span>
#include <stdexcept>
#include <vector>

#include "tilekernels/reference/softmax_state.hpp"

namespace tilekernels::reference::aura {

// In place: x <- Hn x, Hn = H / sqrt(n) with H the Sylvester-Hadamard matrix
// in natural order (H[i][j] = (-1)^popcount(i & j)); n a power of two.
inline void normalised_fwht(std::span<double> x) {
  const std::size_t n = x.size();
  if (!std::has_single_bit(n)) throw std::invalid_argument("normalised_fwht: length must be a power of two");
  for (std::size_t h = 1; h < n; h *= 2)
    for (std::size_t i = 0; i < n; i += 2 * h)
      for (std::size_t j = i; j < i + h; ++j) {
        const double a = x[j], b = x[j + h];
        x[j] = a + b;
        x[j + h] = a - b;
      }
  const double scale = 1.0 / std::sqrt(static_cast<double>(n));
  for (auto& v : x) v *= scale;
}

// The randomised Hadamard rotation of a stored vector: Hn (signs * v).
inline std::vector<double> hadamard_rotate(std::span<const double> v, std::span<const float> signs) {
  std::vector<double> y(v.size());
  for (std::size_t d = 0; d < v.size(); ++d) y[d] = signs[d] * v[d];
  normalised_fwht(y);
  return y;
}

// Its inverse, what FaReduceHadamard applies: signs * (Hn y). For signs of
// +-1, hadamard_undo(hadamard_rotate(v)) == v up to rounding.
inline std::vector<double> hadamard_undo(std::span<const double> y, std::span<const float> signs) {
  std::vector<double> v(y.begin(), y.end());
  normalised_fwht(v);
  for (std::size_t d = 0; d < v.size(); ++d) v[d] *= signs[d];
  return v;
}

// output [rows, head_dim] = hadamard_undo(split-K merge of row), rows whose
// blocks are all empty (l == 0) give zeros.
inline std::vector<double> fa_reduce_hadamard(std::span<const float> o_partials, std::span<const float> m_partials,
                                              std::span<const float> l_partials, std::span<const float> signs,
                                              std::size_t rows, std::size_t nwg, std::size_t head_dim) {
  std::vector<double> out(rows * head_dim);
  for (std::size_t r = 0; r < rows; ++r) {
    SoftmaxState state(head_dim);
    for (std::size_t b = 0; b < nwg; ++b) {
      const std::size_t i = r * nwg + b;
      state.merge(o_partials.subspan(i * head_dim, head_dim), m_partials[i], l_partials[i]);
    }
    const auto v = hadamard_undo(state.output(), signs);
    std::copy(v.begin(), v.end(), out.begin() + static_cast<std::ptrdiff_t>(r * head_dim));
  }
  return out;
}

}  // namespace tilekernels::reference::aura
