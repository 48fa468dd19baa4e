// SPDX-License-Identifier: MIT
#version 460
// AURA cache_write: appends rows to one side (K or V) of the paged cache,
// encoding them in place (include/tilekernels/aura/cache_write.hpp).
//
// Row = (token, KV head) of the input [num_tokens, kv_heads, DIM]; its slot
// is slot_mapping[token] (page * PAGE_TOKENS + offset). A coded side stores,
// as aura::Encode computes them in f32,
//   n = ||x||,  v = R x / n  (Hadamard: H (s * x) / (sqrt(DIM) n)),
//   code[d] = #{ boundaries < v[d] },  norm = n / ||codebook[code]||
// (n itself where that is below 1e-30; a non-finite n keeps n and codes 0;
// n is computed on the row scaled by a power of two, finite wherever ||x|| is);
// a raw side the values rounded to RAW_DTYPE. With CENTRED, x is the row
// minus its centre (centre row token_centres[token], clamped to the
// centres there are), in f32. With HI_DIMS (split keys), coordinates
// d < HI_DIMS take BITS + 1 bits and their own codebook; their codes fill
// the row's first HI_DIMS * (BITS + 1) / 32 words, the rest's follow.
//
// Geometry (invariants the host relies on): ROWS rows per workgroup, ROWS *
// DIM <= 512, every value in shared memory; each phase strides its items
// over the workgroup, separated by barriers that every invocation reaches.
// Sums over a row run in a fixed order (16 strided partial sums, then those
// in order): results do not depend on the device or the scheduling.
// A slot that is negative (padding) or past the cache (>= capacity) is
// skipped: nothing outside the cache is ever written. f16 norms share a u32
// word between two slots, which other workgroups may write at the same time:
// each half is replaced by an atomic AND then an atomic OR that touch only
// that half. No subgroup operation is used.
#extension GL_EXT_control_flow_attributes : require
#extension GL_GOOGLE_include_directive : require
#include "tilekernels/aura/cache_write_abi.h"
#include "../common/convert.glsl"
#include "../common/aura_pack.glsl"
#include "../common/aura_cache.glsl"
#include "../common/row_norm.glsl"

TK_DECLARE_SPEC(TK_CACHE_WRITE_SPEC)
TK_DECLARE_PUSH(TK_CACHE_WRITE_PUSH)

const uint WG = gl_WorkGroupSize.x;
const bool RAW = BITS == 16u;
const uint LEVELS = RAW ? 2u : (1u << BITS);
const bool SPLIT = HI_DIMS != 0u;
const uint HI_BITS = BITS + 1u;
const uint HI_LEVELS = SPLIT ? 1u << HI_BITS : 1u;
const uint HI_WORDS = HI_DIMS * HI_BITS / 32u;
const uint WORDS = RAW ? DIM / 2u : HI_WORDS + (DIM - HI_DIMS) * BITS / 32u;  // per row
const uint N = ROWS * DIM;
const uint PARTS = 16u;  // partial sums per row

layout(std430, binding = 0) readonly buffer InputF { float in_f32[]; };
layout(std430, binding = 0) readonly buffer InputH { uint in_16[]; };
layout(std430, binding = 1) readonly buffer Slots { int slots[]; };
layout(std430, binding = 2) readonly buffer Tables { float tables[]; };
layout(std430, binding = 3) writeonly buffer Store { uint store[]; };
layout(std430, binding = 4) buffer Norms { uint norms[]; };
layout(std430, binding = 5) readonly buffer Centres { float centres[]; };
layout(std430, binding = 6) readonly buffer TokenCentres { int token_centres[]; };

shared float s_x[N];                          // the rows; then, rotated in place (Hadamard)
shared float s_y[ROTATION == 2u ? N : 1u];    // dense rotation: the product
shared uint s_code[RAW ? 1u : N];
shared float s_part[ROWS * PARTS];
shared float s_norm[ROWS];
shared float s_scale[ROWS];
shared int s_exp[ROWS];  // the row's scale is 2^-s_exp
shared int s_slot[ROWS];
shared uint s_centre[CENTRED != 0u ? ROWS : 1u];  // the row's centre, as an index of dim 0
shared float s_bound[LEVELS];  // boundaries, +inf in the last slot
shared float s_c2[LEVELS];     // squared centroids
shared float s_bound_hi[HI_LEVELS];  // the same above the split
shared float s_c2_hi[HI_LEVELS];

#define X(i) s_x[i]

void main() {
  const uint inv = gl_LocalInvocationID.x;
  const uint row0 = (gl_WorkGroupID.x + pc.group_offset) * ROWS;

  if (inv < ROWS) {
    const uint row = row0 + inv;
    int slot = -1;
    if (row < pc.rows) slot = slots[row / pc.kv_heads];
    s_slot[inv] = uint(slot) < pc.capacity ? slot : -1;  // negative or past the cache: skipped
    if (CENTRED != 0u) {
      const int c = row < pc.rows ? clamp(token_centres[row / pc.kv_heads], 0, int(pc.centres) - 1) : 0;
      s_centre[inv] = (uint(c) * pc.kv_heads + row % pc.kv_heads) * DIM;
    }
  }
  if (!RAW) {
    for (uint i = inv; i < LEVELS; i += WG) {
      s_bound[i] = tables[TABLE_BOUNDARIES + i];
      const float c = tables[TABLE_CODEBOOK + i];
      s_c2[i] = c * c;
    }
    if (SPLIT)
      for (uint i = inv; i < HI_LEVELS; i += WG) {
        s_bound_hi[i] = tables[TABLE_HI_BOUNDARIES + i];
        const float c = tables[TABLE_HI_CODEBOOK + i];
        s_c2_hi[i] = c * c;
      }
  }
  barrier();

  // Load (skipped rows read as zeros); the Hadamard signs on the way in.
  for (uint e = inv; e < N; e += WG) {
    const uint r = e / DIM, d = e % DIM;
    float x = 0.0;
    if (s_slot[r] >= 0) {
      const uint row = row0 + r;
      const uint i = pc.in_at + (row / pc.kv_heads) * pc.in_token + (row % pc.kv_heads) * pc.in_head + d;
      x = IN_DTYPE == TK_F32 ? in_f32[i] : tk_load16(IN_DTYPE, in_16[i >> 1], i);
      if (CENTRED != 0u) x -= centres[s_centre[r] + d];
    }
    if (ROTATION == 1u) x *= tables[TABLE_ROTATION + d];
    s_x[e] = x;
  }
  barrier();

  if (RAW) {
    for (uint w = inv; w < ROWS * WORDS; w += WG) {
      const uint r = w / WORDS, wi = w % WORDS;
      const int slot = s_slot[r];
      if (slot < 0) continue;
      const uint page = uint(slot) / PAGE_TOKENS, offset = uint(slot) % PAGE_TOKENS;
      const uint head = (row0 + r) % pc.kv_heads;
      const uint dst = ((page * pc.kv_heads + head) * PAGE_TOKENS + offset) * WORDS + wi;
      store[dst] = tk_narrow16(RAW_DTYPE, s_x[r * DIM + 2u * wi]) | (tk_narrow16(RAW_DTYPE, s_x[r * DIM + 2u * wi + 1u]) << 16);
    }
    return;
  }

  // Each row scaled by the power of two that brings its largest magnitude
  // into [0.5, 4): exact, so codes and norms are those of the row as given
  // wherever its squares neither overflow nor underflow, and the norm is
  // finite wherever the row's is. (A row holding an infinity is not
  // scaled; a NaN stays NaN either way.)
  for (uint p = inv; p < ROWS * PARTS; p += WG) {
    const uint r = p / PARTS, k = p % PARTS;
    float m = 0.0;
    for (uint d = k; d < DIM; d += PARTS) m = max(m, abs(s_x[r * DIM + d]));
    s_part[p] = m;
  }
  barrier();
  if (inv < ROWS) {
    float m = 0.0;
    for (uint k = 0; k < PARTS; ++k) m = max(m, s_part[inv * PARTS + k]);
    s_exp[inv] = tk_scale_exponent(m);  // row_norm.glsl
  }
  barrier();
  for (uint e = inv; e < N; e += WG) s_x[e] *= tk_pow2(-s_exp[e / DIM]);
  barrier();

  // Squared norm: PARTS strided partial sums per row (the signs do not change it).
  for (uint p = inv; p < ROWS * PARTS; p += WG) {
    const uint r = p / PARTS, k = p % PARTS;
    float s = 0.0;
    for (uint d = k; d < DIM; d += PARTS) s = fma(s_x[r * DIM + d], s_x[r * DIM + d], s);
    s_part[p] = s;
  }
  barrier();  // the rows are read whole before the transform changes them
  if (ROTATION == 1u) TK_FWHT_SHARED(X, ROWS, DIM, inv, WG)
  if (ROTATION == 2u) {
    for (uint e = inv; e < N; e += WG) {
      const uint r = e / DIM, d = e % DIM;
      float acc = 0.0;
      for (uint j = 0; j < DIM; ++j) acc = fma(tables[TABLE_ROTATION + d * DIM + j], s_x[r * DIM + j], acc);
      s_y[e] = acc;
    }
  }
  if (inv < ROWS) {
    float sq = 0.0;
    for (uint k = 0; k < PARTS; ++k) sq += s_part[inv * PARTS + k];
    const float n = sqrt(sq);  // of the scaled row
    s_norm[inv] = n * tk_pow2(s_exp[inv]);
    s_scale[inv] = (n > 0.0 ? 1.0 / n : 0.0) * (ROTATION == 1u ? pc.inv_sqrt_dim : 1.0);
  }
  barrier();

  // Quantise; rows whose norm is not finite get codes 0.
  for (uint e = inv; e < N; e += WG) {
    const uint r = e / DIM;
    float v;
    if (ROTATION == 2u)
      v = s_y[e] * s_scale[r];
    else
      v = s_x[e] * s_scale[r];
    uint idx;
    if (SPLIT && e % DIM < HI_DIMS)
      TK_AURA_QUANTIZE(idx, v, s_bound_hi, HI_LEVELS)
    else
      TK_AURA_QUANTIZE(idx, v, s_bound, LEVELS)
    const bool finite = tk_finite(s_norm[r]);
    s_code[e] = finite ? idx : 0u;
  }
  barrier();
  for (uint p = inv; p < ROWS * PARTS; p += WG) {
    const uint r = p / PARTS, k = p % PARTS;
    float s = 0.0;
    for (uint d = k; d < DIM; d += PARTS) {
      const uint code = s_code[r * DIM + d];
      s += SPLIT && d < HI_DIMS ? s_c2_hi[code] : s_c2[code];
    }
    s_part[p] = s;
  }
  barrier();

  // Packed words, each built whole by one invocation.
  for (uint w = inv; w < ROWS * WORDS; w += WG) {
    const uint r = w / WORDS, wi = w % WORDS;
    const int slot = s_slot[r];
    if (slot < 0) continue;
    // The part the word is in: its first coordinate, width and word.
    const bool hi = wi < HI_WORDS;
    const uint d0 = hi ? 0u : HI_DIMS, bits = hi ? HI_BITS : BITS, pw = hi ? wi : wi - HI_WORDS;
    const uint d_last = min(DIM - 1u - d0, (pw * 32u + 31u) / bits);
    uint word = 0u;
    for (uint d = pw * 32u / bits; d <= d_last; ++d) word |= tk_aura_place(s_code[r * DIM + d0 + d], d, bits, pw);
    const uint page = uint(slot) / PAGE_TOKENS, offset = uint(slot) % PAGE_TOKENS;
    const uint head = (row0 + r) % pc.kv_heads;
    store[((page * pc.kv_heads + head) * PAGE_TOKENS + offset) * WORDS + wi] = word;
  }
  if (inv < ROWS && s_slot[inv] >= 0) {
    float recon = 0.0;
    for (uint k = 0; k < PARTS; ++k) recon += s_part[inv * PARTS + k];
    recon = sqrt(recon);
    const float n = s_norm[inv];
    const float value = recon > 1e-30 ? n / recon : n;
    const uint slot = uint(s_slot[inv]);
    const uint page = slot / PAGE_TOKENS, offset = slot % PAGE_TOKENS;
    const uint head = (row0 + inv) % pc.kv_heads;
    const uint i = (page * pc.kv_heads + head) * PAGE_TOKENS + offset;
    if (NORM_DTYPE == TK_F32) {
      norms[i] = floatBitsToUint(value);
    } else {
      const uint shift = (i & 1u) * 16u;
      atomicAnd(norms[i >> 1], ~(0xffffu << shift));
      atomicOr(norms[i >> 1], tk_f32_to_f16(value) << shift);
    }
  }
}
