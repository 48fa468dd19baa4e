// SPDX-License-Identifier: MIT
#version 460
//! requires GL_KHR_cooperative_matrix
//! requires GL_EXT_bfloat16
// The fragment layout of 16 x 16 bf16 operands (shaders/common/fragment_layout.glsl).
#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_bfloat16 : require
#extension GL_GOOGLE_include_directive : require
#define TK_ELEMENT bfloat16_t
// Small integers are exact in bf16: the high half of their f32 bits.
uint tk_pack_pair(uint x, uint y) {
  return (floatBitsToUint(float(x)) >> 16) | (floatBitsToUint(float(y)) & 0xffff0000u);
}
#include "../common/fragment_layout.glsl"
