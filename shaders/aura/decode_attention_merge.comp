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
// States whose o loads are in flight together (32 vec4 per invocation).
const uint MERGE_BATCH = 16u / PAIRS;

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
  const uint first = group * pc.splits, count = pc.splits;
  // The Hadamard signs of the invocation's output dims, loaded with the
  // states rather than after the transform (a round trip less).
  float v_sign[PAIRS * 2u];
  [[unroll]] for (uint n = 0; n < PAIRS; ++n)
    [[unroll]] for (uint h = 0; h < 2u; ++h)
      v_sign[n * 2u + h] = V_ROT == 1u ? tables[V_ROTATION_AT + 2u * min(inv + n * WG, DIM / 2u - 1u) + h] : 0.0;
#define TK_V_SIGN(n, h, d) v_sign[(n) * 2u + (h)]

  // The states' o, a batch at a time (past the last state: the last again,
  // weighted 0), with no control flow between the loads and their use, so
  // that a batch is one round trip. Only invocations that hold output pairs
  // load (with PAIRS == 1, those below DIM / 2).
  const bool merges = PAIRS > 1u || inv < DIM / 2u;
  vec4 os[MERGE_BATCH * PAIRS * 2u];
#define TK_MERGE_LOAD(s0)                                                                        \
  if (merges)                                                                                    \
    [[unroll]] for (uint u = 0; u < MERGE_BATCH; ++u) {                                          \
      const uint s = min((s0) + u, count - 1u);                                                  \
      [[unroll]] for (uint n = 0; n < PAIRS; ++n) {                                              \
        const uint p = min(inv + n * WG, DIM / 2u - 1u);                                         \
        [[unroll]] for (uint h = 0; h < 2u; ++h)                                                 \
          os[(u * PAIRS + n) * 2u + h] = work[((first + s) * DIM + 2u * p + h) * SRV + quad];     \
      }                                                                                          \
    }
  // The first batch's o and every state's (m, l) in one round trip; the
  // maximum over the non-empty states; each state's weight once; l.
  TK_MERGE_LOAD(0u)
  for (uint s = inv; s < count; s += WG) {
    s_scratch[2u * s] = work[pc.ml_at + ((first + s) * SRV + quad) * 2u];
    s_scratch[2u * s + 1u] = work[pc.ml_at + ((first + s) * SRV + quad) * 2u + 1u];
  }
  barrier();
  vec4 m_fin[1], l_fin[1], o_fin[PAIRS * 2u];
  m_fin[0] = NEG_INF4;
  for (uint s = 0; s < count; ++s) m_fin[0] = max4(m_fin[0], s_scratch[2u * s], s_scratch[2u * s + 1u]);
  barrier();
  for (uint s = inv; s < count; s += WG) s_scratch[2u * s] = weight4(s_scratch[2u * s], s_scratch[2u * s + 1u], m_fin[0]);
  barrier();
  l_fin[0] = vec4(0.0);
  for (uint s = 0; s < count; ++s) l_fin[0] += s_scratch[2u * s] * s_scratch[2u * s + 1u];
  [[unroll]] for (uint i = 0; i < PAIRS * 2u; ++i) o_fin[i] = vec4(0.0);
  for (uint s0 = 0; s0 < count; s0 += MERGE_BATCH) {
    if (s0 > 0u) TK_MERGE_LOAD(s0)
    if (merges)
      [[unroll]] for (uint u = 0; u < MERGE_BATCH; ++u) {
        const uint s = min(s0 + u, count - 1u);
        const vec4 w = s_scratch[2u * s];
        // Empty states' o is never written: selected away, not multiplied.
        const bvec4 full = s0 + u < count ? notEqual(s_scratch[2u * s + 1u], vec4(0.0)) : bvec4(false);
        [[unroll]] for (uint i = 0; i < PAIRS * 2u; ++i) o_fin[i] += mix(vec4(0.0), w * os[u * PAIRS * 2u + i], full);
      }
  }
#undef TK_MERGE_LOAD
  barrier();  // the weights are read before the scratch holds the rows

#include "../common/decode_attention_finish.glsl"
}
