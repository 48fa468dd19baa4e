// The interface of shaders/gdn/chunk_kkt_solve*.comp (see core/abi.h).
#ifndef TILEKERNELS_GDN_KKT_SOLVE_ABI_H
#define TILEKERNELS_GDN_KKT_SOLVE_ABI_H
#include "tilekernels/core/abi.h"
#include "tilekernels/gdn/options_abi.h"

// BT: chunk length; KDIM: head size of k; OPTIONS: TK_GDN_OPT_* bits (the
// gate and beta options).
#define TK_KKT_SOLVE_SPEC(F) \
  F(1, BT, 64)               \
  F(2, KDIM, 128)            \
  F(3, OPTIONS, 0)

// T: tokens per batch row; H, Hg: value and key heads, ratio = H / Hg; N:
// sequences; row_chunks: chunks per fixed-length row; varlen: 1 to read
// the index table.
#define TK_KKT_SOLVE_PUSH(F) \
  F(uint, group_offset)      \
  F(uint, T)                 \
  F(uint, H)                 \
  F(uint, Hg)                \
  F(uint, ratio)             \
  F(uint, N)                 \
  F(uint, row_chunks)        \
  F(uint, varlen)

#endif
