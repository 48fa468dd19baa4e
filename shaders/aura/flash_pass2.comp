// SPDX-License-Identifier: MIT
#version 460
// AURA flash pass 2: merges the split-K partial attention results of each
// query head into its output, o = sum_b e^(m_b - M) o_b / sum_b e^(m_b - M) l_b
// with M the largest m_b of the blocks that have l_b != 0 (the softmax
// states of shaders/common/softmax_state.glsl).
//
// Geometry (invariants the host relies on):
// - SLICES workgroups per query head, each owning DIM/SLICES of its output
//   dimensions (slices are independent: no merge between them);
// - the workgroup is GROUPS lane groups of CHUNKS = DIM/4/SLICES
//   invocations; invocation c of a group owns the four output slots
//   4c..4c+3 of its slice;
// - group g replays blocks g, g + GROUPS, ..., UNROLL at a time so that the
//   loads of UNROLL blocks are in flight together (with PREFETCH, the next
//   UNROLL blocks' loads too, while these are folded), then the groups'
//   states are merged through shared memory by group 0;
// - with SPLIT, the blocks of a head slice are cut into pc.splits
//   contiguous ranges, one workgroup each, so that few heads still fill the
//   GPU (x = (head * SLICES + slice) * pc.splits + split). Each workgroup
//   leaves its merged state in the workspace, then counts itself in
//   counters[head * SLICES + slice], which start at zero; the last one to
//   arrive merges the pc.splits states, writes the slice and resets the
//   counter to zero. Without SPLIT, pc.splits is 1.
// No subgroup operation is used: correct for any subgroup size.
#extension GL_EXT_control_flow_attributes : require
#extension GL_GOOGLE_include_directive : require
#include "tilekernels/aura/flash_pass2_abi.h"
#include "../common/convert.glsl"
#include "../common/softmax_state.glsl"

TK_DECLARE_SPEC(TK_FLASH_PASS2_SPEC)
TK_DECLARE_PUSH(TK_FLASH_PASS2_PUSH)

const uint ROW_CHUNKS = DIM / 4;         // vec4 slots per head
const uint CHUNKS = ROW_CHUNKS / SLICES;  // invocations per group: the slots of one slice

// Each binding is declared once per storage view: 32-bit floats, or 16-bit
// values packed in words.
layout(std430, binding = 0) readonly buffer OPartialsF { vec4 o_f32[]; };
layout(std430, binding = 0) readonly buffer OPartialsH { uvec2 o_16[]; };
layout(std430, binding = 1) readonly buffer MPartialsF { float m_f32[]; };
layout(std430, binding = 1) readonly buffer MPartialsH { uint m_16[]; };
layout(std430, binding = 2) readonly buffer LPartialsF { float l_f32[]; };
layout(std430, binding = 2) readonly buffer LPartialsH { uint l_16[]; };
layout(std430, binding = 3) writeonly buffer OutputF { vec4 out_f32[]; };
layout(std430, binding = 3) writeonly buffer OutputH { uvec2 out_16[]; };
layout(std430, binding = 4) writeonly buffer Lse { float lse[]; };
// Workspace, used only with SPLIT: per (head, split) the merged o, and
// (m, l); per head the arrival counter (zero between dispatches).
layout(std430, binding = 5) coherent buffer WorkO { vec4 work_o[]; };
layout(std430, binding = 6) coherent buffer WorkML { vec2 work_ml[]; };
layout(std430, binding = 7) coherent buffer Counters { uint counters[]; };

shared vec4 s_o[GROUPS * CHUNKS];
shared vec2 s_ml[GROUPS];  // per group: its maximum and its sum of l
shared bool s_last;

float load_scalar(bool is_m, uint i) {
  if (PARTIAL_DTYPE == TK_F32) return is_m ? m_f32[i] : l_f32[i];
  return tk_load16(PARTIAL_DTYPE, is_m ? m_16[i >> 1] : l_16[i >> 1], i);
}

vec4 load_chunk(uint i) {
  if (PARTIAL_DTYPE == TK_F32) return o_f32[i];
  return tk_unpack4(PARTIAL_DTYPE, o_16[i]);
}

// Blocks b0, b0 + GROUPS, ... (UNROLL of them) of this head: every load
// issued before any is used; blocks at or past `end` read as empty.
void load_batch(uint b0, uint end, uint row, uint col, out float mb[UNROLL], out float lb[UNROLL], out vec4 ob[UNROLL]) {
  [[unroll]] for (uint u = 0; u < UNROLL; ++u) {
    const uint b = b0 + u * GROUPS;
    mb[u] = TK_NEG_INF;
    lb[u] = 0.0;
    ob[u] = vec4(0.0);
    if (b < end) {
      mb[u] = load_scalar(true, row + b);
      lb[u] = load_scalar(false, row + b);
      ob[u] = load_chunk((row + b) * ROW_CHUNKS + col);
    }
  }
}

void main() {
  const uint tid = gl_LocalInvocationID.x;
  const uint group = tid / CHUNKS;
  const uint c = tid % CHUNKS;
  const uint splits = SPLIT != 0 ? pc.splits : 1u;
  const uint slot = gl_WorkGroupID.x + pc.group_offset;  // unit * splits + split
  const uint unit = slot / splits;                       // head * SLICES + slice
  const uint q = unit / SLICES;
  const uint slice = unit % SLICES;
  const uint split = slot % splits;
  const uint col = slice * CHUNKS + c;  // this invocation's vec4 slot in the head
  const uint nb = pc.num_blocks;
  const uint per_split = (nb + splits - 1) / splits;
  const uint first = split * per_split;
  const uint end = min(first + per_split, nb);
  const uint row = q * nb;  // first (q, block) index of this head

  float m_acc = TK_NEG_INF;
  float l_acc = 0.0;
  vec4 o_acc = vec4(0.0);

  const uint step = UNROLL * GROUPS;
  float mb[UNROLL], lb[UNROLL];
  vec4 ob[UNROLL];
  uint b0 = first + group;
  if (PREFETCH != 0) load_batch(b0, end, row, col, mb, lb, ob);
  for (; b0 < end; b0 += step) {
    float mn[UNROLL], ln[UNROLL];
    vec4 on[UNROLL];
    if (PREFETCH != 0)
      load_batch(b0 + step, end, row, col, mn, ln, on);  // in flight while this batch is folded
    else
      load_batch(b0, end, row, col, mb, lb, ob);
    // The batch is folded without branches: a branch on l would let the
    // compiler sink the o loads behind it, one round trip per block.
    // Empty blocks (l == 0) get weight 0 and their o (possibly garbage)
    // is never read into the sums.
    float m_new = m_acc;
    [[unroll]] for (uint u = 0; u < UNROLL; ++u) m_new = tk_softmax_max(m_new, mb[u], lb[u]);
    const float rescale = tk_softmax_rescale(m_acc, m_new);
    o_acc *= rescale;
    l_acc *= rescale;
    [[unroll]] for (uint u = 0; u < UNROLL; ++u) {
      const float w = tk_softmax_weight(mb[u], lb[u], m_new);
      o_acc += w * (lb[u] != 0.0 ? ob[u] : vec4(0.0));
      l_acc += w * lb[u];
    }
    m_acc = m_new;
    if (PREFETCH != 0) {
      [[unroll]] for (uint u = 0; u < UNROLL; ++u) {
        mb[u] = mn[u];
        lb[u] = ln[u];
        ob[u] = on[u];
      }
    }
  }

  if (GROUPS > 1) {
    // A group's o_acc is finite whatever its empty blocks held (their o
    // never enters it), so the merge weighs it without a select.
    s_o[tid] = o_acc;
    if (c == 0) s_ml[group] = vec2(m_acc, l_acc);
    barrier();
    if (group == 0) {
      float m_max = m_acc;
      [[unroll]] for (uint g = 1; g < GROUPS; ++g) {
        const vec2 ml = s_ml[g];
        m_max = tk_softmax_max(m_max, ml.x, ml.y);
      }
      const float w0 = tk_softmax_weight(m_acc, l_acc, m_max);
      o_acc *= w0;
      l_acc *= w0;
      [[unroll]] for (uint g = 1; g < GROUPS; ++g) {
        const vec2 ml = s_ml[g];
        const float w = tk_softmax_weight(ml.x, ml.y, m_max);
        o_acc += w * s_o[g * CHUNKS + c];
        l_acc += w * ml.y;
      }
      m_acc = m_max;
    }
  }

  if (SPLIT != 0) {
    // Publish this split's state, then find out whether it is the last.
    if (group == 0) {
      work_o[slot * CHUNKS + c] = o_acc;
      if (c == 0) work_ml[slot] = vec2(m_acc, l_acc);
    }
    memoryBarrierBuffer();
    barrier();
    if (tid == 0) s_last = atomicAdd(counters[unit], 1u) == splits - 1u;
    barrier();
    if (!s_last) return;
    memoryBarrierBuffer();
    if (group == 0) {
      // Maximum first, then one weighted sum: no load waits behind a
      // branch, so the states are fetched together.
      m_acc = TK_NEG_INF;
      for (uint s = 0; s < splits; ++s) {
        const vec2 ml = work_ml[unit * splits + s];
        m_acc = tk_softmax_max(m_acc, ml.x, ml.y);
      }
      l_acc = 0.0;
      o_acc = vec4(0.0);
      for (uint s = 0; s < splits; ++s) {
        const vec2 ml = work_ml[unit * splits + s];
        const vec4 o = work_o[(unit * splits + s) * CHUNKS + c];
        const float w = tk_softmax_weight(ml.x, ml.y, m_acc);
        o_acc += ml.y != 0.0 ? w * o : vec4(0.0);
        l_acc += w * ml.y;
      }
      if (tid == 0) counters[unit] = 0u;
    }
  }
  if (group != 0) return;

  // A head whose blocks are all empty has l = 0: it gets zeros, never NaN.
  const vec4 result = tk_softmax_output(o_acc, l_acc);
  const uint out_index = q * ROW_CHUNKS + col;
  if (OUT_DTYPE == TK_F32)
    out_f32[out_index] = result;
  else
    out_16[out_index] = tk_pack4(OUT_DTYPE, result);
  if ((pc.flags & 1u) != 0u && slice == 0 && c == 0) lse[q] = tk_softmax_lse(m_acc, l_acc);
}
