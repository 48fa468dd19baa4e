// SPDX-License-Identifier: MIT
// Shared by shaders/gdn/chunk_o.comp (portable) and chunk_o_fp16.comp
// (tensor cores): buffers, push constants, the workgroup -> tile mapping and
// the scalar f32 algorithm. The including shader declares the
// specialization constants (TK_DECLARE_SPEC) and WG first.
//
// Layouts (row-major, bf16 stored as 16-bit halves of 32-bit words, low half
// first): q, k [B, T, Hg, K]; o [B, T, H, V], a view (chunk_o_element);
// v [rows, H, V] and g [rows, H] f32 with rows tokens or slots
// (gdn_chunks.glsl's tk_gdn_rows); h [chunks, H, V, K]. K and V are
// multiples of 16, so every row but o's starts on a 32-byte boundary; o's
// start at even elements (the host checks), so its pairs are whole words.
#ifndef TK_GDN_CHUNK_O_GLSL
#define TK_GDN_CHUNK_O_GLSL

#include "convert.glsl"

TK_DECLARE_PUSH(TK_CHUNK_O_PUSH)

layout(std430, binding = 0) readonly buffer Q { uint q_w[]; };
layout(std430, binding = 0) readonly buffer Q4 { uvec4 q_4[]; };
layout(std430, binding = 1) readonly buffer Kb { uint k_w[]; };
layout(std430, binding = 1) readonly buffer K4 { uvec4 k_4[]; };
layout(std430, binding = 2) readonly buffer Vb { uint v_w[]; };
layout(std430, binding = 2) readonly buffer V4 { uvec4 v_4[]; };
layout(std430, binding = 3) readonly buffer Hb { uint h_w[]; };
layout(std430, binding = 3) readonly buffer H4 { uvec4 h_4[]; };
layout(std430, binding = 4) readonly buffer G { float g_f[]; };
layout(std430, binding = 5) writeonly buffer O { uint o_w[]; };
layout(std430, binding = 5) writeonly buffer O4 { uvec4 o_4[]; };
layout(std430, binding = 6) readonly buffer IndexBuf { uvec4 index_table[]; };
#define TK_GDN_INDEX(i) index_table[i]
#include "gdn_chunks.glsl"

// The tile a workgroup owns: V tile fastest, then head, so that the heads
// sharing one q/k head (GQA) and the V tiles of one head run side by side
// and share q and k in the cache.
struct ChunkOTile {
  uint ih, kh, v0;
  TkTileRows c;  // the chunk's rows
};

ChunkOTile chunk_o_tile(uint id) {
  const uint nvt = VDIM / BV;
  ChunkOTile s;
  s.v0 = (id % nvt) * BV;
  id /= nvt;
  s.ih = id % pc.H;
  id /= pc.H;
  const uint it = id % pc.NT, b = id / pc.NT;
  const bool varlen = VARLEN != 0u;
  s.c = tk_gdn_rows(b, it, tk_gdn_entry(pc.N, it, varlen), pc.T, pc.NT, BT, varlen, SLOTS != 0u);
  s.kh = s.ih / (pc.H / pc.Hg);
  return s;
}

// The element of o where the row of token `token` and head `head` starts.
uint chunk_o_element(uint token, uint head) { return pc.o_at + token * pc.o_token + head * pc.o_head; }

float bf16_lo(uint w) { return uintBitsToFloat(w << 16); }
float bf16_hi(uint w) { return uintBitsToFloat(w & 0xffff0000u); }
float round_bf16(float x) { return tk_bf16_to_f32(tk_f32_to_bf16(x)); }

// Scalar f32 algorithm over the tile's BT rows and BV columns: WG / BT
// invocations per row, each owning CPT = BV * BT / WG consecutive columns,
// done CHUNK_O_GROUP columns at a time (the includer's choice: all CPT at
// once for speed, fewer to keep registers free for a faster path in the same
// shader; each pass recomputes the row of A). Rows past the chunk's end are
// neither read nor written. Contains no barrier.
const uint CPT = BV * BT / WG;
#ifndef CHUNK_O_GROUP
#define CHUNK_O_GROUP CPT
#endif

void chunk_o_scalar(ChunkOTile s, uint tid) {
  const uint per_row = WG / BT;
  const uint i = tid / per_row;
  if (i >= s.c.rows) return;
  const uint qw = (((s.c.token + i) * pc.Hg + s.kh) * KDIM) / 2;
  const float gi = g_f[(s.c.slot + i) * pc.H + s.ih];
  const float eg = exp(gi);
  const uint hbase = (s.c.chunk * pc.H + s.ih) * VDIM;
  for (uint c0 = s.v0 + (tid % per_row) * CPT, cend = c0 + CPT; c0 < cend; c0 += CHUNK_O_GROUP) {
    float acc[CHUNK_O_GROUP];
    for (uint c = 0; c < CHUNK_O_GROUP; ++c) acc[c] = 0.0;
    // Intra-chunk part: bf16(mask(q k^T * exp(gi - gj))) v, one j at a time.
    for (uint j = 0; j <= i; ++j) {
      const uint kw = (((s.c.token + j) * pc.Hg + s.kh) * KDIM) / 2;
      float dot = 0.0;
      for (uint x = 0; x < KDIM / 2; ++x) {
        const uint a = q_w[qw + x], b = k_w[kw + x];
        dot = fma(bf16_lo(a), bf16_lo(b), dot);
        dot = fma(bf16_hi(a), bf16_hi(b), dot);
      }
      const float a = round_bf16(dot * exp(gi - g_f[(s.c.slot + j) * pc.H + s.ih]));
      const uint vw = (((s.c.slot + j) * pc.H + s.ih) * VDIM + c0) / 2;
      for (uint c = 0; c < CHUNK_O_GROUP; c += 2) {
        const uint w = v_w[vw + c / 2];
        acc[c] = fma(a, bf16_lo(w), acc[c]);
        acc[c + 1] = fma(a, bf16_hi(w), acc[c + 1]);
      }
    }
    // Inter-chunk part: (q h^T) * exp(gi).
    for (uint c = 0; c < CHUNK_O_GROUP; ++c) {
      const uint hw = ((hbase + c0 + c) * KDIM) / 2;
      float dot = 0.0;
      for (uint x = 0; x < KDIM / 2; ++x) {
        const uint a = q_w[qw + x], b = h_w[hw + x];
        dot = fma(bf16_lo(a), bf16_lo(b), dot);
        dot = fma(bf16_hi(a), bf16_hi(b), dot);
      }
      acc[c] = fma(dot, eg, acc[c]);
    }
    const uint ow = (chunk_o_element(s.c.token + i, s.ih) + c0) / 2;
    for (uint c = 0; c < CHUNK_O_GROUP; c += 2)
      o_w[ow + c / 2] = tk_f32_to_bf16(acc[c] * pc.scale) | (tk_f32_to_bf16(acc[c + 1] * pc.scale) << 16);
  }
}

#endif
