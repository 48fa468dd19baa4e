// SPDX-License-Identifier: MIT
// The interface of shaders/aura/cache_write.comp (see core/abi.h).
#ifndef TILEKERNELS_AURA_CACHE_WRITE_ABI_H
#define TILEKERNELS_AURA_CACHE_WRITE_ABI_H
#include "tilekernels/core/abi.h"

// One dispatch writes one side (K or V) of the cache. DIM: head dimension;
// PAGE_TOKENS: slots per page; BITS: 2, 3, 4, 6, 8, or 16 for raw values;
// ROTATION: 0 none (raw), 1 randomised Hadamard, 2 dense; NORM_DTYPE,
// RAW_DTYPE, IN_DTYPE: DType codes; ROWS: (token, head) rows per workgroup;
// TABLE_CODEBOOK, TABLE_BOUNDARIES, TABLE_ROTATION: float offsets of the
// side's tables in the tables buffer (aura::CacheTableLayout); CENTRED: 1
// where the rows lose their centre first (the K side of a centred format:
// binding 5 the centres [centres, kv_heads, DIM] f32, binding 6 each
// token's row of them, i32); HI_DIMS: split keys (the K side of such a
// format, aura::CacheFormat::k_hi_dims): the first HI_DIMS coordinates take
// BITS + 1 bits with the codebook and boundaries at TABLE_HI_CODEBOOK and
// TABLE_HI_BOUNDARIES; 0 none.
#define TK_CACHE_WRITE_SPEC(F) \
  F(1, DIM, 128)               \
  F(2, PAGE_TOKENS, 16)        \
  F(3, BITS, 4)                \
  F(4, ROTATION, 1)            \
  F(5, NORM_DTYPE, 0)          \
  F(6, RAW_DTYPE, 2)           \
  F(7, IN_DTYPE, 2)            \
  F(8, ROWS, 4)                \
  F(9, TABLE_CODEBOOK, 0)      \
  F(10, TABLE_BOUNDARIES, 0)   \
  F(11, TABLE_ROTATION, 0)     \
  F(12, CENTRED, 0)            \
  F(13, HI_DIMS, 0)            \
  F(14, TABLE_HI_CODEBOOK, 0)  \
  F(15, TABLE_HI_BOUNDARIES, 0)

// rows: num_tokens * kv_heads; capacity: num_pages * PAGE_TOKENS slots;
// inv_sqrt_dim: f32(1 / sqrt(DIM)), rounded on the host; in_at, in_token,
// in_head: where the input view is in its binding (element offset,
// elements per token and per head; core/dispatch.hpp ViewLayout).
#define TK_CACHE_WRITE_PUSH(F) \
  F(uint, group_offset)        \
  F(uint, rows)                \
  F(uint, kv_heads)            \
  F(uint, capacity)            \
  F(float, inv_sqrt_dim)       \
  F(uint, in_at)               \
  F(uint, in_token)            \
  F(uint, in_head)             \
  F(uint, centres)

#endif
