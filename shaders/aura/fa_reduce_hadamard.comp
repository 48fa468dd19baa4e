// SPDX-License-Identifier: MIT
#version 460
// AURA fused split-K reduce + randomised-Hadamard undo. For each row (one
// query head of one token) the nwg partial attention states (o_b, m_b, l_b)
// are merged with the max shift,
//   M = max { m_b : l_b != 0 },  e_b = e^(m_b - M),  x = sum_b e_b o_b / sum_b e_b l_b,
// and the rotation is undone: out = signs * (H x) / sqrt(DIM), H the
// Sylvester-Hadamard matrix (natural order). See fa_reduce_hadamard.hpp.
//
// Geometry (invariants the host relies on):
// - ROWS rows per workgroup, GROUPS lane groups of CHUNKS = DIM/4 invocations
//   per row; invocation c of a group owns the vec4 of slots 4c..4c+3;
// - lane group g loads blocks g, g + GROUPS, ..., BPG of them, all issued
//   before the first barrier so that the loads of a row are in flight
//   together; nwg <= GROUPS * BPG;
// - the weights e_b are computed once per block (nwg exponentials per row)
//   and shared; group sums are added in group order (deterministic);
// - lane group 0 runs the transform: the two lowest bits of the slot index
//   in registers, the bit pairs above in shared memory, one barrier per
//   pair; the variant `shuffle` (TK_SHUFFLE) does the bits that fit in a
//   subgroup with shuffles instead, for whatever the subgroup size is;
// - the variant `shuffle` also computes the weights with subgroup
//   reductions where a subgroup lies within one row and has a lane per
//   block slot (no shared memory, no barrier), and for f32 output lets the
//   last shared-memory round of the transform store the output directly.
// The plain module uses no subgroup operation: correct for any subgroup
// size. Every barrier is reached by every invocation (rows past the end
// included).
//! variant subgroup -DTK_SHUFFLE=1
#extension GL_GOOGLE_include_directive : require
#include "tilekernels/aura/fa_reduce_hadamard_abi.h"
#include "../common/convert.glsl"
#include "../common/softmax_state.glsl"
#ifdef TK_SHUFFLE
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#endif

TK_DECLARE_SPEC(TK_FA_REDUCE_HADAMARD_SPEC)
TK_DECLARE_PUSH(TK_FA_REDUCE_HADAMARD_PUSH)

const uint CHUNKS = DIM / 4;
const uint LANES = GROUPS * CHUNKS;  // invocations per row
// Block slots per row in shared memory: nwg <= STAT, the slots past nwg are
// filled as empty blocks so that the loops over blocks have constant bounds.
const uint STAT = GROUPS * BPG;

layout(std430, binding = 0) readonly buffer OPartialsF { vec4 o_f32[]; };
layout(std430, binding = 0) readonly buffer OPartialsH { uvec2 o_16[]; };
layout(std430, binding = 1) readonly buffer MPartialsF { float m_f32[]; };
layout(std430, binding = 1) readonly buffer MPartialsH { uint m_16[]; };
layout(std430, binding = 2) readonly buffer LPartialsF { float l_f32[]; };
layout(std430, binding = 2) readonly buffer LPartialsH { uint l_16[]; };
layout(std430, binding = 3) readonly buffer Signs { vec4 signs[]; };
layout(std430, binding = 3) readonly buffer SignsS { float signs_s[]; };
layout(std430, binding = 4) writeonly buffer OutputF { vec4 out_f32[]; };
layout(std430, binding = 4) writeonly buffer OutputS { float out_s[]; };
layout(std430, binding = 4) writeonly buffer OutputH { uvec2 out_16[]; };

shared float s_m[ROWS * STAT];
shared float s_l[ROWS * STAT];
shared float s_e[ROWS * STAT];
shared vec4 s_acc[ROWS * (GROUPS - 1) * CHUNKS + 1];  // partial sums of groups 1..GROUPS-1
shared float s_x[ROWS * DIM];                          // the row during the transform

float load_scalar(bool is_m, uint i) {
  if (PARTIAL_DTYPE == TK_F32) return is_m ? m_f32[i] : l_f32[i];
  return tk_load16(PARTIAL_DTYPE, is_m ? m_16[i >> 1] : l_16[i >> 1], i);
}

vec4 load_chunk(uint i) {
  if (PARTIAL_DTYPE == TK_F32) return o_f32[i];
  return tk_unpack4(PARTIAL_DTYPE, o_16[i]);
}

// H_4 on the two index bits a vec4 spans.
vec4 butterfly2(vec4 v) {
  const vec2 s = v.xz + v.yw, d = v.xz - v.yw;
  return vec4(s.x + s.y, d.x + d.y, s.x - s.y, d.x - d.y);
}

// H_2 on the upper of the two index bits only.
vec4 butterfly_upper(vec4 v) { return vec4(v.xy + v.zw, v.xy - v.zw); }

void store_slots(uint i, uint step, vec4 v) {
  s_x[i] = v.x;
  s_x[i + step] = v.y;
  s_x[i + 2 * step] = v.z;
  s_x[i + 3 * step] = v.w;
}

// Butterflies the slot-index bits first_bit..LOG_DIM-1 of the row at xo in
// s_x, two per round, one barrier per round (reached by every invocation).
// In a round invocation c takes the four slots that differ only in bits
// (q, q+1) and whose other bits spell c; with an odd count the last round
// butterflies bit p only, spanning bits (p - 1, p). shared_rounds_limited
// does only the first `count` of those rounds.
void shared_rounds_limited(uint first_bit, uint count, bool owner, uint xo, uint c) {
  for (uint n = 0; n < count; ++n) {
    const uint p = first_bit + 2u * n;
    const bool pair = p + 1 < LOG_DIM;
    const uint q = pair ? p : p - 1;
    if (owner) {
      const uint step = 1u << q;
      const uint i = xo + ((c & (step - 1u)) | ((c >> q) << (q + 2)));
      vec4 v = vec4(s_x[i], s_x[i + step], s_x[i + 2 * step], s_x[i + 3 * step]);
      store_slots(i, step, pair ? butterfly2(v) : butterfly_upper(v));
    }
    barrier();
  }
}

void shared_rounds(uint first_bit, bool owner, uint xo, uint c) {
  shared_rounds_limited(first_bit, first_bit < LOG_DIM ? (LOG_DIM - first_bit + 1u) / 2u : 0u, owner, xo, c);
}

void main() {
#ifdef TK_SHUFFLE
  // Invocations numbered by subgroup (see the transform below): each
  // subgroup is then a run of consecutive lanes of one row or of several.
  const uint tid = gl_SubgroupID * gl_SubgroupSize + gl_SubgroupInvocationID;
  // The weights by subgroup operations where one subgroup lies within one
  // row and holds a lane per block slot (uniform over the workgroup): no
  // shared memory, no barrier, no serial loop over the blocks.
  const bool sg_weights = LANES % gl_SubgroupSize == 0u && gl_SubgroupSize >= STAT;
#else
  const uint tid = gl_LocalInvocationID.x;
  const bool sg_weights = false;
#endif
  const uint r = tid / LANES;
  const uint lane = tid % LANES;
  const uint g = lane / CHUNKS;
  const uint c = lane % CHUNKS;
  const uint row = (gl_WorkGroupID.x + pc.group_offset) * ROWS + r;
  const bool live = row < pc.rows;
  const uint nwg = pc.nwg;
  const uint stat = r * STAT;  // this row's slots in s_m, s_l, s_e

  // All global loads of the row first.
  vec4 ob[BPG];
  for (uint u = 0; u < BPG; ++u) {
    const uint b = g + u * GROUPS;
    ob[u] = vec4(0.0);
    if (live && b < nwg) ob[u] = load_chunk((row * nwg + b) * CHUNKS + c);
  }
  vec4 sign4 = vec4(1.0);
  if (g == 0) sign4 = signs[c];
#ifdef TK_SHUFFLE
  // f32 output: the last shared-memory round of the transform writes the
  // output itself (see below); the signs of its four slots, loaded early.
  const uint lane_bits = min(LOG_DIM - 2u, uint(findMSB(gl_SubgroupSize)));
  const bool fold_last = OUT_DTYPE == TK_F32 && 2u + lane_bits < LOG_DIM;
  const uint last_p = LOG_DIM - 2u;  // the last round's lower bit: a pair (p, p+1), or (p, p+1) with only p+1 left
  const uint last_step = 1u << last_p;
  const uint last_slot = (c & (last_step - 1u)) | ((c >> last_p) << (last_p + 2u));
  vec4 last_signs = vec4(1.0);
  if (fold_last && g == 0u)
    last_signs = vec4(signs_s[last_slot], signs_s[last_slot + last_step], signs_s[last_slot + 2u * last_step],
                      signs_s[last_slot + 3u * last_step]);
#endif
  vec4 acc = vec4(0.0);
  float l_sum = 0.0;
#ifdef TK_SHUFFLE
  if (sg_weights) {
    // Lane i of every subgroup of the row holds block i's weight.
    const uint i = gl_SubgroupInvocationID;
    const bool used = live && i < nwg;
    const float mi = used ? load_scalar(true, row * nwg + i) : 0.0;
    const float li = used ? load_scalar(false, row * nwg + i) : 0.0;
    const float m_max = subgroupMax(tk_softmax_max(TK_NEG_INF, mi, li));
    const float ei = tk_softmax_weight(mi, li, m_max);
    l_sum = subgroupAdd(ei * li);
    for (uint u = 0; u < BPG; ++u) {
      const uint b = g + u * GROUPS;
      const float w = subgroupShuffle(ei, b);
      if (w != 0.0) acc += w * ob[u];  // empty blocks are skipped, whatever o holds
    }
  }
#endif
  if (!sg_weights) {
    for (uint b = lane; b < STAT; b += LANES) {
      const bool used = live && b < nwg;
      s_m[stat + b] = used ? load_scalar(true, row * nwg + b) : 0.0;
      s_l[stat + b] = used ? load_scalar(false, row * nwg + b) : 0.0;
    }
    barrier();
    // One weight per block; empty blocks (l == 0) get 0 and are skipped below.
    if (lane < STAT) {
      float m_max = TK_NEG_INF;
      for (uint b = 0; b < STAT; ++b) m_max = tk_softmax_max(m_max, s_m[stat + b], s_l[stat + b]);
      for (uint b = lane; b < STAT; b += LANES) s_e[stat + b] = tk_softmax_weight(s_m[stat + b], s_l[stat + b], m_max);
    }
    barrier();
    for (uint u = 0; u < BPG; ++u) {
      const uint b = g + u * GROUPS;
      if (s_l[stat + b] != 0.0) acc += s_e[stat + b] * ob[u];
    }
    if (g == 0)
      for (uint b = 0; b < STAT; ++b) l_sum += s_e[stat + b] * s_l[stat + b];
  }
  if (GROUPS > 1) {
    if (g != 0) s_acc[(r * (GROUPS - 1) + g - 1) * CHUNKS + c] = acc;
    barrier();
    if (g == 0)
      for (uint h = 1; h < GROUPS; ++h) acc += s_acc[(r * (GROUPS - 1) + h - 1) * CHUNKS + c];
  }

  const uint xo = r * DIM;  // this row's slots in s_x
  if (g == 0) {
    // A row whose blocks are all empty has l_sum = 0: zeros, never NaN.
    // (!= rather than >: a NaN sum propagates instead of giving zeros.)
    const float scale = l_sum != 0.0 ? pc.inv_sqrt_dim / l_sum : 0.0;
    acc *= scale;
  }

#ifdef TK_SHUFFLE
  // Invocations are numbered by subgroup, tid = subgroup * size + lane (a
  // permutation of the workgroup when subgroups are full: the host uses this
  // variant only for workgroups that are a whole number of subgroups, or one
  // partial one), so that bit j of the subgroup lane is bit 2+j of the slot
  // index of the invocation's vec4. Those bits are butterflied with
  // shuffles, as many as the subgroup holds (any size works), straight from
  // the merged registers; the rest in shared memory.
  vec4 v = butterfly2(g == 0u ? acc : vec4(0.0));
  for (uint j = 0; j < lane_bits; ++j) {
    const uint mask = 1u << j;
    const vec4 other = subgroupShuffleXor(v, mask);
    v = (c & mask) != 0u ? other - v : v + other;
  }
  if (fold_last) {
    // The rounds in shared memory but the last, which spans index bits
    // (LOG_DIM - 2, LOG_DIM - 1) (a pair, or only the upper one when the
    // count is odd): its four slots per invocation are butterflied, signed
    // and stored straight to the output (each store instruction of a
    // subgroup still writes consecutive floats), saving a barrier and a
    // shared-memory round trip.
    if (g == 0u) store_slots(xo + 4 * c, 1u, v);
    barrier();
    const uint first = 2u + lane_bits;
    const uint rounds = (LOG_DIM - first + 1u) / 2u;
    if (rounds > 1u) shared_rounds_limited(first, rounds - 1u, g == 0u, xo, c);
    if (g != 0u || !live) return;
    const uint i = xo + last_slot;
    vec4 w = vec4(s_x[i], s_x[i + last_step], s_x[i + 2u * last_step], s_x[i + 3u * last_step]);
    w = ((LOG_DIM - first) % 2u == 0u ? butterfly2(w) : butterfly_upper(w)) * last_signs;
    const uint o = row * DIM + last_slot;
    out_s[o] = w.x;
    out_s[o + last_step] = w.y;
    out_s[o + 2u * last_step] = w.z;
    out_s[o + 3u * last_step] = w.w;
    return;
  }
  if (2u + lane_bits < LOG_DIM) {
    // Every invocation writes back only the slots it read: no barrier before.
    if (g == 0u) store_slots(xo + 4 * c, 1u, v);
    barrier();
    shared_rounds(2u + lane_bits, g == 0u, xo, c);
    if (g == 0u) v = vec4(s_x[xo + 4 * c], s_x[xo + 4 * c + 1], s_x[xo + 4 * c + 2], s_x[xo + 4 * c + 3]);
  }
  if (g != 0u || !live) return;
  v *= sign4;
  const uint out_index = row * CHUNKS + c;
#else
  if (g == 0) store_slots(xo + 4 * c, 1u, acc);
  barrier();
  shared_rounds(2u, g == 0u, xo, c);
  if (g != 0u || !live) return;
  vec4 v = vec4(s_x[xo + 4 * c], s_x[xo + 4 * c + 1], s_x[xo + 4 * c + 2], s_x[xo + 4 * c + 3]);
  v = butterfly2(v) * sign4;
  const uint out_index = row * CHUNKS + c;
#endif
  if (OUT_DTYPE == TK_F32)
    out_f32[out_index] = v;
  else
    out_16[out_index] = tk_pack4(OUT_DTYPE, v);
}
