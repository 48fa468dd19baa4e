// SPDX-License-Identifier: MIT
// The interface of shaders/aura/flash_pass2.comp (see core/abi.h).
#ifndef TILEKERNELS_AURA_FLASH_PASS2_ABI_H
#define TILEKERNELS_AURA_FLASH_PASS2_ABI_H
#include "tilekernels/core/abi.h"

// DIM: head dimension; GROUPS: lane groups per workgroup; PARTIAL_DTYPE,
// OUT_DTYPE: DType codes; UNROLL: blocks whose loads a group has in flight
// together; SPLIT: 1 where the blocks of a head slice are split over
// pc.splits workgroups (merged through the workspace); SLICES: workgroups
// per head along the output; PREFETCH: 1 to load the next batch while one
// is folded. flags: bit 0 write lse.
#define TK_FLASH_PASS2_SPEC(F) \
  F(1, DIM, 128)               \
  F(2, GROUPS, 1)              \
  F(3, PARTIAL_DTYPE, 0)       \
  F(4, OUT_DTYPE, 2)           \
  F(5, UNROLL, 4)              \
  F(6, SPLIT, 0)               \
  F(7, SLICES, 1)              \
  F(8, PREFETCH, 0)

#define TK_FLASH_PASS2_PUSH(F) \
  F(uint, group_offset)        \
  F(uint, q_heads)             \
  F(uint, num_blocks)          \
  F(uint, splits)              \
  F(uint, flags)

#endif
