// SPDX-License-Identifier: MIT
#version 460
// Gated DeltaNet WY representation, portable path (any Vulkan 1.2 device):
//   u = A bf16(v * beta),   w = A bf16((k * beta) * exp(g))
// per chunk of BT rows and per value head, f32 accumulation, A kept in f32.
//
// Geometry (the host relies on it):
// - one workgroup of 256 invocations per (batch, chunk, head) (with
//   varlen: per (global chunk, head)), the head
//   fastest, so the heads that share one GQA key head run side by side
//   and their reads of k (and of the beta/g words) meet in cache;
// - the output columns are the V columns of u followed by the K columns of
//   w, walked in slabs of 64: invocation (rg, cg) = (tid / 16, tid % 16)
//   owns columns 4cg..4cg+3 of the slab for rows RR rg .. RR rg + RR - 1
//   (RR = BT / 16), so that it reads its rows of A as consecutive floats
//   of A^T, kept in f32 in shared memory;
// - each slab's global words are loaded one slab ahead, into registers;
// - rows past the chunk's end (tail chunk) are loaded as zeros and never written;
// - v is a view, read by words (pairs of halves of two with V_UNALIGNED);
//   columns of A at or past the chunk's row count are zeroed, so whatever
//   the caller left there is ignored.
// No subgroup operation: correct for any subgroup size.
#extension GL_EXT_control_flow_attributes : require
#extension GL_GOOGLE_include_directive : require
#include "tilekernels/gdn/recompute_wu_abi.h"
#include "../common/convert.glsl"

TK_DECLARE_SPEC(TK_RECOMPUTE_WU_SPEC)  // the host passes 256 invocations
TK_DECLARE_PUSH(TK_RECOMPUTE_WU_PUSH)

const uint WG = 256;
const uint SLAB = 64;                     // output columns per slab
const uint SLAB_WORDS = SLAB / 2;         // bf16 pairs per staged row
const uint RR = BT / 16;                  // rows per invocation: 1, 2 or 4
const uint SAT = BT + 4;                  // floats per column of A^T
const uint COLS = V + K;                  // u columns, then w columns
const uint SLABS = (COLS + SLAB - 1) / SLAB;
const uint NP = BT * SLAB_WORDS / WG;     // staged words per invocation: BT / 8

layout(std430, binding = 0) readonly buffer KBuf { uint k_words[]; };
layout(std430, binding = 1) readonly buffer VBuf { uint v_words[]; };
layout(std430, binding = 2) readonly buffer BetaBuf { float beta[]; };
layout(std430, binding = 3) readonly buffer GBuf { float gate[]; };
layout(std430, binding = 4) readonly buffer ABuf { float a_in[]; };
layout(std430, binding = 4) readonly buffer ABufH { uint a_words[]; };
layout(std430, binding = 5) writeonly buffer WBuf { uvec2 w_out[]; };
layout(std430, binding = 6) writeonly buffer UBuf { uvec2 u_out[]; };
layout(std430, binding = 7) readonly buffer IndexBuf { uvec4 index_table[]; };
#define TK_GDN_INDEX(i) index_table[i]
#include "../common/gdn_chunks.glsl"

shared vec4 s_at[BT * SAT / 4];           // A^T, f32: column j of A at j * SAT
shared uvec2 s_op[BT * SLAB / 4];         // one slab of bf16 operand rows, 4 columns a word pair

// The RR floats of a from element `at` on, at element 0: selects, so that
// no compiler indexes the vector in memory.
vec4 own_rows(vec4 a, uint at) {
  if (RR == 4) return a;
  if (RR == 2) return at >= 2 ? a.zwzw : a.xyxy;
  return vec4(at >= 2 ? (at >= 3 ? a.w : a.z) : (at >= 1 ? a.y : a.x));
}

void main() {
  const uint tid = gl_LocalInvocationID.x;
  const uint group = gl_WorkGroupID.x + pc.group_offset;
  const uint H = pc.H, T = pc.T;
  const uint h = group % H;
  const uint chunk = (group / H) % pc.chunks;
  const uint b = group / H / pc.chunks;
  const uint kh = h / (H / pc.Hg);
  const bool varlen = VARLEN != 0u;
  const TkTileRows tr = tk_gdn_rows(b, chunk, tk_gdn_entry(pc.N, chunk, varlen), T, pc.chunks, BT, varlen, SLOTS != 0u);
  const uint rows = tr.rows;  // valid rows of this chunk

  for (uint i = tid; i < BT * BT; i += WG) {
    const uint r = i / BT, c = i % BT;
    float a = 0.0;
    if (r < rows && c < rows) {
      const uint e = ((tr.slot + r) * H + h) * BT + c;
      if (A_DTYPE == TK_F32)  // a branch, not ?:, so that only the view of the stored dtype is read
        a = a_in[e];
      else
        a = tk_load16(TK_BF16, a_words[e / 2], e);
    }
    const uint f = c * SAT + r;
    s_at[f / 4][f % 4] = a;
  }

  // Word n of the slab (row tid / 32 + 8 n, columns 2 (tid % 32) ..): its
  // row's beta and decay exp(g) once, its raw words one slab ahead.
  float bt_n[NP], decay_n[NP];
  uint pre[NP], pre_hi[NP];
  [[unroll]] for (uint n = 0; n < NP; ++n) {
    const uint r = min(tid / SLAB_WORDS + n * (WG / SLAB_WORDS), tk_last_row(rows));
    const uint bh = (tr.slot + r) * H + h;
    bt_n[n] = beta[bh];
    decay_n[n] = exp(gate[bh]);
  }
#define TK_LOAD_SLAB(slab)                                                                       \
  [[unroll]] for (uint n = 0; n < NP; ++n) {                                                      \
    const uint r = tid / SLAB_WORDS + n * (WG / SLAB_WORDS), col = (slab) * SLAB + 2u * (tid % SLAB_WORDS); \
    pre[n] = 0u;                                                                                  \
    pre_hi[n] = 0u;                                                                               \
    if (r < rows && col < COLS) {                                                                 \
      if (col < V) {                                                                              \
        const uint e = pc.v_at + (tr.token + r) * pc.v_token + h * pc.v_head + col;               \
        pre[n] = v_words[e >> 1];                                                                 \
        if (V_UNALIGNED != 0u && (e & 1u) != 0u) pre_hi[n] = v_words[(e >> 1) + 1u];              \
      } else {                                                                                    \
        pre[n] = k_words[(((tr.token + r) * pc.Hg + kh) * K + col - V) / 2];                      \
      }                                                                                           \
    }                                                                                             \
  }
  TK_LOAD_SLAB(0u)

  const uint cg = tid % 16, rg = tid / 16;
  for (uint slab = 0; slab < SLABS; ++slab) {
    barrier();  // the previous slab's products are done with s_op (first: A^T is complete)
    [[unroll]] for (uint n = 0; n < NP; ++n) {
      // v is a view: its pair (e, e + 1) is one word where e is even
      // (always, without V_UNALIGNED), else the halves of two
      const uint r = tid / SLAB_WORDS + n * (WG / SLAB_WORDS), col = slab * SLAB + 2u * (tid % SLAB_WORDS);
      const uint e = pc.v_at + (tr.token + r) * pc.v_token + h * pc.v_head + col;
      uint word = pre[n];
      if (col < V && V_UNALIGNED != 0u && (e & 1u) != 0u) word = (word >> 16) | (pre_hi[n] << 16);
      const vec2 x = vec2(tk_bf16_to_f32(word & 0xffffu), tk_bf16_to_f32(word >> 16)) * bt_n[n] * (col < V ? 1.0 : decay_n[n]);
      const uint w = tid + n * WG;
      s_op[w / 2][w % 2] = r < rows && col < COLS ? tk_f32_to_bf16(x.x) | (tk_f32_to_bf16(x.y) << 16) : 0u;
    }
    barrier();
    if (slab + 1u < SLABS) TK_LOAD_SLAB(slab + 1u)

    vec4 acc[RR];
    [[unroll]] for (uint i = 0; i < RR; ++i) acc[i] = vec4(0.0);
    for (uint j = 0; j < rows; ++j) {
      const uvec2 w = s_op[j * (SLAB / 4) + cg];
      const vec4 x = vec4(tk_bf16_pair(w.x), tk_bf16_pair(w.y));
      const uint f = j * SAT + RR * rg;
      const vec4 a = own_rows(s_at[f / 4], f % 4);
      [[unroll]] for (uint i = 0; i < RR; ++i) acc[i] = fma(vec4(a[i]), x, acc[i]);
    }

    const uint col = slab * SLAB + 4 * cg;
    if (col < COLS) {
      [[unroll]] for (uint i = 0; i < RR; ++i) {
        const uint r = RR * rg + i;
        if (r >= rows) continue;
        const uint bh = (tr.slot + r) * H + h;
        const uvec2 packed = tk_pack4(TK_BF16, acc[i]);
        if (col < V)
          u_out[(bh * V + col) / 4] = packed;
        else
          w_out[(bh * K + col - V) / 4] = packed;
      }
    }
  }
#undef TK_LOAD_SLAB
}
