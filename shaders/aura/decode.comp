// SPDX-License-Identifier: MIT
#version 460
#extension GL_EXT_control_flow_attributes : require
// AURA decode: output[r, j] = norms[r] * sum_d R[d, j] * codebook[code(r, d)],
// the transpose of the encode rotation applied to the dequantised vector.
//
// Geometry (the host relies on it):
// - a workgroup decodes ROWS = 4 * ROW_GROUPS rows with DIM/4 * ROW_GROUPS
//   invocations; invocation (rg, lane) writes the four outputs lane*4..+3 of
//   rows rg*4 .. rg*4+3;
// - the dequantised rows are staged in shared memory (unpacked by every
//   invocation, codes may straddle two words), the rotation is read as vec4
//   rows of R, each used for four rows.
// - split codes (HI_DIMS > 0): coordinates below HI_DIMS at BITS + 1 bits
//   and their own codebook, their codes first in the row's words.
// No subgroup operations: correct for any subgroup size.
#extension GL_GOOGLE_include_directive : require
#include "tilekernels/aura/decode_abi.h"
#include "../common/convert.glsl"

TK_DECLARE_SPEC(TK_DECODE_SPEC)
TK_DECLARE_PUSH(TK_DECODE_PUSH)

const uint TM = 4u;
const uint LANES = DIM / 4u;
const uint WG = LANES * ROW_GROUPS;
const uint ROWS = TM * ROW_GROUPS;
const uint LEVELS = 1u << BITS;
const uint HI_BITS = BITS + 1u;
const uint HI_LEVELS = HI_DIMS != 0u ? 1u << HI_BITS : 1u;
const uint WORDS = (HI_DIMS * HI_BITS + (DIM - HI_DIMS) * BITS) / 32u;

layout(std430, binding = 0) readonly buffer Packed { uint packed[]; };
layout(std430, binding = 1) readonly buffer Norms { float norms[]; };
layout(std430, binding = 2) readonly buffer Rotation { vec4 rot[]; };
layout(std430, binding = 3) readonly buffer Codebook { float codebook[]; };
layout(std430, binding = 4) writeonly buffer OutputF { vec4 out_f32[]; };
layout(std430, binding = 4) writeonly buffer OutputH { uvec2 out_16[]; };
layout(std430, binding = 5) readonly buffer HiCodebook { float hi_codebook[]; };

shared float s_val[ROWS * DIM];
shared float s_code[LEVELS];
shared float s_code_hi[HI_LEVELS];

void main() {
  const uint t = gl_LocalInvocationID.x;
  const uint lane = t % LANES;
  const uint rg = t / LANES;
  const uint row0 = (gl_WorkGroupID.x + pc.group_offset) * ROWS;

  for (uint i = t; i < LEVELS; i += WG) s_code[i] = codebook[i];
  if (HI_DIMS != 0u)
    for (uint i = t; i < HI_LEVELS; i += WG) s_code_hi[i] = hi_codebook[i];
  barrier();
  for (uint e = t; e < ROWS * DIM; e += WG) {
    const uint r = e / DIM, d = e % DIM;
    float value = 0.0;
    if (row0 + r < pc.rows) {
      const bool hi = d < HI_DIMS;
      const uint bits = hi ? HI_BITS : BITS;
      const uint bit = hi ? d * HI_BITS : HI_DIMS * HI_BITS + (d - HI_DIMS) * BITS;
      const uint w = (row0 + r) * WORDS + bit / 32u, shift = bit % 32u;
      uint code = packed[w] >> shift;
      if (shift + bits > 32u) code |= packed[w + 1u] << (32u - shift);
      code &= (1u << bits) - 1u;
      value = hi ? s_code_hi[code] : s_code[code];
    }
    s_val[e] = value;
  }
  barrier();

  vec4 acc[TM];
  [[unroll]] for (uint m = 0; m < TM; ++m) acc[m] = vec4(0.0);
  for (uint d = 0; d < DIM; ++d) {
    const vec4 rv = rot[d * LANES + lane];
    [[unroll]] for (uint m = 0; m < TM; ++m) acc[m] += s_val[(rg * TM + m) * DIM + d] * rv;
  }
  [[unroll]] for (uint m = 0; m < TM; ++m) {
    const uint row = row0 + rg * TM + m;
    if (row >= pc.rows) break;
    const vec4 result = acc[m] * norms[row];
    if (OUT_DTYPE == TK_F32)
      out_f32[row * LANES + lane] = result;
    else
      out_16[row * LANES + lane] = tk_pack4(OUT_DTYPE, result);
  }
}
