// SPDX-License-Identifier: MIT
// 16-bit float storage as plain 32-bit words, portable to any Vulkan 1.2
// device (no 16-bit storage or arithmetic feature needed). Mirrors
// include/tilekernels/core/dtype.hpp bit for bit: round to nearest even,
// NaN stays a quiet NaN with its sign.
#ifndef TK_CONVERT_GLSL
#define TK_CONVERT_GLSL

// Storage dtype codes; equal to tilekernels::DType.
const uint TK_F32 = 0u;
const uint TK_F16 = 1u;
const uint TK_BF16 = 2u;

float tk_bf16_to_f32(uint bits) { return uintBitsToFloat(bits << 16); }

// x rounded to bf16 (to nearest even; NaN stays a quiet NaN) in the high
// half of the result; the low half is left over. Two of them pack into one
// word by taking the high halves, with no mask and no conversion. (The
// H100's own f32 -> bf16 conversion is not to nearest even; Vulkan leaves
// that rounding to the implementation.)
uint tk_bf16_high(float x) {
  const uint u = floatBitsToUint(x);
  return isnan(x) ? (u | 0x00400000u) : u + 0x7fffu + ((u >> 16) & 1u);
}

uint tk_f32_to_bf16(float value) { return tk_bf16_high(value) >> 16; }

// x rounded to bf16 precision by Veltkamp's splitting (c = x * (2^16 + 1),
// c - (c - x)): three float operations instead of the integer rounding's
// five plus a NaN test (what the instruction-bound bf16 GDN kernels
// need). Bit for bit tk_bf16_high(x) & 0xffff0000 (to
// nearest even, -0 kept) for normal |x| < 2^111; NaN, +-Inf and
// |x| > 5.19e33, where c overflows, give NaN; a denormal x comes back
// within a bf16 unit (2^-133) of x (too few bits to split) or as 0 where
// the device flushes denormals.
// `precise`: a fused c - x would be exact and break the split.
float tk_round_bf16_split(float x) {
  precise const float c = x * 65537.0;
  precise const float d = c - x;
  precise const float h = c - d;
  return h;
}

// Two values rounded to bf16 by the split, packed low first.
uint tk_pack_bf16_split(vec2 x) {
  return (floatBitsToUint(tk_round_bf16_split(x.x)) >> 16) | (floatBitsToUint(tk_round_bf16_split(x.y)) & 0xffff0000u);
}

// The two bf16 values of a word (low first) as floats.
vec2 tk_bf16_pair(uint w) { return vec2(uintBitsToFloat(w << 16), uintBitsToFloat(w & 0xffff0000u)); }

// Bit 15 or 31 set where a bf16 half of `w` has a magnitude of at least
// 65536 (0x4780), beyond the fp16 range; Inf and NaN are flagged too. Two
// operations per pair: no half can carry into the next (0x7fff + 0x3880 <
// 0x10000).
uint tk_bf16x2_beyond_f16(uint w) { return ((w & 0x7fff7fffu) + 0x38803880u) & 0x80008000u; }

// 8 bf16 -> 8 fp16 (exact for 2^-17 <= |x| <= 65504); sets `bad` nonzero
// for a value fp16 cannot hold.
uvec4 tk_bf16x8_to_f16x8(uvec4 w, inout uint bad) {
  uvec4 h;
  for (uint i = 0; i < 4; ++i) {
    bad |= tk_bf16x2_beyond_f16(w[i]);
    h[i] = packHalf2x16(tk_bf16_pair(w[i]));
  }
  return h;
}

// |x| where finite, else 0: the fp16 recompute_wu kernels take their
// power-of-two shifts from finite values, so an Inf or NaN stays in its own
// column instead of scaling the rest of its row (to 0, found by
// RecomputeWUTest.InfiniteInputStaysContained).
vec4 tk_finite_abs(vec4 x) { return mix(vec4(0.0), abs(x), lessThan(abs(x), vec4(uintBitsToFloat(0x7f800000u)))); }
float tk_finite_abs(float x) { return abs(x) < uintBitsToFloat(0x7f800000u) ? abs(x) : 0.0; }

float tk_f16_to_f32(uint bits) {
  uint sign = (bits & 0x8000u) << 16;
  uint e = (bits >> 10) & 0x1fu;
  uint m = bits & 0x3ffu;
  if (e == 0x1fu) return uintBitsToFloat(sign | 0x7f800000u | (m << 13));
  if (e != 0u) return uintBitsToFloat(sign | ((e + 112u) << 23) | (m << 13));
  float magnitude = float(m) * 5.9604644775390625e-8;
  return sign != 0u ? -magnitude : magnitude;
}

uint tk_f32_to_f16(float value) {
  uint bits = floatBitsToUint(value);
  uint sign = (bits >> 16) & 0x8000u;
  uint x = bits & 0x7fffffffu;
  uint h;
  if (x > 0x7f800000u) {
    h = 0x7e00u | ((x >> 13) & 0x3ffu);
  } else if (x >= 0x477ff000u) {
    h = 0x7c00u;
  } else if (x >= 0x38800000u) {
    uint m = x - 0x38000000u;
    h = (m + 0x0fffu + ((m >> 13) & 1u)) >> 13;
  } else if (x >= 0x33000000u) {
    uint shift = 126u - (x >> 23);
    uint mant = (x & 0x7fffffu) | 0x800000u;
    uint q = mant >> shift;
    uint rem = mant & ((1u << shift) - 1u);
    uint half_unit = 1u << (shift - 1u);
    h = q + ((rem > half_unit || (rem == half_unit && (q & 1u) != 0u)) ? 1u : 0u);
  } else {
    h = 0u;
  }
  return sign | h;
}

// One 16-bit element (low half of `bits`) of dtype `dt` widened to float.
float tk_widen16(uint dt, uint bits) {
  return dt == TK_BF16 ? tk_bf16_to_f32(bits & 0xffffu) : tk_f16_to_f32(bits & 0xffffu);
}

uint tk_narrow16(uint dt, float v) { return dt == TK_BF16 ? tk_f32_to_bf16(v) : tk_f32_to_f16(v); }

// Four 16-bit elements packed little-endian in a uvec2, widened.
vec4 tk_unpack4(uint dt, uvec2 w) {
  return vec4(tk_widen16(dt, w.x), tk_widen16(dt, w.x >> 16), tk_widen16(dt, w.y), tk_widen16(dt, w.y >> 16));
}

uvec2 tk_pack4(uint dt, vec4 v) {
  return uvec2(tk_narrow16(dt, v.x) | (tk_narrow16(dt, v.y) << 16), tk_narrow16(dt, v.z) | (tk_narrow16(dt, v.w) << 16));
}

// Element i of a 16-bit array stored in 32-bit words.
float tk_load16(uint dt, uint word, uint i) { return tk_widen16(dt, word >> ((i & 1u) * 16u)); }

// Eight consecutive 16-bit elements packed as a uvec4 (low half first), from
// the words a0..a4 that hold them: a0..a3 where the first is even (odd 0;
// a4 is not used), else the high half of a0 through the low half of a4.
uvec4 tk_words8(uint odd, uint a0, uint a1, uint a2, uint a3, uint a4) {
  const uvec4 lo = uvec4(a0, a1, a2, a3);
  return odd != 0u ? (lo >> 16) | (uvec4(a1, a2, a3, a4) << 16) : lo;
}
// The eight 16-bit elements e .. e + 7 of an array stored in 32-bit words
// (`words`, a buffer's uint array; e a plain variable, any element: a
// view's row may start at an odd one), as one uvec4 load would give them
// from an element that is a multiple of 8. Reads only the words that hold
// them. (A macro: GLSL functions take no buffer arrays.)
#define TK_LOAD8_16(words, e)                                                                              \
  tk_words8((e) & 1u, words[(e) >> 1], words[((e) >> 1) + 1u], words[((e) >> 1) + 2u], words[((e) >> 1) + 3u], \
            words[((e) >> 1) + 3u + ((e) & 1u)])

#endif
