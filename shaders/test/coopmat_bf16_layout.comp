// SPDX-License-Identifier: MIT
#version 460
//! requires GL_KHR_cooperative_matrix
//! requires GL_EXT_bfloat16
// Test-only: whether VK_KHR_cooperative_matrix puts element i of a 16 x 16
// bf16 A operand where it puts element i of an f32 accumulator, as the
// rows kernel of the GDN state recurrence (chunk_state_rows.glsl) assumes.
// One subgroup of 32 loads, row-major, a tile whose element (r, c) is
// r 16 + c (exact in bf16) into both and writes, for lane l, the two
// lengths at out[l 34] and out[l 34 + 1], then element i of A at
// out[l 34 + 2 + i] and of the accumulator at out[l 34 + 18 + i].
#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_bfloat16 : require

layout(local_size_x = 32) in;
layout(push_constant) uniform Push { uint group_offset; } pc;
layout(std430, binding = 0) writeonly buffer Out { uint words[]; };

shared uvec4 s_h[32];  // the tile as bf16, 8 per uvec4
shared uvec4 s_f[64];  // the tile as f32, 4 per uvec4

void main() {
  const uint lane = gl_LocalInvocationID.x;
  for (uint e = lane; e < 128u; e += 32u)
    s_h[e / 4u][e % 4u] = (floatBitsToUint(float(2u * e)) >> 16) | (floatBitsToUint(float(2u * e + 1u)) & 0xffff0000u);
  for (uint e = lane; e < 256u; e += 32u) s_f[e / 4u][e % 4u] = floatBitsToUint(float(e));
  barrier();
  coopmat<bfloat16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseA> a;
  coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator> c;
  coopMatLoad(a, s_h, 0, 2, gl_CooperativeMatrixLayoutRowMajor);
  coopMatLoad(c, s_f, 0, 4, gl_CooperativeMatrixLayoutRowMajor);
  const uint base = lane * 34u;
  words[base] = a.length();
  words[base + 1u] = c.length();
  for (uint i = 0; i < a.length() && i < 16u; ++i) words[base + 2u + i] = uint(float(a[i]));
  for (uint i = 0; i < c.length() && i < 16u; ++i) words[base + 18u + i] = uint(c[i]);
}
