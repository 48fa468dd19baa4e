// SPDX-License-Identifier: MIT
#version 460
// Test-only: runs the GLSL conversions of common/convert.glsl on 32-bit
// patterns so that tests can compare them bit for bit with the host's.
//   out[6i+0] = f32 -> bf16 bits     out[6i+1] = f32 -> f16 bits
//   out[6i+2] = bf16 bits (low half of in[i]) widened, as f32 bits
//   out[6i+3] = f16 bits (low half of in[i]) widened, as f32 bits
//   out[6i+4] = f32 -> bf16 bits through tk_bf16_high
//   out[6i+5] = tk_round_bf16_split, as f32 bits
#include "../common/convert.glsl"

layout(local_size_x = 64) in;
layout(push_constant) uniform Push { uint group_offset; uint count; } pc;
layout(std430, binding = 0) readonly buffer In { uint words[]; };
layout(std430, binding = 1) writeonly buffer Out { uint results[]; };

void main() {
  uint i = (gl_WorkGroupID.x + pc.group_offset) * 64u + gl_LocalInvocationID.x;
  if (i >= pc.count) return;
  uint w = words[i];
  results[6u * i + 0u] = tk_f32_to_bf16(uintBitsToFloat(w));
  results[6u * i + 1u] = tk_f32_to_f16(uintBitsToFloat(w));
  results[6u * i + 2u] = floatBitsToUint(tk_bf16_to_f32(w & 0xffffu));
  results[6u * i + 3u] = floatBitsToUint(tk_f16_to_f32(w & 0xffffu));
  results[6u * i + 4u] = tk_bf16_high(uintBitsToFloat(w)) >> 16;
  results[6u * i + 5u] = floatBitsToUint(tk_round_bf16_split(uintBitsToFloat(w)));
}
