// SPDX-License-Identifier: MIT
// Reading the AURA paged KV cache (include/tilekernels/aura/paged_cache.hpp):
// code extraction from a token's word stream, raw 16-bit values, and the
// in-place Walsh-Hadamard transform the cache kernels run in shared memory.
#ifndef TK_AURA_CACHE_GLSL
#define TK_AURA_CACHE_GLSL

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

// Unnormalised Walsh-Hadamard transform, in natural order, of `rows` rows of
// `dim` floats (dim a power of two) accessed through the macro ELEM(index):
// rounds of radix-4 butterflies (two index bits each; radix 2 for a last
// odd bit), each followed by a barrier, spread over `count` invocations
// (this one is `self`). Every invocation of the workgroup must call it.
#define TK_FWHT_SHARED(ELEM, rows, dim, self, count)                                          \
  {                                                                                           \
    for (uint tk_h_ = 1u; tk_h_ < (dim); tk_h_ <<= 2) {                                        \
      if (4u * tk_h_ <= (dim)) {                                                              \
        for (uint tk_p_ = (self); tk_p_ < (rows) * ((dim) / 4u); tk_p_ += (count)) {          \
          const uint tk_r_ = tk_p_ / ((dim) / 4u), tk_q_ = tk_p_ % ((dim) / 4u);              \
          const uint tk_i_ = tk_r_ * (dim) + (((tk_q_ & ~(tk_h_ - 1u)) << 2) | (tk_q_ & (tk_h_ - 1u))); \
          const float tk_a_ = ELEM(tk_i_), tk_b_ = ELEM(tk_i_ + tk_h_);                       \
          const float tk_c_ = ELEM(tk_i_ + 2u * tk_h_), tk_d_ = ELEM(tk_i_ + 3u * tk_h_);     \
          const float tk_s0_ = tk_a_ + tk_b_, tk_s1_ = tk_a_ - tk_b_;                         \
          const float tk_s2_ = tk_c_ + tk_d_, tk_s3_ = tk_c_ - tk_d_;                         \
          ELEM(tk_i_) = tk_s0_ + tk_s2_;                                                      \
          ELEM(tk_i_ + tk_h_) = tk_s1_ + tk_s3_;                                              \
          ELEM(tk_i_ + 2u * tk_h_) = tk_s0_ - tk_s2_;                                         \
          ELEM(tk_i_ + 3u * tk_h_) = tk_s1_ - tk_s3_;                                         \
        }                                                                                     \
      } else {                                                                                \
        for (uint tk_p_ = (self); tk_p_ < (rows) * ((dim) / 2u); tk_p_ += (count)) {          \
          const uint tk_r_ = tk_p_ / ((dim) / 2u), tk_q_ = tk_p_ % ((dim) / 2u);              \
          const uint tk_i_ = tk_r_ * (dim) + (((tk_q_ & ~(tk_h_ - 1u)) << 1) | (tk_q_ & (tk_h_ - 1u))); \
          const float tk_a_ = ELEM(tk_i_), tk_b_ = ELEM(tk_i_ + tk_h_);                       \
          ELEM(tk_i_) = tk_a_ + tk_b_;                                                        \
          ELEM(tk_i_ + tk_h_) = tk_a_ - tk_b_;                                                \
        }                                                                                     \
      }                                                                                       \
      barrier();                                                                              \
    }                                                                                         \
  }

#endif
