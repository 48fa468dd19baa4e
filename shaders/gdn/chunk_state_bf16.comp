// SPDX-License-Identifier: MIT
#version 460
//! requires GL_KHR_cooperative_matrix
//! requires GL_EXT_bfloat16
// Gated DeltaNet inter-chunk state recurrence on bf16 16x16x16
// cooperative-matrix tiles (subgroups of 32). The kernel:
// chunk_state_mma.glsl.
#extension GL_KHR_cooperative_matrix : require
#extension GL_EXT_bfloat16 : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_shader_explicit_arithmetic_types_int16 : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_GOOGLE_include_directive : require
#include "chunk_state_mma.glsl"
