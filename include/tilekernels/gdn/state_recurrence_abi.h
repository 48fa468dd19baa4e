// SPDX-License-Identifier: MIT
// The interface of shaders/gdn/chunk_state*.comp (see core/abi.h).
#ifndef TILEKERNELS_GDN_STATE_RECURRENCE_ABI_H
#define TILEKERNELS_GDN_STATE_RECURRENCE_ABI_H
#include "tilekernels/core/abi.h"
#include "tilekernels/gdn/options_abi.h"

// BT: chunk length; KDIM, VDIM: head sizes; BV: state columns per
// workgroup; OPTIONS: TK_GDN_OPT_* bits (H0, HT, STATE_VK); MMA_M, MMA_N,
// MMA_K, SUBGROUP: the device's tile (fp16 matrix kernel, core/abi.h).
#define TK_STATE_RECURRENCE_SPEC(F) \
  F(1, BT, 64)                      \
  F(2, KDIM, 128)                   \
  F(3, VDIM, 128)                   \
  F(4, BV, 16)                      \
  F(5, OPTIONS, 0)                  \
  TK_MMA_SPEC(F, 6, 7, 8, 9)

// T: tokens per batch row; H, Hg: value and key heads, ratio = H / Hg; N:
// sequences; row_chunks: chunks per fixed-length row; varlen: 1 to read
// the index table.
#define TK_STATE_RECURRENCE_PUSH(F) \
  F(uint, group_offset)             \
  F(uint, T)                        \
  F(uint, H)                        \
  F(uint, Hg)                       \
  F(uint, ratio)                    \
  F(uint, N)                        \
  F(uint, row_chunks)               \
  F(uint, varlen)

// The portable kernel (chunk_state.comp): its workgroup (8 BV
// invocations), the columns of w per staged slice (all of them up to
// K = 128, else 64) and its shared memory: the stage (BT rows of KC / 8
// + 1 uvec4), bf16(S) and the update's operand in f32, g.
#define TK_STATE_PORTABLE_WORKGROUP(BV) (8u * (BV))
#define TK_STATE_PORTABLE_KC(K) ((K) <= 128u ? (K) : 64u)
#define TK_STATE_PORTABLE_SHARED_BYTES(BT, K, BV) \
  (16u * (BT) * (TK_STATE_PORTABLE_KC(K) / 8u + 1u) + 4u * ((K) + (BT)) * (BV) + 4u * (BT))

#endif
