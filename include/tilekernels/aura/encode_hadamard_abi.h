// SPDX-License-Identifier: MIT
// The interface of shaders/aura/encode_hadamard.comp (see core/abi.h).
#ifndef TILEKERNELS_AURA_ENCODE_HADAMARD_ABI_H
#define TILEKERNELS_AURA_ENCODE_HADAMARD_ABI_H
#include "tilekernels/core/abi.h"

// DIM, BITS, IN_DTYPE: the row format; ROWS rows per block; V values per
// invocation (8..64, a power of two, <= DIM; DIM / V invocations per row);
// ITER blocks of ROWS rows per workgroup, the next block's loads in flight;
// INV_SQRT_DIM_BITS: the bits of f32(1 / sqrt(DIM)), rounded on the host.
// CELL_ENTRY: how the quantiser reads its cell table: 0 (what the host
// passes) b and k from two 32-bit arrays and the squared centroid by index,
// three conflict-free 32-bit reads; 1 one 16-byte entry. The second form
// stays in the shader because the driver compiles the first one faster
// with it present (bench/notes/2026-11-aura-encode.md).
#define TK_ENCODE_HADAMARD_SPEC(F) \
  F(1, DIM, 128)                   \
  F(2, BITS, 4)                    \
  F(3, IN_DTYPE, 2)                \
  F(4, ROWS, 64)                   \
  F(5, INV_SQRT_DIM_BITS, 0x3db504f3u) \
  F(6, V, 32)                      \
  F(7, ITER, 1)                    \
  F(8, CELL_ENTRY, 0)

#define TK_ENCODE_HADAMARD_PUSH(F) \
  F(uint, group_offset)            \
  F(uint, rows)

#endif
