// SPDX-License-Identifier: MIT
#version 460
#extension GL_EXT_control_flow_attributes : require
// AURA fused encode, dense rotation: per row, the L2 norm, the rotation
// rotated[d] = sum_j R[d, j] x[j] / ||x||, the Lloyd-Max index (boundaries
// strictly exceeded), the packed codes and the norm-correction factor
// ||x|| / ||codebook[idx]||.
//
// Geometry (the host relies on it):
// - a workgroup encodes ROWS = TM * ROW_GROUPS consecutive rows
//   (gl_WorkGroupID.x + group_offset), LANES * ROW_GROUPS invocations;
// - the product is a register-tiled matrix product over K chunks of KC
//   columns staged in shared memory: invocation (rg, lane) owns rows
//   rg*TM .. rg*TM+TM-1 and the coordinates lane*4..+3 and DIM/2+lane*4..+3,
//   so the rotation chunk is reused TM times and each input value 8 times;
//   the norm is accumulated from the same staged chunks and applied after
//   the product (R (x/n) == (R x)/n up to rounding);
// - codes go to shared memory as bytes, four consecutive coordinates per
//   word written by the one invocation that owns them, then every output
//   word is built whole by one invocation: no atomics, no subgroup
//   operations, so the kernel is correct for any subgroup size;
// - per-row sums are reduced in a fixed order: results do not depend on
//   scheduling (the test runs twice and compares bits);
// - split codes (HI_DIMS > 0): coordinates below HI_DIMS take BITS + 1 bits
//   and the tables of bindings 6 and 7 (binary search, no cell table);
//   their codes fill the row's first HI_WORDS words, the rest's follow.
#extension GL_GOOGLE_include_directive : require
#include "tilekernels/aura/encode_abi.h"
#include "../common/convert.glsl"
#include "../common/aura_pack.glsl"

TK_DECLARE_SPEC(TK_ENCODE_SPEC)
TK_DECLARE_PUSH(TK_ENCODE_PUSH)
const uint MEM_VEC4 = TK_ENCODE_TILED_VEC4(DIM, ROW_GROUPS, TM, KC);  // shared scratch

const uint LANES = DIM / 8;
const uint WG = LANES * ROW_GROUPS;
const uint ROWS = TM * ROW_GROUPS;
const uint LEVELS = 1u << BITS;
const bool SPLIT = HI_DIMS != 0u;
const uint HI_BITS = BITS + 1u;
const uint HI_LEVELS = SPLIT ? 1u << HI_BITS : 1u;
const uint HI_WORDS = HI_DIMS * HI_BITS / 32u;
const uint WORDS = HI_WORDS + (DIM - HI_DIMS) * BITS / 32u;
const uint U_STRIDE = ROWS + 4u;       // floats per staged input column (padded)
const uint R_STRIDE = DIM + 4u;        // floats per staged rotation column (padded)
const uint R_BASE = KC * U_STRIDE;     // float offset of the rotation chunk
const uint PART_BASE = ROWS * DIM / 4u;  // word offset of the per-lane partial sums

layout(std430, binding = 0) readonly buffer InputF { vec4 in_f32[]; };
layout(std430, binding = 0) readonly buffer InputH { uvec2 in_16[]; };
layout(std430, binding = 1) readonly buffer Rotation { vec4 rot[]; };
layout(std430, binding = 2) readonly buffer Boundaries { float boundaries[]; };
layout(std430, binding = 3) readonly buffer Codebook { float codebook[]; };
layout(std430, binding = 4) writeonly buffer Packed { uint packed[]; };
layout(std430, binding = 5) writeonly buffer Norms { float norms[]; };
layout(std430, binding = 6) readonly buffer HiBoundaries { float hi_boundaries[]; };
layout(std430, binding = 7) readonly buffer HiCodebook { float hi_codebook[]; };

#define TK_AURA_CELL_TABLE
#include "../common/aura_pack.glsl"

// Scratch: during the product, the input chunk [KC][U_STRIDE] then the
// rotation chunk [KC][R_STRIDE] (floats); afterwards the code bytes
// [ROWS][DIM/4] words and the partial sums [ROWS][LANES].
shared uvec4 s_mem[MEM_VEC4];
shared float s_bound[LEVELS];
shared float s_code[LEVELS];
shared float s_bound_hi[HI_LEVELS];
shared float s_code_hi[HI_LEVELS];
shared float s_norm[ROWS];

float mem_float(uint i) { return uintBitsToFloat(s_mem[i >> 2][i & 3u]); }
void mem_store(uint i, uint v) { s_mem[i >> 2][i & 3u] = v; }
uint mem_word(uint i) { return s_mem[i >> 2][i & 3u]; }

vec4 load_input4(uint element) {
  if (IN_DTYPE == TK_F32) return in_f32[element >> 2];
  return tk_unpack4(IN_DTYPE, in_16[element >> 2]);
}
#define TK_ROW_VALUES
float tk_row_value(uint i) { return load_input4(i & ~3u)[i & 3u]; }
#include "../common/row_norm.glsl"

const uint U_LOADS = (ROWS * KC / 4u + WG - 1u) / WG;  // vec4 loads per invocation per chunk
const uint R_LOADS = (DIM * KC / 4u + WG - 1u) / WG;

// Global loads of the input chunk [ROWS][KC] and rotation chunk [DIM][KC]
// starting at column k0, four consecutive columns per load.
void prefetch(uint k0, uint row0, uint t, out vec4 pu[U_LOADS], out vec4 pr[R_LOADS]) {
  [[unroll]] for (uint l = 0; l < U_LOADS; ++l) {
    const uint q = t + l * WG;
    const uint r = q / (KC / 4u), kq = q % (KC / 4u);
    pu[l] = q < ROWS * KC / 4u && row0 + r < pc.rows ? load_input4((row0 + r) * DIM + k0 + kq * 4u) : vec4(0.0);
  }
  [[unroll]] for (uint l = 0; l < R_LOADS; ++l) {
    const uint q = t + l * WG;
    const uint d = q / (KC / 4u), kq = q % (KC / 4u);
    pr[l] = q < DIM * KC / 4u ? rot[(d * DIM + k0) / 4u + kq] : vec4(0.0);
  }
}

void main() {
  const uint t = gl_LocalInvocationID.x;
  const uint lane = t % LANES;
  const uint rg = t / LANES;
  const uint row0 = (gl_WorkGroupID.x + pc.group_offset) * ROWS;

  for (uint i = t; i < LEVELS; i += WG) {
    s_bound[i] = i + 1u < LEVELS ? boundaries[i] : 0.0;
    s_code[i] = codebook[i];
  }
  if (SPLIT)
    for (uint i = t; i < HI_LEVELS; i += WG) {
      s_bound_hi[i] = i + 1u < HI_LEVELS ? hi_boundaries[i] : 0.0;
      s_code_hi[i] = hi_codebook[i];
    }

  bool table = false;  // the cell-table quantiser (BITS <= 4), visible after the loop's first barrier
  if (BITS <= 4u) table = tk_cell_table_build(t) && !SPLIT;

  vec4 acc[2 * TM];
  [[unroll]] for (uint m = 0; m < 2 * TM; ++m) acc[m] = vec4(0.0);
  float sumsq = 0.0;  // of row t, for t < ROWS

  // The next chunk's global loads are issued before the current chunk's
  // product, so that their latency hides behind it (register double buffer).
  vec4 pu[U_LOADS];
  vec4 pr[R_LOADS];
  prefetch(0u, row0, t, pu, pr);
  for (uint k0 = 0; k0 < DIM; k0 += KC) {
    barrier();  // the previous chunk is consumed
    [[unroll]] for (uint l = 0; l < U_LOADS; ++l) {
      const uint q = t + l * WG;
      if (q < ROWS * KC / 4u) {
        const uint r = q / (KC / 4u), kq = q % (KC / 4u);
        [[unroll]] for (uint c = 0; c < 4u; ++c) mem_store((kq * 4u + c) * U_STRIDE + r, floatBitsToUint(pu[l][c]));
      }
    }
    [[unroll]] for (uint l = 0; l < R_LOADS; ++l) {
      const uint q = t + l * WG;
      if (q < DIM * KC / 4u) {
        const uint d = q / (KC / 4u), kq = q % (KC / 4u);
        [[unroll]] for (uint c = 0; c < 4u; ++c) mem_store(R_BASE + (kq * 4u + c) * R_STRIDE + d, floatBitsToUint(pr[l][c]));
      }
    }
    barrier();
    if (k0 + KC < DIM) prefetch(k0 + KC, row0, t, pu, pr);
    if (t < ROWS)
      [[unroll]] for (uint k = 0; k < KC; ++k) {
        const float u = mem_float(k * U_STRIDE + t);
        sumsq += u * u;
      }
    [[unroll]] for (uint k = 0; k < KC; ++k) {
      const uint rbase = (R_BASE + k * R_STRIDE) / 4u;
      const vec4 r_lo = uintBitsToFloat(s_mem[rbase + lane]);
      const vec4 r_hi = uintBitsToFloat(s_mem[rbase + LANES + lane]);
      const uint ubase = k * U_STRIDE + rg * TM;
      if (TM >= 4) {
        [[unroll]] for (uint m4 = 0; m4 < TM; m4 += 4u) {
          const vec4 u = uintBitsToFloat(s_mem[(ubase + m4) / 4u]);
          [[unroll]] for (uint c = 0; c < 4u; ++c) {
            acc[2u * (m4 + c)] += u[c] * r_lo;
            acc[2u * (m4 + c) + 1u] += u[c] * r_hi;
          }
        }
      } else {
        [[unroll]] for (uint m = 0; m < TM; ++m) {
          const float u = mem_float(ubase + m);
          acc[2u * m] += u * r_lo;
          acc[2u * m + 1u] += u * r_hi;
        }
      }
    }
  }

  // A sum of squares outside f32's normal range (huge or tiny rows): the
  // norm again from the row, scaled (row_norm.glsl). The product needs no
  // such care: each of its partial sums is at most the norm.
  if (t < ROWS)
    s_norm[t] = tk_plain_sumsq_ok(sumsq) || row0 + t >= pc.rows ? sqrt(sumsq) : tk_rescaled_norm((row0 + t) * DIM, DIM);
  barrier();  // the chunks are consumed and the norms are visible

  if (BITS <= 4u) table = tk_cell_table_usable(table);
#define TK_ENCODE_EPILOGUE(TABLE)                                                 \
  [[unroll]] for (uint m = 0; m < TM; ++m) {                                      \
    const uint r = rg * TM + m;                                                   \
    const float norm = s_norm[r];                                                 \
    const float pre = tk_norm_prescale(norm);  /* row_norm.glsl */                \
    const float inv_norm = norm > 0.0 ? 1.0 / (norm * pre) : 0.0;                 \
    float part = 0.0;                                                             \
    [[unroll]] for (uint h = 0; h < 2u; ++h) {                                    \
      uint word = 0u;                                                             \
      [[unroll]] for (uint c = 0; c < 4u; ++c) {                                  \
        const float v = tk_mul2(acc[2u * m + h][c], pre, inv_norm);              \
        if (TABLE) {                                                              \
          const uvec4 cell = tk_s_cell[tk_cell_of(v)];                            \
          part += uintBitsToFloat(cell.z);                                        \
          word += cell.y << (8u * c);                                             \
          if (v > uintBitsToFloat(cell.x)) {                                      \
            part += uintBitsToFloat(cell.w);                                      \
            word += 1u << (8u * c);                                               \
          }                                                                       \
        } else if (SPLIT && h * (DIM / 2u) + lane * 4u + c < HI_DIMS) {           \
          uint idx;                                                               \
          TK_AURA_QUANTIZE(idx, v, s_bound_hi, HI_LEVELS);                        \
          const float cv = s_code_hi[idx];                                        \
          part += cv * cv;                                                        \
          word |= idx << (8u * c);                                                \
        } else {                                                                  \
          uint idx;                                                               \
          TK_AURA_QUANTIZE(idx, v, s_bound, LEVELS);                              \
          const float cv = s_code[idx];                                           \
          part += cv * cv;                                                        \
          word |= idx << (8u * c);                                                \
        }                                                                         \
      }                                                                           \
      mem_store(r * (DIM / 4u) + h * LANES + lane, word);                         \
    }                                                                             \
    mem_store(PART_BASE + r * LANES + lane, floatBitsToUint(part));               \
  }
  if (table) {
    TK_ENCODE_EPILOGUE(true)
  } else {
    TK_ENCODE_EPILOGUE(false)
  }
  barrier();

  if (t < ROWS && row0 + t < pc.rows) {
    float recon_sq = 0.0;
    for (uint l = 0; l < LANES; ++l) recon_sq += mem_float(PART_BASE + t * LANES + l);
    const float recon = sqrt(recon_sq);
    norms[row0 + t] = recon > 1e-30 ? s_norm[t] / recon : s_norm[t];
  }

  for (uint w = t; w < ROWS * WORDS; w += WG) {
    const uint r = w / WORDS, wi = w % WORDS;
    if (row0 + r >= pc.rows) break;
    // The part the word is in: its first coordinate, width, dims and word.
    const bool hi = wi < HI_WORDS;
    const uint d0 = hi ? 0u : HI_DIMS, bits = hi ? HI_BITS : BITS, dims = hi ? HI_DIMS : DIM - HI_DIMS;
    const uint pw = hi ? wi : wi - HI_WORDS;
    const uint d_first = pw * 32u / bits;
    uint word = 0u;
    for (uint j = 0; j <= 32u / BITS + 1u; ++j) {  // a word touches at most 32/bits + 2 codes
      const uint d = d_first + j;
      if (d < dims && d * bits < pw * 32u + 32u) {
        const uint code = (mem_word(r * (DIM / 4u) + (d0 + d) / 4u) >> (8u * ((d0 + d) % 4u))) & 0xffu;
        word |= tk_aura_place(code, d, bits, pw);
      }
    }
    packed[(row0 + r) * WORDS + wi] = word;
  }
}
