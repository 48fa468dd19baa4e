// SPDX-License-Identifier: MIT
#version 460
#extension GL_EXT_control_flow_attributes : require
// AURA fused encode, dense rotation, for few rows (latency rather than
// throughput): the same results as encode.comp (see
// include/tilekernels/aura/encode.hpp).
//
// A call of few rows is bound by moving the rotation (Dim^2 floats) into
// the SMs, so the rotation is spread over workgroups: one workgroup per (RS
// rows, CW output coordinates), each reading only its CW rows of the
// rotation. The norm correction needs every coordinate's code, so the
// workgroups of a row block meet through a workspace, in one of two ways:
// - TK_ATOMIC64 (devices with 64-bit buffer atomics): per row a 64-bit
//   word holding an arrival count (bits 57-63) and a fixed-point sum of the
//   parts (2^-46 units, bits 0-56; a row's sum of squared centroids is at
//   most Dim <= 512 = 2^9). Each workgroup adds (1 << 57) + its part in one
//   atomic; the one that sees CB - 1 earlier arrivals has the whole sum in
//   hand, writes the row's norm and resets the word to 0. One round trip,
//   and integer sums do not depend on the order of arrival;
// - otherwise each writes its parts, counts itself in counters[row block],
//   and the last to arrive reads the parts back, adds them in a fixed order
//   and writes the norms, then resets the counter to 0 for the next call.
//
// Geometry (the host relies on it):
// - workgroup x = row_block * CB + cb (CB = DIM / CW), CW * KS = 256
//   invocations; invocation (c, ks) = (t / KS, t % KS) owns coordinate
//   cb * CW + c and the 16-byte pieces ks, ks + KS, ks + 2 KS, ... of its
//   rotation row and of the input rows (KCI / 4 of them, KCI = DIM / KS), for
//   all RS rows: the KS invocations of a coordinate read contiguous bytes,
//   and every rotation load is issued before anything else;
// - the KS partial products of (row, coordinate) are summed in a fixed
//   order; one (row, coordinate) per invocation is quantised (binary search
//   of aura_pack.glsl); the coordinate block's BW words of each row are
//   built whole by one invocation each (CW * BITS is a multiple of 32, so
//   blocks never share a word);
// - row sums are reduced in a fixed order: results do not depend on
//   scheduling. No subgroup operations: correct for any subgroup size.
#ifdef TK_ATOMIC64
#extension GL_EXT_shader_atomic_int64 : require
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require
#endif
#extension GL_GOOGLE_include_directive : require
#include "tilekernels/aura/encode_abi.h"
#include "../common/convert.glsl"
#include "../common/aura_pack.glsl"

TK_DECLARE_SPEC(TK_ENCODE_SPEC)  // DIM, BITS, IN_DTYPE; 256 invocations
TK_DECLARE_PUSH(TK_ENCODE_PUSH)

// Literal sizes (EncodeConfig::few_rows_per_group, few_rows_invocations):
// arrays and loops bounded by specialization constants are not unrolled by
// glslc, and a register array indexed at run time may go to local memory.
// TK_CW coordinates per workgroup and TK_KS invocations per coordinate,
// TK_CW * TK_KS = 256: one module per pair (the variants below), used where
// EncodeConfig::few_rows_block_allowed (a block's codes fill whole words, each
// invocation's columns are whole 16-byte pieces).
//! variant c16 -DTK_CW=16u -DTK_KS=16u
//! variant c8 -DTK_CW=8u -DTK_KS=32u
//! variant atomic64 -DTK_ATOMIC64=1
//! variant c16_atomic64 -DTK_CW=16u -DTK_KS=16u -DTK_ATOMIC64=1
//! variant c8_atomic64 -DTK_CW=8u -DTK_KS=32u -DTK_ATOMIC64=1
#ifndef TK_CW
#define TK_CW 32u
#define TK_KS 8u
#endif
const uint RS = 8u;  // rows per workgroup
const uint KS = TK_KS;  // invocations per output coordinate
const uint MAX_KC4 = 128u / TK_KS;  // KCI / 4 at DIM 512
const uint MAX_CB = 512u / TK_CW;   // CB at DIM 512

const uint CW = TK_CW;      // coordinates per workgroup
const uint CB = DIM / CW;   // workgroups per row block
const uint BW = CW * BITS / 32u;  // packed words per row of a coordinate block
const uint WG = CW * KS;
const uint KCI = DIM / KS;   // columns per invocation
const uint LEVELS = 1u << BITS;
const uint WORDS = DIM * BITS / 32u;
const uint G = DIM / 4u;    // input vec4 per row

layout(std430, binding = 0) readonly buffer InputF { vec4 in_f32[]; };
layout(std430, binding = 0) readonly buffer InputH { uvec2 in_16[]; };
layout(std430, binding = 1) readonly buffer Rotation { vec4 rot[]; };
layout(std430, binding = 2) readonly buffer Boundaries { float boundaries[]; };
layout(std430, binding = 3) readonly buffer Codebook { float codebook[]; };
layout(std430, binding = 4) writeonly buffer Packed { uint packed[]; };
layout(std430, binding = 5) writeonly buffer Norms { float norms[]; };
// Workspace (zero between dispatches): with TK_ATOMIC64 per row the count
// and sum word; otherwise per (row, cb) the part of the squared
// reconstruction norm and per row block the arrival counter.
#ifdef TK_ATOMIC64
layout(std430, binding = 6) buffer RowSums { uint64_t row_sums[]; };
#else
layout(std430, binding = 6) coherent buffer Parts { float parts[]; };
layout(std430, binding = 7) coherent buffer Counters { uint counters[]; };
#endif

shared vec4 s_in[RS * G];          // staged input rows
shared float s_part[RS * CW * KS]; // partial products [row][c][ks]
shared uint s_code[RS * CW];       // code of (row, c)
shared vec4 s_c2v[RS * CW / 4u];   // its squared centroid
shared float s_sum8[RS * 8u];     // row sums of squares in 8 parts
shared float s_bound[LEVELS];
shared float s_c2[LEVELS];
#ifndef TK_ATOMIC64
shared bool s_last;  // this workgroup completes its row block (counter path)
#endif

#define TK_ROW_VALUES
float tk_row_value(uint i) { return s_in[i >> 2][i & 3u]; }  // element i of the staged rows
#include "../common/row_norm.glsl"

// Rows whose sum of squares leaves f32's normal range take the rescaled
// norm (row_norm.glsl); every invocation computes the same bits.
float row_norm(uint r) {
  float sq = 0.0;
  [[unroll]] for (uint i = 0; i < 8u; ++i) sq += s_sum8[r * 8u + i];
  return tk_plain_sumsq_ok(sq) ? sqrt(sq) : tk_rescaled_norm(r * DIM, DIM);
}

// The norm of row `row` (row r of this block), corrected by the row's sum
// of squared centroids: the norm itself where that sum is ~0.
void write_norm(uint row, uint r, float recon_sq) {
  const float recon = sqrt(recon_sq);
  const float norm = row_norm(r);
  norms[row] = recon > 1e-30 ? norm / recon : norm;
}

void main() {
  const uint t = gl_LocalInvocationIndex;
  const uint ks = t % KS;  // consecutive invocations: consecutive 16-byte pieces of a rotation row
  const uint c = t / KS;
  const uint wg = gl_WorkGroupID.x + pc.group_offset;
  const uint rb = wg / CB;
  const uint cb = wg % CB;
  const uint row0 = rb * RS;
  const uint d = cb * CW + c;

  // This invocation's rotation values first: the call's critical path.
  // Piece i * KS + ks of row d (16 bytes each): the KS invocations of a
  // coordinate read 16 * KS contiguous bytes per step.
  const uint rbase = d * (DIM / 4u) + ks;
  vec4 rv[MAX_KC4];
  [[unroll]] for (uint i = 0; i < MAX_KC4; ++i) rv[i] = i < KCI / 4u ? rot[rbase + i * KS] : vec4(0.0);

  for (uint i = t; i < LEVELS; i += WG) {
    s_bound[i] = i + 1u < LEVELS ? boundaries[i] : 0.0;
    const float cv = codebook[i];
    s_c2[i] = cv * cv;
  }
  for (uint i = t; i < RS * G; i += WG) {
    const uint row = row0 + i / G;
    const uint src = min(row, pc.rows - 1u) * G + i % G;  // in bounds even where both sides are evaluated
    vec4 x;
    if (IN_DTYPE == TK_F32)
      x = in_f32[src];
    else
      x = tk_unpack4(IN_DTYPE, in_16[src]);
    x = row < pc.rows ? x : vec4(0.0);
    s_in[i] = x;
  }
  barrier();

  // Row sums of squares in 8 parts (G is a multiple of 8), and the partial products.
  if (t < RS * 8u) {
    float sq = 0.0;
    for (uint i = 0; i < G / 8u; ++i) {
      const vec4 x = s_in[t * (G / 8u) + i];
      sq += dot(x, x);
    }
    s_sum8[t] = sq;
  }
  [[unroll]] for (uint r = 0; r < RS; ++r) {
    float acc = 0.0;
    [[unroll]] for (uint i = 0; i < MAX_KC4; ++i) {
      if (i < KCI / 4u) {
        const vec4 u = s_in[r * G + i * KS + ks];
        acc = fma(rv[i].x, u.x, fma(rv[i].y, u.y, fma(rv[i].z, u.z, fma(rv[i].w, u.w, acc))));
      }
    }
    s_part[(r * CW + c) * KS + ks] = acc;
  }
  barrier();

  // One (row, coordinate) per invocation: sum the KS parts, quantise.
  // row_norm(r) adds the 8 parts in a fixed order: the same bits everywhere.
  for (uint task = t; task < RS * CW; task += WG) {
    const uint r = task / CW, cc = task % CW;
    float sum = 0.0;
    [[unroll]] for (uint h = 0; h < KS; ++h) sum += s_part[(r * CW + cc) * KS + h];
    const float norm = row_norm(r);
    const float pre = tk_norm_prescale(norm);  // row_norm.glsl
    const float v = tk_mul2(sum, pre, norm > 0.0 ? 1.0 / (norm * pre) : 0.0);
    uint idx;
    TK_AURA_QUANTIZE(idx, v, s_bound, LEVELS);
    s_code[task] = idx;
    s_c2v[task / 4u][task % 4u] = s_c2[idx];
  }
  barrier();

  // This block's words of each row, and its part of the squared norm.
  for (uint w = t; w < RS * BW; w += WG) {
    const uint r = w / BW, wi = w % BW;  // word wi of the block = word cb * BW + wi of the row
    if (row0 + r < pc.rows) {
      const uint word_index = cb * BW + wi;
      const uint d_first = wi * 32u / BITS;  // first coordinate (within the block) touching the word
      uint word = 0u;
      [[unroll]] for (uint j = 0; j <= 32u / BITS + 1u; ++j) {  // a word touches at most 32/BITS + 2 codes
        const uint dd = d_first + j;
        if (dd < CW && dd * BITS < wi * 32u + 32u) word |= tk_aura_place(s_code[r * CW + dd], dd, BITS, wi);
      }
      packed[(row0 + r) * WORDS + word_index] = word;
    }
  }
  if (t < RS) {
    float part = 0.0;
    [[unroll]] for (uint i = 0; i < CW / 4u; ++i) {
      const vec4 q = s_c2v[t * (CW / 4u) + i];
      part += q.x;
      part += q.y;
      part += q.z;
      part += q.w;
    }
    if (CB == 1u) {  // the whole row is here: no workspace round trip
      if (row0 + t < pc.rows) write_norm(row0 + t, t, part);
    } else {
#ifdef TK_ATOMIC64
      if (row0 + t < pc.rows) {
        const uint64_t one = uint64_t(1) << 57;
        const uint64_t mine = uint64_t(part * 70368744177664.0);  // 2^46: exact scaling, then truncation
        const uint64_t before = atomicAdd(row_sums[row0 + t], one + mine);
        if (uint(before >> 57) == CB - 1u) {
          write_norm(row0 + t, t, float((before & (one - 1)) + mine) * (1.0 / 70368744177664.0));
          row_sums[row0 + t] = uint64_t(0);
        }
      }
#else
      parts[(row0 + t) * CB + cb] = part;
#endif
    }
  }
#ifndef TK_ATOMIC64
  if (CB == 1u) return;
  // Publish the parts, then find out whether this workgroup is the last of its row block.
  memoryBarrierBuffer();
  barrier();
  if (t == 0u) s_last = atomicAdd(counters[rb], 1u) == CB - 1u;
  barrier();
  if (!s_last) return;
  memoryBarrierBuffer();
  if (t < RS && row0 + t < pc.rows) {
    float pv[MAX_CB];  // all loads first, then the sum in a fixed order
    [[unroll]] for (uint b = 0; b < MAX_CB; ++b) pv[b] = b < CB ? parts[(row0 + t) * CB + b] : 0.0;
    float recon_sq = 0.0;
    [[unroll]] for (uint b = 0; b < MAX_CB; ++b) recon_sq += pv[b];
    write_norm(row0 + t, t, recon_sq);
  }
  if (t == 0u) counters[rb] = 0u;
#endif
}
