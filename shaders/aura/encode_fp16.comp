// SPDX-License-Identifier: MIT
#version 460
//! requires GL_KHR_cooperative_matrix
// AURA fused encode, dense rotation, on cooperative matrices (fp16 x fp16
// -> fp32 16x16x16 products on the device's tile and subgroup size,
// common/mma.glsl):
// per row the L2 norm, rotated = R x / ||x||, the Lloyd-Max codes
// (boundaries strictly exceeded), the packed codes and ||x|| / ||codebook[code]||.
//
// Numerics (why the codes match the f32 kernel's):
// - input row x is multiplied by 2^s (s per row) so that its largest
//   magnitude lies in [2^14, 2^15): bf16 and f16 values are then exact in
//   fp16; f32 values are carried as hi + lo fp16 planes (22 bits);
// - R is multiplied by 2^t (one t per workgroup, from max |R|) and split
//   into PARTS fp16 parts of the same scale, hi = cut(R 2^t),
//   mid = cut(R 2^t - hi), lo = fp16(R 2^t - hi - mid) (cut: toward zero to
//   what fp16 holds, by integer masking): with three parts
//   every R entry within 2^-14 of max |R| (of R 2^t: at least 2^-1) is
//   represented exactly (3 x 11 bits >= 24); smaller ones are exact to 2^-25
//   of the scaled unit. The parts share one f32 accumulator (all at the
//   same scale), so each product x_j R_dj is exact and only the f32
//   accumulation rounds, as in the f32 kernel. f32 inputs add
//   lo(x) hi(R) and lo(x) mid(R) (five products).
// - rotated = (acc * 2^-t) * (2^-s / ||x||), ||x|| summed in f32 from the input.
//
// Geometry (the host relies on it):
// - NSG subgroups of SUBGROUP invocations (WG = NSG * SUBGROUP, any size);
//   a workgroup encodes blocks of
//   BM consecutive rows: block gl_WorkGroupID.x + group_offset, then + groups
//   (push constant) until the rows run out, so the rotation's scale and the
//   quantiser tables are set up once per workgroup;
// - subgroup sg owns row tiles (sg % RG) * RPS .. + RPS - 1 and column tiles
//   (sg / RG) * CPS .. + CPS - 1 of the block's [BM, DIM] result
//   (RG = BM / 16 / RPS, RG * DIM / 16 / CPS = NSG), accumulated over k tiles;
// - the staged block: fp16 rows [BM][DIM + 8] (and the lo plane for f32),
//   XSW pieces of 8 values per invocation, kept in registers from the norm
//   pass to the staging pass (and, with PREFETCH, loaded for the next block
//   during the products) where XSW <= MAX_XSW, else loaded again;
//   per (k tile, part) step one part of R^T's 16 rows [16][DIM + 8] is
//   converted from f32 (global loads of the next k tile in flight, RW
//   column quads per invocation) into one of NBUF buffers: with two, one
//   barrier per step;
// - after the products the shared memory becomes the epilogue's: a 16 x 16
//   f32 scratch per subgroup, the code bytes [BM][DIM] (2, 3 and 6 bits;
//   4- and 8-bit codes go to memory as whole words straight away), and
//   per-row partial sums of codebook[code]^2 [BM][2 * column groups],
//   reduced in a fixed order (results do not depend on scheduling).
//
// Non-finite rows: a row whose norm is NaN or +Inf (NaN or Inf values, or a
// squared norm past f32) gets code 0 for every coordinate and that norm; a
// row whose squared norm underflows to 0 is a zero row (norm 0, the codes of 0).

#extension GL_KHR_cooperative_matrix : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_EXT_control_flow_attributes : require
#extension GL_GOOGLE_include_directive : require
#include "tilekernels/aura/encode_abi.h"
#include "../common/convert.glsl"
#include "../common/aura_pack.glsl"

TK_DECLARE_SPEC(TK_ENCODE_SPEC)
TK_DECLARE_PUSH(TK_ENCODE_PUSH)
#include "../common/mma.glsl"
const uint WG = gl_WorkGroupSize.x;
const uint NSG = WG / SUBGROUP;
const uint LEVELS = 1u << BITS;
const uint WORDS = DIM * BITS / 32u;
const uint LPR = DIM / 8u;            // 8-value pieces per row
const uint XS = DIM / 8u + 1u;        // uvec4 per staged row (8 fp16 each; one of skew)
const uint PLANES = IN_DTYPE == TK_F32 ? 2u : 1u;
const uint MEM_VEC4 = TK_ENCODE_FP16_VEC4(DIM, PLANES, NSG, BM, RPS, NBUF);  // shared scratch
const uint X_LO = BM * XS;            // the lo plane (f32 input)
const uint R_BASE = PLANES * BM * XS;
const uint RBUF = 16u * XS;           // one part of 16 rows of R^T
const uint RT = BM / 16u;
const uint CT = DIM / 16u;
const uint RG = RT / RPS;             // row groups of subgroups
const uint CG = NSG / RG;             // column groups
const uint SCR = 5u;                  // uvec4 per scratch row: 16 f32 + 4 of skew
const uint SCR_SG = 16u * SCR;
const uint CODE_W = 4u * NSG * SCR_SG;       // word offset of the code bytes
const uint PART_W = CODE_W + BM * DIM / 4u;  // word offset of the partial sums
const uint PPR = 2u * CG;                    // partial sums per row
const uint RED_MAX = BM * LPR;               // word offset of the row-max partials (the sums at 0)
// 4- and 8-bit codes: an invocation's 8 consecutive codes are whole packed
// words (one or two), written straight from the epilogue.
const bool DIRECT = BITS == 4u || BITS == 8u;

// Literal bounds (the largest over the host's geometries) guarded by the
// specialised values, so that arrays are indexed by constants after unrolling.
const uint MAX_RPS = 2u;
const uint MAX_CPS = 8u;
const uint MAX_XSW = 8u;  // BM * LPR / WG where the pieces stay in registers
const uint XSW = (BM * LPR + WG - 1u) / WG;
const bool KEEP = XSW <= MAX_XSW;
const uint RW = (DIM + WG - 1u) / WG;  // R^T column quads per invocation

layout(std430, binding = 0) readonly buffer InputF { vec4 in_f32[]; };
layout(std430, binding = 0) readonly buffer InputH { uvec4 in_16[]; };  // 8 16-bit values
layout(std430, binding = 1) readonly buffer Rotation { vec4 rot[]; };
layout(std430, binding = 2) readonly buffer Boundaries { float boundaries[]; };
layout(std430, binding = 3) readonly buffer Codebook { float codebook[]; };
layout(std430, binding = 4) writeonly buffer Packed { uint packed[]; };
layout(std430, binding = 5) writeonly buffer Norms { float norms[]; };

#define TK_AURA_CELL_TABLE
#include "../common/aura_pack.glsl"

shared uvec4 smem[MEM_VEC4];
shared float s_bound[LEVELS];
shared float s_code[LEVELS];
shared float s_norm[BM];
shared float s_scale[BM];  // 2^s of the row
shared float s_rowf[BM];   // 2^-s / ||x||, 0 for a zero row, NaN for a non-finite norm
shared uint s_rmax;

void word_store(uint w, uint v) { smem[w >> 2][w & 3u] = v; }
uint word_load(uint w) { return smem[w >> 2][w & 3u]; }
float half_at(uint h) { return unpackHalf2x16(smem[h >> 3][(h >> 1) & 3u])[h & 1u]; }

// Shift that brings a largest magnitude m (>= 0) into [2^14, 2^15).
int normalising_shift(float m, int lo, int hi) {
  if (m == 0.0) return 0;
  return clamp(141 - int(floatBitsToUint(m) >> 23), lo, hi);
}
#include "../common/row_norm.glsl"  // tk_pow2, the rescaled norm's helpers

// The 8 input values of piece q (row q / LPR, values (q % LPR) * 8 ..) of
// the block at row0; zeros past the last row.
void load_piece(uint q, uint row0, out uvec4 h, out vec4 f0, out vec4 f1) {
  const uint row = q / LPR, c8 = q % LPR;
  const bool live = q < BM * LPR && row0 + row < pc.rows;
  const uint e = (min(row0 + row, pc.rows - 1u) * DIM + c8 * 8u);  // a valid address either way
  h = uvec4(0u);
  f0 = vec4(0.0);
  f1 = vec4(0.0);
  if (IN_DTYPE == TK_F32) {
    f0 = live ? in_f32[e / 4u] : vec4(0.0);
    f1 = live ? in_f32[e / 4u + 1u] : vec4(0.0);
  } else {
    h = live ? in_16[e / 8u] : uvec4(0u);
  }
}

void widen_piece(uvec4 h, vec4 f0, vec4 f1, out vec4 a, out vec4 b) {
  if (IN_DTYPE == TK_F32) {
    a = f0;
    b = f1;
  } else if (IN_DTYPE == TK_BF16) {
    a = vec4(uintBitsToFloat(h.x << 16), uintBitsToFloat(h.x & 0xffff0000u), uintBitsToFloat(h.y << 16),
             uintBitsToFloat(h.y & 0xffff0000u));
    b = vec4(uintBitsToFloat(h.z << 16), uintBitsToFloat(h.z & 0xffff0000u), uintBitsToFloat(h.w << 16),
             uintBitsToFloat(h.w & 0xffff0000u));
  } else {
    a = vec4(unpackHalf2x16(h.x), unpackHalf2x16(h.y));
    b = vec4(unpackHalf2x16(h.z), unpackHalf2x16(h.w));
  }
}

// The norm of row t of the block at row0 from its pieces scaled by 2^s
// (exact; the largest magnitude becomes < 2^15, so no square overflows),
// for rows whose plain sum of squares left f32's normal range.
float rescaled_norm(uint t, uint row0, int s) {
  const float up = tk_pow2(s);
  float ss = 0.0;
  for (uint c = 0; c < LPR; ++c) {
    uvec4 h;
    vec4 f0, f1, a, b;
    load_piece(t * LPR + c, row0, h, f0, f1);
    widen_piece(h, f0, f1, a, b);
    a *= up;
    b *= up;
    ss += dot(a, a) + dot(b, b);
  }
  return sqrt(ss) * tk_pow2(-s);
}

// x cut to a value fp16 holds exactly (toward zero: 11 significant bits, or
// a multiple of 2^-24 below 2^-14), |x| < 65504. Integer masking rather than
// unpackHalf2x16(packHalf2x16(x)): a compiler may fold that round trip to x
// (a first version that used it got 11-bit errors on the H100, as if the
// low parts were zero).
float f16_cut(float x) {
  const uint b = floatBitsToUint(x);
  return (b & 0x7f800000u) >= (113u << 23) ? uintBitsToFloat(b & 0xffffe000u) : trunc(x * 16777216.0) * 5.9604644775390625e-8;
}
vec4 f16_cut4(vec4 v) { return vec4(f16_cut(v.x), f16_cut(v.y), f16_cut(v.z), f16_cut(v.w)); }

uvec4 pack8(vec4 a, vec4 b) { return uvec4(packHalf2x16(a.xy), packHalf2x16(a.zw), packHalf2x16(b.xy), packHalf2x16(b.zw)); }
vec4 unpack4(uvec2 w) { return vec4(unpackHalf2x16(w.x), unpackHalf2x16(w.y)); }

// Global loads of R rows n4*4 .. +3, columns kt*16 + kq*4 .. +3 (column quad t < DIM: n4 = t / 4, kq = t % 4;
// quads past DIM load a valid address).
void load_r(uint kt, uint t, out vec4 r[4]) {
  const uint n4 = min(t, DIM - 1u) / 4u, kq = t % 4u;
  [[unroll]] for (uint e = 0; e < 4u; ++e) r[e] = rot[((n4 * 4u + e) * DIM + kt * 16u + kq * 4u) / 4u];
}

// Column quad t's fp16 parts of R^T: pk[p * 4 + c] holds part p of row
// kq*4 + c of R^T, R[n4*4 .. +3][kt*16 + kq*4 + c] (hi, mid, lo).
void r_parts(vec4 r[4], float rscale, out uvec2 pk[3 * 4]) {
  [[unroll]] for (uint c = 0; c < 4u; ++c) {
    const vec4 v = vec4(r[0][c], r[1][c], r[2][c], r[3][c]) * rscale;
    const vec4 hv = f16_cut4(v);
    const vec4 r1 = v - hv;  // exact, at most 13 significant bits
    const vec4 mv = f16_cut4(r1);
    const vec4 r2 = r1 - mv;  // exact, at most 2 significant bits
    pk[c] = uvec2(packHalf2x16(hv.xy), packHalf2x16(hv.zw));
    pk[4u + c] = uvec2(packHalf2x16(mv.xy), packHalf2x16(mv.zw));
    pk[8u + c] = uvec2(packHalf2x16(r2.xy), packHalf2x16(r2.zw));
  }
}

// Part p of column quad t into the staging buffer at rb.
void stage_r(uint rb, uint t, uvec2 pk[3 * 4], uint p) {
  const uint n4 = t / 4u, kq = t % 4u;
  [[unroll]] for (uint c = 0; c < 4u; ++c) {
    const uint i = rb + (kq * 4u + c) * XS + n4 / 2u;
    smem[i][(n4 % 2u) * 2u] = pk[p * 4u + c].x;
    smem[i][(n4 % 2u) * 2u + 1u] = pk[p * 4u + c].y;
  }
}

// The code of v and its codebook value squared added to part (the cell
// table where usable, else the binary search); NaN is treated as -Inf (code 0).
uint quantise(float v, bool table, inout float part) {
  v = isnan(v) ? uintBitsToFloat(0xff800000u) : v;
  if (table) {
    const uvec4 cell = tk_s_cell[tk_cell_of(v)];
    uint code = cell.y;
    part += uintBitsToFloat(cell.z);
    if (v > uintBitsToFloat(cell.x)) {
      part += uintBitsToFloat(cell.w);
      code += 1u;
    }
    return code;
  }
  uint idx;
  TK_AURA_QUANTIZE(idx, v, s_bound, LEVELS);
  const float c = s_code[idx];
  part += c * c;
  return idx;
}


// The norm pass over piece q: its sum of squares and largest magnitude.
void piece_partials(uint q, uvec4 h, vec4 f0, vec4 f1) {
  vec4 a, b;
  widen_piece(h, f0, f1, a, b);
  const vec4 m4 = max(abs(a), abs(b));
  word_store(q, floatBitsToUint(dot(a, a) + dot(b, b)));
  word_store(RED_MAX + q, floatBitsToUint(max(max(m4.x, m4.y), max(m4.z, m4.w))));
}

// The staging pass over piece q: scaled by its row's 2^s, as fp16 (hi and
// lo planes for f32 input).
void stage_piece(uint q, uvec4 h, vec4 f0, vec4 f1) {
  vec4 a, b;
  widen_piece(h, f0, f1, a, b);
  const uint row = q / LPR, c8 = q % LPR;
  const float sc = s_scale[row];
  a *= sc;
  b *= sc;
  if (IN_DTYPE == TK_F32) {
    const vec4 ha = f16_cut4(a), hb = f16_cut4(b);
    smem[row * XS + c8] = pack8(ha, hb);
    smem[X_LO + row * XS + c8] = pack8(a - ha, b - hb);
  } else {
    smem[row * XS + c8] = pack8(a, b);  // exact
  }
}

// PASS(q, values) for each of this invocation's pieces q = t + n WG of the
// block at row0 (q < BM * LPR): from the registers where they hold every
// piece (KEEP), else loaded here.
#define TK_FOR_PIECES(row0, PASS)                                                  \
  if (KEEP) {                                                                      \
    [[unroll]] for (uint n = 0; n < MAX_XSW; ++n)                                  \
      if (n < XSW && t + n * WG < BM * LPR) PASS(t + n * WG, xh[n], xf0[n], xf1[n]); \
  } else {                                                                         \
    for (uint q = t; q < BM * LPR; q += WG) {                                      \
      load_piece(q, row0, xh[0], xf0[0], xf1[0]);                                  \
      PASS(q, xh[0], xf0[0], xf1[0]);                                              \
    }                                                                              \
  }

void main() {
  const uint t = gl_LocalInvocationID.x;
  const uint sg = gl_SubgroupID, lane = gl_SubgroupInvocationID;
  const uint rg = sg % RG, cg = sg / RG;

  // ---- once per workgroup: tables and the rotation's scale ----------------
  for (uint i = t; i < LEVELS; i += WG) {
    s_bound[i] = i + 1u < LEVELS ? boundaries[i] : 0.0;
    s_code[i] = codebook[i];
  }
  bool table = false;
  if (BITS <= 4u) table = tk_cell_table_build(t);
  if (t == 0u) s_rmax = 0u;
  barrier();
  {
    float m = 0.0;
    for (uint i = t; i < DIM * DIM / 4u; i += WG) {
      const vec4 a = abs(rot[i]);
      m = max(m, max(max(a.x, a.y), max(a.z, a.w)));
    }
    atomicMax(s_rmax, floatBitsToUint(m));  // non-negative floats order as their bits
  }
  barrier();
  if (BITS <= 4u) table = tk_cell_table_usable(table);
  const int rshift = normalising_shift(uintBitsToFloat(s_rmax), -100, 100);
  const float rscale = tk_pow2(rshift), runscale = tk_pow2(-rshift);

  const uint blocks = (pc.rows + BM - 1u) / BM;
  uvec4 xh[MAX_XSW];
  vec4 xf0[MAX_XSW], xf1[MAX_XSW];
  if (KEEP && PREFETCH != 0u)
    [[unroll]] for (uint n = 0; n < MAX_XSW; ++n)
      if (n < XSW) load_piece(t + n * WG, (gl_WorkGroupID.x + pc.group_offset) * BM, xh[n], xf0[n], xf1[n]);
  for (uint block = gl_WorkGroupID.x + pc.group_offset; block < blocks; block += pc.groups) {
    const uint row0 = block * BM;

    // ---- the block's rows: norms, shifts, staged fp16 --------------------
    if (KEEP && PREFETCH == 0u)
      [[unroll]] for (uint n = 0; n < MAX_XSW; ++n)
        if (n < XSW) load_piece(t + n * WG, row0, xh[n], xf0[n], xf1[n]);
    TK_FOR_PIECES(row0, piece_partials)
    barrier();
    for (uint row = t; row < BM; row += WG) {
      float ss = 0.0, m = 0.0;
      for (uint c = 0; c < LPR; ++c) {
        ss += uintBitsToFloat(word_load(row * LPR + c));
        m = max(m, uintBitsToFloat(word_load(RED_MAX + row * LPR + c)));
      }
      const int s = normalising_shift(m, -120, 120);
      const float norm = tk_plain_sumsq_ok(ss) || row0 + row >= pc.rows ? sqrt(ss) : rescaled_norm(row, row0, s);
      s_norm[row] = norm;
      s_scale[row] = tk_pow2(s);
      // 2^-s / norm with the division in range (row_norm.glsl)
      const float pre = tk_norm_prescale(norm);
      precise float num = tk_pow2(-s) * pre, den = norm * pre;
      s_rowf[row] = norm == 0.0 ? 0.0 : (isinf(norm) || isnan(norm) ? uintBitsToFloat(0x7fc00000u) : num / den);
    }
    barrier();
    TK_FOR_PIECES(row0, stage_piece)
    // (the first step's barrier makes the staged rows visible)
    if (KEEP && PREFETCH != 0u)  // the next block's rows (zeros past the end), in flight during the products
      [[unroll]] for (uint n = 0; n < MAX_XSW; ++n)
        if (n < XSW) load_piece(t + n * WG, row0 + pc.groups * BM, xh[n], xf0[n], xf1[n]);

    // ---- products over k tiles, PARTS steps each --------------------------
    TK_MMA_C acc[MAX_RPS * MAX_CPS][TK_MMA_PARTS];
    [[unroll]] for (uint x = 0; x < MAX_RPS * MAX_CPS; ++x) TK_MMA_FILL(acc[x], 0.0);
    TK_MMA_A ah[MAX_RPS][TK_MMA_PARTS], al[MAX_RPS][TK_MMA_PARTS];
    TK_MMA_B bf[TK_MMA_PARTS];
    // Column quad t + w WG (w < RW) of R^T: rows n4 * 4 .. + 3 of R, columns kq * 4 .. + 3 of the k tile.
    // With WG >= DIM, invocation t < DIM converts column quad t and keeps
    // the next k tile's loads in flight; smaller workgroups load and convert
    // their quads in each step.
    vec4 rr[4];
    if (RW == 1u) load_r(0u, t, rr);
    for (uint kt = 0; kt < CT; ++kt) {
      uvec2 pk[3 * 4];
      if (RW == 1u) {
        r_parts(rr, rscale, pk);
        load_r(min(kt + 1u, CT - 1u), t, rr);  // the next k tile's loads, in flight during this one
      }
      [[unroll]] for (uint p = 0; p < 3u; ++p) {
        if (p < PARTS) {
          const uint buf = NBUF == 2u ? (kt * PARTS + p) % 2u : 0u;
          const uint rb = R_BASE + buf * RBUF;
          if (NBUF == 1u) barrier();  // the previous step's products are done with the buffer
          if (RW == 1u) {
            if (t < DIM) stage_r(rb, t, pk, p);
          } else {
            for (uint tw = t; tw < DIM; tw += WG) {
              vec4 r[4];
              uvec2 q[3 * 4];
              load_r(kt, tw, r);
              r_parts(r, rscale, q);
              stage_r(rb, tw, q, p);
            }
          }
          barrier();
          if (p == 0u)
            [[unroll]] for (uint i = 0; i < MAX_RPS; ++i)
              if (i < RPS) {
                const uint a0 = (rg * RPS + i) * 16u * XS + kt * 2u;
                TK_MMA_LOAD_A_ROW(ah[i], smem, a0, XS);
                if (IN_DTYPE == TK_F32) TK_MMA_LOAD_A_ROW(al[i], smem, X_LO + a0, XS);
              }
          [[unroll]] for (uint x = 0; x < MAX_RPS * MAX_CPS; ++x) {
            const uint j = x / MAX_RPS, i = x % MAX_RPS;
            if (j < CPS && i < RPS) {
              if (i == 0u) TK_MMA_LOAD_B_ROW(bf, smem, rb + (cg * CPS + j) * 2u, XS);
              TK_MMA(acc[x], ah[i], bf);
              if (IN_DTYPE == TK_F32 && p < 2u) TK_MMA(acc[x], al[i], bf);
            }
          }
        }
      }
    }
    barrier();  // every product is done: the shared memory becomes the epilogue's

    // ---- epilogue: scale, quantise, code bytes, partial sums --------------
    // Tile x goes through the subgroup's scratch; its pieces (mma.glsl) are
    // rows r = piece / 2, columns 8 h .. + 7 (h = piece % 2): a piece's 8
    // codes are whole words for 4 and 8 bits.
    const uint scr = sg * SCR_SG;
    // A piece's sum of codebook[code]^2 over the subgroup's column tiles
    // accumulates, in column order, in its row's slot of the partial sums
    // (one owner per slot: only that invocation reads and writes it). The
    // pieces are a loop that is not unrolled: one copy of its body keeps
    // the tile loop small enough for the driver to unroll, so that acc[x]
    // stays in registers.
#define TK_TC_EPILOGUE(TABLE)                                                                   \
    [[unroll]] for (uint x = 0; x < MAX_RPS * MAX_CPS; ++x) {                                   \
      const uint j = x / MAX_RPS, i = x % MAX_RPS;                                              \
      if (j < CPS && i < RPS) {                                                                 \
        TK_MMA_STORE_C_ROW(acc[x], smem, scr, SCR);                                             \
        TK_MMA_SYNC();                                                                          \
        [[dont_unroll]] for (uint y = 0; y < TK_MMA_PIECES; ++y) {                              \
          if (tk_mma_piece(y, lane)) {                                                          \
            const uint r = (lane + y * SUBGROUP) / 2u, h = (lane + y * SUBGROUP) % 2u;          \
            const uint row_l = (rg * RPS + i) * 16u + r;                                        \
            const uint col0 = (cg * CPS + j) * 16u + h * 8u;                                    \
            const float f = s_rowf[row_l];                                                      \
            const uint slot = PART_W + row_l * PPR + cg * 2u + h;                               \
            float part = j == 0u ? 0.0 : uintBitsToFloat(word_load(slot));                      \
            const vec4 va = uintBitsToFloat(smem[scr + r * SCR + 2u * h]);                      \
            const vec4 vb = uintBitsToFloat(smem[scr + r * SCR + 2u * h + 1u]);                 \
            uint w0 = 0u, w1 = 0u;                                                              \
            [[unroll]] for (uint c = 0; c < 4u; ++c) {                                          \
              const uint qa = quantise((va[c] * runscale) * f, TABLE, part);                    \
              const uint qb = quantise((vb[c] * runscale) * f, TABLE, part);                    \
              if (BITS == 4u) {                                                                 \
                w0 |= (qa << (4u * c)) | (qb << (4u * c + 16u));                                \
              } else {                                                                          \
                w0 |= qa << (8u * c);                                                           \
                w1 |= qb << (8u * c);                                                           \
              }                                                                                 \
            }                                                                                   \
            if (DIRECT) {                                                                       \
              if (row0 + row_l < pc.rows) {                                                     \
                const uint gw = (row0 + row_l) * WORDS + col0 * BITS / 32u;                     \
                packed[gw] = w0;                                                                \
                if (BITS == 8u) packed[gw + 1u] = w1;                                           \
              }                                                                                 \
            } else {                                                                            \
              word_store(CODE_W + row_l * (DIM / 4u) + col0 / 4u, w0);                          \
              word_store(CODE_W + row_l * (DIM / 4u) + col0 / 4u + 1u, w1);                     \
            }                                                                                   \
            word_store(slot, floatBitsToUint(part));                                            \
          }                                                                                     \
        }                                                                                       \
        TK_MMA_SYNC();                                                                          \
      }                                                                                         \
    }
    if (table) {
      TK_TC_EPILOGUE(true)
    } else {
      TK_TC_EPILOGUE(false)
    }
    barrier();

    // ---- norms and packed words --------------------------------------------
    for (uint row = t; row < BM && row0 + row < pc.rows; row += WG) {
      float recon_sq = 0.0;
      for (uint l = 0; l < PPR; ++l) recon_sq += uintBitsToFloat(word_load(PART_W + row * PPR + l));
      const float recon = sqrt(recon_sq);
      norms[row0 + row] = recon > 1e-30 ? s_norm[row] / recon : s_norm[row];
    }
    for (uint w = t; !DIRECT && w < BM * WORDS; w += WG) {
      const uint row = w / WORDS, wi = w % WORDS;
      if (row0 + row >= pc.rows) break;
      const uint d_first = wi * 32u / BITS;
      uint word = 0u;
      for (uint j = 0; j <= 32u / BITS + 1u; ++j) {  // a word holds parts of at most 32/BITS + 2 codes
        const uint d = d_first + j;
        if (d < DIM && d * BITS < wi * 32u + 32u) {
          const uint code = (word_load(CODE_W + row * (DIM / 4u) + d / 4u) >> (8u * (d % 4u))) & 0xffu;
          word |= tk_aura_place(code, d, BITS, wi);
        }
      }
      packed[(row0 + row) * WORDS + wi] = word;
    }
    barrier();  // the next block reuses the shared memory
  }
}
