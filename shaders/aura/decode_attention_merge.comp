// SPDX-License-Identifier: MIT
#version 460
// AURA decode attention, the second dispatch of a call that splits the keys
// (include/tilekernels/aura/decode_attention.hpp): the first dispatch's
// workgroups published their softmax states (decode_attention_finish.glsl,
// PUBLISH); this kernel merges them and finishes the rows with the same
// code as an unsplit workgroup (sink, o / l, lse, V's rotation undone,
// output).
//
// Geometry: workgroup (x = group = (seq * kv_heads + kv_head) * chunks +
// chunk, y = row quad q) takes rows chunk * 4 SRV + 4 q .. + 3 of the
// chunk, SRV = ROW_VECS the first dispatch's row quads per state, from the
// states group * splits + s of the splits s. The specialization constants
// are the first dispatch's but the workgroup size: WG invocations, PAIRS
// output dim pairs each. Every split's state is written before this
// dispatch starts: no arrival counters.
#extension GL_EXT_control_flow_attributes : require
#extension GL_GOOGLE_include_directive : require
#define TK_DECODE_ATTENTION_MERGE 1
#include "tilekernels/aura/decode_attention_abi.h"
#include "../common/convert.glsl"
#include "../common/softmax_state.glsl"
#include "../common/aura_cache.glsl"

TK_DECLARE_SPEC(TK_DECODE_ATTENTION_SPEC)
TK_DECLARE_PUSH(TK_DECODE_ATTENTION_PUSH)

const uint WG = gl_WorkGroupSize.x;
const uint RV = 1u;  // one row quad per workgroup
const uint ROWS = 4u;
const uint SRV = ROW_VECS;
const uint PAIRS = TK_DECODE_ATTENTION_PAIRS(DIM, WG);

#include "../common/decode_attention_io.glsl"

// Each split's (m, l), then its weight and l; the rows as floats (SF: DIM
// vec4, Dim being at most 256).
shared vec4 s_scratch[2u * TK_DECODE_ATTENTION_MAX_SPLITS];

void main() {
  const uint inv = gl_LocalInvocationID.x;
  const uint group = gl_WorkGroupID.x + pc.group_offset, quad = gl_WorkGroupID.y;
  const uint chunks = (pc.gqa * pc.q_len + 4u * SRV - 1u) / (4u * SRV);
  const uint unit = group / chunks, chunk = group % chunks;
  const uint seq = unit / pc.kv_heads, kvh = unit % pc.kv_heads;
  const uint q_heads = pc.kv_heads * pc.gqa;
  const uint row0 = chunk * 4u * SRV + 4u * quad;
  if (row0 >= pc.gqa * pc.q_len) return;  // a quad of padding rows (uniform)
  // V's signs loaded with the states.
  TK_LOAD_V_SIGNS(v_sign, true)

  vec4 m_fin[1], l_fin[1], o_fin[PAIRS * 2u];
#define TK_MERGE_QUAD quad
#define TK_MERGE_M m_fin[0]
#define TK_MERGE_L l_fin[0]
#define TK_MERGE_O(i) o_fin[i]
#define TK_MERGE_TEAMS 1u
#define TK_MERGE_FLAT 0u
#include "../common/decode_attention_merge_states.glsl"
  barrier();  // the weights are read before the scratch holds the rows

#include "../common/decode_attention_finish.glsl"
}
