// SPDX-License-Identifier: MIT
// The interface of shaders/aura/decode_attention.comp (see core/abi.h).
#ifndef TILEKERNELS_AURA_DECODE_ATTENTION_ABI_H
#define TILEKERNELS_AURA_DECODE_ATTENTION_ABI_H
#include "tilekernels/core/abi.h"

// DIM, PAGE_TOKENS: the cache's; K_BITS, V_BITS: 2, 3, 4, 6, 8, or 16 for
// raw values; K_ROT, V_ROT: 0 none (raw side), 1 randomised Hadamard, 2
// dense; NORM_DTYPE, RAW_DTYPE, Q_DTYPE, OUT_DTYPE: DType codes; ROW_VECS:
// query rows per workgroup / 4; TPI: keys per invocation per block;
// K_CODEBOOK_AT ... V_ROTATION_AT: float offsets in the tables buffer
// (aura::CacheTableLayout); PUBLISH: 1 where the call splits the keys:
// each workgroup publishes its softmax state to the workspace and the
// call's second dispatch (shaders/aura/decode_attention_merge.comp, the
// same constants, ROW_VECS the first dispatch's) merges the states and
// finishes the rows; 2: each publishes and counts its arrival in binding
// 14 (u32 per group), and the group's last to arrive merges the states and
// finishes the rows (one dispatch); 0: the workgroup finishes its rows
// itself; MMA_M, MMA_N, MMA_K, SUBGROUP: the tensor-core variants' matrix
// tile and subgroup size (shaders/common/mma.glsl; unused by the others);
// K_CENTRED: 1 where the cache's keys are centred (binding 12 the centres
// [centres, kv_heads, DIM] f32, binding 13 each sequence's row, i32): each
// row's scores gain scale * <q, centre>; K_HI_DIMS: split keys
// (aura::CacheFormat::k_hi_dims; the CUDA-core kernel only): K's first
// K_HI_DIMS coordinates take K_BITS + 1 bits and the codebook at
// K_HI_CODEBOOK_AT, 0 none. What changes from call to call
// (group sizes, new tokens, the split, options) is a push constant, so one
// pipeline serves every length.
#define TK_DECODE_ATTENTION_SPEC(F) \
  F(1, DIM, 128)                    \
  F(2, PAGE_TOKENS, 16)             \
  F(3, K_BITS, 4)                   \
  F(4, V_BITS, 4)                   \
  F(5, K_ROT, 1)                    \
  F(6, V_ROT, 1)                    \
  F(7, NORM_DTYPE, 0)               \
  F(8, RAW_DTYPE, 2)                \
  F(9, Q_DTYPE, 2)                  \
  F(10, OUT_DTYPE, 2)               \
  F(11, ROW_VECS, 1)                \
  F(12, TPI, 2)                     \
  F(13, K_CODEBOOK_AT, 0)           \
  F(14, V_CODEBOOK_AT, 0)           \
  F(15, K_ROTATION_AT, 0)           \
  F(16, V_ROTATION_AT, 0)           \
  F(17, PUBLISH, 0)                 \
  TK_MMA_SPEC(F, 18, 19, 20, 21)    \
  F(22, K_CENTRED, 0)               \
  F(23, K_HI_DIMS, 0)               \
  F(24, K_HI_CODEBOOK_AT, 0)

// gqa: query heads per KV head; q_len: new tokens per sequence; splits:
// workgroups per (sequence, KV head, row chunk) along the keys; flags: bit 0
// write lse, bit 1 sinks given; window: 0 none, else keys at positions >
// pos - window; softcap: 0 none; scale: the softmax scale; inv_sqrt_dim:
// f32(1 / sqrt(DIM)); ml_at: vec4 offset of the (m, l) region in the
// workspace binding; q_at, q_token, q_head and o_at, o_token, o_head:
// where the views q and output are in their bindings (element offset,
// elements per token and per head; core/dispatch.hpp ViewLayout);
// centres: rows of the centre binding (K_CENTRED).
#define TK_DECODE_ATTENTION_PUSH(F) \
  F(uint, group_offset)             \
  F(uint, num_seqs)                 \
  F(uint, kv_heads)                 \
  F(uint, max_pages)                \
  F(uint, num_pages)                \
  F(uint, gqa)                      \
  F(uint, q_len)                    \
  F(uint, splits)                   \
  F(uint, flags)                    \
  F(uint, window)                   \
  F(float, scale)                   \
  F(float, softcap)                 \
  F(float, inv_sqrt_dim)            \
  F(uint, ml_at)                    \
  F(uint, q_at)                     \
  F(uint, q_token)                  \
  F(uint, q_head)                   \
  F(uint, o_at)                     \
  F(uint, o_token)                  \
  F(uint, o_head)                   \
  F(uint, centres)

// Output dim pairs per invocation of a workgroup of WG invocations (the
// finish's o_fin holds them).
#define TK_DECODE_ATTENTION_PAIRS(DIM, WG) (((DIM) / 2u + (WG) - 1u) / (WG))
// The CUDA-core kernel's scratch in vec4 (decode_attention.comp): 8 per
// invocation up to 128 invocations, so that 256 stay within 32 KiB of
// shared memory; a block's weights (WG * TPI * ROW_VECS) must fit it.
#define TK_DECODE_ATTENTION_SCRATCH(WG) ((WG) > 128u ? 1024u : (WG)*8u)
// Split states whose o the merge loads in one round trip
// (decode_attention_merge_states.glsl; the split rule counts on it).
#define TK_DECODE_ATTENTION_MERGE_BATCH(DIM, WG) (16u / TK_DECODE_ATTENTION_PAIRS(DIM, WG))
// The most splits of a call (workgroups per group along the keys).
#define TK_DECODE_ATTENTION_MAX_SPLITS 128u
// An arrival counter (PUBLISH 2) holds TAG + the group's workgroups that
// arrived so far in the call (below COUNT_MASK + 1); between calls, TAG
// alone. A counter whose high bits are not TAG was never initialised or
// was overwritten: its group's rows are written as NaN.
#define TK_DECODE_ATTENTION_ARRIVAL_TAG 0x7A6B0000u
#define TK_DECODE_ATTENTION_ARRIVAL_COUNT_MASK 0xFFFFu

// The tensor-core variants (shaders/aura/decode_attention_tc.glsl), in
// uvec4 units: the row stride of a decoded 16-key tile, one subgroup's
// stage (the tile, S as f32, P as fp16), and the vec4 scratch (the 16
// query rows as floats; the lanes variant's second byte table, 256
// entries x 16 copies, also).
#define TK_DECODE_ATTENTION_TC_KS(dim) ((dim) / 8u + 1u)
#define TK_DECODE_ATTENTION_TC_STAGE(dim) (16u * TK_DECODE_ATTENTION_TC_KS(dim) + 16u * 5u + 32u)
#define TK_DECODE_ATTENTION_TC_SCRATCH(dim, lanes) ((lanes) != 0 ? TK_ABI_MAX(4u * (dim), 1024u) : 4u * (dim))

#endif
