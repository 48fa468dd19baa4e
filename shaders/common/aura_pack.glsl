// SPDX-License-Identifier: MIT
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

// Cell-table quantiser for BITS <= 4 (linear in the work per value, no
// search): include again with TK_AURA_CELL_TABLE defined, after the
// `boundaries` and `codebook` buffers, with LEVELS and WG declared. NC cells
// span the boundaries' range; cell(v) is a monotone function of v computed
// the same way when the table is built, so each cell's count of boundaries
// below it is exact and one compare with the (at most one) boundary inside
// the cell finishes the count. A table where some cell holds two or more
// boundaries (or a degenerate range) reports itself unusable, and the
// caller falls back to TK_AURA_QUANTIZE.
#if defined(TK_AURA_CELL_TABLE) && !defined(TK_AURA_CELL_TABLE_DONE)
#define TK_AURA_CELL_TABLE_DONE
const uint TK_NC = 32u;
// Per cell: the next boundary b (+Inf if none), the count k of boundaries
// below the cell, codebook[k]^2 and codebook[k+1]^2 - codebook[k]^2.
shared uvec4 tk_s_cell[TK_NC];
// The same split into conflict-free 32-bit arrays (b and k).
shared float tk_s_cell_b[TK_NC];
shared uint tk_s_cell_k[TK_NC];
shared uvec4 tk_s_cell_bad[TK_NC / 4u];  // 1 where a cell holds two or more boundaries
float tk_cell_inv_w, tk_cell_c0;

uint tk_cell_of(float x) {
  const float c = clamp(fma(x, tk_cell_inv_w, tk_cell_c0), 0.0, 1.0);  // a saturating FMA on most GPUs
  return floatBitsToUint(fma(c, float(TK_NC - 1u), 8388608.0)) & (TK_NC - 1u);  // integer part of 2^23 + c*(NC-1)
}

// Every invocation calls this (lt: its index in the workgroup); then a
// barrier; then tk_cell_table_usable(the result). Boundaries and centroids
// are picked by loops rather than by index so that every global load is
// issued at once.
bool tk_cell_table_build(uint lt) {
  const float b_first = boundaries[0], b_last = boundaries[LEVELS - 2u];
  const float w = (b_last - b_first) / float(TK_NC - 4u);
  const float inv_w = 1.0 / w;
  // b_first near cell 2, b_last near cell NC - 2; cell_of scales [0, 1] back to [0, NC - 1].
  tk_cell_inv_w = inv_w / float(TK_NC - 1u);
  tk_cell_c0 = (2.0 - b_first * inv_w) / float(TK_NC - 1u);
  for (uint cell = lt; cell < TK_NC; cell += WG) {
    uint k = 0u, n = 0u;
    float b = uintBitsToFloat(0x7f800000u);
    [[unroll]] for (uint i = LEVELS - 1u; i-- > 0u;) {
      const float bi = boundaries[i];
      const uint c = tk_cell_of(bi);
      k += c < cell ? 1u : 0u;
      n += c == cell ? 1u : 0u;
      if (c >= cell) b = bi;  // ends as the lowest boundary not below the cell
    }
    float c2k = 0.0, c2k1 = 0.0;
    [[unroll]] for (uint i = 0; i < LEVELS; ++i) {
      const float ci = codebook[i];
      if (i == k) c2k = ci * ci;
      if (i == k + 1u) c2k1 = ci * ci;
    }
    tk_s_cell[cell] = uvec4(floatBitsToUint(b), k, floatBitsToUint(c2k), floatBitsToUint(c2k1 - c2k));
    tk_s_cell_b[cell] = b;
    tk_s_cell_k[cell] = k;
    tk_s_cell_bad[cell / 4u][cell % 4u] = n > 1u ? 1u : 0u;
  }
  return w > 0.0 && tk_cell_inv_w < 3.0e38;  // false for NaN or degenerate ranges
}

bool tk_cell_table_usable(bool range_ok) {
  uint bad = 0u;
  [[unroll]] for (uint i = 0; i < TK_NC / 4u; ++i) {
    const uvec4 b = tk_s_cell_bad[i];
    bad |= b.x | b.y | b.z | b.w;
  }
  return range_ok && bad == 0u;
}
#endif
