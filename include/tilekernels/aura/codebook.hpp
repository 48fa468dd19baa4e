// SPDX-License-Identifier: MIT
// Lloyd-Max codebooks for AURA: the optimal scalar quantiser of one
// coordinate of a uniformly random unit vector in Dim dimensions.
//
// That coordinate has the exact density
//   f(x) = (1 - x^2)^k / Z,   k = (Dim - 3) / 2,   x in [-1, 1]
// (close to N(0, 1/Dim) for large Dim, but not equal to it). A rotated unit
// vector has exactly this marginal for every coordinate, so one codebook
// serves every coordinate.
//
// The solver works on the positive half (the density is even, and so is the
// solution: the middle boundary is exactly 0 and codebook[L-1-i] ==
// -codebook[i]) with closed forms:
//   first moment  int_a^b t (1-t^2)^k dt = ((1-a^2)^(k+1) - (1-b^2)^(k+1)) / (2k+2)
//   mass          I_k(x) = int_0^x (1-t^2)^k dt, by the forward-stable recurrence
//                 I_k = (x (1-x^2)^k + 2k I_(k-1)) / (2k+1)
//                 from I_0 = x (Dim odd) or I_(1/2) = (x sqrt(1-x^2) + asin x)/2.
// Start: centroids at the quantiles of the companding density f^(1/3)
// (Panter-Dite), then 8 Lloyd iterations and 40 safeguarded Newton steps on
// the centroid conditions (tridiagonal Jacobian). Everything is double with
// + - * / sqrt and fixed iteration counts (see the notes on exactness below),
// so the float results are identical to the last bit on every machine; the
// codebook tests pin hashes of them.
#pragma once

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "tilekernels/core/error.hpp"

// ---- exact double helpers ---------------------------------------------------
//
// Only + - * / and sqrt (correctly rounded by IEEE 754), fixed iteration
// counts, no libm transcendental (std::exp, std::log, std::asin and
// std::lgamma differ between libms in the last bits). Two compiler behaviours
// would still break bit-identity, so:
// - contraction of a*b+c into a fused multiply-add (GCC's default in GNU
//   mode, clang's within an expression on FMA targets) is turned off for
//   every function marked TK_EXACT_FP (GCC: optimize attribute; clang: a
//   scoped `#pragma clang fp contract(off)` as the first line of the body);
// - excess precision (x87, FLT_EVAL_METHOD != 0) is rejected at compile time.
// -ffast-math re-associates and cannot be undone locally: results are then
// not guaranteed to be portable (a warning says so).
static_assert(FLT_EVAL_METHOD == 0,
              "tilekernels/aura: codebooks and rotations need double arithmetic without excess precision "
              "(FLT_EVAL_METHOD == 0, e.g. SSE2 instead of x87)");

#if defined(__FAST_MATH__)
#warning "tilekernels/aura: -ffast-math: codebooks and rotations are no longer bit-identical across machines"
#endif

#if defined(__clang__)
#define TK_EXACT_FP
#define TK_EXACT_FP_BODY _Pragma("clang fp contract(off)")
#elif defined(__GNUC__)
#define TK_EXACT_FP __attribute__((optimize("fp-contract=off")))
#define TK_EXACT_FP_BODY
#else
#define TK_EXACT_FP
#define TK_EXACT_FP_BODY
#endif

namespace tilekernels::aura::impl {

// atan(y) for |y| <= 1: five angle halvings, tan(a/2) = t / (1 + sqrt(1 + t^2)),
// bring |y| below tan(pi/128) ~ 0.0245, where 13 terms of the alternating
// series y - y^3/3 + y^5/5 - ... leave an error below 1e-40.
TK_EXACT_FP inline double exact_atan(double y) {
  TK_EXACT_FP_BODY
  for (int i = 0; i < 5; ++i) y = y / (1.0 + std::sqrt(1.0 + y * y));
  const double y2 = y * y;
  double sum = 0.0;
  for (int n = 12; n >= 0; --n) sum = sum * y2 + ((n % 2) ? -1.0 : 1.0) / (2.0 * n + 1.0);
  return 32.0 * (y * sum);
}

// asin(x) for |x| <= 1 as 2 atan(x / (1 + sqrt(1 - x^2))).
TK_EXACT_FP inline double exact_asin(double x) {
  TK_EXACT_FP_BODY
  return 2.0 * exact_atan(x / (1.0 + std::sqrt(1.0 - x * x)));
}

// Natural logarithm for x > 0: the exponent comes out exactly (frexp is a bit
// operation), the mantissa m in [sqrt(1/2), sqrt(2)) goes through
// log m = 2 atanh(t), t = (m - 1)/(m + 1), |t| <= 0.172, 21 series terms.
TK_EXACT_FP inline double exact_log(double x) {
  TK_EXACT_FP_BODY
  int e = 0;
  double m = std::frexp(x, &e);  // x = m 2^e, m in [0.5, 1)
  if (m < 0.70710678118654752440) {
    m = m * 2.0;
    e = e - 1;
  }
  const double t = (m - 1.0) / (m + 1.0);
  const double t2 = t * t;
  double sum = 0.0;
  for (int n = 20; n >= 0; --n) sum = sum * t2 + 1.0 / (2.0 * n + 1.0);
  const double ln2_hi = 0x1.62e42fefa3800p-1, ln2_lo = 0x1.ef35793c76730p-45;
  return (e * ln2_hi + 2.0 * (t * sum)) + e * ln2_lo;
}

// s^(two_k / 2) for s >= 0 and an integer two_k >= 0 (so half-integer
// exponents are exact powers times one sqrt), by binary powering.
TK_EXACT_FP inline double half_power(double s, int two_k) {
  TK_EXACT_FP_BODY
  double result = (two_k % 2) ? std::sqrt(s) : 1.0;
  double base = s;
  for (int n = two_k / 2; n > 0; n /= 2) {
    if (n % 2) result = result * base;
    base = base * base;
  }
  return result;
}

}  // namespace tilekernels::aura::impl

namespace tilekernels::aura {

namespace impl {

// The coordinate marginal, unnormalised: g(x) = (1 - x^2)^(two_k/2).
class SphereMarginal {
 public:
  explicit SphereMarginal(int two_k) : two_k_(two_k) {}
  int two_k() const { return two_k_; }

  TK_EXACT_FP double density(double x) const {
    TK_EXACT_FP_BODY
    return half_power(1.0 - x * x, two_k_);
  }
  // int_0^x g, for x in [-1, 1].
  double mass(double x) const { return mass_of(x, two_k_); }
  // int_a^b t g(t) dt.
  TK_EXACT_FP double moment(double a, double b) const {
    TK_EXACT_FP_BODY
    return (half_power(1.0 - a * a, two_k_ + 2) - half_power(1.0 - b * b, two_k_ + 2)) / (two_k_ + 2.0);
  }

  TK_EXACT_FP static double mass_of(double x, int two_k) {
    TK_EXACT_FP_BODY
    const double s = 1.0 - x * x;
    double integral, p;
    int two_m;
    if (two_k % 2 == 0) {
      integral = x;
      p = 1.0;
      two_m = 0;
    } else {
      p = std::sqrt(s);
      integral = 0.5 * (x * p + exact_asin(x));
      two_m = 1;
    }
    while (two_m < two_k) {
      two_m += 2;
      p = p * s;
      integral = (x * p + two_m * integral) / (two_m + 1.0);
    }
    return integral;
  }

 private:
  int two_k_;
};

// Solution on the positive half: centroids y[0..n) and boundaries t[0..n],
// t[0] = 0, t[n] = 1.
struct HalfSolution {
  std::vector<double> y, t;
};

TK_EXACT_FP inline void half_boundaries(HalfSolution& s) {
  TK_EXACT_FP_BODY
  const std::size_t n = s.y.size();
  s.t.assign(n + 1, 0.0);
  s.t[n] = 1.0;
  for (std::size_t i = 1; i < n; ++i) s.t[i] = 0.5 * (s.y[i - 1] + s.y[i]);
}

TK_EXACT_FP inline HalfSolution solve_half(const SphereMarginal& g, std::size_t n) {
  TK_EXACT_FP_BODY
  HalfSolution s{std::vector<double>(n), {}};
  // Panter-Dite start: quantiles of (1-x^2)^(k/3), k/3 rounded to a half integer.
  const int two_m = (g.two_k() + 1) / 3;
  const double total = SphereMarginal::mass_of(1.0, two_m);
  for (std::size_t i = 0; i < n; ++i) {
    const double target = total * ((i + 0.5) / static_cast<double>(n));
    double lo = 0.0, hi = 1.0;
    for (int it = 0; it < 64; ++it) {
      const double mid = 0.5 * (lo + hi);
      if (SphereMarginal::mass_of(mid, two_m) < target) lo = mid; else hi = mid;
    }
    s.y[i] = 0.5 * (lo + hi);
  }

  std::vector<double> mass(n), cent(n), a(n), b(n), f(n), lower(n), diag(n), upper(n), step(n), trial(n);
  const auto centroids = [&](const std::vector<double>& y) {
    HalfSolution h{y, {}};
    half_boundaries(h);
    for (std::size_t i = 0; i < n; ++i) {
      mass[i] = g.mass(h.t[i + 1]) - g.mass(h.t[i]);
      cent[i] = g.moment(h.t[i], h.t[i + 1]) / mass[i];
    }
    return h.t;
  };
  const auto valid = [&](const std::vector<double>& y) {
    if (!(y[0] > 0.0) || !(y[n - 1] < 1.0)) return false;
    for (std::size_t i = 1; i < n; ++i)
      if (!(y[i] > y[i - 1])) return false;
    return true;
  };

  for (int it = 0; it < 8; ++it) {
    centroids(s.y);
    s.y = cent;
  }
  for (int it = 0; it < 40; ++it) {
    const auto t = centroids(s.y);
    // F_i = y_i - C_i(t_i, t_(i+1)), t_i = (y_(i-1) + y_i)/2 for 0 < i < n.
    for (std::size_t i = 0; i < n; ++i) {
      f[i] = s.y[i] - cent[i];
      a[i] = i + 1 < n ? g.density(t[i + 1]) * (t[i + 1] - cent[i]) / mass[i] : 0.0;  // dC_i/dt_(i+1)
      b[i] = i > 0 ? g.density(t[i]) * (cent[i] - t[i]) / mass[i] : 0.0;              // dC_i/dt_i
      lower[i] = -0.5 * b[i];
      upper[i] = -0.5 * a[i];
      diag[i] = 1.0 - 0.5 * b[i] - 0.5 * a[i];
    }
    // Thomas algorithm.
    for (std::size_t i = 1; i < n; ++i) {
      const double w = lower[i] / diag[i - 1];
      diag[i] = diag[i] - w * upper[i - 1];
      f[i] = f[i] - w * f[i - 1];
    }
    step[n - 1] = f[n - 1] / diag[n - 1];
    for (std::size_t i = n - 1; i-- > 0;) step[i] = (f[i] - upper[i] * step[i + 1]) / diag[i];
    double lambda = 1.0;
    bool taken = false;
    for (int halving = 0; halving < 40 && !taken; ++halving, lambda = lambda * 0.5) {
      for (std::size_t i = 0; i < n; ++i) trial[i] = s.y[i] - lambda * step[i];
      taken = valid(trial);
    }
    if (taken) {
      s.y = trial;
    } else {
      centroids(s.y);
      s.y = cent;
    }
  }
  half_boundaries(s);
  return s;
}

}  // namespace impl

// A codebook for (dim, bits): L = 2^bits levels.
struct Codebook {
  std::uint32_t dim = 0, bits = 0;
  std::vector<float> boundaries;  // [L - 1], ascending; boundaries[L/2 - 1] == 0
  std::vector<float> codebook;    // [L], ascending, odd-symmetric
  // E ||u - Q(u)||^2 for a uniformly random unit vector u quantised per
  // coordinate with the double-precision solution (Lloyd-Max distortion per
  // vector, before any norm correction).
  double distortion = 0;
};

// Throws Error(invalid_argument) unless dim >= 3 and 1 <= bits <= 8.
TK_EXACT_FP inline Codebook lloyd_max_codebook(std::uint32_t dim, std::uint32_t bits) {
  TK_EXACT_FP_BODY
  if (dim < 3 || dim > 65536)
    throw Error(ErrorCode::invalid_argument, "aura.codebook: dim must be in [3, 65536], got " + std::to_string(dim));
  if (bits < 1 || bits > 8)
    throw Error(ErrorCode::invalid_argument, "aura.codebook: bits must be in [1, 8], got " + std::to_string(bits));
  const impl::SphereMarginal g(static_cast<int>(dim) - 3);
  const std::size_t levels = std::size_t{1} << bits, n = levels / 2;
  const auto half = impl::solve_half(g, n);

  Codebook cb{dim, bits, std::vector<float>(levels - 1), std::vector<float>(levels), 0.0};
  for (std::size_t i = 0; i < n; ++i) {
    cb.codebook[n + i] = static_cast<float>(half.y[i]);
    cb.codebook[n - 1 - i] = -static_cast<float>(half.y[i]);
    cb.boundaries[n - 1 + i] = static_cast<float>(half.t[i]);
    if (i) cb.boundaries[n - 1 - i] = -static_cast<float>(half.t[i]);
  }
  // E x^2 = 1/dim per coordinate; with the centroid condition the error is
  // E x^2 - sum_cells P_i y_i^2 (cells weighted by their probability).
  const double total = g.mass(1.0);
  double kept = 0.0;
  for (std::size_t i = 0; i < n; ++i) {
    const double p = (g.mass(half.t[i + 1]) - g.mass(half.t[i])) / total;
    const double c = g.moment(half.t[i], half.t[i + 1]) / (g.mass(half.t[i + 1]) - g.mass(half.t[i]));
    kept = kept + p * c * c;
  }
  cb.distortion = 1.0 - static_cast<double>(dim) * kept;
  return cb;
}

}  // namespace tilekernels::aura
