#version 460
// Gated DeltaNet q/k L2 normalisation as FLA's l2norm_fwd computes it: per
// row of KDIM bf16 values, y = x / sqrt(sum x^2 + 1e-6) in f32, stored as
// bf16 (rounded to nearest even). Workgroup y = 0 normalises q, y = 1 k.
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
layout(std430, binding = 1) readonly buffer K { uvec4 k_4[]; };
layout(std430, binding = 2) writeonly buffer QOut { uvec4 qo_4[]; };
layout(std430, binding = 3) writeonly buffer KOut { uvec4 ko_4[]; };

const uint PIECES = KDIM / 8;  // 16-byte pieces per row
const uint PPL = PIECES / 8;   // per lane

shared float s_part[256];

void main() {
  const uint tid = gl_LocalInvocationID.x, lane = tid % 8, r = tid / 8;
  const uint row = (gl_WorkGroupID.x + pc.group_offset) * 32 + r;
  const bool valid = row < pc.rows;
  const uint src = min(row, pc.rows - 1) * PIECES;
  uvec4 x[PPL];
  float ss = 0.0;
  [[unroll]] for (uint j = 0; j < PPL; ++j) {
    x[j] = gl_WorkGroupID.y == 0 ? q_4[src + lane + 8 * j] : k_4[src + lane + 8 * j];
    [[unroll]] for (uint e = 0; e < 4; ++e) {
      const vec2 v = tk_bf16_pair(x[j][e]);
      ss += dot(v, v);
    }
  }
  s_part[tid] = ss;
  barrier();
  float total = 0.0;
  [[unroll]] for (uint l = 0; l < 8; ++l) total += s_part[r * 8 + l];
  const float inv = 1.0 / sqrt(total + 1e-6);
  if (!valid) return;
  [[unroll]] for (uint j = 0; j < PPL; ++j) {
    uvec4 y;
    [[unroll]] for (uint e = 0; e < 4; ++e) {
      const vec2 v = tk_bf16_pair(x[j][e]) * inv;
      y[e] = tk_f32_to_bf16(v.x) | (tk_f32_to_bf16(v.y) << 16);
    }
    if (gl_WorkGroupID.y == 0)
      qo_4[row * PIECES + lane + 8 * j] = y;
    else
      ko_4[row * PIECES + lane + 8 * j] = y;
  }
}
