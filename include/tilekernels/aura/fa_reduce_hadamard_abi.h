// SPDX-License-Identifier: MIT
// The interface of shaders/aura/fa_reduce_hadamard.comp (see core/abi.h).
#ifndef TILEKERNELS_AURA_FA_REDUCE_HADAMARD_ABI_H
#define TILEKERNELS_AURA_FA_REDUCE_HADAMARD_ABI_H
#include "tilekernels/core/abi.h"

// DIM (= 2^LOG_DIM): head dimension; GROUPS lane groups per row, BPG blocks
// per lane group, ROWS rows per workgroup; PARTIAL_DTYPE, OUT_DTYPE: DType codes.
#define TK_FA_REDUCE_HADAMARD_SPEC(F) \
  F(1, DIM, 256)                      \
  F(2, LOG_DIM, 8)                    \
  F(3, GROUPS, 1)                     \
  F(4, BPG, 8)                        \
  F(5, ROWS, 1)                       \
  F(6, PARTIAL_DTYPE, 0)              \
  F(7, OUT_DTYPE, 0)

// inv_sqrt_dim: 1 / sqrt(DIM), rounded once on the host.
#define TK_FA_REDUCE_HADAMARD_PUSH(F) \
  F(uint, group_offset)               \
  F(uint, rows)                       \
  F(uint, nwg)                        \
  F(float, inv_sqrt_dim)

#endif
