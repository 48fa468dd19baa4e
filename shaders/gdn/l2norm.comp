// SPDX-License-Identifier: MIT
#version 460
// Gated DeltaNet q/k L2 normalisation as FLA's l2norm_fwd computes it: per
// row of KDIM bf16 values, y = x / sqrt(sum x^2 + 1e-6) in f32, stored as
// bf16 (rounded to nearest even); with normalise 0 the rows are copied as
// they are. Workgroup y = 0 does q, y = 1 k.
//
// q and k are views (row = token * Hg + head at element at + token * per
// token + head * per head of its binding); the outputs are dense.
//
// Geometry: 256 invocations = 32 rows x 8 lanes; lane l reads the row's
// 16-byte pieces l, l + 8, ... (coalesced across the lanes), the 8 partial
// sums meet in shared memory. No subgroup operation.
#extension GL_EXT_control_flow_attributes : require
#extension GL_GOOGLE_include_directive : require
#include "tilekernels/gdn/l2norm_abi.h"
#include "../common/convert.glsl"

TK_DECLARE_SPEC(TK_L2NORM_SPEC)
TK_DECLARE_PUSH(TK_L2NORM_PUSH)

layout(std430, binding = 0) readonly buffer Q { uvec4 q_4[]; };
layout(std430, binding = 0) readonly buffer QW { uint q_w[]; };
layout(std430, binding = 1) readonly buffer K { uvec4 k_4[]; };
layout(std430, binding = 1) readonly buffer KW { uint k_w[]; };
layout(std430, binding = 2) writeonly buffer QOut { uvec4 qo_4[]; };
layout(std430, binding = 3) writeonly buffer KOut { uvec4 ko_4[]; };

const uint PIECES = KDIM / 8;  // 16-byte pieces per row
const uint PPL = PIECES / 8;   // per lane

shared float s_part[256];

void main() {
  const uint tid = gl_LocalInvocationID.x, lane = tid % 8, r = tid / 8;
  const uint row = (gl_WorkGroupID.x + pc.group_offset) * 32 + r;
  const bool valid = row < pc.rows;
  const bool is_q = gl_WorkGroupID.y == 0;
  const uint src = min(row, pc.rows - 1);
  const uint at = is_q ? pc.q_at : pc.k_at, per_token = is_q ? pc.q_token : pc.k_token;
  const uint per_head = is_q ? pc.q_head : pc.k_head;
  const uint first = at + (src / pc.Hg) * per_token + (src % pc.Hg) * per_head;  // the row's element 0
  uvec4 x[PPL];
  if (((at | per_token | per_head) & 7u) == 0u) {  // uniform: every row starts on a 16-byte boundary
    [[unroll]] for (uint j = 0; j < PPL; ++j) x[j] = is_q ? q_4[first / 8 + lane + 8 * j] : k_4[first / 8 + lane + 8 * j];
  } else {
    [[unroll]] for (uint j = 0; j < PPL; ++j) {
      const uint e = first + 8 * (lane + 8 * j);
      x[j] = is_q ? TK_LOAD8_16(q_w, e) : TK_LOAD8_16(k_w, e);
    }
  }
  float ss = 0.0;
  [[unroll]] for (uint j = 0; j < PPL; ++j)
    [[unroll]] for (uint e = 0; e < 4; ++e) {
      const vec2 v = tk_bf16_pair(x[j][e]);
      ss += dot(v, v);
    }
  s_part[tid] = ss;
  barrier();
  float total = 0.0;
  [[unroll]] for (uint l = 0; l < 8; ++l) total += s_part[r * 8 + l];
  const float inv = 1.0 / sqrt(total + 1e-6);
  if (!valid) return;
  [[unroll]] for (uint j = 0; j < PPL; ++j) {
    uvec4 y = x[j];
    if (pc.normalise != 0u)
      [[unroll]] for (uint e = 0; e < 4; ++e) {
        const vec2 v = tk_bf16_pair(x[j][e]) * inv;
        y[e] = tk_f32_to_bf16(v.x) | (tk_f32_to_bf16(v.y) << 16);
      }
    if (is_q)
      qo_4[row * PIECES + lane + 8 * j] = y;
    else
      ko_4[row * PIECES + lane + 8 * j] = y;
  }
}
