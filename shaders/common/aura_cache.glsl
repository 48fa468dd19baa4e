// SPDX-License-Identifier: MIT
// Reading the AURA paged KV cache (include/tilekernels/aura/paged_cache.hpp):
// code extraction from a token's word stream and raw 16-bit values. The
// Walsh-Hadamard transforms the cache kernels run come with it.
#ifndef TK_AURA_CACHE_GLSL
#define TK_AURA_CACHE_GLSL

#include "hadamard.glsl"

// The `bits`-bit field at bit `o` (0 <= o < 32) of the 64-bit little-endian
// pair (lo, hi). (hi << 1) << (31 - o) is hi << (32 - o) without the
// undefined shift by 32 when o == 0.
uint tk_code_window(uint lo, uint hi, uint o, uint bits) {
  return ((lo >> o) | ((hi << 1u) << (31u - o))) & ((1u << bits) - 1u);
}

// The same at any bit p in [0, 64).
uint tk_code_window64(uint lo, uint hi, uint p, uint bits) {
  return p < 32u ? tk_code_window(lo, hi, p, bits) : (hi >> (p - 32u)) & ((1u << bits) - 1u);
}

// Element e (0 or 1) of a word of two 16-bit values of dtype dt, widened.
float tk_raw_value(uint dt, uint word, uint e) {
  if (dt == TK_BF16) return uintBitsToFloat(e == 0u ? word << 16 : word & 0xffff0000u);
  return tk_f16_to_f32(e == 0u ? word & 0xffffu : word >> 16);
}

// Norm n of a norms buffer stored as f32 words or f16 pairs.
#define TK_LOAD_NORM(dt, words, n) ((dt) == TK_F32 ? uintBitsToFloat(words[n]) : tk_load16(TK_F16, words[(n) >> 1], (n)))

#endif
