// SPDX-License-Identifier: MIT
#version 460
// AURA key centre: the mean of each prompt's keys, per KV head, written to
// the centre rows of a centred cache (include/tilekernels/aura/key_centre.hpp).
//
// Workgroup (entry * kv_heads + head): lane (tl, d) of TL = WG / DIM token
// lanes sums dim d of tokens first + tl, first + tl + TL, ... in four
// interleaved f32 sums; then invocation d adds the lanes' sums in order and
// writes sum / count. The order is fixed: results do not depend on the
// device or the scheduling. An entry whose range is empty (after clamping
// to the keys there are) or whose row is not a row of the centres writes
// nothing.
#extension GL_EXT_control_flow_attributes : require
#extension GL_GOOGLE_include_directive : require
#include "tilekernels/aura/key_centre_abi.h"
#include "../common/convert.glsl"

TK_DECLARE_SPEC(TK_KEY_CENTRE_SPEC)
TK_DECLARE_PUSH(TK_KEY_CENTRE_PUSH)

const uint WG = gl_WorkGroupSize.x;  // TK_KEY_CENTRE_WG
const uint TL = WG / DIM;  // token lanes

layout(std430, binding = 0) readonly buffer InputF { float in_f32[]; };
layout(std430, binding = 0) readonly buffer InputH { uint in_16[]; };
layout(std430, binding = 1) readonly buffer Starts { int starts[]; };
layout(std430, binding = 2) readonly buffer Rows { int rows[]; };
layout(std430, binding = 3) writeonly buffer Centres { float centres[]; };

shared float s_sum[TL * DIM];

float load_key(uint token, uint head, uint d) {
  const uint i = pc.in_at + token * pc.in_token + head * pc.in_head + d;
  return IN_DTYPE == TK_F32 ? in_f32[i] : tk_load16(IN_DTYPE, in_16[i >> 1], i);
}

void main() {
  const uint inv = gl_LocalInvocationID.x;
  const uint unit = gl_WorkGroupID.x + pc.group_offset;
  const uint entry = unit / pc.kv_heads, head = unit % pc.kv_heads;
  const int first = clamp(starts[entry], 0, int(pc.tokens));
  const int end = clamp(starts[entry + 1u], first, int(pc.tokens));
  const int row = rows[entry];
  if (end == first || row < 0 || row >= int(pc.centres)) return;  // uniform over the workgroup
  const uint tl = inv / DIM, d = inv % DIM;
  const uint count = uint(end - first);

  if (tl < TL) {
    vec4 acc = vec4(0.0);
    uint t = tl;
    for (; t + 3u * TL < count; t += 4u * TL)
      [[unroll]] for (uint u = 0; u < 4u; ++u) acc[u] += load_key(uint(first) + t + u * TL, head, d);
    for (uint u = 0; t < count; t += TL, ++u) acc[u] += load_key(uint(first) + t, head, d);
    s_sum[inv] = (acc.x + acc.y) + (acc.z + acc.w);
  }
  barrier();
  if (inv < DIM) {
    float sum = 0.0;
    for (uint l = 0; l < TL; ++l) sum += s_sum[l * DIM + inv];
    centres[(uint(row) * pc.kv_heads + head) * DIM + inv] = sum / float(count);
  }
}
