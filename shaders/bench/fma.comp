// SPDX-License-Identifier: MIT
#version 460
// Benchmark helper: the f32 FMA peak. Eight independent chains of fused
// multiply-adds per invocation, written out so nothing is eliminated.
layout(local_size_x = 256) in;
layout(push_constant) uniform Push { uint group_offset; uint iterations; } pc;
layout(std430, binding = 0) writeonly buffer Out { float result[]; };

void main() {
  const uint id = gl_GlobalInvocationID.x;
  float a[8];
  for (int k = 0; k < 8; ++k) a[k] = float(id + uint(k)) * 1e-7;
  const float b = 0.999999, c = 1e-7;
  for (uint i = 0; i < pc.iterations; ++i)
    for (int k = 0; k < 8; ++k) a[k] = fma(a[k], b, c);
  float s = 0.0;
  for (int k = 0; k < 8; ++k) s += a[k];
  result[id] = s;
}
