// SPDX-License-Identifier: MIT
#version 460
// Gated DeltaNet: the gate, its chunk-local cumulative sum, beta, and the
// solved intra-chunk block A = (I + M)^-1 of one chunk and value head, with
//   M[i][j] = beta_i (k_i . k_j) exp(g_i - g_j)   for j < i < rows, else 0,
// g the cumulative log decay (natural log): the portable path, scalar f32
// throughout, no subgroup operation (the solve: chunk_kkt_solve_scalar.glsl;
// on matrix units: chunk_kkt_solve_mma.glsl).
//
// Geometry (the host relies on it): one workgroup per (chunk c, value head
// h), x = c H + h (heads of one chunk adjacent, so that GQA heads find
// their k rows in the cache); 256 invocations.
// Outputs per chunk, in slots c BT .. c BT + BT - 1 (gdn/chunking.hpp):
// g_out and beta_out [slots, H] f32 (padding slots: the last cumulative
// value and 0), A [slots, H, BT] bf16 (rounded to nearest even; zero above
// the diagonal and in padding rows).
#extension GL_EXT_control_flow_attributes : require
#extension GL_GOOGLE_include_directive : require
#include "tilekernels/gdn/kkt_solve_abi.h"
#include "../common/convert.glsl"

TK_DECLARE_SPEC(TK_KKT_SOLVE_SPEC)
TK_DECLARE_PUSH(TK_KKT_SOLVE_PUSH)

const uint WG = 256;  // the host's workgroup size
#include "chunk_kkt_gate.glsl"
#include "chunk_kkt_solve_scalar.glsl"

void main() {
  const uint tid = gl_LocalInvocationID.x;
  const uint x = gl_WorkGroupID.x + pc.group_offset;
  const uint h = x % pc.H, c = x / pc.H;
  const TkChunk ch = tk_gdn_chunk(c, pc.N, pc.T, pc.row_chunks, BT, pc.varlen != 0u);
  kkt_gate_beta(tid, ch, h);
  kkt_gate_cumsum(tid, c * BT, h);
  kkt_solve_scalar(tid, ch, c * BT, h, h / pc.ratio);
}
