// SPDX-License-Identifier: MIT
#version 460
//! requires GL_KHR_cooperative_matrix
// AURA decode attention on tensor cores with the operands built in
// registers (VK_KHR_cooperative_matrix, fp16 x fp16 -> f32, subgroups of
// 32, the fragment layout of NVIDIA's tensor cores): decode_attention_tc.glsl
// with TK_TC_LANES, whose tile loop is decode_attention_tc_lanes.glsl.
#define TK_TC_LANES 1
#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#extension GL_GOOGLE_include_directive : require
#include "decode_attention_tc.glsl"
