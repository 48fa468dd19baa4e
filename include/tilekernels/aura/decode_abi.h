// SPDX-License-Identifier: MIT
// The interface of shaders/aura/decode.comp (see core/abi.h).
#ifndef TILEKERNELS_AURA_DECODE_ABI_H
#define TILEKERNELS_AURA_DECODE_ABI_H
#include "tilekernels/core/abi.h"

// DIM, BITS: the row format; OUT_DTYPE: DType code of the output;
// ROW_GROUPS: groups of 4 rows per workgroup (DIM / 4 invocations each);
// HI_DIMS: split codes (aura::DecodeConfig's HiDims): the first HI_DIMS
// coordinates at BITS + 1 bits, their codebook at binding 5; 0 none.
#define TK_DECODE_SPEC(F) \
  F(1, DIM, 128)          \
  F(2, BITS, 4)           \
  F(3, OUT_DTYPE, 0)      \
  F(4, ROW_GROUPS, 8)     \
  F(5, HI_DIMS, 0)

#define TK_DECODE_PUSH(F) \
  F(uint, group_offset)   \
  F(uint, rows)

#endif
