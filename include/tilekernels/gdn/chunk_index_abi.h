// SPDX-License-Identifier: MIT
// The interface of shaders/gdn/chunk_index.comp (see core/abi.h).
#ifndef TILEKERNELS_GDN_CHUNK_INDEX_ABI_H
#define TILEKERNELS_GDN_CHUNK_INDEX_ABI_H
#include "tilekernels/core/abi.h"

// BT: the chunk length.
#define TK_CHUNK_INDEX_SPEC(F) F(1, BT, 64)

// T: tokens of the one row; N: sequences (cu_seqlens holds N + 1 offsets);
// chunks: the chunk entries of the table (gdn::Chunking::chunks()).
#define TK_CHUNK_INDEX_PUSH(F) \
  F(uint, group_offset)        \
  F(uint, T)                   \
  F(uint, N)                   \
  F(uint, chunks)

#endif
