// SPDX-License-Identifier: MIT
// Double-precision mirror of shaders/common/softmax_state.glsl: the
// online-softmax merge state of attention over a set of keys,
//   m = max_j s_j,  l = sum_j e^(s_j - m),  o = sum_j e^(s_j - m) v_j.
// l == 0 means empty (no key); an empty state's m and o are never read.
// Every attention reference (split-K merges, decode attention) builds its
// result by merging states, so they agree on empty blocks, -inf maxima and
// the lse of nothing (-inf).
#pragma once

#include <cmath>
#include <cstddef>
#include <limits>
#include <span>
#include <vector>

namespace tilekernels::reference {

struct SoftmaxState {
  std::vector<double> o;
  double m = -std::numeric_limits<double>::infinity();
  double l = 0;

  explicit SoftmaxState(std::size_t dim) : o(dim, 0.0) {}

  bool empty() const { return l == 0; }

  // Takes in the state (o_b, m_b, l_b) of another set of keys; an empty
  // one (l_b == 0) changes nothing, whatever its o_b and m_b hold.
  template <class T>
  void merge(std::span<const T> o_b, double m_b, double l_b) {
    if (l_b == 0) return;
    const double m_new = empty() ? m_b : std::max(m, m_b);
    const double keep = empty() ? 0.0 : std::exp(m - m_new), take = std::exp(m_b - m_new);
    for (std::size_t d = 0; d < o.size(); ++d) o[d] = o[d] * keep + take * static_cast<double>(o_b[d]);
    l = l * keep + take * l_b;
    m = m_new;
  }

  // Takes in one key of score s and value v.
  template <class T>
  void add(double s, std::span<const T> v) {
    if (s == -std::numeric_limits<double>::infinity()) return;  // a masked key
    const std::vector<double> vd(v.begin(), v.end());
    merge(std::span<const double>(vd), s, 1.0);
  }

  // o / l; zeros for an empty state.
  std::vector<double> output() const {
    std::vector<double> out(o.size(), 0.0);
    if (!empty())
      for (std::size_t d = 0; d < o.size(); ++d) out[d] = o[d] / l;
    return out;
  }

  // m + ln l; -inf for an empty state.
  double lse() const { return empty() ? -std::numeric_limits<double>::infinity() : m + std::log(l); }
};

}  // namespace tilekernels::reference
