// SPDX-License-Identifier: MIT
#version 460
//! requires GL_KHR_cooperative_matrix
//! requires GL_EXT_bfloat16
// Gated DeltaNet gate, cumsum, beta and A = (I + M)^-1 per chunk, every
// product on bf16 16x16x16 cooperative-matrix tiles (BT / 16 subgroups of
// 32). The kernel: chunk_kkt_solve_mma.glsl.
#extension GL_KHR_cooperative_matrix : require
#extension GL_EXT_bfloat16 : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_GOOGLE_include_directive : require
#define TK_KKT_BF16 1
#include "chunk_kkt_solve_mma.glsl"
