// SPDX-License-Identifier: MIT
#version 460
#extension GL_EXT_control_flow_attributes : require
// AURA fused encode with a randomised Hadamard rotation, register version:
// rotated = H (s * x) / (sqrt(DIM) ||x||), then the quantisation, packing and
// norm correction of encode.comp (see include/tilekernels/aura/encode.hpp).
//
// Geometry (the host relies on it):
// - T = DIM / V invocations per row, ROWS rows per workgroup (WG = ROWS * T);
//   invocation (r, j) holds the 8-value chunks j, j + T, j + 2T, ... of row
//   r (one 16-byte load per chunk for 16-bit input), so the T invocations of
//   a row read contiguous bytes;
// - position p = (q*T + j)*8 + e of register v[q*8 + e]: the transform's
//   bits of e and q are butterflied in registers, the bits of j across the
//   row's invocations (subgroup shuffles in the shuffle variant where the
//   subgroup holds T invocations, else shared memory, chunk by chunk);
// - the transform keeps natural order, so each invocation ends up owning
//   whole chunks of 8 output coordinates (one packed word at 4 bits); a
//   field of whole words (4 or 8 bits) is stored by that invocation (the T
//   invocations of a row write contiguous words); other fields go to shared
//   memory and every output word is built whole by one invocation (16-byte
//   stores where they fit);
// - quantisation for BITS <= 4: a table of NC cells over the boundaries'
//   range, cell(v) a monotone function of v computed the same way when the
//   table is built, so each cell's count of boundaries below it is exact and
//   one compare with the (at most one) boundary inside the cell finishes
//   the count; if some cell holds two boundaries (pathological tables) the
//   workgroup falls back to the binary search of aura_pack.glsl;
// - sums over a row (squared norm, squared reconstruction) are reduced in a
//   fixed order: results do not depend on scheduling.
// The shuffle variant numbers invocations by subgroup (t = subgroup * size
// + lane), a permutation of the workgroup when it is whole subgroups; the
// host uses it only then. The plain module has no subgroup operations.
//! variant subgroup -DTK_SHUFFLE=1
#ifdef TK_SHUFFLE
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#endif
#extension GL_GOOGLE_include_directive : require
#include "tilekernels/aura/encode_hadamard_abi.h"
#include "../common/convert.glsl"
#include "../common/aura_pack.glsl"
#include "../common/hadamard.glsl"

TK_DECLARE_SPEC(TK_ENCODE_HADAMARD_SPEC)
TK_DECLARE_PUSH(TK_ENCODE_HADAMARD_PUSH)

const uint T = DIM / V;        // invocations per row
const uint Q = V / 8u;         // chunks per invocation
const uint CHUNKS = DIM / 8u;  // chunks per row
const uint WG = ROWS * T;
const uint LEVELS = 1u << BITS;
const uint WORDS = DIM * BITS / 32u;
const uint FIELD = 8u * BITS;  // bits per chunk
const uint MEM_WORDS = WG * (V > 32u ? V / 4u : 8u);  // exchange (WG*8) or fields (WG*Q*2)
// Fields of whole words are stored straight from the invocation that made
// them: no shared-memory round trip (8-way bank conflicts by its indexing)
// and no barrier between row blocks.
// (A function, not a boolean spec-constant expression: glslang's optimiser
// dropped the definition of that.)
bool direct_fields() { return FIELD % 32u == 0u; }

layout(std430, binding = 0) readonly buffer InputF { vec4 in_f32[]; };
layout(std430, binding = 0) readonly buffer InputH { uvec4 in_16[]; };
layout(std430, binding = 1) readonly buffer Signs { float signs[]; };
layout(std430, binding = 2) readonly buffer Boundaries { float boundaries[]; };
layout(std430, binding = 3) readonly buffer Codebook { float codebook[]; };
layout(std430, binding = 4) writeonly buffer Packed { uint packed[]; };
layout(std430, binding = 4) writeonly buffer Packed4 { uvec4 packed4[]; };
layout(std430, binding = 5) writeonly buffer Norms { float norms[]; };

shared uint s_mem[MEM_WORDS];  // exchange buffer, then the chunk fields (uvec2 per chunk)
shared float s_red[WG];        // row sums when the subgroup is too narrow
shared uvec4 s_sgn4[DIM / 4u]; // sign-bit masks in the input's word layout
shared float s_bound[LEVELS];  // boundaries, +Inf at LEVELS - 1
shared float s_c2[LEVELS];     // squared centroids
#define TK_AURA_CELL_TABLE
#include "../common/aura_pack.glsl"

// Element i of the input (row-major), widened: the rescaled norm's reads.
#define TK_ROW_VALUES
float tk_row_value(uint i) {
  if (IN_DTYPE == TK_F32) return in_f32[i >> 2][i & 3u];
  const uint w = in_16[i >> 3][(i >> 1) & 3u];
  return tk_widen16(IN_DTYPE, (i & 1u) != 0u ? w >> 16 : w);
}
#include "../common/row_norm.glsl"

uint g_t, g_j, g_r;  // invocation number (see above), lane within the row, row within the workgroup

bool use_shuffle() {
#ifdef TK_SHUFFLE
  return gl_SubgroupSize >= T;
#else
  return false;
#endif
}

// Sum of x over the row's T invocations, the same bits on every one of them.
float row_sum(float x) {
#ifdef TK_SHUFFLE
  if (use_shuffle()) {
    [[unroll]] for (uint m = 1u; m < T; m <<= 1) x += subgroupShuffleXor(x, m);
    return x;
  }
#endif
  if (T == 1u) return x;
  s_red[g_t] = x;
  barrier();
  float s = 0.0;
  for (uint b = 0; b < T; ++b) s += s_red[g_r * T + b];
  barrier();
  return s;
}

uint quantize_search(float x) {
  uint idx;
  TK_AURA_QUANTIZE(idx, x, s_bound, LEVELS);
  return idx;
}

// Quantises the V values (times scale) into Q chunk fields; returns the sum of squared centroids.
float encode_values(in float v[V], float scale, bool table, out uvec2 field[Q]) {
  float part = 0.0;
  [[unroll]] for (uint q = 0; q < Q; ++q) {
    uvec2 f = uvec2(0u);
    [[unroll]] for (uint e = 0; e < 8u; ++e) {
      const float x = v[q * 8u + e] * scale;
      const uint pos = e * BITS;
      if (table && CELL_ENTRY == 0u) {  // BITS <= 4: the field fits f.x
        const uint c = tk_cell_of(x);
        const uint idx = tk_s_cell_k[c] + (x > tk_s_cell_b[c] ? 1u : 0u);
        part += s_c2[idx];
        f.x += idx << pos;  // the fields are disjoint: one shift-add instead of a shift and an or
      } else if (table) {
        const uvec4 cell = tk_s_cell[tk_cell_of(x)];
        part += uintBitsToFloat(cell.z);
        f.x += cell.y << pos;
        if (x > uintBitsToFloat(cell.x)) {
          part += uintBitsToFloat(cell.w);
          f.x += 1u << pos;
        }
      } else {
        const uint idx = quantize_search(x);
        part += s_c2[idx];
        if (pos < 32u) {
          f.x |= idx << pos;
          if (pos + BITS > 32u) f.y |= idx >> (32u - pos);
        } else {
          f.y |= idx << (pos - 32u);
        }
      }
    }
    field[q] = f;
  }
  return part;
}

// Word wi of the packed row r (within the workgroup) from the chunk fields.
uint assemble(uint r, uint wi) {
  const uint base = r * CHUNKS;
  if (FIELD == 32u) return s_mem[2u * (base + wi)];
  if (FIELD == 64u) return s_mem[2u * (base + wi / 2u) + (wi & 1u)];
  const uint lo_bit = wi * 32u;
  uint word = 0u;
  [[unroll]] for (uint k = 0; k < 3u; ++k) {  // a word meets at most 3 fields of >= 16 bits
    const uint c = lo_bit / FIELD + k;
    if (c < CHUNKS && c * FIELD < lo_bit + 32u) {
      const uvec2 f = uvec2(s_mem[2u * (base + c)], s_mem[2u * (base + c) + 1u]);
      const int s = int(c * FIELD) - int(lo_bit);  // field bit 0 lands at word bit s
      if (s >= 0) {
        word |= f.x << uint(s);
      } else {
        const uint d = uint(-s);  // word bit 0 is field bit d
        if (d < 32u)
          word |= (f.x >> d) | (d > 0u ? f.y << (32u - d) : 0u);
        else
          word |= f.y >> (d - 32u);
      }
    }
  }
  return word;
}

// This invocation's chunks of its row in block `block` (ROWS rows) into
// the array `dst`. Rows past the end read the last row (never written
// back): no out-of-bounds load even where a select evaluates both sides.
#define LOAD_BLOCK(dst, block)                                                  \
  {                                                                             \
    const uint src_ = min((block) * ROWS + g_r, pc.rows - 1u);                  \
    [[unroll]] for (uint q_ = 0; q_ < Q; ++q_) {                                \
      const uint c_ = q_ * T + g_j;                                             \
      if (IN_DTYPE == TK_F32) {                                                 \
        dst[2u * q_] = floatBitsToUint(in_f32[(src_ * CHUNKS + c_) * 2u]);      \
        dst[2u * q_ + 1u] = floatBitsToUint(in_f32[(src_ * CHUNKS + c_) * 2u + 1u]); \
      } else {                                                                  \
        dst[q_] = in_16[src_ * CHUNKS + c_];                                    \
      }                                                                         \
    }                                                                           \
  }

void main() {
  const uint lt = gl_LocalInvocationIndex;
#ifdef TK_SHUFFLE
  g_t = gl_SubgroupID * gl_SubgroupSize + gl_SubgroupInvocationID;
#else
  g_t = lt;
#endif
  g_r = g_t / T;
  g_j = g_t % T;
  const uint block0 = (gl_WorkGroupID.x + pc.group_offset) * ITER;

  // Global loads first: their latency hides behind the table set-up.
  uvec4 raw[IN_DTYPE == TK_F32 ? 2u * Q : Q];
  LOAD_BLOCK(raw, block0);

  bool table = false;
  if (BITS <= 4u) table = tk_cell_table_build(lt);
  for (uint i = lt; i < LEVELS; i += WG) {
    s_bound[i] = i + 1u < LEVELS ? boundaries[i] : uintBitsToFloat(0x7f800000u);
    const float c = codebook[i];
    s_c2[i] = c * c;
  }
  // Only the sign bit of each sign is used.
  for (uint i = lt; i < (IN_DTYPE == TK_F32 ? DIM / 4u : DIM / 8u); i += WG) {
    uvec4 m;
    [[unroll]] for (uint k = 0; k < 4u; ++k) {
      if (IN_DTYPE == TK_F32) {
        m[k] = floatBitsToUint(signs[4u * i + k]) & 0x80000000u;
      } else {
        const uint e = 2u * (4u * i + k);
        m[k] = ((floatBitsToUint(signs[e]) & 0x80000000u) >> 16) | (floatBitsToUint(signs[e + 1u]) & 0x80000000u);
      }
    }
    s_sgn4[i] = m;
  }
  barrier();
  if (BITS <= 4u) table = tk_cell_table_usable(table);

  for (uint it = 0; it < ITER; ++it) {
  const uint row0 = (block0 + it) * ROWS;
  if (row0 >= pc.rows) break;  // uniform over the workgroup
  const uint row = row0 + g_r;
  const bool live = row < pc.rows;
  uvec4 next[IN_DTYPE == TK_F32 ? 2u * Q : Q];
  if (it + 1u < ITER && row0 + ROWS < pc.rows) LOAD_BLOCK(next, block0 + it + 1u);
  if (it > 0u && !direct_fields()) barrier();  // the previous block's fields are written out

  // Signs, widening and the sum of squares.
  float v[V];
  float sq = 0.0;
  [[unroll]] for (uint q = 0; q < Q; ++q) {
    const uint c = q * T + g_j;
    if (IN_DTYPE == TK_F32) {
      const vec4 a = uintBitsToFloat(raw[2u * q] ^ s_sgn4[2u * c]);
      const vec4 b = uintBitsToFloat(raw[2u * q + 1u] ^ s_sgn4[2u * c + 1u]);
      [[unroll]] for (uint k = 0; k < 4u; ++k) {
        v[q * 8u + k] = a[k];
        v[q * 8u + 4u + k] = b[k];
      }
    } else {
      const uvec4 x = raw[q] ^ s_sgn4[c];
      [[unroll]] for (uint k = 0; k < 4u; ++k) {
        if (IN_DTYPE == TK_BF16) {
          v[q * 8u + 2u * k] = uintBitsToFloat(x[k] << 16);
          v[q * 8u + 2u * k + 1u] = uintBitsToFloat(x[k] & 0xffff0000u);
        } else {
          v[q * 8u + 2u * k] = tk_f16_to_f32(x[k] & 0xffffu);
          v[q * 8u + 2u * k + 1u] = tk_f16_to_f32(x[k] >> 16);
        }
      }
    }
  }
  [[unroll]] for (uint i = 0; i < V; ++i) sq = fma(v[i], v[i], sq);
  const float sumsq = row_sum(sq);
  // A row whose sum of squares leaves [2^-100, 2^100] is transformed times
  // pre = 2^-+64 (tk_sumsq_prescale) and divided by its norm times pre:
  // exact, no butterfly overflows where the norm fits, and the division
  // stays in range. The same choice on all of the row's invocations
  // (row_sum gives them the same bits).
  const float pre = tk_sumsq_prescale(sumsq);
  if (pre != 1.0)
    [[unroll]] for (uint i = 0; i < V; ++i) v[i] *= pre;

  // Transform bits held in registers (e, then q).
  TK_FWHT_REGS(v, V)
  // Bits of j: across the row's invocations.
  if (T > 1u) {
    if (use_shuffle()) {
#ifdef TK_SHUFFLE
      TK_FWHT_SHUFFLE(float, v, V, g_j, 1u, T)
#endif
    } else {
      for (uint m = 1u; m < T; m <<= 1) {
        const bool upper = (g_j & m) != 0u;
        [[unroll]] for (uint q = 0; q < Q; ++q) {
          [[unroll]] for (uint e = 0; e < 8u; ++e) s_mem[g_t * 8u + e] = floatBitsToUint(v[q * 8u + e]);
          barrier();
          [[unroll]] for (uint e = 0; e < 8u; ++e) {
            const float o = uintBitsToFloat(s_mem[(g_t ^ m) * 8u + e]);
            v[q * 8u + e] = upper ? o - v[q * 8u + e] : v[q * 8u + e] + o;
          }
          barrier();
        }
      }
    }
  }

  // A sum of squares outside f32's normal range: the norm again from the
  // row, scaled (row_norm.glsl); the same on each of the row's invocations.
  const float norm = tk_plain_sumsq_ok(sumsq) || !live ? sqrt(sumsq) : tk_rescaled_norm(row * DIM, DIM);
  // NaN/Inf rows: norm NaN/Inf, codes 0.
  const bool finite = tk_finite(norm);
  const float scale = (norm > 0.0 ? 1.0 / (norm * pre) : 0.0) * uintBitsToFloat(INV_SQRT_DIM_BITS);

  uvec2 field[Q];
  float part;
  if (table)
    part = encode_values(v, scale, true, field);
  else
    part = encode_values(v, scale, false, field);
  if (direct_fields()) {
    if (live) {
      [[unroll]] for (uint q = 0; q < Q; ++q) {
        const uint w0 = row * WORDS + (q * T + g_j) * (FIELD / 32u);
        packed[w0] = finite ? field[q].x : 0u;
        if (FIELD == 64u) packed[w0 + 1u] = finite ? field[q].y : 0u;
      }
    }
  } else {
    [[unroll]] for (uint q = 0; q < Q; ++q) {
      const uint idx = 2u * (g_r * CHUNKS + q * T + g_j);
      s_mem[idx] = finite ? field[q].x : 0u;
      s_mem[idx + 1u] = finite ? field[q].y : 0u;
    }
  }
  const float recon = sqrt(row_sum(part));
  if (g_j == 0u && live) norms[row] = recon > 1e-30 ? norm / recon : norm;
  if (!direct_fields()) {  // fields through shared memory: words built whole
    barrier();

    const uint live_rows = min(ROWS, pc.rows - row0);
    if (WORDS % 4u == 0u) {
      for (uint i = lt; i < live_rows * (WORDS / 4u); i += WG) {
        uvec4 o;
        [[unroll]] for (uint k = 0; k < 4u; ++k) o[k] = assemble((4u * i + k) / WORDS, (4u * i + k) % WORDS);
        packed4[row0 * (WORDS / 4u) + i] = o;
      }
    } else {
      for (uint i = lt; i < live_rows * WORDS; i += WG) packed[row0 * WORDS + i] = assemble(i / WORDS, i % WORDS);
    }
  }
  [[unroll]] for (uint i = 0; i < (IN_DTYPE == TK_F32 ? 2u * Q : Q); ++i) raw[i] = next[i];
  }
}
