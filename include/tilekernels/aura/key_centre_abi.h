// SPDX-License-Identifier: MIT
// The interface of shaders/aura/key_centre.comp (see core/abi.h).
#ifndef TILEKERNELS_AURA_KEY_CENTRE_ABI_H
#define TILEKERNELS_AURA_KEY_CENTRE_ABI_H
#include "tilekernels/core/abi.h"

// DIM: head dimension; IN_DTYPE: the keys' DType code.
#define TK_KEY_CENTRE_SPEC(F) \
  F(1, DIM, 128)              \
  F(2, IN_DTYPE, 2)

// entries: prompts of the call; kv_heads; tokens: rows of the keys;
// centres: rows of the centre binding; in_at, in_token, in_head: where the
// keys' view is in its binding (element offset, elements per token and per
// head; core/dispatch.hpp ViewLayout).
#define TK_KEY_CENTRE_PUSH(F) \
  F(uint, group_offset)       \
  F(uint, entries)            \
  F(uint, kv_heads)           \
  F(uint, tokens)             \
  F(uint, centres)            \
  F(uint, in_at)              \
  F(uint, in_token)           \
  F(uint, in_head)

// Invocations of a workgroup: DIM dims times WG / DIM token lanes.
#define TK_KEY_CENTRE_WG 256u

#endif
