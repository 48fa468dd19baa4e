// SPDX-License-Identifier: MIT
#version 460
//! requires GL_KHR_cooperative_matrix
// Gated DeltaNet inter-chunk state recurrence on the device's fp16
// cooperative-matrix tile, (BT / 16)(BV / 16) subgroups of any size, every
// operand scaled into fp16's range. The kernel: chunk_state_mma.glsl.
#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_shader_explicit_arithmetic_types_int16 : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_GOOGLE_include_directive : require
#define TK_STATE_FP16 1
#include "chunk_state_mma.glsl"
