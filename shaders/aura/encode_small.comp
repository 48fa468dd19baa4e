#version 460
#extension GL_EXT_control_flow_attributes : require
// AURA fused encode, dense rotation, for few rows (latency rather than
// throughput): the same results as encode.comp (see
// include/tilekernels/aura/encode.hpp).
//
// A call of few rows is bound by moving the rotation (Dim^2 floats) into
// the SMs, so the rotation is spread over workgroups: one workgroup per (RS
// rows, 32 output coordinates), each reading only its 32 rows of the
// rotation. The norm correction needs every coordinate's code, so the
// workgroups of a row block meet through a workspace: each writes its part
// of the sum of squared centroids, counts itself in counters[row block],
// and the last to arrive adds the parts (in a fixed order) and writes the
// norms, then resets the counter to 0 for the next call.
//
// Geometry (the host relies on it):
// - workgroup x = row_block * CB + cb (CB = DIM / 32), 32 * KS invocations;
//   invocation (c, ks) = (t / KS, t % KS) owns coordinate cb * 32 + c and
//   the 16-byte pieces ks, ks + KS, ks + 2 KS, ... of its rotation row and
//   of the input rows (KC / 4 of them, KC = DIM / KS), for all RS rows:
//   the KS invocations of a coordinate read contiguous bytes, and every
//   rotation load is issued before anything else;
// - the KS partial products of (row, coordinate) are summed in a fixed
//   order; one (row, coordinate) per invocation is quantised (binary search
//   of aura_pack.glsl); the coordinate block's BITS words of each row are
//   built whole by one invocation each (32 coordinates * BITS bits = BITS
//   words, so blocks never share a word);
// - row sums are reduced in a fixed order: results do not depend on
//   scheduling. No subgroup operations: correct for any subgroup size.
#include "../common/convert.glsl"
#include "../common/aura_pack.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint DIM = 128;
layout(constant_id = 2) const uint BITS = 4;
layout(constant_id = 3) const uint IN_DTYPE = 2;

// Literal sizes (EncodeConfig::small_rows_per_group, small_split): arrays
// and loops bounded by specialization constants are not unrolled by glslc,
// and a register array indexed at run time may go to local memory.
const uint RS = 8u;  // rows per workgroup
const uint KS = 8u;  // invocations per output coordinate
const uint MAX_KC4 = 16u;  // KC / 4 at DIM 512
const uint MAX_CB = 16u;   // CB at DIM 512

const uint CW = 32u;        // coordinates per workgroup
const uint CB = DIM / CW;   // workgroups per row block
const uint WG = CW * KS;
const uint KC = DIM / KS;   // columns per invocation
const uint LEVELS = 1u << BITS;
const uint WORDS = DIM * BITS / 32u;
const uint G = DIM / 4u;    // input vec4 per row

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
// Workspace: per (row, cb) the part of the squared reconstruction norm; per
// row block the arrival counter (zero between dispatches).
layout(std430, binding = 6) coherent buffer Parts { float parts[]; };
layout(std430, binding = 7) coherent buffer Counters { uint counters[]; };

shared vec4 s_in[RS * G];          // staged input rows
shared float s_part[RS * CW * KS]; // partial products [row][c][ks]
shared uint s_code[RS * CW];       // code of (row, c)
shared vec4 s_c2v[RS * CW / 4u];   // its squared centroid
shared float s_sum8[RS * 8u];     // row sums of squares in 8 parts
shared float s_bound[LEVELS];
shared float s_c2[LEVELS];
shared bool s_last;

float row_norm(uint r) {
  float sq = 0.0;
  [[unroll]] for (uint i = 0; i < 8u; ++i) sq += s_sum8[r * 8u + i];
  return sqrt(sq);
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
  [[unroll]] for (uint i = 0; i < MAX_KC4; ++i) rv[i] = i < KC / 4u ? rot[rbase + i * KS] : vec4(0.0);

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
      if (i < KC / 4u) {
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
    const float v = sum * (norm > 0.0 ? 1.0 / norm : 0.0);
    uint idx;
    TK_AURA_QUANTIZE(idx, v, s_bound, LEVELS);
    s_code[task] = idx;
    s_c2v[task / 4u][task % 4u] = s_c2[idx];
  }
  barrier();

  // This block's words of each row, and its part of the squared norm.
  for (uint w = t; w < RS * BITS; w += WG) {
    const uint r = w / BITS, wi = w % BITS;  // word wi of the block = word cb * BITS + wi of the row
    if (row0 + r < pc.rows) {
      const uint word_index = cb * BITS + wi;
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
      if (row0 + t < pc.rows) {
        const float recon = sqrt(part);
        const float norm = row_norm(t);
        norms[row0 + t] = recon > 1e-30 ? norm / recon : norm;
      }
    } else {
      parts[(row0 + t) * CB + cb] = part;
    }
  }
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
    const float recon = sqrt(recon_sq);
    const float norm = row_norm(t);
    norms[row0 + t] = recon > 1e-30 ? norm / recon : norm;
  }
  if (t == 0u) counters[rb] = 0u;
}
