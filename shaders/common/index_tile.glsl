// SPDX-License-Identifier: MIT
// Row- and column-number tiles, for kernels that must know where an
// element of a cooperative-matrix accumulator sits (Vulkan leaves the
// fragment layout to the implementation): n stored as the float 2^23 + n
// (bits TK_CM_IDX_BIAS + n), loaded as an f32 accumulator, read back by an
// integer subtraction. tk_cm_index_word(e) is word e of the two 16 x 16
// tiles (256 words each, row-major): the row tile first, then the column
// tile.
#ifndef TK_INDEX_TILE_GLSL
#define TK_INDEX_TILE_GLSL

const uint TK_CM_IDX_BIAS = 0x4b000000u;
uint tk_cm_index_word(uint e) { return TK_CM_IDX_BIAS + (e < 256u ? (e & 255u) / 16u : e & 15u); }
uint tk_cm_pos(float x) { return floatBitsToUint(x) - TK_CM_IDX_BIAS; }

#endif
