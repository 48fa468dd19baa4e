// SPDX-License-Identifier: MIT
// The interface of shaders/gdn/chunk_o.comp (portable), chunk_o_fp16.comp
// (tensor_core_fp16) and chunk_o_bf16.comp (tensor_core_bf16); see
// core/abi.h. Each variant reads the constants it needs.
#ifndef TILEKERNELS_GDN_CHUNK_O_ABI_H
#define TILEKERNELS_GDN_CHUNK_O_ABI_H
#include "tilekernels/core/abi.h"

// BT: chunk length; KDIM, VDIM: head sizes; BV: columns of V per tile
// (portable, fp16); WC: subgroups along V (fp16); KSTAGE: K columns per
// shared stage (fp16); VARLEN, SLOTS: as in recompute_wu_abi.h;
// O_UNALIGNED (tensor-core variants): 1 where the rows of the o view may
// start at any even element (written by 32-bit words), 0 where every one
// starts at a multiple of 8 elements (16-byte stores); MMA_M, MMA_N, MMA_K,
// SUBGROUP (fp16): the device's matrix tile and subgroup size
// (shaders/common/mma.glsl).
#define TK_CHUNK_O_SPEC(F) \
  F(1, BT, 64)             \
  F(2, KDIM, 128)          \
  F(3, VDIM, 128)          \
  F(4, BV, 64)             \
  F(5, WC, 4)              \
  F(6, KSTAGE, 64)         \
  F(7, VARLEN, 0)          \
  F(8, SLOTS, 0)           \
  F(9, O_UNALIGNED, 0)     \
  TK_MMA_SPEC(F, 10, 11, 12, 13)

// batch, NT: B and ceil(T / BT), or 1 and every sequence's chunks with
// varlen; total_groups: tiles (batch * NT * H * VDIM / BV); stride:
// workgroups of the persistent bf16 grid; ratio: H / Hg; N: sequences;
// o_at, o_token, o_head: where the view o is in its binding
// (core/dispatch.hpp ViewLayout; all three even).
#define TK_CHUNK_O_PUSH(F) \
  F(uint, group_offset)    \
  F(uint, T)               \
  F(uint, H)               \
  F(uint, Hg)              \
  F(uint, NT)              \
  F(uint, total_groups)    \
  F(float, scale)          \
  F(uint, stride)          \
  F(uint, ratio)           \
  F(uint, batch)           \
  F(uint, N)               \
  F(uint, o_at)            \
  F(uint, o_token)         \
  F(uint, o_head)

// Shared memory. portable (BV = 64 or 128): a stage of KC columns of q, k
// and h transposed (columns of 2 BT + BV + 4 floats) or of 16 rows of v,
// then A^T (columns of BT + 4 floats) and g.
#define TK_CHUNK_O_PORTABLE_KC(BV) ((BV) > 64u ? 8u : 16u)
#define TK_CHUNK_O_PORTABLE_STAGE_STRIDE(BT, BV) (2u * (BT) + (BV) + 4u)
#define TK_CHUNK_O_PORTABLE_SHARED_BYTES(BT, BV)                                                        \
  (4u * (TK_ABI_MAX(TK_CHUNK_O_PORTABLE_KC(BV) * TK_CHUNK_O_PORTABLE_STAGE_STRIDE(BT, BV), 16u * (BV)) + \
         (BT) * ((BT) + 4u) + (BT)))
// tensor_core_fp16, in uvec4 units: one K stage (q, k, h rows of KC fp16),
// or v, A and a 16 x 20 f32 scratch tile per subgroup; then g and a flag.
#define TK_CHUNK_O_FP16_REGION(BT, BV, WC, KC)                                               \
  TK_ABI_MAX((2u * (BT) + (BV)) * ((KC) / 8u + 1u),                                          \
             (BT) * ((BV) / 8u + 1u) + (BT) * ((BT) / 8u + 1u) + (BT) / 16u * (WC) * 16u * 5u)
#define TK_CHUNK_O_FP16_SHARED_BYTES(BT, BV, WC, KC) (16u * TK_CHUNK_O_FP16_REGION(BT, BV, WC, KC) + 4u * (BT) + 4u)
// tensor_core_bf16, in uvec4 units: a K step's q, k, h slices (64 columns),
// or v, P and 16 per-subgroup output scratch tiles; then two 16 x 16 f32
// index tiles. Plus g and exp(g) of 64 rows.
#define TK_CHUNK_O_BF16_VEC4(BT, V) \
  (TK_ABI_MAX((2u * (BT) + (V)) * 9u, (BT) * ((V) / 8u + 1u) + (BT) * ((BT) / 8u + 1u) + 512u) + 128u)
#define TK_CHUNK_O_BF16_SHARED_BYTES(BT, V) (16u * TK_CHUNK_O_BF16_VEC4(BT, V) + 512u)

#endif
