// SPDX-License-Identifier: MIT
// Row norms that are finite wherever the norm is. A kernel sums the squares
// of a row as it streams it; where that sum leaves f32's normal range (a
// square overflowed, or the squares underflowed), the plain norm is wrong
// although the row's norm may fit. tk_rescaled_norm then reads the row twice
// more: once for its largest magnitude, once for the sum of squares of the
// row scaled by the power of two that brings that magnitude into [0.5, 4).
// The scaling is exact, so no square overflows and none that matters
// underflows. A row holding inf or NaN still gives inf or NaN.
//
// For tk_rescaled_norm the including shader defines TK_ROW_VALUES and
// declares, before the include, the input's values:
//   float tk_row_value(uint i);  // element i of the input, as a float
#ifndef TK_ROW_NORM_GLSL
#define TK_ROW_NORM_GLSL

// Tests on the bits: a compiler may assume that floating-point comparisons
// never see an infinity or a NaN (no float-controls execution mode here).
bool tk_finite(float x) { return (floatBitsToUint(x) & 0x7f800000u) != 0x7f800000u; }
// f32's biased exponent of x (255: inf or NaN).
uint tk_exponent(float x) { return (floatBitsToUint(x) >> 23) & 0xffu; }

// 2^k for k in [-126, 127]: exact, a normal float.
float tk_pow2(int k) { return uintBitsToFloat(uint(k + 127) << 23); }
// The exponent e of m = f 2^e, f in [0.5, 1) (frexp's), clamped to
// [-126, 126] so that 2^-e and 2^e are normal floats (m 2^-e is then in
// [0.5, 4)); 0 for m = 0, inf or NaN. One multiplication by tk_pow2(-e)
// scales exactly: two factors could be reassociated by the compiler into
// one that is not a normal float.
int tk_scale_exponent(float m) {
  return m > 0.0 && tk_finite(m) ? clamp(int(tk_exponent(m)) - 126, -126, 126) : 0;
}
// (x p) q, both products kept (`precise`: not reassociated into x (p q),
// which may be subnormal where x p q is not).
float tk_mul2(float x, float p, float q) {
  precise float y = x * p;
  precise float z = y * q;
  return z;
}

// Whether a plain sum of squares can be trusted: in [2^-100, f32's largest]
// (the fallback is never taken for rows of usual magnitudes).
bool tk_plain_sumsq_ok(float sumsq) { return tk_exponent(sumsq) >= 27u && tk_exponent(sumsq) < 255u; }

// Dividing by a norm n beyond 2^+-126 is outside the range in which Vulkan
// guarantees division, and 1 / n is then subnormal (flushed to zero by many
// GPUs) or infinite. So x / n is computed as tk_mul2(x, p, 1 / (n p)) with
// p = tk_norm_prescale(n): 2^-64 for n >= 2^50, 2^64 below 2^-50, else 1
// (exact, and the same bits as x / n for rows of usual magnitudes).
// Biased exponent e >= hi: 2^-64; e < lo: 2^64; else 1.
float tk_prescale_of_exponent(uint e, uint lo, uint hi) {
  return e >= hi ? tk_pow2(-64) : e < lo ? tk_pow2(64) : 1.0;
}
float tk_norm_prescale(float n) { return tk_prescale_of_exponent(tk_exponent(n), 77u, 177u); }
// The same choice from a row's sum of squares (before its norm is known).
float tk_sumsq_prescale(float sumsq) { return tk_prescale_of_exponent(tk_exponent(sumsq), 27u, 227u); }

#ifdef TK_ROW_VALUES
// The L2 norm of the n values from element `first` on.
float tk_rescaled_norm(uint first, uint n) {
  float m = 0.0;
  for (uint i = 0u; i < n; ++i) m = max(m, abs(tk_row_value(first + i)));
  const int e = tk_scale_exponent(m);
  const float down = tk_pow2(-e);
  float s = 0.0;
  for (uint i = 0u; i < n; ++i) {
    const float u = tk_row_value(first + i) * down;
    s = fma(u, u, s);
  }
  return sqrt(s) * tk_pow2(e);
}
#endif

#endif
