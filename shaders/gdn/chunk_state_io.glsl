// SPDX-License-Identifier: MIT
// The interface shared by the matrix state recurrence kernels
// (chunk_state_mma.glsl, chunk_state_rows.glsl): specialization constants,
// push constants, bindings, the chunk table and the state's addressing.
// The including kernel defines TK_STATE_U_VOLATILE (volatile, or empty)
// for u's binding.
#extension GL_EXT_control_flow_attributes : require
#extension GL_GOOGLE_include_directive : require
#include "tilekernels/gdn/state_recurrence_abi.h"
#include "../common/convert.glsl"

TK_DECLARE_SPEC(TK_STATE_RECURRENCE_SPEC)
TK_DECLARE_PUSH(TK_STATE_RECURRENCE_PUSH)

// Inputs loaded ahead are volatile so that the compiler keeps each load
// where it is issued (after the barrier that follows the staging of the
// previous ones), as in chunk_o_bf16.comp. h0 and final_state are also
// bound as uvec4 arrays (f32 elements 4 to a uvec4), for fragment loads.
layout(std430, binding = 0) volatile readonly buffer K4 { uvec4 k_4[]; };
layout(std430, binding = 1) volatile readonly buffer W4 { uvec4 w_4[]; };
layout(std430, binding = 2) TK_STATE_U_VOLATILE readonly buffer U4 { uvec4 u_4[]; };
layout(std430, binding = 3) volatile readonly buffer GCum { float g_f[]; };
layout(std430, binding = 4) readonly buffer H0 { float h0_f[]; };
layout(std430, binding = 4) readonly buffer H04 { uvec4 h0_4[]; };
layout(std430, binding = 5) readonly buffer Index { uvec4 index_table[]; };
layout(std430, binding = 6) writeonly buffer HOut { uvec4 h_4[]; };
layout(std430, binding = 7) writeonly buffer VNew { uvec4 vn_4[]; };
layout(std430, binding = 8) writeonly buffer HT { float ht_f[]; };
layout(std430, binding = 8) writeonly buffer HT4 { uvec4 ht_4[]; };

#define TK_GDN_INDEX(i) index_table[i]
#include "../common/gdn_chunks.glsl"

// Element (kk, vv) of sequence n's state for head h in initial_state or
// final_state, in the call's layout.
uint state_offset(uint n, uint h, uint kk, uint vv) {
  return (OPTIONS & TK_GDN_OPT_STATE_VK) != 0u ? ((n * pc.H + h) * VDIM + vv) * KDIM + kk
                                                : ((n * pc.H + h) * KDIM + kk) * VDIM + vv;
}
