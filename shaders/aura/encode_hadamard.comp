#version 460
#extension GL_EXT_control_flow_attributes : require
// AURA fused encode with a randomised Hadamard rotation applied in
// O(DIM log DIM): rotated = H (s * x) / (sqrt(DIM) ||x||) with H the Sylvester
// Hadamard matrix (DIM a power of two), then the same quantisation, packing
// and norm correction as encode.comp.
//
// Geometry (the host relies on it):
// - a workgroup encodes ROWS consecutive rows with NB = DIM / 32 invocations
//   per row; invocation (r, i) loads the 32 consecutive values of block i;
// - H_DIM = H_NB (x) H_32: the 32-point transform runs in registers, the
//   blocks are exchanged through shared memory (one padded transpose) and the
//   NB-point transform runs on the 32*32/DIM columns each invocation reads;
// - codes go to shared memory one word per coordinate and each output word
//   is built whole by one invocation; per-row sums are reduced in a fixed
//   order. No atomics, no subgroup operations: any subgroup size works.
#include "../common/convert.glsl"
#include "../common/aura_pack.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint DIM = 128;
layout(constant_id = 2) const uint BITS = 4;
layout(constant_id = 3) const uint IN_DTYPE = 2;
layout(constant_id = 4) const uint ROWS = 32;
layout(constant_id = 5) const uint INV_SQRT_DIM_BITS = 0x3db504f3u;  // f32(1/sqrt(DIM)), rounded on the host

const uint E = 32u;              // values per invocation
const uint NB = DIM / E;         // invocations (blocks) per row
const uint CPI = E / NB;         // columns per invocation in the second stage
const uint WG = NB * ROWS;
const uint LEVELS = 1u << BITS;
const uint WORDS = DIM * BITS / 32u;
const uint ROW_STRIDE = NB * (E + 1u);  // transpose: blocks padded by one word
const uint IDX_STRIDE = DIM + 1u;       // codes: rows padded by one word

layout(push_constant) uniform Push {
  uint group_offset;
  uint rows;
} pc;

layout(std430, binding = 0) readonly buffer InputF { vec4 in_f32[]; };
layout(std430, binding = 0) readonly buffer InputH { uvec4 in_16[]; };
layout(std430, binding = 1) readonly buffer Signs { float signs[]; };
layout(std430, binding = 2) readonly buffer Boundaries { float boundaries[]; };
layout(std430, binding = 3) readonly buffer Codebook { float codebook[]; };
layout(std430, binding = 4) writeonly buffer Packed { uint packed[]; };
layout(std430, binding = 5) writeonly buffer Norms { float norms[]; };

shared uint s_mem[ROWS * ROW_STRIDE];  // transpose, then codes (ROWS * IDX_STRIDE <= size)
shared float s_sq[ROWS * NB];          // partial sums of squares
shared float s_recon[ROWS * NB];       // partial sums of squared centroids
shared float s_bound[LEVELS];
shared float s_code[LEVELS];
shared float s_sign[DIM];

void main() {
  const uint t = gl_LocalInvocationID.x;
  const uint r = t / NB;
  const uint i = t % NB;
  const uint row0 = (gl_WorkGroupID.x + pc.group_offset) * ROWS;
  const bool live = row0 + r < pc.rows;

  for (uint j = t; j < LEVELS; j += WG) {
    s_bound[j] = j + 1u < LEVELS ? boundaries[j] : 0.0;
    s_code[j] = codebook[j];
  }
  for (uint j = t; j < DIM; j += WG) s_sign[j] = signs[j];

  float v[E];
  const uint base = (row0 + r) * DIM + i * E;
  if (IN_DTYPE == TK_F32) {
    [[unroll]] for (uint q = 0; q < E / 4u; ++q) {
      const vec4 x = live ? in_f32[base / 4u + q] : vec4(0.0);
      [[unroll]] for (uint c = 0; c < 4u; ++c) v[4u * q + c] = x[c];
    }
  } else {
    [[unroll]] for (uint q = 0; q < E / 8u; ++q) {
      const uvec4 x = live ? in_16[base / 8u + q] : uvec4(0u);
      const vec4 a = tk_unpack4(IN_DTYPE, x.xy), b = tk_unpack4(IN_DTYPE, x.zw);
      [[unroll]] for (uint c = 0; c < 4u; ++c) {
        v[8u * q + c] = a[c];
        v[8u * q + 4u + c] = b[c];
      }
    }
  }
  barrier();  // signs and tables are visible

  float sq = 0.0;
  [[unroll]] for (uint e = 0; e < E; ++e) {
    sq += v[e] * v[e];
    v[e] *= s_sign[i * E + e];
  }
  s_sq[t] = sq;
  // 32-point transform in registers.
  [[unroll]] for (uint h = 1u; h < E; h <<= 1)
    [[unroll]] for (uint e = 0; e < E; ++e)
      if ((e & h) == 0u) {
        const float a = v[e], b = v[e + h];
        v[e] = a + b;
        v[e + h] = a - b;
      }
  [[unroll]] for (uint e = 0; e < E; ++e) s_mem[r * ROW_STRIDE + i * (E + 1u) + e] = floatBitsToUint(v[e]);
  barrier();

  // Columns p = i * CPI + c across the NB blocks: w[c * NB + b] is position b * E + p.
  float w[E];
  [[unroll]] for (uint c = 0; c < CPI; ++c)
    [[unroll]] for (uint b = 0; b < NB; ++b) w[c * NB + b] = uintBitsToFloat(s_mem[r * ROW_STRIDE + b * (E + 1u) + i * CPI + c]);
  [[unroll]] for (uint h = 1u; h < NB; h <<= 1)
    [[unroll]] for (uint c = 0; c < CPI; ++c)
      [[unroll]] for (uint b = 0; b < NB; ++b)
        if ((b & h) == 0u) {
          const float a = w[c * NB + b], d = w[c * NB + b + h];
          w[c * NB + b] = a + d;
          w[c * NB + b + h] = a - d;
        }
  float norm_sq = 0.0;
  for (uint b = 0; b < NB; ++b) norm_sq += s_sq[r * NB + b];
  const float norm = sqrt(norm_sq);
  const float scale = (norm > 0.0 ? 1.0 / norm : 0.0) * uintBitsToFloat(INV_SQRT_DIM_BITS);
  barrier();  // the transpose is consumed

  float part = 0.0;
  [[unroll]] for (uint c = 0; c < CPI; ++c)
    [[unroll]] for (uint b = 0; b < NB; ++b) {
      const float x = w[c * NB + b] * scale;
      uint idx;
      TK_AURA_QUANTIZE(idx, x, s_bound, LEVELS);
      const float cv = s_code[idx];
      part += cv * cv;
      s_mem[r * IDX_STRIDE + b * E + i * CPI + c] = idx;
    }
  s_recon[t] = part;
  barrier();

  if (t < ROWS && row0 + t < pc.rows) {
    float sq_sum = 0.0, recon_sq = 0.0;
    for (uint b = 0; b < NB; ++b) {
      sq_sum += s_sq[t * NB + b];
      recon_sq += s_recon[t * NB + b];
    }
    const float n = sqrt(sq_sum);
    const float recon = sqrt(recon_sq);
    norms[row0 + t] = recon > 1e-30 ? n / recon : n;
  }

  for (uint wd = t; wd < ROWS * WORDS; wd += WG) {
    const uint rr = wd / WORDS, wi = wd % WORDS;
    if (row0 + rr >= pc.rows) break;
    const uint d_first = wi * 32u / BITS;
    uint word = 0u;
    for (uint j = 0; j <= 32u / BITS + 1u; ++j) {  // a word touches at most 32/BITS + 2 codes
      const uint d = d_first + j;
      if (d < DIM && d * BITS < wi * 32u + 32u) word |= tk_aura_place(s_mem[rr * IDX_STRIDE + d], d, BITS, wi);
    }
    packed[(row0 + rr) * WORDS + wi] = word;
  }
}
