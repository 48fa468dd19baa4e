// SPDX-License-Identifier: MIT
#version 460
// Test-only: chunk_state_bf16.comp with its matrix operations emulated
// (shaders/common/coopmat.glsl: any subgroup size), so that the tensor-core
// kernel's code runs on devices without tensor cores.
#define TK_COOPMAT_EMULATE 1
#extension GL_GOOGLE_include_directive : require
#include "../gdn/chunk_state_tc.glsl"
