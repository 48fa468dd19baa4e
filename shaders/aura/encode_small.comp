#version 460
#extension GL_EXT_control_flow_attributes : require
// AURA fused encode, dense rotation, for few rows (latency rather than
// throughput): the same results as encode.comp (see
// include/tilekernels/aura/encode.hpp), one workgroup per RS rows.
//
// Geometry (the host relies on it):
// - WG = DIM * KS invocations: invocation t owns output coordinate
//   d = t % DIM and the columns ks*KC .. ks*KC + KC - 1 (ks = t / DIM,
//   KC = DIM / KS, a multiple of 4) of the product for all RS rows; its
//   rotation values go straight from global memory to registers, issued
//   before the input is staged, 16 vec4 at a time;
// - the staged input is read as vec4 at addresses uniform across a subgroup
//   of consecutive invocations (broadcast);
// - the KS partial products of (row, d) are summed in a fixed order, then
//   quantised by the binary search of aura_pack.glsl four coordinates per
//   task, and every output word is built whole by one invocation. No
//   atomics, no subgroup operations: correct for any subgroup size.
#include "../common/convert.glsl"
#include "../common/aura_pack.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint DIM = 128;
layout(constant_id = 2) const uint BITS = 4;
layout(constant_id = 3) const uint IN_DTYPE = 2;
layout(constant_id = 4) const uint RS = 8;  // rows per workgroup
layout(constant_id = 5) const uint KS = 4;  // invocations per output coordinate

const uint WG = DIM * KS;
const uint KC = DIM / KS;   // columns per invocation
const uint KB = 64u;        // columns per batch of loads
const uint LEVELS = 1u << BITS;
const uint WORDS = DIM * BITS / 32u;
const uint G = DIM / 4u;    // 4-coordinate groups per row

layout(push_constant) uniform Push {
  uint group_offset;
  uint rows;
} pc;

layout(std430, binding = 0) readonly buffer InputF { vec4 in_f32[]; };
layout(std430, binding = 0) readonly buffer InputH { uvec2 in_16[]; };
layout(std430, binding = 1) readonly buffer Rotation { vec4 rot[]; };
layout(std430, binding = 2) readonly buffer Boundaries { float boundaries[]; };
layout(std430, binding = 3) readonly buffer Codebook { float codebook[]; };
layout(std430, binding = 4) writeonly buffer Packed { uint packed[]; };
layout(std430, binding = 5) writeonly buffer Norms { float norms[]; };

shared vec4 s_mem[RS * (WG > DIM ? WG : DIM) / 4u];  // staged input [RS][DIM], then partials [RS][KS][DIM]
shared float s_sq[RS * G];      // squares per input vec4
shared uint s_codes[RS * G];    // 4 code bytes per word
shared float s_c2p[RS * G];     // squared centroids per 4 coordinates
shared float s_norm[RS];
shared float s_sum8[RS * 8u];   // row sums in 8 parts (squares, then squared centroids)
shared float s_bound[LEVELS];
shared float s_c2[LEVELS];

float mem_f(uint i) { return s_mem[i >> 2][i & 3u]; }

void main() {
  const uint t = gl_LocalInvocationIndex;
  const uint d = t % DIM;
  const uint ks = t / DIM;
  const uint row0 = (gl_WorkGroupID.x + pc.group_offset) * RS;

  // First batch of this invocation's rotation values.
  const uint rbase = (d * DIM + ks * KC) / 4u;
  vec4 rv[KB / 4u];
  [[unroll]] for (uint i = 0; i < KB / 4u; ++i) rv[i] = i * 4u < KC ? rot[rbase + i] : vec4(0.0);

  for (uint i = t; i < LEVELS; i += WG) {
    s_bound[i] = i + 1u < LEVELS ? boundaries[i] : 0.0;
    const float c = codebook[i];
    s_c2[i] = c * c;
  }
  for (uint i = t; i < RS * G; i += WG) {
    const uint r = i / G, row = row0 + r;
    const uint src = min(row, pc.rows - 1u) * G + i % G;  // in bounds even where both sides are evaluated
    vec4 x;
    if (IN_DTYPE == TK_F32)
      x = in_f32[src];
    else
      x = tk_unpack4(IN_DTYPE, in_16[src]);
    x = row < pc.rows ? x : vec4(0.0);
    s_mem[i] = x;
    s_sq[i] = dot(x, x);
  }
  barrier();

  float acc[RS];
  [[unroll]] for (uint r = 0; r < RS; ++r) acc[r] = 0.0;
  for (uint k0 = 0; k0 < KC; k0 += KB) {
    if (k0 > 0u)
      [[unroll]] for (uint i = 0; i < KB / 4u; ++i) rv[i] = k0 + i * 4u < KC ? rot[rbase + k0 / 4u + i] : vec4(0.0);
    [[unroll]] for (uint i = 0; i < KB / 4u; ++i) {
      if (k0 + i * 4u < KC) {
        const uint q = (ks * KC + k0) / 4u + i;  // input vec4 within the row
        [[unroll]] for (uint r = 0; r < RS; ++r) {
          const vec4 u = s_mem[r * G + q];
          acc[r] = fma(rv[i].x, u.x, fma(rv[i].y, u.y, fma(rv[i].z, u.z, fma(rv[i].w, u.w, acc[r]))));
        }
      }
    }
  }
  // Row sums in two levels (8 parts of G/8, then the parts), fixed order.
  if (t < RS * 8u) {
    float sq = 0.0;
    for (uint i = 0; i < G / 8u; ++i) sq += s_sq[t * (G / 8u) + i];
    s_sum8[t] = sq;
  }
  barrier();  // the staged input is consumed
  if (t < RS) {
    float sq = 0.0;
    [[unroll]] for (uint i = 0; i < 8u; ++i) sq += s_sum8[t * 8u + i];
    s_norm[t] = sqrt(sq);
  }
  [[unroll]] for (uint r = 0; r < RS; ++r) {
    const uint i = (r * KS + ks) * DIM + d;
    s_mem[i >> 2][i & 3u] = acc[r];
  }
  barrier();

  for (uint task = t; task < RS * G; task += WG) {
    const uint r = task / G, g = task % G;
    const float norm = s_norm[r];
    const float inv_norm = norm > 0.0 ? 1.0 / norm : 0.0;
    uint word = 0u;
    float part = 0.0;
    [[unroll]] for (uint c = 0; c < 4u; ++c) {
      float sum = 0.0;
      for (uint h = 0; h < KS; ++h) sum += mem_f((r * KS + h) * DIM + 4u * g + c);
      const float v = sum * inv_norm;
      uint idx;
      TK_AURA_QUANTIZE(idx, v, s_bound, LEVELS);
      part += s_c2[idx];
      word |= idx << (8u * c);
    }
    s_codes[task] = word;
    s_c2p[task] = part;
  }
  barrier();

  if (t < RS * 8u) {
    float part = 0.0;
    for (uint i = 0; i < G / 8u; ++i) part += s_c2p[t * (G / 8u) + i];
    s_sum8[t] = part;
  }
  barrier();
  if (t < RS && row0 + t < pc.rows) {
    float recon_sq = 0.0;
    [[unroll]] for (uint i = 0; i < 8u; ++i) recon_sq += s_sum8[t * 8u + i];
    const float recon = sqrt(recon_sq);
    norms[row0 + t] = recon > 1e-30 ? s_norm[t] / recon : s_norm[t];
  }
  for (uint w = t; w < RS * WORDS; w += WG) {
    const uint r = w / WORDS, wi = w % WORDS;
    if (row0 + r >= pc.rows) break;
    const uint d_first = wi * 32u / BITS;
    uint word = 0u;
    [[unroll]] for (uint j = 0; j <= 32u / BITS + 1u; ++j) {  // a word touches at most 32/BITS + 2 codes
      const uint dd = d_first + j;
      if (dd < DIM && dd * BITS < wi * 32u + 32u) {
        const uint code = (s_codes[r * G + dd / 4u] >> (8u * (dd % 4u))) & 0xffu;
        word |= tk_aura_place(code, dd, BITS, wi);
      }
    }
    packed[(row0 + r) * WORDS + wi] = word;
  }
}
