#version 460
// Gated DeltaNet gate, cumsum, beta and A = (I + M)^-1 per chunk: the
// portable path (k k^T in scalar f32, no subgroup operation). The kernel:
// chunk_kkt_solve.glsl.
#define TK_TC 0
#extension GL_GOOGLE_include_directive : require
#include "chunk_kkt_solve.glsl"
