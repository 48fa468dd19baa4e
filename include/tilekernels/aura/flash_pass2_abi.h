// The interface of shaders/aura/flash_pass2.comp (see core/abi.h).
#ifndef TILEKERNELS_AURA_FLASH_PASS2_ABI_H
#define TILEKERNELS_AURA_FLASH_PASS2_ABI_H
#include "tilekernels/core/abi.h"

// DIM: head dimension; GROUPS: lane groups per workgroup; PARTIAL_DTYPE,
// OUT_DTYPE: DType codes; WRITE_LSE: 1 to write lse; UNROLL: blocks whose
// loads a group has in flight together; SPLITS: workgroups per head slice
// along the blocks (through the workspace); SLICES: workgroups per head
// along the output; PREFETCH: 1 to load the next batch while one is folded.
#define TK_FLASH_PASS2_SPEC(F) \
  F(1, DIM, 128)               \
  F(2, GROUPS, 1)              \
  F(3, PARTIAL_DTYPE, 0)       \
  F(4, OUT_DTYPE, 2)           \
  F(5, WRITE_LSE, 0)           \
  F(6, UNROLL, 4)              \
  F(7, SPLITS, 1)              \
  F(8, SLICES, 1)              \
  F(9, PREFETCH, 0)

#define TK_FLASH_PASS2_PUSH(F) \
  F(uint, group_offset)        \
  F(uint, q_heads)             \
  F(uint, num_blocks)

#endif
