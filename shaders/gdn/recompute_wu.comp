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
//   owns columns 4cg..4cg+3 of the slab for rows rg, rg + 16, ... < BT;
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

const uint SLAB = 64;                     // output columns per slab
const uint SLAB_WORDS = SLAB / 2;         // bf16 pairs per staged row
const uint ROWS_PER_INV = BT / 16;        // 1, 2 or 4
const uint MAX_ROWS_PER_INV = 4;          // literal bound: unrolled loops, constant indices
const uint COLS = V + K;                  // u columns, then w columns
const uint SLABS = (COLS + SLAB - 1) / SLAB;

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

shared float s_a[BT * BT];                // the chunk's A block, f32
shared uint s_op[BT * SLAB_WORDS];        // one slab of bf16 operand rows

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

  for (uint i = tid; i < BT * BT; i += 256) {
    const uint r = i / BT, c = i % BT;
    float a = 0.0;
    if (r < rows && c < rows) {
      const uint e = ((tr.slot + r) * H + h) * BT + c;
      if (A_DTYPE == TK_F32)  // a branch, not ?:, so that only the view of the stored dtype is read
        a = a_in[e];
      else
        a = tk_load16(TK_BF16, a_words[e / 2], e);
    }
    s_a[i] = a;
  }

  const uint cg = tid % 16, rg = tid / 16;
  for (uint slab = 0; slab < SLABS; ++slab) {
    barrier();  // the previous slab's products are done with s_op
    for (uint i = tid; i < BT * SLAB_WORDS; i += 256) {
      const uint r = i / SLAB_WORDS;
      const uint col = slab * SLAB + 2 * (i % SLAB_WORDS);
      uint packed = 0u;
      if (r < rows && col < COLS) {
        const uint bh = (tr.slot + r) * H + h;
        const float bt = beta[bh];
        vec2 x;
        if (col < V) {
          // v is a view: its pair (e, e + 1) is one word where e is even
          // (always, without V_UNALIGNED), else the halves of two
          const uint e = pc.v_at + (tr.token + r) * pc.v_token + h * pc.v_head + col;
          uint word = v_words[e >> 1];
          if (V_UNALIGNED != 0u && (e & 1u) != 0u) word = (word >> 16) | (v_words[(e >> 1) + 1u] << 16);
          x = vec2(tk_bf16_to_f32(word & 0xffffu), tk_bf16_to_f32(word >> 16)) * bt;
        } else {
          const uint word = k_words[(((tr.token + r) * pc.Hg + kh) * K + col - V) / 2];
          const float decay = exp(gate[bh]);
          x = vec2(tk_bf16_to_f32(word & 0xffffu), tk_bf16_to_f32(word >> 16)) * bt * decay;
        }
        packed = tk_f32_to_bf16(x.x) | (tk_f32_to_bf16(x.y) << 16);
      }
      s_op[i] = packed;
    }
    barrier();

    vec4 acc[MAX_ROWS_PER_INV];
    [[unroll]] for (uint i = 0; i < MAX_ROWS_PER_INV; ++i) acc[i] = vec4(0.0);
    for (uint j = 0; j < rows; ++j) {
      const uint w0 = s_op[j * SLAB_WORDS + 2 * cg], w1 = s_op[j * SLAB_WORDS + 2 * cg + 1];
      const vec4 x = vec4(tk_bf16_to_f32(w0 & 0xffffu), tk_bf16_to_f32(w0 >> 16), tk_bf16_to_f32(w1 & 0xffffu),
                          tk_bf16_to_f32(w1 >> 16));
      [[unroll]] for (uint i = 0; i < MAX_ROWS_PER_INV; ++i)
        if (i < ROWS_PER_INV) acc[i] += s_a[(rg + 16 * i) * BT + j] * x;
    }

    const uint col = slab * SLAB + 4 * cg;
    if (col < COLS) {
      [[unroll]] for (uint i = 0; i < MAX_ROWS_PER_INV; ++i) {
        const uint r = rg + 16 * i;
        if (i >= ROWS_PER_INV || r >= rows) continue;
        const uint bh = (tr.slot + r) * H + h;
        const uvec2 packed = tk_pack4(TK_BF16, acc[i]);
        if (col < V)
          u_out[(bh * V + col) / 4] = packed;
        else
          w_out[(bh * K + col - V) / 4] = packed;
      }
    }
  }
}
