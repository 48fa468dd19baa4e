// SPDX-License-Identifier: MIT
#version 460
//! requires GL_KHR_cooperative_matrix
// AURA decode attention on cooperative matrices (VK_KHR_cooperative_matrix,
// fp16 operands and f32 accumulators on the device's tile, any subgroup
// size, shuffles): the kernel is decode_attention_tc.glsl.
#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#extension GL_GOOGLE_include_directive : require
#include "decode_attention_tc.glsl"
