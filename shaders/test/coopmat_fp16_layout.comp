// SPDX-License-Identifier: MIT
#version 460
//! requires GL_KHR_cooperative_matrix
// Test-only: where VK_KHR_cooperative_matrix puts the elements of 16 x 16
// fp16 A and B operands and f32 accumulators among a subgroup's lanes. One
// subgroup of 32 loads, row-major, a tile whose element (r, c) is r 16 + c
// into each of the three and writes, for lane l and matrix m (0 A, 1 B,
// 2 accumulator), its length at out[(m 32 + l) 17] and element i at
// out[(m 32 + l) 17 + 1 + i]. The lanes variant of decode attention
// (decode_attention_tc.glsl, TK_TC_LANES) assumes what tests/aura/
// test_decode_attention_tc.cpp checks against this.
#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require

layout(local_size_x = 32) in;
layout(push_constant) uniform Push { uint group_offset; } pc;
layout(std430, binding = 0) writeonly buffer Out { uint words[]; };

shared uvec4 s_h[32];  // the tile as fp16, 8 per uvec4
shared uvec4 s_f[64];  // the tile as f32, 4 per uvec4

void main() {
  const uint lane = gl_LocalInvocationID.x;
  for (uint e = lane; e < 128u; e += 32u) s_h[e / 4u][e % 4u] = packHalf2x16(vec2(2u * e, 2u * e + 1u));
  for (uint e = lane; e < 256u; e += 32u) s_f[e / 4u][e % 4u] = floatBitsToUint(float(e));
  barrier();
  coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseA> a;
  coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseB> b;
  coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator> c;
  coopMatLoad(a, s_h, 0, 2, gl_CooperativeMatrixLayoutRowMajor);
  coopMatLoad(b, s_h, 0, 2, gl_CooperativeMatrixLayoutRowMajor);
  coopMatLoad(c, s_f, 0, 4, gl_CooperativeMatrixLayoutRowMajor);
  const uint base = lane * 17u;
  words[base] = a.length();
  words[32u * 17u + base] = b.length();
  words[64u * 17u + base] = c.length();
  for (uint i = 0; i < a.length() && i < 16u; ++i) words[base + 1u + i] = uint(float(a[i]));
  for (uint i = 0; i < b.length() && i < 16u; ++i) words[32u * 17u + base + 1u + i] = uint(float(b[i]));
  for (uint i = 0; i < c.length() && i < 16u; ++i) words[64u * 17u + base + 1u + i] = uint(c[i]);
}
