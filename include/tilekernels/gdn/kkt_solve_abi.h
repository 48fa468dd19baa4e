// SPDX-License-Identifier: MIT
// The interface of shaders/gdn/chunk_kkt_solve*.comp (see core/abi.h).
#ifndef TILEKERNELS_GDN_KKT_SOLVE_ABI_H
#define TILEKERNELS_GDN_KKT_SOLVE_ABI_H
#include "tilekernels/core/abi.h"
#include "tilekernels/gdn/options_abi.h"

// BT: chunk length; KDIM: head size of k; OPTIONS: TK_GDN_OPT_* bits (the
// gate and beta options); MMA_M, MMA_N, MMA_K, SUBGROUP: the device's tile
// (fp16 matrix kernel, core/abi.h).
#define TK_KKT_SOLVE_SPEC(F) \
  F(1, BT, 64)               \
  F(2, KDIM, 128)            \
  F(3, OPTIONS, 0)           \
  TK_MMA_SPEC(F, 4, 5, 6, 7)

// T: tokens per batch row; H, Hg: value and key heads, ratio = H / Hg; N:
// sequences; row_chunks: chunks per fixed-length row; varlen: 1 to read
// the index table; for each of the views g and beta where it is in its
// binding (core/dispatch.hpp ViewLayout): element offset, elements per
// token, elements per head.
#define TK_KKT_SOLVE_PUSH(F) \
  F(uint, group_offset)      \
  F(uint, T)                 \
  F(uint, H)                 \
  F(uint, Hg)                \
  F(uint, ratio)             \
  F(uint, N)                 \
  F(uint, row_chunks)        \
  F(uint, varlen)            \
  F(uint, g_at)              \
  F(uint, g_token)           \
  F(uint, g_head)            \
  F(uint, beta_at)           \
  F(uint, beta_token)        \
  F(uint, beta_head)

// k columns staged in shared memory per step, every kernel.
#define TK_KKT_KC(K) ((K) < 64 ? (K) : 64)

// Shared memory of the scalar solve (chunk_kkt_solve_scalar.glsl), in uvec4
// units: M [BT][BT + 4] f32, then the k slice (BT rows of KC bf16 + 8 of
// padding) or, once M is built, the solved 16 x 16 blocks on and below the
// diagonal (16 x 17 f32 each).
#define TK_KKT_PS_KS_OFF(BT) ((BT) * ((BT) / 4 + 1))
#define TK_KKT_PS_XS_VEC4(BT) (((BT) / 16 * ((BT) / 16 + 1) / 2 * 16 * 17 + 3) / 4)
#define TK_KKT_PS_SMEM_VEC4(BT, K) \
  (TK_KKT_PS_KS_OFF(BT) + TK_ABI_MAX((BT) * (TK_KKT_KC(K) / 8 + 1), TK_KKT_PS_XS_VEC4(BT)))

// Shared memory of the matrix kernels (chunk_kkt_solve_mma.glsl), in
// uvec4 units, kept under 12 KiB at BT = 64 so that four workgroups share a
// multiprocessor on NVIDIA's driver (bench/notes/2026-11-gdn-kkt-solve.md). 16-bit
// tiles are 16 rows of TS uvec4. From 0: the X_IJ that later blocks read
// (rows 0 .. RT - 2, J <= I, then the last diagonal block) as hi/lo tile
// pairs; M_IJ (J < I), likewise in pairs, lie over them (each subgroup takes
// its row of M into registers before any X is written); then per subgroup
// an f32 tile (rows of FS uvec4), which in turn holds M_II, X_II, each
// product's hi/lo pair and A's tiles on their way out. The k slice (BT rows
// of KC 16-bit values + 8 of padding;
// 64 columns at a time, the first loaded while the gate is summed) and,
// right after it, the two index tiles lie under all of that: both are read
// before any tile is written.
#define TK_KKT_TC_TS 2
#define TK_KKT_TC_FS 4
#define TK_KKT_TC_TILE (16 * TK_KKT_TC_TS)
#define TK_KKT_TC_SK(K) (TK_KKT_KC(K) / 8 + 1)
#define TK_KKT_TC_RT(BT) ((BT) / 16)
#define TK_KKT_TC_NX(BT) ((TK_KKT_TC_RT(BT) - 1) * TK_KKT_TC_RT(BT) / 2 + 1)
#define TK_KKT_TC_X_OFF 0
#define TK_KKT_TC_M_OFF(BT) 0
#define TK_KKT_TC_SC_OFF(BT) (2 * TK_KKT_TC_NX(BT) * TK_KKT_TC_TILE)
#define TK_KKT_TC_SC_SIZE (16 * TK_KKT_TC_FS)
#define TK_KKT_TC_TILES_END(BT) (TK_KKT_TC_SC_OFF(BT) + TK_KKT_TC_RT(BT) * TK_KKT_TC_SC_SIZE)
#define TK_KKT_TC_IDX_OFF(BT, K) ((BT) * TK_KKT_TC_SK(K))
#define TK_KKT_TC_SMEM_VEC4(BT, K)                                                          \
  (TK_KKT_TC_TILES_END(BT) > TK_KKT_TC_IDX_OFF(BT, K) + 128 ? TK_KKT_TC_TILES_END(BT) \
                                                             : TK_KKT_TC_IDX_OFF(BT, K) + 128)

#endif
