// SPDX-License-Identifier: MIT
// Reads back where VK_KHR_cooperative_matrix puts the elements of 16 x 16
// matrices among the lanes of one subgroup (core/fragment_layout.hpp says
// how the words are read). The including module enables the extensions and
// defines TK_ELEMENT, the operand type, and tk_pack_pair(x, y), two small
// integers as a pair of TK_ELEMENT bits in one word (x in the low half).
//
// One workgroup, one subgroup of 32. It loads, row-major, the 16 x 16 tile
// whose element (r, c) is r 16 + c (exact in fp16 and bf16) as an A
// operand, a B operand and an f32 accumulator, and writes for matrix m
// (0 A, 1 B, 2 accumulator) and lane l the fragment's length at
// words[(m 32 + l) 17] and its element i at words[(m 32 + l) 17 + 1 + i],
// for i below 16.
layout(local_size_x = 32) in;
layout(std430, binding = 0) writeonly buffer Out { uint words[]; };

shared uvec4 s_pairs[32];  // the tile as TK_ELEMENT, 8 per uvec4
shared uvec4 s_f32[64];    // the tile as f32, 4 per uvec4

void main() {
  const uint lane = gl_LocalInvocationID.x;
  for (uint e = lane; e < 128u; e += 32u) s_pairs[e / 4u][e % 4u] = tk_pack_pair(2u * e, 2u * e + 1u);
  for (uint e = lane; e < 256u; e += 32u) s_f32[e / 4u][e % 4u] = floatBitsToUint(float(e));
  barrier();
  coopmat<TK_ELEMENT, gl_ScopeSubgroup, 16, 16, gl_MatrixUseA> a;
  coopmat<TK_ELEMENT, gl_ScopeSubgroup, 16, 16, gl_MatrixUseB> b;
  coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator> c;
  coopMatLoad(a, s_pairs, 0, 2, gl_CooperativeMatrixLayoutRowMajor);
  coopMatLoad(b, s_pairs, 0, 2, gl_CooperativeMatrixLayoutRowMajor);
  coopMatLoad(c, s_f32, 0, 4, gl_CooperativeMatrixLayoutRowMajor);
  const uint at = lane * 17u;
  words[at] = a.length();
  words[32u * 17u + at] = b.length();
  words[64u * 17u + at] = c.length();
  for (uint i = 0; i < a.length() && i < 16u; ++i) words[at + 1u + i] = uint(float(a[i]));
  for (uint i = 0; i < b.length() && i < 16u; ++i) words[32u * 17u + at + 1u + i] = uint(float(b[i]));
  for (uint i = 0; i < c.length() && i < 16u; ++i) words[64u * 17u + at + 1u + i] = uint(c[i]);
}
