// SPDX-License-Identifier: MIT
// The bindings of the kkt_solve kernels (chunk_kkt_solve.comp, portable;
// chunk_kkt_solve_mma.glsl, matrix units) and the stage they share: per
// chunk row, the gate (computed from the raw input with gate_in_kernel)
// and beta (a sigmoid of logits with beta_sigmoid), read from the views g
// and beta, the gate's inclusive cumulative sum within the chunk, and M's
// elements from k k^T.
// The including shader declares the specialization and push constants
// (kkt_solve_abi.h) and WG, its workgroup size, first.
layout(std430, binding = 0) readonly buffer K4 { uvec4 k_4[]; };
layout(std430, binding = 1) readonly buffer GRaw { float g_raw[]; };
layout(std430, binding = 2) readonly buffer BetaRaw { float beta_raw[]; };
layout(std430, binding = 3) readonly buffer ALog { float a_log[]; };
layout(std430, binding = 4) readonly buffer DtBias { float dt_bias[]; };
layout(std430, binding = 5) readonly buffer Index { uvec4 index_table[]; };
layout(std430, binding = 6) writeonly buffer GOut { float g_out[]; };
layout(std430, binding = 7) writeonly buffer BetaOut { float beta_out[]; };
layout(std430, binding = 8) writeonly buffer AOut { uvec4 a_4[]; };

#define TK_GDN_INDEX(i) index_table[i]
#include "../common/gdn_chunks.glsl"

shared float s_g[BT];     // cumulative log decay of the chunk's rows
shared float s_beta[BT];

// Row r's log decay and beta into s_g, s_beta (padding rows: 0 and 0, they
// decay by nothing and add nothing); invocation tid takes rows tid,
// tid + WG, ... (WG: the workgroup size, declared by the including shader).
void kkt_gate_beta(uint tid, TkChunk ch, uint h) {
  for (uint r = tid; r < BT; r += WG) {
    const bool valid = r < ch.rows;
    const uint token = ch.first + min(r, tk_last_row(ch.rows));
    float gl = g_raw[pc.g_at + token * pc.g_token + h * pc.g_head];
    if ((OPTIONS & TK_GDN_OPT_GATE_IN_KERNEL) != 0u) {
      const float bias = (OPTIONS & TK_GDN_OPT_DT_BIAS) != 0u ? dt_bias[h] : 0.0;
      gl = -exp(a_log[h]) * tk_softplus(gl + bias);
    }
    float b = beta_raw[pc.beta_at + token * pc.beta_token + h * pc.beta_head];
    if ((OPTIONS & TK_GDN_OPT_BETA_SIGMOID) != 0u)
      b = ((OPTIONS & TK_GDN_OPT_NEG_EIGVAL) != 0u ? 2.0 : 1.0) / (1.0 + exp(-b));
    s_g[r] = valid ? gl : 0.0;
    s_beta[r] = valid ? b : 0.0;
  }
}

// After kkt_gate_beta, by the whole workgroup (two barriers): s_g becomes
// its inclusive sum, in row order as the reference sums; g_out and
// beta_out get the chunk's rows. s_g is final for readers behind the next
// barrier.
const uint TK_KKT_GATE_ROWS = (BT + WG - 1) / WG;  // rows per invocation
void kkt_gate_cumsum(uint tid, uint slot0, uint h) {
  barrier();
  float sum[TK_KKT_GATE_ROWS];
  for (uint n = 0; n < TK_KKT_GATE_ROWS; ++n) {
    const uint r = tid + n * WG;
    sum[n] = 0.0;
    [[unroll]] for (uint q = 0; q < BT; ++q)
      if (q <= r) sum[n] += s_g[q];
  }
  barrier();
  for (uint n = 0; n < TK_KKT_GATE_ROWS; ++n) {
    const uint r = tid + n * WG;
    if (r < BT) {
      s_g[r] = sum[n];
      g_out[(slot0 + r) * pc.H + h] = sum[n];
      beta_out[(slot0 + r) * pc.H + h] = s_beta[r];
    }
  }
}

// M[i][j] from the raw dot product: gated, beta-scaled, masked.
float gated(float dot, uint i, uint j, uint rows) {
  return j < i && i < rows ? s_beta[i] * dot * exp(s_g[i] - s_g[j]) : 0.0;
}
