// SPDX-License-Identifier: MIT
// The interface of shaders/gdn/recompute_wu.comp (portable),
// recompute_wu_fp16.comp (tensor_core_fp16), recompute_wu_bf16.comp
// (tensor_core_bf16) and recompute_wu_bf16_joint.comp
// (tensor_core_bf16_joint); see core/abi.h.
#ifndef TILEKERNELS_GDN_RECOMPUTE_WU_ABI_H
#define TILEKERNELS_GDN_RECOMPUTE_WU_ABI_H
#include "tilekernels/core/abi.h"

// BT: chunk length; K, V: head sizes; A_DTYPE: DType code of A (f32 or
// bf16); SHAPE: 0, a constant of recompute_wu_bf16.comp whose code paths
// under it are never taken, kept because the driver allocates that
// kernel's registers best with them present; VARLEN, SLOTS: 1 to read the
// index table (cu_seqlens), 1 for slot-major intermediates (gdn_chunks.glsl's
// tk_gdn_rows; constants, so that fixed-length batches carry no trace of
// either); V_UNALIGNED: 1 where the rows of the v view may start at any
// element (read by 32-bit words), 0 where every one starts at a multiple
// of 8 elements (16-byte loads; a constant, so that the default pipelines
// carry no trace of the other way); MMA_M, MMA_N, MMA_K, SUBGROUP (fp16):
// the device's matrix tile and subgroup size (shaders/common/mma.glsl).
#define TK_RECOMPUTE_WU_SPEC(F) \
  F(1, BT, 64)                  \
  F(2, K, 128)                  \
  F(3, V, 128)                  \
  F(4, A_DTYPE, 0)              \
  F(5, SHAPE, 0)                \
  F(6, VARLEN, 0)               \
  F(7, SLOTS, 0)                \
  F(8, V_UNALIGNED, 0)          \
  TK_MMA_SPEC(F, 9, 10, 11, 12)

// batch, chunks: B and ceil(T / BT), or 1 and every sequence's chunks
// with varlen; stride: the persistent bf16 kernels' grid (pairs of
// workgroups for recompute_wu_bf16, workgroups for the joint kernel);
// ratio: H / Hg; N: sequences (the index table's chunk entries follow N
// sequence entries); v_at, v_token, v_head: where the view v is in its
// binding (core/dispatch.hpp ViewLayout).
#define TK_RECOMPUTE_WU_PUSH(F) \
  F(uint, group_offset)         \
  F(uint, batch)                \
  F(uint, T)                    \
  F(uint, Hg)                   \
  F(uint, H)                    \
  F(uint, chunks)               \
  F(uint, stride)               \
  F(uint, ratio)                \
  F(uint, N)                    \
  F(uint, v_at)                 \
  F(uint, v_token)              \
  F(uint, v_head)

// uvec4s per staged operand row (one of skew).
#define TK_RECOMPUTE_WU_OPS(K, V) (TK_ABI_MAX(K, V) / 8u + 1u)
// tensor_core_fp16, uvec4 units: fp16 operand rows [BT][OPS] and A
// [BT][BT / 8 + 1], later reused as a 16 x 20 f32 scratch tile per
// subgroup (NSG of them); plus three tables of BT words.
#define TK_RECOMPUTE_WU_FP16_VEC4(BT, K, V, NSG) \
  TK_ABI_MAX((BT) * TK_RECOMPUTE_WU_OPS(K, V) + (BT) * ((BT) / 8u + 1u), (NSG) * 80u)
#define TK_RECOMPUTE_WU_FP16_SHARED_BYTES(BT, K, V, NSG) (16u * TK_RECOMPUTE_WU_FP16_VEC4(BT, K, V, NSG) + 12u * (BT))
// tensor_core_bf16, uvec4 units: bf16 operand rows [BT][OPS], A [BT][BT /
// 8 + 1] (twice for A in f32: bf16 + residual), then a [16][3] output
// scratch per subgroup.
#define TK_RECOMPUTE_WU_BF16_VEC4(BT, K, V, A_IS_F32, WG)                                               \
  ((BT) * TK_RECOMPUTE_WU_OPS(K, V) + (BT) * ((BT) / 8u + 1u) * ((A_IS_F32) ? 2u : 1u) + (WG) / 32u * 48u)
// tensor_core_bf16_joint (BT = 64), uvec4 units: v rows [64][V / 8 + 1],
// k rows [64][K / 8 + 1], A rows [64][9].
#define TK_RECOMPUTE_WU_JOINT_VEC4(K, V) (64u * (((K) / 8u + 1u) + ((V) / 8u + 1u) + 9u))

#endif
