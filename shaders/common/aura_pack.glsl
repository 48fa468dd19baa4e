// AURA code packing shared by the encode kernels: the `bits`-bit code of
// coordinate d sits at bit offset d * bits of its row's little-endian u32
// stream, so a code may straddle two words (3- and 6-bit codes do).
#ifndef TK_AURA_PACK_GLSL
#define TK_AURA_PACK_GLSL

// Codebook index of v: the number of boundaries v strictly exceeds, found by
// binary search over `levels - 1` ascending boundaries (levels a power of two).
// A value equal to a boundary goes to the lower cell; NaN gets index 0.
#define TK_AURA_QUANTIZE(result, v, boundary_array, levels) \
  {                                                          \
    uint tk_idx_ = 0u;                                       \
    for (uint tk_s_ = (levels) >> 1; tk_s_ > 0u; tk_s_ >>= 1) \
      if ((v) > boundary_array[tk_idx_ + tk_s_ - 1u]) tk_idx_ += tk_s_; \
    result = tk_idx_;                                        \
  }

// The part of code `code` of coordinate d that lands in word w (bits [32w, 32w + 32)).
uint tk_aura_place(uint code, uint d, uint bits, uint w) {
  int shift = int(d * bits) - int(w * 32u);
  return shift >= 0 ? code << uint(shift) : code >> uint(-shift);
}

#endif
