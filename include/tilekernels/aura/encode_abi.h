// SPDX-License-Identifier: MIT
// The interface of shaders/aura/encode.comp (tiled), encode_few_rows.comp
// (few_rows_*) and encode_fp16.comp (tensor_core_fp16): the dense-rotation
// encode; see core/abi.h. Each variant reads the constants it needs.
#ifndef TILEKERNELS_AURA_ENCODE_ABI_H
#define TILEKERNELS_AURA_ENCODE_ABI_H
#include "tilekernels/core/abi.h"

// DIM, BITS, IN_DTYPE: the row format. tiled: ROW_GROUPS groups of TM rows,
// KC rotation columns per staged chunk. tensor_core_fp16: BM rows per
// block, RPS x CPS accumulator tiles per subgroup, PARTS fp16 parts of R
// (2 or 3), NBUF staging buffers for them, PREFETCH 1 to load the next
// block's rows during this block's products; MMA_M, MMA_N, MMA_K,
// SUBGROUP: its matrix tile and subgroup size (shaders/common/mma.glsl).
// HI_DIMS (tiled only): split codes (aura::EncodeConfig's HiDims): the
// first HI_DIMS coordinates at BITS + 1 bits with the boundaries and
// codebook of bindings 6 and 7; 0 none.
#define TK_ENCODE_SPEC(F) \
  F(1, DIM, 128)          \
  F(2, BITS, 4)           \
  F(3, IN_DTYPE, 2)       \
  F(4, ROW_GROUPS, 16)    \
  F(5, TM, 8)             \
  F(6, KC, 16)            \
  F(7, BM, 128)           \
  F(8, RPS, 2)            \
  F(9, CPS, 4)            \
  F(10, PARTS, 2)         \
  F(11, NBUF, 2)          \
  F(12, PREFETCH, 1)      \
  TK_MMA_SPEC(F, 13, 14, 15, 16) \
  F(17, HI_DIMS, 0)

// groups: workgroups in the whole tensor_core_fp16 grid (its block stride).
#define TK_ENCODE_PUSH(F) \
  F(uint, group_offset)   \
  F(uint, rows)           \
  F(uint, groups)

// The cell-table quantiser of shaders/common/aura_pack.glsl (Bits <= 4):
// 32 cells of 16 + 8 bytes and 8 flag words of 16.
#define TK_AURA_CELL_TABLE_BYTES (32u * 16u + 8u * 16u + 32u * 8u)

// tiled, uvec4 units: the product's staged input and rotation chunks, or
// the epilogue's code bytes and per-lane partial sums.
#define TK_ENCODE_TILED_VEC4(DIM, ROW_GROUPS, TM, KC)                                                    \
  ((TK_ABI_MAX((KC) * ((TM) * (ROW_GROUPS) + 4u) + (KC) * ((DIM) + 4u),                                  \
               (TM) * (ROW_GROUPS) * (DIM) / 4u + (TM) * (ROW_GROUPS) * ((DIM) / 8u)) + 3u) / 4u)
// HI_LEVELS: the levels above a split (0: none).
#define TK_ENCODE_TILED_SHARED_BYTES(DIM, BITS, HI_LEVELS, ROW_GROUPS, TM, KC)                                    \
  (16u * TK_ENCODE_TILED_VEC4(DIM, ROW_GROUPS, TM, KC) + 8u * (1u << (BITS)) + 8u * TK_ABI_MAX(HI_LEVELS, 1u) + \
   4u * (TM) * (ROW_GROUPS) + TK_AURA_CELL_TABLE_BYTES)

// tensor_core_fp16, uvec4 units: the staged fp16 rows (one plane, two for
// f32 input) and NBUF buffers of 16 rows of R^T; or the epilogue's 16 x 20
// f32 scratch per subgroup (NSG of them), code bytes and per-row partial sums.
#define TK_ENCODE_FP16_XS(DIM) ((DIM) / 8u + 1u)
#define TK_ENCODE_FP16_CG(NSG, BM, RPS) ((NSG) / ((BM) / 16u / (RPS)))
#define TK_ENCODE_FP16_VEC4(DIM, PLANES, NSG, BM, RPS, NBUF)                                         \
  TK_ABI_MAX((PLANES) * (BM) * TK_ENCODE_FP16_XS(DIM) + (NBUF) * 16u * TK_ENCODE_FP16_XS(DIM),       \
             (NSG) * 80u + (BM) * (DIM) / 16u + ((BM) * 2u * TK_ENCODE_FP16_CG(NSG, BM, RPS) + 3u) / 4u)
#define TK_ENCODE_FP16_SHARED_BYTES(DIM, BITS, PLANES, NSG, BM, RPS, NBUF)                                   \
  (16u * TK_ENCODE_FP16_VEC4(DIM, PLANES, NSG, BM, RPS, NBUF) + 8u * (1u << (BITS)) + 12u * (BM) + 4u + \
   TK_AURA_CELL_TABLE_BYTES)

// few_rows (8 rows per workgroup, 256 invocations): the staged rows, the
// partial products, codes, squared centroids, row sums and the tables.
#define TK_ENCODE_FEW_ROWS_SHARED_BYTES(DIM, BITS) (8u * ((DIM) * 4u + 256u * 4u + 32u * 8u + 8u * 4u) + 8u * (1u << (BITS)) + 4u)

#endif
