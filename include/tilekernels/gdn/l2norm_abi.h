// The interface of shaders/gdn/l2norm.comp (see core/abi.h).
#ifndef TILEKERNELS_GDN_L2NORM_ABI_H
#define TILEKERNELS_GDN_L2NORM_ABI_H
#include "tilekernels/core/abi.h"

// KDIM: row length (the head size of q and k).
#define TK_L2NORM_SPEC(F) F(1, KDIM, 128)

// rows: rows of each tensor (B T Hg).
#define TK_L2NORM_PUSH(F) \
  F(uint, group_offset)   \
  F(uint, rows)

#endif
