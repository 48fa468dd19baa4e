// SPDX-License-Identifier: MIT
#version 460
// Test-only: decode_attention_tc.comp with its matrix operations emulated
// (shaders/common/coopmat.glsl: any subgroup size), so that the tensor-core
// kernel's code runs on devices without tensor cores. Its one subgroup
// operation, a shuffle between invocations 2k and 2k + 1, stays within a
// real subgroup of any size >= 2.
#define TK_COOPMAT_EMULATE 1
#extension GL_KHR_shader_subgroup_shuffle : require
#extension GL_GOOGLE_include_directive : require
#include "../aura/decode_attention_tc.glsl"
