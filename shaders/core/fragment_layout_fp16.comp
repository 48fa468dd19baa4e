// SPDX-License-Identifier: MIT
#version 460
//! requires GL_KHR_cooperative_matrix
// The fragment layout of 16 x 16 fp16 operands (shaders/common/fragment_layout.glsl).
#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_GOOGLE_include_directive : require
#define TK_ELEMENT float16_t
uint tk_pack_pair(uint x, uint y) { return packHalf2x16(vec2(x, y)); }
#include "../common/fragment_layout.glsl"
