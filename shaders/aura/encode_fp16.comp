// SPDX-License-Identifier: MIT
#version 460
//! requires GL_KHR_cooperative_matrix
// AURA fused encode, dense rotation, on cooperative matrices (fp16 x fp16
// -> fp32 16x16x16 products on the device's tile, common/mma.glsl;
// subgroups of 32):
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
// - WG = 256 or 512 invocations (NSG subgroups of 32); a workgroup encodes blocks of
//   BM consecutive rows: block gl_WorkGroupID.x + group_offset, then + groups
//   (push constant) until the rows run out, so the rotation's scale and the
//   quantiser tables are set up once per workgroup;
// - subgroup sg owns row tiles (sg % RG) * RPS .. + RPS - 1 and column tiles
//   (sg / RG) * CPS .. + CPS - 1 of the block's [BM, DIM] result
//   (RG = BM / 16 / RPS, RG * DIM / 16 / CPS = NSG), accumulated over k tiles;
// - the staged block: fp16 rows [BM][DIM + 8] (and the lo plane for f32);
//   per (k tile, part) step one part of R^T's 16 rows [16][DIM + 8] is
//   converted from f32 (global loads of the next k tile in flight) into one
//   of NBUF buffers: with two, one barrier per step;
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
const uint WG = gl_WorkGroupSize.x;  // 256 or 512

const uint NSG = WG / 32u;
const uint LEVELS = 1u << BITS;
const uint WORDS = DIM * BITS / 32u;
const uint LPR = DIM / 8u;            // 8-value pieces per row
const uint XS = DIM / 8u + 1u;        // uvec4 per staged row (8 fp16 each; one of skew)
const uint PLANES = IN_DTYPE == TK_F32 ? 2u : 1u;
const uint MEM_VEC4 = TK_ENCODE_FP16_VEC4(DIM, PLANES, WG, BM, RPS, NBUF);  // shared scratch
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
const uint MAX_XSW = 8u;  // BM * LPR / WG
const uint XSW = (BM * LPR + WG - 1u) / WG;

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

// Global loads of R rows n4*4 .. +3, columns kt*16 + kq*4 .. +3 (invocation t < DIM: n4 = t / 4, kq = t % 4).
void load_r(uint kt, uint t, out vec4 r[4]) {
  const uint n4 = min(t, DIM - 1u) / 4u, kq = t % 4u;
  [[unroll]] for (uint e = 0; e < 4u; ++e) r[e] = rot[((n4 * 4u + e) * DIM + kt * 16u + kq * 4u) / 4u];
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
  if (PREFETCH != 0u)
    [[unroll]] for (uint n = 0; n < MAX_XSW; ++n)
      if (n < XSW) load_piece(t + n * WG, (gl_WorkGroupID.x + pc.group_offset) * BM, xh[n], xf0[n], xf1[n]);
  for (uint block = gl_WorkGroupID.x + pc.group_offset; block < blocks; block += pc.groups) {
    const uint row0 = block * BM;

    // ---- the block's rows: norms, shifts, staged fp16 --------------------
    if (PREFETCH == 0u)
      [[unroll]] for (uint n = 0; n < MAX_XSW; ++n)
        if (n < XSW) load_piece(t + n * WG, row0, xh[n], xf0[n], xf1[n]);
    [[unroll]] for (uint n = 0; n < MAX_XSW; ++n) {
      const uint q = t + n * WG;
      if (n < XSW && q < BM * LPR) {
        vec4 a, b;
        widen_piece(xh[n], xf0[n], xf1[n], a, b);
        const vec4 m4 = max(abs(a), abs(b));
        word_store(q, floatBitsToUint(dot(a, a) + dot(b, b)));
        word_store(RED_MAX + q, floatBitsToUint(max(max(m4.x, m4.y), max(m4.z, m4.w))));
      }
    }
    barrier();
    if (t < BM) {
      float ss = 0.0, m = 0.0;
      for (uint c = 0; c < LPR; ++c) {
        ss += uintBitsToFloat(word_load(t * LPR + c));
        m = max(m, uintBitsToFloat(word_load(RED_MAX + t * LPR + c)));
      }
      const int s = normalising_shift(m, -120, 120);
      const float norm = tk_plain_sumsq_ok(ss) || row0 + t >= pc.rows ? sqrt(ss) : rescaled_norm(t, row0, s);
      s_norm[t] = norm;
      s_scale[t] = tk_pow2(s);
      // 2^-s / norm with the division in range (row_norm.glsl)
      const float pre = tk_norm_prescale(norm);
      precise float num = tk_pow2(-s) * pre, den = norm * pre;
      s_rowf[t] = norm == 0.0 ? 0.0 : (isinf(norm) || isnan(norm) ? uintBitsToFloat(0x7fc00000u) : num / den);
    }
    barrier();
    [[unroll]] for (uint n = 0; n < MAX_XSW; ++n) {
      const uint q = t + n * WG;
      if (n < XSW && q < BM * LPR) {
        vec4 a, b;
        widen_piece(xh[n], xf0[n], xf1[n], a, b);
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
    }
    // (the first step's barrier makes the staged rows visible)
    if (PREFETCH != 0u)  // the next block's rows (zeros past the end), in flight during the products
      [[unroll]] for (uint n = 0; n < MAX_XSW; ++n)
        if (n < XSW) load_piece(t + n * WG, row0 + pc.groups * BM, xh[n], xf0[n], xf1[n]);

    // ---- products over k tiles, PARTS steps each --------------------------
    TK_MMA_C acc[MAX_RPS * MAX_CPS][TK_MMA_PARTS];
    [[unroll]] for (uint x = 0; x < MAX_RPS * MAX_CPS; ++x) TK_MMA_FILL(acc[x], 0.0);
    TK_MMA_A ah[MAX_RPS][TK_MMA_PARTS], al[MAX_RPS][TK_MMA_PARTS];
    TK_MMA_B bf[TK_MMA_PARTS];
    vec4 rr[4];
    load_r(0u, t, rr);
    const uint n4 = min(t, DIM - 1u) / 4u, kq = t % 4u;
    for (uint kt = 0; kt < CT; ++kt) {
      // This k tile's parts: row kq*4 + c of R^T holds R[n4*4 .. +3][kt*16 + kq*4 + c].
      uvec2 pk[3 * 4];
      [[unroll]] for (uint c = 0; c < 4u; ++c) {
        const vec4 v = vec4(rr[0][c], rr[1][c], rr[2][c], rr[3][c]) * rscale;
        const vec4 hv = f16_cut4(v);
        const vec4 r1 = v - hv;  // exact, at most 13 significant bits
        const vec4 mv = f16_cut4(r1);
        const vec4 r2 = r1 - mv;  // exact, at most 2 significant bits
        pk[c] = uvec2(packHalf2x16(hv.xy), packHalf2x16(hv.zw));
        pk[4u + c] = uvec2(packHalf2x16(mv.xy), packHalf2x16(mv.zw));
        pk[8u + c] = uvec2(packHalf2x16(r2.xy), packHalf2x16(r2.zw));
      }
      load_r(min(kt + 1u, CT - 1u), t, rr);  // the next k tile's loads, in flight during this one
      [[unroll]] for (uint p = 0; p < 3u; ++p) {
        if (p < PARTS) {
          const uint buf = NBUF == 2u ? (kt * PARTS + p) % 2u : 0u;
          const uint rb = R_BASE + buf * RBUF;
          if (NBUF == 1u) barrier();  // the previous step's products are done with the buffer
          if (t < DIM)
            [[unroll]] for (uint c = 0; c < 4u; ++c) {
              const uint i = rb + (kq * 4u + c) * XS + n4 / 2u;
              smem[i][(n4 % 2u) * 2u] = pk[p * 4u + c].x;
              smem[i][(n4 % 2u) * 2u + 1u] = pk[p * 4u + c].y;
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
    const uint scr = sg * SCR_SG;
    const uint r = lane / 2u, h = lane % 2u;
    float part[MAX_RPS];
    [[unroll]] for (uint i = 0; i < MAX_RPS; ++i) part[i] = 0.0;
#define TK_TC_EPILOGUE(TABLE)                                                                  \
    [[unroll]] for (uint x = 0; x < MAX_RPS * MAX_CPS; ++x) {                                  \
      const uint j = x / MAX_RPS, i = x % MAX_RPS;                                             \
      if (j < CPS && i < RPS) {                                                                \
        TK_TC_STORE_TILE(x)                                                                    \
        TK_MMA_SYNC();                                                                         \
        const uint row_l = (rg * RPS + i) * 16u + r;                                           \
        const uint col0 = (cg * CPS + j) * 16u + h * 8u;                                       \
        const float f = s_rowf[row_l];                                                         \
        const vec4 va = uintBitsToFloat(smem[scr + r * SCR + 2u * h]);                         \
        const vec4 vb = uintBitsToFloat(smem[scr + r * SCR + 2u * h + 1u]);                    \
        uint w0 = 0u, w1 = 0u;                                                                 \
        [[unroll]] for (uint c = 0; c < 4u; ++c) {                                             \
          const uint qa = quantise((va[c] * runscale) * f, TABLE, part[i]);                    \
          const uint qb = quantise((vb[c] * runscale) * f, TABLE, part[i]);                    \
          if (BITS == 4u) {                                                                    \
            w0 |= (qa << (4u * c)) | (qb << (4u * c + 16u));                                   \
          } else {                                                                             \
            w0 |= qa << (8u * c);                                                              \
            w1 |= qb << (8u * c);                                                              \
          }                                                                                    \
        }                                                                                      \
        if (DIRECT) {                                                                          \
          if (row0 + row_l < pc.rows) {                                                        \
            const uint gw = (row0 + row_l) * WORDS + col0 * BITS / 32u;                         \
            packed[gw] = w0;                                                                   \
            if (BITS == 8u) packed[gw + 1u] = w1;                                              \
          }                                                                                    \
        } else {                                                                               \
          word_store(CODE_W + row_l * (DIM / 4u) + col0 / 4u, w0);                             \
          word_store(CODE_W + row_l * (DIM / 4u) + col0 / 4u + 1u, w1);                        \
        }                                                                                      \
        TK_MMA_SYNC();                                                                         \
      }                                                                                        \
    }
#define TK_TC_STORE_TILE(x) TK_MMA_STORE_C_ROW(acc[x], smem, scr, SCR);
    if (table) {
      TK_TC_EPILOGUE(true)
    } else {
      TK_TC_EPILOGUE(false)
    }
    [[unroll]] for (uint i = 0; i < MAX_RPS; ++i)
      if (i < RPS) word_store(PART_W + ((rg * RPS + i) * 16u + r) * PPR + cg * 2u + h, floatBitsToUint(part[i]));
    barrier();

    // ---- norms and packed words --------------------------------------------
    if (t < BM && row0 + t < pc.rows) {
      float recon_sq = 0.0;
      for (uint l = 0; l < PPR; ++l) recon_sq += uintBitsToFloat(word_load(PART_W + t * PPR + l));
      const float recon = sqrt(recon_sq);
      norms[row0 + t] = recon > 1e-30 ? s_norm[t] / recon : s_norm[t];
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
