// SPDX-License-Identifier: MIT
#version 460
//! requires GL_KHR_cooperative_matrix
// Gated DeltaNet gate, cumsum, beta and A = (I + M)^-1 per chunk, every
// product on the device's fp16 cooperative-matrix tile, BT / 16 subgroups
// of any size. The kernel: chunk_kkt_solve_mma.glsl.
#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_GOOGLE_include_directive : require
#include "chunk_kkt_solve_mma.glsl"
