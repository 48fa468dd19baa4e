// SPDX-License-Identifier: MIT
#version 460
//! requires GL_KHR_cooperative_matrix
//! optimize
// Gated DeltaNet WY representation on cooperative matrices, built for
// memory bandwidth (fp16 x fp16 -> fp32 16x16x16 products on the device's
// tile, common/mma.glsl):
//   u = A bf16(v * beta),   w = A bf16((k * beta) * exp(g)).
//
// Geometry (the host relies on it):
// - two workgroups per (batch, chunk, value head): the even one computes u
//   (D = V columns), the odd one w (D = K columns). They are adjacent in the
//   grid, so the second read of the chunk's A block (and of the k rows shared
//   by the heads of one GQA group, adjacent too) is served by the L2 cache;
// - NSG = 8 or 16 subgroups of SUBGROUP >= 8 invocations (WG = NSG x
//   SUBGROUP, at most 16 * BT at SUBGROUP 32). Every global load of the
//   workgroup (operand rows, A, beta, g) is issued up front,
//   unconditionally (clamped addresses, selects afterwards), in 16-byte
//   pieces, before the first value is used (v is a view whose pieces, with
//   V_UNALIGNED, are read as the 32-bit words that hold them);
// - operand rows: invocation (row, lane16) = (tid / 16 + n * WG / 16,
//   tid % 16) holds the 8 columns 8 * (lane16 + 16 q) .. + 7; the 16 lanes
//   of a row share its largest magnitude by shuffles within a subgroup of
//   16 or more, through shared atomics in subgroups of 8. A: BT / 8 lanes
//   per row, 8 columns each;
// - subgroup s multiplies row tile s % RT against the MT = ceil(CT / SPR)
//   consecutive column tiles from (s / RT) * MT on (RT = BT / 16 row tiles,
//   CT = D / 16 column tiles, SPR = NSG / RT subgroups per row tile); the
//   host guarantees MT <= 8 (NSG >= 8 when BT = 64 and D > 128);
// - after one workgroup barrier the staging memory becomes per-subgroup
//   scratch: each subgroup turns one accumulator tile at a time into bf16
//   and writes whole 32-byte sectors, synchronising only itself.
// Two workgroup barriers in all: after the operand rows are staged (their
// shifts are needed by A), after A is staged; a third before the scratch.
//
// fp16 range (no silent overflow): operand row j
// (bf16 already) is multiplied by 2^s_j so that its largest magnitude lies in
// [2^14, 2^15) (exact); column j of A is divided by 2^s_j, then row i of A is
// multiplied by 2^r_i so that its largest magnitude lies in [2^14, 2^15);
// the accumulator row is multiplied by 2^-r_i before rounding to bf16. Only
// A loses precision (fp16 keeps 11 bits). Shifts are clamped to [-64, 64].

#extension GL_KHR_cooperative_matrix : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#extension GL_EXT_control_flow_attributes : require
#extension GL_GOOGLE_include_directive : require
#include "tilekernels/gdn/recompute_wu_abi.h"
#include "../common/convert.glsl"

TK_DECLARE_SPEC(TK_RECOMPUTE_WU_SPEC)
TK_DECLARE_PUSH(TK_RECOMPUTE_WU_PUSH)
#include "../common/mma.glsl"
const uint WG = gl_WorkGroupSize.x;             // NSG * SUBGROUP invocations
const uint NSG = WG / SUBGROUP;
const uint OPS = TK_RECOMPUTE_WU_OPS(K, V);    // uvec4 per staged operand row
const uint SMEM_VEC4 = TK_RECOMPUTE_WU_FP16_VEC4(BT, K, V, NSG);

const uint RT = BT / 16;              // row tiles
const uint SPR = NSG / RT;            // subgroups per row tile
const uint OPR = WG / 16;             // operand rows per sweep
const uint OSW = BT / OPR;            // operand sweeps (BT >= 16 >= OPR / ... : at least 1, see host)
const uint LA = BT / 8;               // lanes per A row (8 columns each)
const uint ARS = WG / LA;             // A rows per sweep
const uint ASW = (BT + ARS - 1) / ARS;
const uint AS = BT / 8 + 1;           // uvec4 per staged A row (odd: no bank conflicts)
const uint A_BASE = BT * OPS;
const uint SCR = 5;                   // uvec4 per scratch row: 16 f32 + 4 of skew
const uint SCR_SG = 16 * SCR;         // scratch uvec4 per subgroup

// Literal bounds (largest over the allowed specialisations) with the
// specialised bound as a guard: glslc unrolls, arrays stay in registers.
const uint MAX_OSW = 8;   // BT = 64, WG = 128 (NSG 16, SUBGROUP 8)
const uint MAX_CG = 2;    // D = 256
const uint MAX_ASW = 4;   // BT = 64, WG = 128
const uint MAX_RT = 4;
const uint MAX_MT = 8;

layout(std430, binding = 0) readonly buffer KBuf { uvec4 k8[]; };
layout(std430, binding = 1) readonly buffer VBuf { uvec4 v8[]; };
layout(std430, binding = 1) readonly buffer VWords { uint v_w[]; };  // V_UNALIGNED
layout(std430, binding = 2) readonly buffer BetaBuf { float beta[]; };
layout(std430, binding = 3) readonly buffer GBuf { float gate[]; };
layout(std430, binding = 4) readonly buffer ABuf { vec4 a4[]; };
layout(std430, binding = 4) readonly buffer ABufH { uvec4 a8[]; };  // 8 bf16 values
layout(std430, binding = 5) writeonly buffer WBuf { uvec4 w8[]; };
layout(std430, binding = 6) writeonly buffer UBuf { uvec4 u8[]; };
layout(std430, binding = 7) readonly buffer IndexBuf { uvec4 index_table[]; };
#define TK_GDN_INDEX(i) index_table[i]
#include "../common/gdn_chunks.glsl"

// Staged fp16 operand rows [BT][OPS], then A hi [BT][AS] (and lo); after the
// products, per-subgroup f32 scratch [NSG][16][SCR].
shared uvec4 smem[SMEM_VEC4];
shared int s_col_shift[BT];  // s_j
shared int s_row_shift[BT];  // r_i
shared uint s_row_max[BT];   // subgroups of 8: an operand row's largest magnitude (f32 bits)

// Shift that brings a largest magnitude m (>= 0) into [2^14, 2^15).
int normalising_shift(float m) {
  if (m == 0.0) return 0;
  return clamp(141 - int(floatBitsToUint(m) >> 23), -64, 64);  // 14 - (biased exponent - 127)
}

float pow2(int s) { return uintBitsToFloat(uint(s + 127) << 23); }  // s in [-126, 127]

float round_bf16(float x) { return uintBitsToFloat(tk_f32_to_bf16(x) << 16); }

vec4 bf16_lo(uvec2 w) {  // elements 0..3 of 4 packed bf16
  return vec4(uintBitsToFloat(w.x << 16), uintBitsToFloat(w.x & 0xffff0000u), uintBitsToFloat(w.y << 16),
              uintBitsToFloat(w.y & 0xffff0000u));
}

// bf16(x * f) (u) or bf16((x * f) * d) (w) of 8 packed bf16 values.
void convert8(uvec4 wv, float f, float d, bool is_w, out vec4 lo, out vec4 hi) {
  lo = bf16_lo(wv.xy) * f;
  hi = bf16_lo(wv.zw) * f;
  if (is_w) {
    lo *= d;
    hi *= d;
  }
  lo = vec4(round_bf16(lo.x), round_bf16(lo.y), round_bf16(lo.z), round_bf16(lo.w));
  hi = vec4(round_bf16(hi.x), round_bf16(hi.y), round_bf16(hi.z), round_bf16(hi.w));
}

uvec4 pack_out(vec4 lo, vec4 hi) { return uvec4(tk_pack4(TK_BF16, lo), tk_pack4(TK_BF16, hi)); }

uvec4 pack8(vec4 lo, vec4 hi) {
  return uvec4(packHalf2x16(lo.xy), packHalf2x16(lo.zw), packHalf2x16(hi.xy), packHalf2x16(hi.zw));
}

// A lane's 16 (D <= 128) or 32 columns of operand row r (live: r < rows),
// scaled and rounded to bf16; zero where past the row or D.
void operand_row(uvec4 raw0, uvec4 raw1, bool live_row, uint lane16, uint D8, float f, float g, bool is_w,
                 out vec4 x0, out vec4 x1, out vec4 x2, out vec4 x3) {
  const float d = exp(g);
  const bool g0 = live_row && lane16 < D8, g1 = 16 < D8 && live_row && lane16 + 16 < D8;
  x2 = vec4(0.0);
  x3 = vec4(0.0);
  convert8(mix(uvec4(0u), raw0, bvec4(g0)), f, d, is_w, x0, x1);
  if (16 < D8) convert8(mix(uvec4(0u), raw1, bvec4(g1)), f, d, is_w, x2, x3);
}

float row_magnitude(vec4 x0, vec4 x1, vec4 x2, vec4 x3) {
  const vec4 mag = max(max(tk_finite_abs(x0), tk_finite_abs(x1)), max(tk_finite_abs(x2), tk_finite_abs(x3)));
  return max(max(mag.x, mag.y), max(mag.z, mag.w));
}

// The whole kernel for u (IS_W false) or w (IS_W true). main() calls it
// under a branch that is uniform per workgroup, with a literal argument, so
// that D and every guard below fold to constants at specialisation and no
// global load sits inside a conditional block (seen on the H100: a load in a
// guarded block is waited for at the block's end, which serialised the
// loads of the first version of this kernel).
void body(const bool IS_W) {
  const uint tid = gl_LocalInvocationID.x;
  const uint group = gl_WorkGroupID.x + pc.group_offset;
  const uint H = pc.H;
  const uint head_group = group >> 1;
  const uint h = head_group % H;
  const uint chunk = (head_group / H) % pc.chunks;
  const uint b = head_group / H / pc.chunks;
  const uint kh = h / (H / pc.Hg);
  const bool varlen = VARLEN != 0u;
  const TkTileRows tr =
      tk_gdn_rows(b, chunk, tk_gdn_entry(pc.N, chunk, varlen), pc.T, pc.chunks, BT, varlen, SLOTS != 0u);
  const uint rows = tr.rows;
  const uint D = IS_W ? K : V;
  const uint D8 = D / 8;

  // ---- every global load first, unconditionally --------------------------
  // Rows past the tail are loaded from the last valid row (a valid address)
  // and zeroed by a select afterwards; column groups past D re-read group 0.
  // Every [[unroll]] loop is flat: glslc (spirv-opt) leaves nested loops as
  // loops, and then the small arrays would be indexed at run time.
  const uint lane16 = tid % 16, orow0 = tid / 16;
  uvec4 raw[MAX_OSW * MAX_CG];
  float row_f[MAX_OSW], row_d[MAX_OSW];
  [[unroll]] for (uint x = 0; x < MAX_OSW * MAX_CG; ++x) {
    const uint n = x / MAX_CG, q = x % MAX_CG;
    if (n < OSW && 16 * q < D8) {  // specialisation constants only
      const uint r = min(orow0 + n * OPR, tk_last_row(rows));
      const uint c8 = lane16 + 16 * q < D8 ? lane16 + 16 * q : 0;
      const uint t = tr.token + r;
      if (IS_W) {
        raw[x] = k8[(t * pc.Hg + kh) * (K / 8) + c8];
      } else {
        const uint e = pc.v_at + t * pc.v_token + h * pc.v_head + 8 * c8;  // v is a view
        if (V_UNALIGNED == 0u)
          raw[x] = v8[e / 8];
        else
          raw[x] = TK_LOAD8_16(v_w, e);
      }
    }
  }
  [[unroll]] for (uint n = 0; n < MAX_OSW; ++n) {
    if (n < OSW) {
      const uint r = min(orow0 + n * OPR, tk_last_row(rows));
      const uint bh = (tr.slot + r) * H + h;
      row_f[n] = beta[bh];
      row_d[n] = 0.0;
      if (IS_W) row_d[n] = gate[bh];
    }
  }
  const uint al = tid % LA, arow0 = tid / LA;
  vec4 a_lo[MAX_ASW], a_hi[MAX_ASW];
  [[unroll]] for (uint n = 0; n < MAX_ASW; ++n) {
    if (n < ASW) {
      const uint r = min(arow0 + n * ARS, tk_last_row(rows));
      const uint e = ((tr.slot + r) * H + h) * BT + 8 * al;
      if (A_DTYPE == TK_F32) {  // only the view of the stored dtype is read
        a_lo[n] = a4[e / 4];
        a_hi[n] = a4[e / 4 + 1];
      } else {
        const uvec4 x = a8[e / 8];
        a_lo[n] = bf16_lo(x.xy);
        a_hi[n] = bf16_lo(x.zw);
      }
    }
  }

  // ---- operand rows: scale, round to bf16 (as FLA), normalise, stage fp16 -
  // column groups q = 0 and 1 written out (MAX_CG = 2): no nested loop
  if (SUBGROUP < 16) {  // the row maxima through shared memory first
    if (tid < BT) s_row_max[tid] = 0u;
    barrier();
    [[unroll]] for (uint n = 0; n < MAX_OSW; ++n) {
      if (n < OSW) {
        vec4 x0, x1, x2, x3;
        operand_row(raw[n * MAX_CG], raw[n * MAX_CG + 1], orow0 + n * OPR < rows, lane16, D8, row_f[n], row_d[n], IS_W,
                    x0, x1, x2, x3);
        atomicMax(s_row_max[orow0 + n * OPR], floatBitsToUint(row_magnitude(x0, x1, x2, x3)));
      }
    }
    barrier();
  }
  [[unroll]] for (uint n = 0; n < MAX_OSW; ++n) {
    if (n < OSW) {
      const uint r = orow0 + n * OPR;
      vec4 x0, x1, x2, x3;
      operand_row(raw[n * MAX_CG], raw[n * MAX_CG + 1], r < rows, lane16, D8, row_f[n], row_d[n], IS_W, x0, x1, x2, x3);
      float m = row_magnitude(x0, x1, x2, x3);
      if (SUBGROUP >= 16) {
        m = max(m, subgroupShuffleXor(m, 1u));
        m = max(m, subgroupShuffleXor(m, 2u));
        m = max(m, subgroupShuffleXor(m, 4u));
        m = max(m, subgroupShuffleXor(m, 8u));
      } else {
        m = uintBitsToFloat(s_row_max[r]);
      }
      const int s = normalising_shift(m);
      if (lane16 == 0) s_col_shift[r] = s;
      const float scale = pow2(s);
      if (lane16 < D8) smem[r * OPS + lane16] = pack8(x0 * scale, x1 * scale);
      if (16 < D8 && lane16 + 16 < D8) smem[r * OPS + lane16 + 16] = pack8(x2 * scale, x3 * scale);
    }
  }
  barrier();

  // ---- A: columns / 2^s_j, rows normalised, stage fp16 (hi, and lo) -------
  ivec4 sj_lo = ivec4(s_col_shift[8 * al], s_col_shift[8 * al + 1], s_col_shift[8 * al + 2], s_col_shift[8 * al + 3]);
  ivec4 sj_hi =
      ivec4(s_col_shift[8 * al + 4], s_col_shift[8 * al + 5], s_col_shift[8 * al + 6], s_col_shift[8 * al + 7]);
  const vec4 cs_lo = vec4(pow2(-sj_lo.x), pow2(-sj_lo.y), pow2(-sj_lo.z), pow2(-sj_lo.w));
  const vec4 cs_hi = vec4(pow2(-sj_hi.x), pow2(-sj_hi.y), pow2(-sj_hi.z), pow2(-sj_hi.w));
  // Columns at or past the chunk's last row are ignored (they may hold anything).
  const uint c0 = 8 * al;
  const bvec4 keep_lo = bvec4(c0 < rows, c0 + 1 < rows, c0 + 2 < rows, c0 + 3 < rows);
  const bvec4 keep_hi = bvec4(c0 + 4 < rows, c0 + 5 < rows, c0 + 6 < rows, c0 + 7 < rows);
  [[unroll]] for (uint n = 0; n < MAX_ASW; ++n) {
    const uint r = arow0 + n * ARS;
    if (n < ASW && r < BT) {  // uniform per group of LA lanes
      vec4 lo = a_lo[n] * cs_lo, hi = a_hi[n] * cs_hi;
      // selects: NaN in ignored columns (or in the clamped rows) does not leak
      lo = mix(vec4(0.0), mix(vec4(0.0), lo, keep_lo), bvec4(r < rows));
      hi = mix(vec4(0.0), mix(vec4(0.0), hi, keep_hi), bvec4(r < rows));
      const vec4 mag = max(tk_finite_abs(lo), tk_finite_abs(hi));
      float m = max(max(mag.x, mag.y), max(mag.z, mag.w));
      m = max(m, subgroupShuffleXor(m, 1u));
      if (LA > 2) m = max(m, subgroupShuffleXor(m, 2u));
      if (LA > 4) m = max(m, subgroupShuffleXor(m, 4u));
      const int ri = normalising_shift(m);
      if (al == 0) s_row_shift[r] = ri;
      const float scale = pow2(ri);
      lo *= scale;
      hi *= scale;
      const uvec4 ph = uvec4(packHalf2x16(lo.xy), packHalf2x16(lo.zw), packHalf2x16(hi.xy), packHalf2x16(hi.zw));
      smem[A_BASE + r * AS + al] = ph;
    }
  }
  barrier();

  // ---- products ---------------------------------------------------------
  const uint sg = gl_SubgroupID;
  const uint rt = sg % RT, cs = sg / RT;
  const uint CT = D / 16;
  const uint MT = (CT + SPR - 1) / SPR;
  const uint ct0 = cs * MT;
  TK_MMA_C acc[MAX_MT][TK_MMA_PARTS];
  [[unroll]] for (uint m = 0; m < MAX_MT; ++m) TK_MMA_FILL(acc[m], 0.0);
  TK_MMA_A am[TK_MMA_PARTS];
  TK_MMA_B xb[TK_MMA_PARTS];
  // No runtime condition around the loads and products: a subgroup whose
  // range runs past the last column tile repeats that tile (its result is
  // not stored).
  [[unroll]] for (uint x = 0; x < MAX_RT * MAX_MT; ++x) {
    const uint kk = x / MAX_MT, m = x % MAX_MT;
    if (kk < RT && m == 0) TK_MMA_LOAD_A_ROW(am, smem, A_BASE + rt * 16 * AS + kk * 2, AS);
    if (kk < RT && m < MT) {  // specialisation constants only
      TK_MMA_LOAD_B_ROW(xb, smem, kk * 16 * OPS + min(ct0 + m, CT - 1) * 2, OPS);
      TK_MMA(acc[m], am, xb);
    }
  }
  barrier();  // every subgroup is done with the staged operands: the memory becomes scratch

  // ---- output: one tile at a time through this subgroup's scratch --------
  // A tile is read back in pieces (mma.glsl); two pieces make one 32-byte
  // sector of w or u.
  const uint lane = gl_SubgroupInvocationID;
  const uint scr = sg * SCR_SG;
  [[unroll]] for (uint m = 0; m < MAX_MT; ++m) {
    if (m < MT) {  // specialisation constants only
      const bool live = ct0 + m < CT;  // uniform per subgroup
      if (live) TK_MMA_STORE_C_ROW(acc[m], smem, scr, SCR);
      TK_MMA_SYNC();
      [[unroll]] for (uint x = 0; x < TK_MMA_MAX_PIECES; ++x) {
        const uint piece = lane + x * SUBGROUP;
        const uint orow = piece / 2, half_ = piece % 2;  // row of the tile, 8-column half
        const uint i = rt * 16 + orow;
        if (tk_mma_piece(x, lane) && live && i < rows) {
          const float unscale = pow2(-s_row_shift[i]);
          const uint base = scr + orow * SCR + 2 * half_;
          const uvec4 outv = pack_out(uintBitsToFloat(smem[base]) * unscale, uintBitsToFloat(smem[base + 1]) * unscale);
          const uint col8 = (ct0 + m) * 2 + half_;
          const uint bh_out = (tr.slot + i) * H + h;
          if (IS_W)
            w8[bh_out * (K / 8) + col8] = outv;
          else
            u8[bh_out * (V / 8) + col8] = outv;
        }
      }
      TK_MMA_SYNC();  // the scratch is read before the next tile overwrites it
    }
  }
}

void main() {
  if ((gl_WorkGroupID.x + pc.group_offset) % 2 == 1)
    body(true);
  else
    body(false);
}
