// SPDX-License-Identifier: MIT
#version 460
//! requires GL_NV_cooperative_matrix
// AURA decode attention on NVIDIA tensor cores (VK_NV_cooperative_matrix,
// fp16 operands, f32 accumulators, subgroups of 32, shuffles): the kernel is
// decode_attention_tc.glsl.
#extension GL_NV_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#extension GL_GOOGLE_include_directive : require
#include "decode_attention_tc.glsl"
