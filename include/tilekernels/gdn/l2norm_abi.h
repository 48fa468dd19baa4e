// SPDX-License-Identifier: MIT
// The interface of shaders/gdn/l2norm.comp (see core/abi.h).
#ifndef TILEKERNELS_GDN_L2NORM_ABI_H
#define TILEKERNELS_GDN_L2NORM_ABI_H
#include "tilekernels/core/abi.h"

// KDIM: row length (the head size of q and k).
#define TK_L2NORM_SPEC(F) F(1, KDIM, 128)

// rows: rows of each tensor (B T Hg); Hg: rows per token; normalise: 0 to
// copy the rows as they are; for each of the views q and k where it is in
// its binding (core/dispatch.hpp ViewLayout): element offset, elements per
// token, elements per head.
#define TK_L2NORM_PUSH(F) \
  F(uint, group_offset)   \
  F(uint, rows)           \
  F(uint, Hg)             \
  F(uint, normalise)      \
  F(uint, q_at)           \
  F(uint, q_token)        \
  F(uint, q_head)         \
  F(uint, k_at)           \
  F(uint, k_token)        \
  F(uint, k_head)

#endif
