// SPDX-License-Identifier: MIT
#version 460
// Gated DeltaNet inter-chunk state recurrence (FLA's chunk_gated_delta_rule_fwd_h),
// portable path: scalar f32, no subgroup operation. Per sequence n, value
// head h and its chunks in order, with S [K, V] the state (from h0, or 0):
//   h_c   = bf16(S)                                   -> h [NT_total, H, V, K]
//   v_new = u - w bf16(S)                             -> v_new [slots, H, V] bf16
//   S     = exp(g_last) S + k^T bf16(v_new exp(g_last - g_i))
// g_last is the cumulative log decay of the chunk's last row; rows past the
// sequence end add nothing (their operand is 0, selected, never multiplied).
// After the last chunk S goes to ht [N, H, K, V] (or [.., V, K]) in f32.
//
// Geometry (the host relies on it): one workgroup of 256 invocations per
// (sequence, value head, BV columns of V): x = (n H + h) (V / BV) + slice.
// Invocation t owns state column v = t % BV, rows KPI (t / BV) .. + KPI - 1,
// in registers. Per chunk: bf16(S) to shared memory and to h; v_new in
// column pairs (two bf16 per word, so no two invocations write one word),
// w staged 64 columns at a time; then the update, k staged likewise.
// u and v_new may be the same memory: each word of u is read by the
// invocation that then writes v_new there.
#extension GL_EXT_control_flow_attributes : require
#extension GL_GOOGLE_include_directive : require
#include "tilekernels/gdn/state_recurrence_abi.h"
#include "../common/convert.glsl"

TK_DECLARE_SPEC(TK_STATE_RECURRENCE_SPEC)
TK_DECLARE_PUSH(TK_STATE_RECURRENCE_PUSH)

layout(std430, binding = 0) readonly buffer K4 { uvec4 k_4[]; };
layout(std430, binding = 1) readonly buffer W4 { uvec4 w_4[]; };
layout(std430, binding = 2) readonly buffer U { uint u_w[]; };
layout(std430, binding = 3) readonly buffer GCum { float g_f[]; };
layout(std430, binding = 4) readonly buffer H0 { float h0_f[]; };
layout(std430, binding = 5) readonly buffer Index { uvec4 index_table[]; };
layout(std430, binding = 6) writeonly buffer HOut { uint h_w[]; };
layout(std430, binding = 7) writeonly buffer VNew { uint vn_w[]; };
layout(std430, binding = 8) writeonly buffer HT { float ht_f[]; };

#define TK_GDN_INDEX(i) index_table[i]
#include "../common/gdn_chunks.glsl"

const uint WG = 256;
const uint G = WG / BV;        // row groups of the state
const uint KPI = KDIM / G;     // state rows per invocation (even, <= 32)
const uint KC = 64;            // w or k columns per staged slice
const uint NKS = KDIM / KC;
const uint SS = KC / 8 + 1;    // staged row stride (uvec4, one of padding)
const uint VP = BV / 2;        // column pairs of a slice
const uint RG = WG / VP;       // v_new row groups
const uint MAXR = 8;           // v_new rows per invocation: BT / RG <= 8 for BV <= 64
const uint HSS = BV + 1;       // row stride of hs and vs (floats)

shared uvec4 st[BT * SS];       // a staged slice of w or k, bf16
shared float hs[KDIM * HSS];    // bf16(S) of the slice, [K][BV]
shared float vs[BT * HSS];      // the update's operand, [BT][BV]
shared float s_g[BT];

float st_at(uint i, uint col) {  // bf16 element (row i, column col) of the staged slice
  const uint e = i * SS * 8 + col;
  const uint w = st[e >> 3][(e >> 1) & 3u];
  return uintBitsToFloat((e & 1u) != 0u ? (w & 0xffff0000u) : (w << 16));
}

// Slice s of w (slot rows) or k (token rows, clamped), rows past the
// sequence end zeroed.
void stage(bool is_k, uint s, uint slot0, uint tok0, uint rows, uint h, uint kh) {
  const uint tid = gl_LocalInvocationID.x;
  [[unroll]] for (uint p = tid; p < BT * (KC / 8); p += WG) {
    const uint i = p / (KC / 8), c8 = p % (KC / 8) + s * (KC / 8);
    uvec4 q = is_k ? k_4[((tok0 + min(i, rows - 1u)) * pc.Hg + kh) * (KDIM / 8) + c8]
                   : w_4[((slot0 + i) * pc.H + h) * (KDIM / 8) + c8];
    st[i * SS + p % (KC / 8)] = i < rows ? q : uvec4(0u);
  }
}

uint state_index(uint n, uint h, uint kk, uint vv) {
  return (OPTIONS & TK_GDN_OPT_STATE_VK) != 0u ? ((n * pc.H + h) * VDIM + vv) * KDIM + kk
                                                : ((n * pc.H + h) * KDIM + kk) * VDIM + vv;
}

void main() {
  const uint tid = gl_LocalInvocationID.x;
  const uint slices = VDIM / BV;
  const uint x = gl_WorkGroupID.x + pc.group_offset;
  const uint slice = x % slices, h = (x / slices) % pc.H, n = x / slices / pc.H;
  const uint kh = h / pc.ratio, v0 = slice * BV;
  const TkSeq seq = tk_gdn_seq(n, pc.T, pc.row_chunks, pc.varlen != 0u);
  const uint v = tid % BV, k0 = (tid / BV) * KPI;  // this invocation's state column and rows
  const uint vp = tid % VP, i0 = tid / VP;          // its v_new column pair and first row

  float S[KPI];
  [[unroll]] for (uint r = 0; r < KPI; ++r)
    S[r] = (OPTIONS & TK_GDN_OPT_H0) != 0u ? h0_f[state_index(n, h, k0 + r, v0 + v)] : 0.0;

  const uint chunks = (seq.len + BT - 1) / BT;
  for (uint c = 0; c < chunks; ++c) {
    const uint cg = seq.first_chunk + c, rows = min(BT, seq.len - c * BT);
    const uint slot0 = cg * BT, tok0 = seq.bos + c * BT;
    barrier();  // the previous chunk is done with hs, vs and the stage
    // h_c = bf16(S), to h and to hs
    const uint hrow = ((cg * pc.H + h) * VDIM + v0 + v) * KDIM + k0;
    [[unroll]] for (uint r = 0; r < KPI; r += 2) {
      const uint lo = tk_f32_to_bf16(S[r]), hi = tk_f32_to_bf16(S[r + 1]);
      hs[(k0 + r) * HSS + v] = tk_bf16_to_f32(lo);
      hs[(k0 + r + 1) * HSS + v] = tk_bf16_to_f32(hi);
      h_w[(hrow + r) / 2] = lo | (hi << 16);
    }
    if (tid < BT) s_g[tid] = g_f[(slot0 + tid) * pc.H + h];

    // v_new = u - w bf16(S), two columns per invocation
    vec2 acc[MAXR];
    [[unroll]] for (uint r = 0; r < MAXR; ++r) acc[r] = vec2(0.0);
    [[unroll]] for (uint s = 0; s < NKS; ++s) {
      barrier();
      stage(false, s, slot0, tok0, rows, h, kh);
      barrier();
      [[unroll]] for (uint r = 0; r < MAXR; ++r) {
        const uint i = i0 + r * RG;
        if (i < BT) {
          for (uint col = 0; col < KC; ++col) {
            const float wv = st_at(i, col);
            const uint at = (s * KC + col) * HSS + 2 * vp;
            acc[r] += wv * vec2(hs[at], hs[at + 1]);
          }
        }
      }
    }
    const float g_last = s_g[rows - 1];
    [[unroll]] for (uint r = 0; r < MAXR; ++r) {
      const uint i = i0 + r * RG;
      if (i < BT) {
        const uint at = ((slot0 + i) * pc.H + h) * (VDIM / 2) + v0 / 2 + vp;
        const vec2 vn = tk_bf16_pair(u_w[at]) - acc[r];
        vn_w[at] = tk_f32_to_bf16(vn.x) | (tk_f32_to_bf16(vn.y) << 16);
        const float f = exp(g_last - s_g[i]);
        vs[i * HSS + 2 * vp] = i < rows ? tk_bf16_to_f32(tk_f32_to_bf16(vn.x * f)) : 0.0;
        vs[i * HSS + 2 * vp + 1] = i < rows ? tk_bf16_to_f32(tk_f32_to_bf16(vn.y * f)) : 0.0;
      }
    }

    // S = exp(g_last) S + k^T vs
    const float decay = exp(g_last);
    [[unroll]] for (uint r = 0; r < KPI; ++r) S[r] *= decay;
    [[unroll]] for (uint s = 0; s < NKS; ++s) {
      barrier();
      stage(true, s, slot0, tok0, rows, h, kh);
      barrier();
      if (k0 >= s * KC && k0 < s * KC + KC) {  // this invocation's rows lie in the slice
        for (uint i = 0; i < rows; ++i) {
          const float operand = vs[i * HSS + v];
          [[unroll]] for (uint r = 0; r < KPI; ++r) S[r] += st_at(i, k0 - s * KC + r) * operand;
        }
      }
    }
  }
  if ((OPTIONS & TK_GDN_OPT_HT) != 0u)
    [[unroll]] for (uint r = 0; r < KPI; ++r) ht_f[state_index(n, h, k0 + r, v0 + v)] = S[r];
}
