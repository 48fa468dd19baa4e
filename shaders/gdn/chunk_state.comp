// SPDX-License-Identifier: MIT
#version 460
// Gated DeltaNet inter-chunk state recurrence (FLA's chunk_gated_delta_rule_fwd_h),
// portable path: f32 FMAs on register tiles, no subgroup operation. Per
// sequence n, value head h and its chunks in order, with S [K, V] the state
// (from h0, or 0):
//   h_c   = bf16(S)                                   -> h [NT_total, H, V, K]
//   v_new = u - w bf16(S)                             -> v_new [slots, H, V] bf16
//   S     = exp(g_last) S + k^T bf16(v_new exp(g_last - g_i))
// g_last is the cumulative log decay of the chunk's last row; rows past the
// sequence end add nothing (their operand is 0, selected, never multiplied).
// After the last chunk S goes to ht [N, H, K, V] (or [.., V, K]) in f32.
//
// Geometry (the host relies on it): one workgroup of WG = 8 BV invocations
// per (sequence, value head, BV columns of V): x = (n H + h) (V / BV) +
// slice. Invocation t works on the 4 columns 4 cg .. 4 cg + 3 of the slice
// (cg = t % CG, CG = BV / 4) in row group rg = t / CG (RGS = WG / CG = 32
// of them):
// - it owns the state rows SR rg .. SR rg + SR - 1 (SR = K / 32) of its
//   columns, in registers, and accumulates the update into them;
// - it computes v_new's rows rg + 32 j (j < RV; at BT = 16 row groups 16
//   and up have none).
// Each product reads one operand as vec4 rows of f32 in shared memory
// (bf16(S), the update's operand) and the other as packed bf16 from the
// stage: w in slices of KC columns (v_new sums over them), then k in
// slices of RT = BT KC / K rows (the update sums over them). Each slice's
// global loads are issued one slice ahead into registers (the next
// chunk's first w slice, u and g during this chunk's update), so they fly
// while the previous slice is multiplied.
// u and v_new may be the same memory: each word of u is read by the
// invocation that then writes v_new there, and a chunk's u is loaded after
// the previous chunk's v_new is written (other slots).
#extension GL_EXT_control_flow_attributes : require
#extension GL_GOOGLE_include_directive : require
#include "tilekernels/gdn/state_recurrence_abi.h"
#include "../common/convert.glsl"

TK_DECLARE_SPEC(TK_STATE_RECURRENCE_SPEC)
TK_DECLARE_PUSH(TK_STATE_RECURRENCE_PUSH)

layout(std430, binding = 0) readonly buffer K4 { uvec4 k_4[]; };
layout(std430, binding = 1) readonly buffer W4 { uvec4 w_4[]; };
layout(std430, binding = 2) readonly buffer U2 { uvec2 u_2[]; };
layout(std430, binding = 3) readonly buffer GCum { float g_f[]; };
layout(std430, binding = 4) readonly buffer H0 { float h0_f[]; };
layout(std430, binding = 5) readonly buffer Index { uvec4 index_table[]; };
layout(std430, binding = 6) writeonly buffer HOut { uint h_w[]; };
layout(std430, binding = 7) writeonly buffer VNew { uvec2 vn_2[]; };
layout(std430, binding = 8) writeonly buffer HT { float ht_f[]; };

#define TK_GDN_INDEX(i) index_table[i]
#include "../common/gdn_chunks.glsl"

const uint WG = TK_STATE_PORTABLE_WORKGROUP(BV);
const uint CG = BV / 4u;                   // column groups
const uint RGS = WG / CG;                  // row groups: 32
const uint SR = KDIM / RGS;                // state rows per invocation: 2, 4 or 8
const uint RV = BT >= RGS ? BT / RGS : 1u;  // v_new rows per invocation
const uint KC = TK_STATE_PORTABLE_KC(KDIM);  // w columns per slice
const uint NKS = KDIM / KC;                // slices of w, and of k
const uint RT = BT * KC / KDIM;            // k rows per slice
const uint SWW = KC / 8u + 1u;             // stage row strides (uvec4, one of padding)
const uint SWK = KDIM / 8u + 1u;
const uint PIECES = BT * KC / 8u;          // uvec4 per slice
const uint PW = (PIECES + WG - 1u) / WG;   // per invocation

shared uvec4 st[BT * SWW];      // a slice of w [BT][KC] or of k [RT][K], bf16
shared vec4 hs[KDIM * CG];      // bf16(S) of the workgroup's columns, [K][BV]
shared vec4 vs[BT * CG];        // the update's operand, [BT][BV]
shared float s_g[BT];

// Element e (0..7) of 8 packed bf16; e is a constant at every call (an
// index that varies per invocation goes through own_words).
float bf16_at(uvec4 q, uint e) {
  const uint w = q[e >> 1];
  return uintBitsToFloat((e & 1u) != 0u ? (w & 0xffff0000u) : (w << 16));
}

// The packed bf16 of k's row from element `at` (k0 % 8) on, at element 0:
// selects, so that no compiler indexes the vector in memory.
uvec4 own_words(uvec4 q, uint at) {
  if (SR == 8u) return q;
  if (SR == 4u) return at >= 4u ? q.zwzw : q.xyxy;
  return uvec4(at >= 4u ? (at >= 6u ? q.w : q.z) : (at >= 2u ? q.y : q.x));
}

uint state_index(uint n, uint h, uint kk, uint vv) {
  return (OPTIONS & TK_GDN_OPT_STATE_VK) != 0u ? ((n * pc.H + h) * VDIM + vv) * KDIM + kk
                                                : ((n * pc.H + h) * KDIM + kk) * VDIM + vv;
}

// Step `step` of chunk c (w's slice step, or k's slice step - NKS) into
// registers; k rows past the sequence end read its last row (zeroed when
// staged).
void load_step(out uvec4 pre[PW], TkSeq seq, uint c, uint step, uint h, uint kh) {
  const uint tid = gl_LocalInvocationID.x;
  const uint slot0 = (seq.first_chunk + c) * BT, tok0 = seq.bos + c * BT;
  const uint last = min(BT, seq.len - c * BT) - 1u;
  [[unroll]] for (uint n = 0; n < PW; ++n) {
    const uint p = min(tid + n * WG, PIECES - 1u);
    if (step < NKS) {
      const uint i = p / (KC / 8u), c8 = step * (KC / 8u) + p % (KC / 8u);
      pre[n] = w_4[((slot0 + i) * pc.H + h) * (KDIM / 8u) + c8];
    } else {
      const uint i = (step - NKS) * RT + p / (KDIM / 8u), c8 = p % (KDIM / 8u);
      pre[n] = k_4[((tok0 + min(i, last)) * pc.Hg + kh) * (KDIM / 8u) + c8];
    }
  }
}

// The loaded step into the stage, rows from `rows` (the sequence's end) on
// zeroed.
void stage_step(uvec4 pre[PW], uint step, uint rows) {
  const uint tid = gl_LocalInvocationID.x;
  [[unroll]] for (uint n = 0; n < PW; ++n) {
    const uint p = tid + n * WG;
    if (p < PIECES) {
      if (step < NKS) {
        const uint i = p / (KC / 8u);
        st[i * SWW + p % (KC / 8u)] = i < rows ? pre[n] : uvec4(0u);
      } else {
        const uint r = p / (KDIM / 8u);
        st[r * SWK + p % (KDIM / 8u)] = (step - NKS) * RT + r < rows ? pre[n] : uvec4(0u);
      }
    }
  }
}

void main() {
  const uint tid = gl_LocalInvocationID.x;
  const uint slices = VDIM / BV;
  const uint x = gl_WorkGroupID.x + pc.group_offset;
  const uint slice = x % slices, h = (x / slices) % pc.H, n = x / slices / pc.H;
  const uint kh = h / pc.ratio, v0 = slice * BV;
  const TkSeq seq = tk_gdn_seq(n, pc.T, pc.row_chunks, pc.varlen != 0u);
  const uint cg = tid % CG, rg = tid / CG;
  const uint k0 = rg * SR, vc = v0 + 4u * cg;  // the invocation's first state row and column
  const bool rows_v = rg < BT;                 // it has v_new rows

  vec4 S[SR];
  [[unroll]] for (uint r = 0; r < SR; ++r)
    [[unroll]] for (uint e = 0; e < 4u; ++e)
      S[r][e] = (OPTIONS & TK_GDN_OPT_H0) != 0u ? h0_f[state_index(n, h, k0 + r, vc + e)] : 0.0;

  const uint chunks = (seq.len + BT - 1u) / BT;
  uvec4 pre[PW];
  uvec2 pre_u[RV];
  float pre_g = 0.0;
  // Chunk c's u (this invocation's v_new rows and columns) and g (row tid).
  const uint u_col = (h * VDIM + vc) / 4u;
#define TK_LOAD_UG(c)                                                                            \
  {                                                                                              \
    const uint slot0_ = (seq.first_chunk + (c)) * BT;                                            \
    [[unroll]] for (uint j = 0; j < RV; ++j)                                                     \
      if (rows_v) pre_u[j] = u_2[(slot0_ + rg + j * RGS) * (pc.H * VDIM / 4u) + u_col];          \
    if (tid < BT) pre_g = g_f[(slot0_ + tid) * pc.H + h];                                        \
  }
  if (chunks > 0u) {
    load_step(pre, seq, 0u, 0u, h, kh);
    TK_LOAD_UG(0u)
  }

  for (uint c = 0; c < chunks; ++c) {
    const uint cg_ = seq.first_chunk + c, rows = min(BT, seq.len - c * BT);
    const uint slot0 = cg_ * BT;
    // h_c = bf16(S), to h and to hs
    uvec4 hb[SR];  // bf16(S), row r's 4 columns
    [[unroll]] for (uint r = 0; r < SR; ++r) {
      [[unroll]] for (uint e = 0; e < 4u; ++e) hb[r][e] = tk_f32_to_bf16(S[r][e]);
      hs[(k0 + r) * CG + cg] = uintBitsToFloat(hb[r] << 16);
    }
    [[unroll]] for (uint e = 0; e < 4u; ++e) {
      const uint hrow = ((cg_ * pc.H + h) * VDIM + vc + e) * KDIM + k0;
      [[unroll]] for (uint r = 0; r < SR; r += 2u) h_w[(hrow + r) / 2u] = hb[r][e] | (hb[r + 1u][e] << 16);
    }
    if (tid < BT) s_g[tid] = pre_g;

    // v_new = u - w bf16(S): rows rg + 32 j, columns vc ..
    vec4 acc[RV];
    [[unroll]] for (uint j = 0; j < RV; ++j) acc[j] = vec4(0.0);
    [[unroll]] for (uint s = 0; s < NKS; ++s) {
      barrier();  // hs and s_g are written; the previous slice (or chunk) is read
      stage_step(pre, s, rows);
      barrier();
      load_step(pre, seq, c, s + 1u, h, kh);
      if (rows_v)
        for (uint q = 0; q < KC / 8u; ++q) {
          uvec4 wq[RV];
          [[unroll]] for (uint j = 0; j < RV; ++j) wq[j] = st[(rg + j * RGS) * SWW + q];
          [[unroll]] for (uint e = 0; e < 8u; ++e) {
            const vec4 hv = hs[(s * KC + 8u * q + e) * CG + cg];
            [[unroll]] for (uint j = 0; j < RV; ++j) acc[j] = fma(vec4(bf16_at(wq[j], e)), hv, acc[j]);
          }
        }
    }
    const float g_last = s_g[rows - 1u];
    if (rows_v)
      [[unroll]] for (uint j = 0; j < RV; ++j) {
        const uint i = rg + j * RGS;
        const vec4 vn = tk_unpack4(TK_BF16, pre_u[j]) - acc[j];
        vn_2[(slot0 + i) * (pc.H * VDIM / 4u) + u_col] = tk_pack4(TK_BF16, vn);
        const float f = exp(g_last - s_g[i]);
        vec4 op;
        [[unroll]] for (uint e = 0; e < 4u; ++e) op[e] = tk_bf16_to_f32(tk_f32_to_bf16(vn[e] * f));
        vs[i * CG + cg] = i < rows ? op : vec4(0.0);
      }
    if (c + 1u < chunks) TK_LOAD_UG(c + 1u)

    // S = exp(g_last) S + k^T vs: rows k0 .., columns vc ..
    const float decay = exp(g_last);
    [[unroll]] for (uint r = 0; r < SR; ++r) S[r] *= decay;
    [[unroll]] for (uint s = 0; s < NKS; ++s) {
      barrier();  // vs is written; the stage is read
      stage_step(pre, NKS + s, rows);
      barrier();
      if (s + 1u < NKS)
        load_step(pre, seq, c, NKS + s + 1u, h, kh);
      else if (c + 1u < chunks)
        load_step(pre, seq, c + 1u, 0u, h, kh);
      for (uint i = 0; i < RT; ++i) {
        const vec4 op = vs[(s * RT + i) * CG + cg];
        const uvec4 q = own_words(st[i * SWK + k0 / 8u], k0 % 8u);
        [[unroll]] for (uint r = 0; r < SR; ++r) S[r] = fma(vec4(bf16_at(q, r)), op, S[r]);
      }
    }
  }
#undef TK_LOAD_UG
  if ((OPTIONS & TK_GDN_OPT_HT) != 0u)
    [[unroll]] for (uint r = 0; r < SR; ++r)
      [[unroll]] for (uint e = 0; e < 4u; ++e) ht_f[state_index(n, h, k0 + r, vc + e)] = S[r][e];
}
